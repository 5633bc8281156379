#!/usr/bin/env bash
# A sweep of the DPO example over 4 learning rates, one command: build (unless
# SKIP_BUILD=1), make the preference pairs, then `runctl sweep` runs
# examples/dpo/sweep.toml once per rate — each member its own holdfastd and
# run (runs/dpo-sweep/sweep-lr/lr-VALUE) — and compares them by held-out
# reward accuracy (docs/sweeps.md).
#
#   examples/dpo/sweep.sh                    # in turn
#   SIDE_BY_SIDE=2 examples/dpo/sweep.sh     # two members at a time
#   LRS=1e-4,1e-3 examples/dpo/sweep.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/build.sh
fi
RUN=runs/dpo-sweep
rm -rf "$RUN"
mkdir -p "$RUN" runs/dpo
python3 examples/dpo/make_data.py runs/dpo/pairs.jsonl --pairs 4000 --kind copy
rc=0
build/cli/runctl --run-dir "$RUN" sweep examples/dpo/sweep.toml --vary "lr=${LRS:-1e-4,3e-4,1e-3,3e-3}" \
  --side-by-side "${SIDE_BY_SIDE:-1}" --metric eval_reward_accuracy || rc=$?
exit "$rc"
