#!/usr/bin/env bash
# How much of each allocation a time-limited job trains when Slurm warns it early
# (bench/slurm_lead_time_bench.py; results in docs/benchmarks.md). Needs root and a build
# (scripts/build.sh); starts and stops scripts/slurm-cluster.sh itself, under the Slurm lock.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
exec flock /tmp/hf-slurm.lock env TZ=UTC /usr/bin/python3 bench/slurm_lead_time_bench.py "$@"
