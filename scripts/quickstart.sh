#!/usr/bin/env bash
# The main job: set up, build, and run a supervised local training run (2 ranks
# of holdfast-train under holdfastd), kill one rank mid-run, watch the daemon
# recover from the newest checkpoint, and end with `runctl status` and
# `runctl triage`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
RUN=runs/quickstart
rm -rf "$RUN"
mkdir -p "$RUN"
scripts/make_corpus.sh "$RUN/corpus.txt"
RUNCTL="build/cli/runctl --run-dir $RUN"

echo "== starting holdfastd (log: $RUN/holdfastd.log)"
build/daemon/holdfastd --run-dir "$RUN" --config examples/job.toml > "$RUN/holdfastd.log" 2>&1 &
DAEMON=$!

# Wait until the run is past its first checkpoint (step 25), then kill rank 1.
victim=""
for _ in $(seq 1 600); do
  if ! kill -0 "$DAEMON" 2>/dev/null; then break; fi
  victim=$($RUNCTL status --json 2>/dev/null | python3 -c '
import json, sys
try:
    s = json.load(sys.stdin)
except Exception:
    sys.exit(0)
s = s.get("status") or {}
ranks = [r for n in s.get("nodes", []) for r in n.get("ranks", [])]
if len(ranks) == 2 and all(r.get("step", 0) >= 40 for r in ranks):
    print(ranks[1]["pid"])' || true)
  [ -n "$victim" ] && break
  sleep 0.5
done
if [ -n "$victim" ]; then
  echo "== injecting a fault: kill -9 rank 1 (pid $victim)"
  kill -9 "$victim"
else
  echo "== could not find a rank to kill; see $RUN/holdfastd.log" >&2
fi
rc=0
wait "$DAEMON" || rc=$?
echo "== holdfastd exited with code $rc; its log:"
tail -n 12 "$RUN/holdfastd.log"
echo
echo "== runctl status"
$RUNCTL status latest
echo
echo "== runctl triage"
$RUNCTL triage latest
exit "$rc"
