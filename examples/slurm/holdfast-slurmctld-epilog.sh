#!/bin/bash
# Slurm EpilogSlurmctld (runs on the controller after every job, as SlurmUser).
# Finishes a requeue a job's holdfastd asked for: excludes the bad nodes and
# starts the job again at once instead of after Slurm's ~120 s BeginTime hold.
# Jobs without a holdfastd request are left alone (it returns in milliseconds).
# Install: EpilogSlurmctld=/etc/slurm/holdfast-slurmctld-epilog.sh
exec "${HOLDFAST_SLURMCTLD_EPILOG:-/usr/local/sbin/holdfast-slurmctld-epilog}" \
  --log "${HOLDFAST_EPILOG_LOG:-/var/log/slurm/holdfast-slurmctld-epilog.log}"
