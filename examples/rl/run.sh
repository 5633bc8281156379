#!/usr/bin/env bash
# The RL example, one command: set up and build, make the task's data, teach a
# tiny GPT the task by SFT, then run GRPO under holdfastd — the learner, two
# rollout workers and the reward service, each supervised — and end with
# `runctl status` and the held-out accuracy before and after RL.
#
#   examples/rl/run.sh            # from anywhere; runs in runs/rl/
#   SKIP_BUILD=1 examples/rl/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/setup.sh
  scripts/build.sh
fi
RUN=runs/rl
rm -rf "$RUN"
mkdir -p "$RUN/data"
build/trainer/rl/holdfast-reward --task add2 --emit sft --count 20000 --out "$RUN/data/sft.jsonl"

echo "== stage 1: SFT (examples/rl/sft.toml)"
build/trainer/holdfast-train --config examples/rl/sft.toml --dump-final "$RUN/sft/final" > "$RUN/sft.log" 2>&1 \
  || { tail -20 "$RUN/sft.log"; exit 1; }
tail -1 "$RUN/sft.log"

echo "== stage 2: GRPO under holdfastd (examples/rl/job.toml; log: $RUN/holdfastd.log)"
mkdir -p "$RUN/daemon"
rc=0
build/daemon/holdfastd --run-dir "$RUN/daemon" --config examples/rl/job.toml > "$RUN/holdfastd.log" 2>&1 || rc=$?
build/cli/runctl --run-dir "$RUN/daemon" status latest || true
echo "== held-out accuracy (greedy, $(sed -n 's/^eval_prompts *= *\([0-9]*\).*/\1/p' examples/rl/grpo.toml) prompts the run never trains on)"
python3 - "$RUN/learner/metrics.jsonl" <<'PY'
import json, sys
evals = [r for r in map(json.loads, open(sys.argv[1])) if "eval_reward" in r]
for r in evals:
    print(f"  step {r['step']:4d}: {r['eval_reward']:.3f}")
PY
build/cli/runctl --run-dir "$RUN/daemon" best latest --metric eval_reward || true
exit "$rc"
