#!/usr/bin/env bash
# Failure -> the requeued job's first training step on a real Slurm cluster on this machine,
# for both requeue paths (bench/slurm_requeue_bench.py; results in docs/benchmarks.md).
# Needs root and a build (scripts/build.sh); starts and stops scripts/slurm-cluster.sh itself.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
exec /usr/bin/python3 bench/slurm_requeue_bench.py "$@"
