#!/usr/bin/env bash
# The RL example, one command: set up and build, make the task's data, teach a
# tiny GPT the task by SFT, then run GRPO under holdfastd — the learner, two
# rollout workers and the reward service, each supervised — and end with
# `runctl status` and the held-out accuracy before and after RL (docs/rl.md).
#
#   examples/rl/run.sh            # from anywhere; runs in runs/rl/
#   SKIP_BUILD=1 examples/rl/run.sh
#   REWARD=model examples/rl/run.sh   # GRPO against a learned reward model (examples/rl/rm.toml,
#                                     # served by holdfast-reward --model) instead of the task's rule
#
# For the test that guards the result (ctest rl_example): RL_ROOT=DIR runs the
# example's own files (examples/rl, copied) in DIR with BUILD_DIR linked as
# DIR/build; MIN_GAIN=0.10 exits 1 unless GRPO lifts held-out accuracy by at
# least that much from a start below 0.5.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/setup.sh
  scripts/build.sh
fi
if [ -n "${RL_ROOT:-}" ]; then
  build_dir=$(cd "${BUILD_DIR:-build}" && pwd)
  mkdir -p "$RL_ROOT/examples"
  rm -rf "$RL_ROOT/examples/rl" "$RL_ROOT/build"
  cp -r examples/rl "$RL_ROOT/examples/rl"
  ln -s "$build_dir" "$RL_ROOT/build"
  cd "$RL_ROOT"
fi
RUN=runs/rl
REWARD=${REWARD:-rule}
case "$REWARD" in
  rule) job=examples/rl/job.toml; learner="$RUN/learner" ;;
  model) job=examples/rl/job_rm.toml; learner="$RUN/learner-rm" ;;
  *) echo "REWARD=$REWARD: use rule (the task's check) or model (a learned reward model)" >&2; exit 2 ;;
esac
rm -rf "$RUN"
mkdir -p "$RUN/data"
build/trainer/rl/holdfast-reward --task add2 --emit sft --count 20000 --out "$RUN/data/sft.jsonl"

echo "== stage 1: SFT (examples/rl/sft.toml)"
build/trainer/holdfast-train --config examples/rl/sft.toml --dump-final "$RUN/sft/final" > "$RUN/sft.log" 2>&1 \
  || { tail -20 "$RUN/sft.log"; exit 1; }
tail -1 "$RUN/sft.log"

if [ "$REWARD" = model ]; then
  echo "== stage 1b: the reward model (examples/rl/rm.toml)"
  build/trainer/rl/holdfast-reward --task add2 --emit reward-pairs --count 40000 --out "$RUN/data/reward_pairs.jsonl"
  build/trainer/holdfast-train --config examples/rl/rm.toml --dump-final "$RUN/rm/final" > "$RUN/rm.log" 2>&1 \
    || { tail -20 "$RUN/rm.log"; exit 1; }
  grep "eval after" "$RUN/rm.log" | tail -1 | sed 's/.*\(eval after\)/  \1/'
fi

echo "== stage 2: GRPO under holdfastd ($job; log: $RUN/holdfastd.log)"
mkdir -p "$RUN/daemon"
rc=0
build/daemon/holdfastd --run-dir "$RUN/daemon" --config "$job" > "$RUN/holdfastd.log" 2>&1 || rc=$?
build/cli/runctl --run-dir "$RUN/daemon" status latest || true
echo "== held-out accuracy (greedy, $(sed -n 's/^eval_prompts *= *\([0-9]*\).*/\1/p' examples/rl/grpo.toml) prompts the run never trains on)"
check=0
python3 - "$learner/metrics.jsonl" "${MIN_GAIN:-}" <<'PY' || check=$?
import json, math, sys
rows = list(map(json.loads, open(sys.argv[1])))
evals = [r for r in rows if "eval_reward" in r]
# The reward the learner trained on (the service's: the rule's or the model's), per step.
trained = {r["step"]: r["reward"] for r in rows if "reward" in r and "eval_reward" not in r}
for r in evals:
    got = trained.get(max(r["step"], 1))
    print(f"  step {r['step']:4d}: {r['eval_reward']:.3f}" +
          (f"   (mean reward of the step's samples: {got:.3f})" if got is not None else ""))
if len(evals) < 2:
    sys.exit("no evaluation before and after GRPO in " + sys.argv[1])
first, last = evals[0]["eval_reward"], evals[-1]["eval_reward"]
n = evals[-1].get("eval_prompts", 1000)
se = math.sqrt((first * (1 - first) + last * (1 - last)) / n)  # of the difference
print(f"  GRPO: {first:.3f} -> {last:.3f}, {100 * (last - first):+.1f} points "
      f"(standard error of the difference {100 * se:.1f} points)")
if sys.argv[2]:
    bound = float(sys.argv[2])
    if first >= 0.5 or last - first < bound:
        sys.exit(f"FAILED: the example must start below 0.5 and gain at least {100 * bound:.0f} points "
                 f"(docs/rl.md); it went {first:.3f} -> {last:.3f}")
PY
build/cli/runctl --run-dir "$RUN/daemon" best latest --metric eval_reward || true
[ "$rc" -ne 0 ] && exit "$rc"
exit "$check"
