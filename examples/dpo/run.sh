#!/usr/bin/env bash
# The DPO example, one command: build (unless SKIP_BUILD=1), make 4000
# preference pairs, train DPO under holdfastd (2 ranks, held-out eval every 20
# steps), then `runctl status` and the best checkpoint by held-out reward
# accuracy.
#
#   examples/dpo/run.sh            # from anywhere; runs in runs/dpo/
#   KIND=sum examples/dpo/run.sh   # a harder preference (the units digit of the sum)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/build.sh
fi
RUN=runs/dpo
rm -rf "$RUN"
mkdir -p "$RUN/daemon"
python3 examples/dpo/make_data.py "$RUN/pairs.jsonl" --pairs 4000 --kind "${KIND:-copy}"
echo "== DPO under holdfastd (examples/dpo/job.toml; log: $RUN/holdfastd.log)"
rc=0
build/daemon/holdfastd --run-dir "$RUN/daemon" --config examples/dpo/job.toml > "$RUN/holdfastd.log" 2>&1 || rc=$?
echo "== held-out evaluation ($RUN/metrics.jsonl)"
python3 - "$RUN/metrics.jsonl" <<'PY'
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r.get("record") == "eval":
        print(f"  step {r['step']:4d}: reward accuracy {r['eval_reward_accuracy']:.3f}  "
              f"margin {r['eval_reward_margin']:.3f}  loss {r['eval_loss']:.4f}")
PY
build/cli/runctl --run-dir "$RUN/daemon" best latest --metric eval_reward_accuracy || true
build/cli/runctl --run-dir "$RUN/daemon" status latest || true
exit "$rc"
