#!/usr/bin/env bash
# The main job: set up, build, and run a supervised local training run (2 ranks
# of holdfast-train under holdfastd), kill one rank mid-run, watch the daemon
# recover from the newest checkpoint, and end with `runctl status`,
# `runctl triage`, the incident's write-up (`runctl incident`) and the report.
#
# From the source tree it builds first and runs build/'s programs. From an install
# (HOLDFAST_PREFIX=P scripts/quickstart.sh, or P/share/holdfast/scripts/quickstart.sh,
# whose prefix is its own) it builds nothing: P/bin's programs and P/share/holdfast's
# examples, the run in runs/quickstart under the current directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${HOLDFAST_PREFIX:-}" ] && [ ! -e "$here/../CMakeLists.txt" ] &&
   [ -x "$here/../../../bin/holdfastd" ]; then
  HOLDFAST_PREFIX=$(cd "$here/../../.." && pwd)  # the installed copy: PREFIX/share/holdfast/scripts
fi
RUN=runs/quickstart
if [ -n "${HOLDFAST_PREFIX:-}" ]; then
  BIN=$HOLDFAST_PREFIX/bin
  EXAMPLES=$HOLDFAST_PREFIX/share/holdfast/examples
  for f in "$BIN/holdfastd" "$BIN/runctl" "$BIN/holdfast-train" "$EXAMPLES/job.toml"; do
    [ -e "$f" ] || { echo "quickstart: $f is missing: install Holdfast there (cmake --install build --prefix $HOLDFAST_PREFIX)" >&2; exit 2; }
  done
  rm -rf "$RUN"
  mkdir -p "$RUN"
  # The example job with its program and config taken from the install.
  JOB=$RUN/job.toml
  sed -e "s|\"build/trainer/holdfast-train\"|\"$BIN/holdfast-train\"|" \
      -e "s|\"examples/quickstart.toml\"|\"$EXAMPLES/quickstart.toml\"|" "$EXAMPLES/job.toml" > "$JOB"
  if ! grep -q "\"$BIN/holdfast-train\"" "$JOB" || ! grep -q "\"$EXAMPLES/quickstart.toml\"" "$JOB"; then
    echo "quickstart: $EXAMPLES/job.toml no longer names build/trainer/holdfast-train and examples/quickstart.toml" >&2
    exit 1
  fi
  MAKE_CORPUS=$HOLDFAST_PREFIX/share/holdfast/scripts/make_corpus.sh
  HOLDFASTD=$BIN/holdfastd
  RUNCTL_BIN=$BIN/runctl
else
  cd "$here/.."
  scripts/setup.sh
  scripts/build.sh
  rm -rf "$RUN"
  mkdir -p "$RUN"
  EXAMPLES=examples
  JOB=examples/job.toml
  MAKE_CORPUS=scripts/make_corpus.sh
  HOLDFASTD=build/daemon/holdfastd
  RUNCTL_BIN=build/cli/runctl
fi
"$MAKE_CORPUS" "$RUN/corpus.txt"
runctl() { "$RUNCTL_BIN" --run-dir "$RUN" "$@"; }

echo "== starting holdfastd (log: $RUN/holdfastd.log)"
"$HOLDFASTD" --run-dir "$RUN" --config "$JOB" > "$RUN/holdfastd.log" 2>&1 &
DAEMON=$!

# A progress bar while the run trains (the run's step from `runctl status`), on stderr.
STEPS=$(sed -n 's/^steps *= *\([0-9]*\).*/\1/p' "$EXAMPLES/quickstart.toml")
bar() {  # bar STEP [NOTE]
  local step=$1 width=40 filled
  filled=$(( step * width / STEPS )); [ "$filled" -gt "$width" ] && filled=$width
  printf '\r   step %4d/%d [%s%s] %s' "$step" "$STEPS" "$(printf '%*s' "$filled" '' | tr ' ' '#')" \
    "$(printf '%*s' $((width - filled)) '' | tr ' ' '.')" "${2:-}" >&2
}
# Prints "STEP PID_OF_RANK_1 GENERATION" from the live status, or nothing.
observe() {
  runctl status --json 2>/dev/null | python3 -c '
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
runctl status latest || echo "(runctl status exited $?: the run did not succeed; see runctl --help for its exit codes)"
echo
echo "== runctl triage"
runctl triage latest
echo
echo "== runctl incident (the write-up for a postmortem; all of it: $RUN/incident.md)"
if runctl incident latest > "$RUN/incident.md"; then
  sed -n '1,16p' "$RUN/incident.md"
  echo "   ..."
fi
echo
echo "== runctl report"
if runctl report latest --out "$RUN/report.html"; then
  echo "the run's report (charts, timeline, lost time, triage; one offline HTML file):"
  echo "  $PWD/$RUN/report.html"
fi
exit "$rc"
