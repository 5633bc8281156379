#!/bin/bash
# Slurm EpilogSlurmctld (runs on the controller after every job, as SlurmUser).
# Finishes a requeue a job's holdfastd asked for: excludes the bad nodes and
# starts the job again at once instead of after Slurm's ~120 s BeginTime hold.
# Jobs without a holdfastd request are left alone (it returns in milliseconds).
# Installed as <prefix>/libexec/holdfast/holdfast-slurmctld-epilog.sh (the .deb:
# /usr/libexec/holdfast/); slurm.conf:
#   EpilogSlurmctld=/usr/libexec/holdfast/holdfast-slurmctld-epilog.sh
#
# The program is $HOLDFAST_SLURMCTLD_EPILOG, else the installed one (sbin/): the
# installed copy of this script has the path from its folder to it on the next
# line (cmake/HoldfastInstall.cmake); this copy in examples/slurm takes it from PATH.
holdfast_programs_from_here=
if [ -n "$holdfast_programs_from_here" ]; then
  default_epilog=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/$holdfast_programs_from_here/holdfast-slurmctld-epilog
else
  default_epilog=holdfast-slurmctld-epilog
fi
exec "${HOLDFAST_SLURMCTLD_EPILOG:-$default_epilog}" \
  --log "${HOLDFAST_EPILOG_LOG:-/var/log/slurm/holdfast-slurmctld-epilog.log}"
