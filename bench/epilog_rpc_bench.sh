#!/usr/bin/env bash
# How many RPCs holdfast-slurmctld-epilog sends slurmctld to finish one requeue, counted by
# slurmctld itself (sdiag's per-message counts, reset before each requeue), and how long its
# watcher took to see the job pending; results in docs/benchmarks.md ("Epilog RPCs per requeue").
#
#   bench/epilog_rpc_bench.sh [--build-dir build] [--baseline PROGRAM] [--rounds 5] [--completing-s 0,5] [--keep]
#
# Starts scripts/slurm-cluster.sh --netns with a node Epilog that sleeps COMPLETING seconds (a
# site epilog that takes that long keeps a requeued job COMPLETING, and its watcher waiting), then
# per round: a 1-node `sleep` job, a requeue request in its comment as holdfastd writes it, sdiag
# -r, `scontrol requeue`, and once the epilog's log says the job was finished, sdiag's counts of
# REQUEST_JOB_INFO_SINGLE (slurm_load_job) and REQUEST_UPDATE_JOB: the epilog's and its
# watcher's, nothing else asks for them meanwhile. --baseline runs another epilog program the
# same way, alternating with this build's (e.g. one built from an earlier commit).
# Needs root. Holds no lock itself: run it under `flock /tmp/hf-slurm.lock` where others share
# the machine's one cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build baseline='' rounds=5 completing=0,5 keep=
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --completing-s) completing=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--baseline PROGRAM] [--rounds N] [--completing-s A,B] [--keep]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
work=$(mktemp -d /tmp/holdfast-epilog-rpc.XXXXXX)
chmod 755 "$work"  # munged's socket lives below it
export HOLDFAST_SLURM_DIR=$work/slurm SLURM_CONF=$work/slurm/slurm.conf
trap 'scancel --quiet --user root 2>/dev/null; scripts/slurm-cluster.sh stop >/dev/null 2>&1
      if [ -n "$keep" ]; then echo "kept $work (epilog.log: what each watcher did)"; else rm -rf "$work"; fi' EXIT

# The epilog slurmctld runs: whichever program $work/program names, switched between rounds.
cat >"$work/epilog.sh" <<EOF
#!/bin/bash
exec "\$(cat $work/program)" --slurm-conf $SLURM_CONF --log $work/epilog.log
EOF
cat >"$work/node-epilog.sh" <<EOF
#!/bin/bash
sleep "\$(cat $work/completing)"
EOF
chmod 755 "$work"/*.sh
echo 0 >"$work/completing"
: >"$work/epilog.log"
HOLDFAST_SLURM_EPILOG_SLURMCTLD=$work/epilog.sh HOLDFAST_SLURM_CONF_EXTRA="Epilog=$work/node-epilog.sh" \
  scripts/slurm-cluster.sh start --netns --nodes 3 >/dev/null

count() {  # MESSAGE_TYPE: its count in sdiag (0 when sdiag lists none)
  sdiag | awk -v m="$1" 'BEGIN { n = 0 } $1 == m { for (i = 2; i <= NF; i++) if ($i ~ /^count:/) { sub("count:", "", $i); n = $i } }
                         END { print n }'
}

round() {  # PROGRAM -> "RPCS PENDING_AFTER_S"
  echo "$1" >"$work/program"
  local job uid from line
  job=$(sbatch --parsable -N1 --chdir /tmp -o /dev/null --wrap 'sleep 300')
  until [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]; do sleep 0.1; done
  uid=$(id -u)
  scontrol update jobid="$job" comment="holdfast-requeue job=$job uid=$uid restart=0 run=bench exclude=n1"
  from=$(wc -c <"$work/epilog.log")
  sdiag -r >/dev/null
  scontrol requeue "$job"
  until line=$(tail -c +$((from + 1)) "$work/epilog.log" | grep "job $job (run bench): pending after"); do sleep 0.2; done
  line=${line#*pending after }
  echo "$(( $(count REQUEST_JOB_INFO_SINGLE) + $(count REQUEST_UPDATE_JOB) )) ${line%% s*}"
  scancel "$job"
  until [ -z "$(squeue -h -j "$job" -o %T 2>/dev/null)" ]; do sleep 0.2; done
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

programs=("$build/scheduler/holdfast-slurmctld-epilog")
[ -n "$baseline" ] && programs+=("$baseline")
echo "| epilog | node Epilog | rounds | RPCs per requeue (median, min-max) | watcher saw it pending after (median) |"
echo "|---|---|---|---|---|"
IFS=, read -ra waits <<<"$completing"
for c in "${waits[@]}"; do
  echo "$c" >"$work/completing"
  declare -A rpcs=() pend=()
  for ((r = 0; r < rounds; r++)); do
    for p in "${programs[@]}"; do  # alternated, so drift hits both alike
      read -r n s < <(round "$p")
      rpcs[$p]+="$n "
      pend[$p]+="$s "
    done
  done
  for p in "${programs[@]}"; do
    name=this; [ "$p" = "$baseline" ] && name="baseline ($(basename "$(dirname "$(dirname "$(dirname "$p")")")"))"
    r_med=$(tr ' ' '\n' <<<"${rpcs[$p]}" | grep . | median)
    r_min=$(tr ' ' '\n' <<<"${rpcs[$p]}" | grep . | sort -n | head -1)
    r_max=$(tr ' ' '\n' <<<"${rpcs[$p]}" | grep . | sort -n | tail -1)
    s_med=$(tr ' ' '\n' <<<"${pend[$p]}" | grep . | median)
    echo "| $name | sleeps $c s | $rounds | $r_med ($r_min-$r_max) | $s_med s |"
  done
  unset rpcs pend
done
