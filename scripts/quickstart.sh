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

# A progress bar while the run trains (the run's step from `runctl status`), on stderr.
STEPS=$(sed -n 's/^steps *= *\([0-9]*\).*/\1/p' examples/quickstart.toml)
bar() {  # bar STEP [NOTE]
  local step=$1 width=40 filled
  filled=$(( step * width / STEPS )); [ "$filled" -gt "$width" ] && filled=$width
  printf '\r   step %4d/%d [%s%s] %s' "$step" "$STEPS" "$(printf '%*s' "$filled" '' | tr ' ' '#')" \
    "$(printf '%*s' $((width - filled)) '' | tr ' ' '.')" "${2:-}" >&2
}
# Prints "STEP PID_OF_RANK_1 GENERATION" from the live status, or nothing.
observe() {
  $RUNCTL status --json 2>/dev/null | python3 -c '
import json, sys
try:
    s = json.load(sys.stdin)
except Exception:
    sys.exit(0)
s = s.get("status") or {}
ranks = [r for n in s.get("nodes", []) for r in n.get("ranks", [])]
if len(ranks) == 2:
    print(min(r.get("step", 0) for r in ranks), ranks[1]["pid"], s.get("generation", 0))' || true
}

# Wait until the run is past its first checkpoint (step 25), then kill rank 1.
victim=""
for _ in $(seq 1 600); do
  if ! kill -0 "$DAEMON" 2>/dev/null; then break; fi
  read -r step pid gen <<<"$(observe)" || true
  if [ -n "${step:-}" ]; then
    bar "$step"
    if [ "$step" -ge 40 ]; then victim=$pid; break; fi
  fi
  sleep 0.5
done
echo >&2
if [ -n "$victim" ]; then
  echo "== injecting a fault: kill -9 rank 1 (pid $victim)"
  kill -9 "$victim"
else
  echo "== could not find a rank to kill; see $RUN/holdfastd.log" >&2
fi
# Follow the recovery and the rest of the run.
while kill -0 "$DAEMON" 2>/dev/null; do
  read -r step pid gen <<<"$(observe)" || true
  [ -n "${step:-}" ] && bar "$step" "generation ${gen:-?}"
  sleep 0.5
done
echo >&2
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
echo
echo "== runctl report"
if $RUNCTL report latest --out "$RUN/report.html"; then
  echo "the run's report (charts, timeline, lost time, triage; one offline HTML file):"
  echo "  $PWD/$RUN/report.html"
fi
exit "$rc"
