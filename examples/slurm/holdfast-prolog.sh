#!/bin/bash
# Slurm Prolog (with PrologFlags=Alloc: runs on every node of a job before it
# starts). A node that fails holdfast-health's fast checks is drained with the
# failed check as its reason (`sinfo -R`), and Slurm requeues the job onto
# other nodes. Install: Prolog=/etc/slurm/holdfast-prolog.sh (slurm.conf.d/holdfast.conf).
# Slurm does not rerun a Prolog on a node that already ran it for the job after
# a requeue: holdfastd's own pre-launch checks cover every attempt.
HOLDFAST_HEALTH=${HOLDFAST_HEALTH:-/usr/local/bin/holdfast-health}
HEALTH_CONFIG=${HEALTH_CONFIG:-/etc/holdfast/health.toml}
args=(--prolog)
[ -r "$HEALTH_CONFIG" ] && args+=(--config "$HEALTH_CONFIG")
reason=$("$HOLDFAST_HEALTH" "${args[@]}" 2>>/var/log/slurm/holdfast-prolog.log)
rc=$?
reason=${reason#holdfast: }
if [ $rc -ne 0 ]; then
  # The drain reason Slurm shows is ours, not "Prolog error".
  scontrol update nodename="$SLURMD_NODENAME" state=drain reason="holdfast-health: ${reason:-failed (exit $rc)}" || true
  exit 1
fi
exit 0
