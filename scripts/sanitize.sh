#!/usr/bin/env bash
# Sanitizer builds and their tests (CI runs this after the main build and tests: scripts/test.sh).
#
#   scripts/sanitize.sh [--only asan|tsan] [--keep-going]
#
#   asan  AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer: every test of the
#         build without LibTorch and CUDA, in ${ASAN_BUILD_DIR:-build-asan}.
#   tsan  ThreadSanitizer: the suites with threads, child processes and signals (TSAN_SUITES
#         below: the checkpoint writer, the rendezvous store, the daemon, the reward service), in
#         ${TSAN_BUILD_DIR:-build-tsan}.
#
# Each build is configured (-Og -g1: some 40% less compile time than -O1, line numbers in every
# report), builds only what its tests run (JOBS=n to limit), and runs them with ctest (-j JOBS).
# A finding fails the run: UBSan stops the program (-fno-sanitize-recover), ASan and LeakSanitizer
# exit 1, ThreadSanitizer 66. Reports of every process the tests start (holdfastd, runctl,
# helpers), not only of the test binaries, are written to BUILD/sanitizer-logs/ and shown here,
# so a finding in a child is not lost when a test looks only at the child's output. Findings are
# fixed in the code; scripts/sanitizers/*.supp is only for third-party or system code, with a
# reason per entry. Tests that need a Slurm cluster (label slurm) are not run.
#
# Without --keep-going the first build or suite stage that fails ends the run; with it, everything
# that builds is built and run (ninja -k 0) and all failures are listed at the end. Prints one line
# per suite. Exits 0 when all passed, 1 on any build failure, failed suite or sanitizer report,
# 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# The ThreadSanitizer suites: those whose code runs threads, forks ranks or handles signals.
# The daemon's pure decision tables (recovery_policy, straggler, triage, job_config,
# checkpoint_tracker) have no threads and run under ASan/UBSan only.
TSAN_SUITES=(
  # checkpoint writer: background save thread, staging fence, rank-0 commit over the store;
  # the stager feeds it from another thread; the crash test kills its helper mid-save.
  checkpoint_test trainer_device_stager_test checkpoint_crash_test
  # loader: ranks agree on the step through the store; a reader thread feeds the checksum.
  checkpoint_loader_test checkpoint_file_reader_test
  # rendezvous store: in-process store and the TCP store (server on its own asio thread,
  # clients shared by threads).
  common_memory_store_test common_tcp_store_test
  # communicators: one worker thread per Gloo communicator drains the collective queue
  # (allreduce, ZeRO-1's reduce-scatter and allgather) while the training thread issues.
  comm_communicator_test
  # daemon: protocols over sockets, rank processes (fork, signals), the run lock, the lineage
  # recorder's writer, the run controller, metrics, and holdfastd itself with stand-in ranks.
  control_protocol_test cluster_protocol_test rank_process_test run_lock_test run_controller_test
  run_recorder_test metrics_test daemon_metrics_test
  # control over TCP: the server on its own loop thread against client calls (one forked as
  # another user), each checked with a private munged.
  control_tcp_test
  # roles: holdfastd with role processes beside the stand-in ranks ([[roles]]: one reaper for
  # ranks and roles, restarts, SIGKILL of a hung one, TERM/KILL at the end of the run).
  daemon_roles_test
  # RL reward service: the server's own asio loop thread (progress heartbeat, many connections)
  # against client threads; the client follows the address file to a replacement server; and
  # the holdfast-reward process itself, SIGKILLed under concurrent clients.
  rl_reward_test rl_reward_process_test
  # RL weights over the network: the server's accept and per-subscriber threads, each
  # subscriber's thread, publishing and reading the newest version from other threads.
  rl_weights_wire_test
)

ONLY=""
KEEP_GOING=0
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=${2:-}; shift 2 || usage ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    --keep-going) KEEP_GOING=1; shift ;;
    -h|--help) usage ;;
    *) echo "sanitize.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
case "$ONLY" in
  "") KINDS=(asan tsan) ;;
  asan|tsan) KINDS=("$ONLY") ;;
  *) echo "sanitize.sh: --only takes asan or tsan, got '$ONLY'" >&2; exit 2 ;;
esac

JOBS=${JOBS:-$(nproc)}
GEN=()
if command -v ninja >/dev/null; then GEN=(-G Ninja); fi
abs() { case "$1" in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
ASAN_BUILD_DIR=$(abs "${ASAN_BUILD_DIR:-build-asan}")
TSAN_BUILD_DIR=$(abs "${TSAN_BUILD_DIR:-build-tsan}")
SUPP_DIR=$ROOT/scripts/sanitizers
# Suppression files go by absolute path: tests run in their own working directories.
supp() { if [ -s "$SUPP_DIR/$1" ]; then echo ":suppressions=$SUPP_DIR/$1"; fi; }

SUMMARY=()   # one line per suite (and per build failure or stray report)
FAILED=0

# configure KIND DIR SANITIZERS
configure() {
  local kind=$1 dir=$2 sanitize=$3
  mkdir -p "$dir"
  echo "sanitize.sh: $kind: configuring $dir"
  if ! cmake -S . -B "$dir" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug \
      "-DCMAKE_CXX_FLAGS_DEBUG=-Og -g1" "-DCMAKE_C_FLAGS_DEBUG=-Og -g1" \
      -DHOLDFAST_WITH_TORCH=OFF -DHOLDFAST_WITH_CUDA=OFF -DHOLDFAST_BUILD_TESTS=ON \
      -DHOLDFAST_SANITIZE="$sanitize" -DHOLDFAST_WERROR=ON >"$dir/sanitize-configure.log" 2>&1; then
    cat "$dir/sanitize-configure.log"
    SUMMARY+=("$kind  FAIL  (configure: $dir/sanitize-configure.log)")
    return 1
  fi
}

# build KIND DIR TARGET...
build() {
  local kind=$1 dir=$2; shift 2
  local log=$dir/sanitize-build.log keep=()
  if [ "$KEEP_GOING" = 1 ]; then
    if [ "${#GEN[@]}" -gt 0 ]; then keep=(-- -k 0); else keep=(-- -k); fi
  fi
  echo "sanitize.sh: $kind: building $# targets with $JOBS jobs (log: $log)"
  local start=$SECONDS
  if ! cmake --build "$dir" -j "$JOBS" --target "$@" "${keep[@]}" >"$log" 2>&1; then
    grep -A 30 -E '^FAILED:|error:' "$log" | head -n 150 || tail -n 80 "$log"
    SUMMARY+=("$kind  FAIL  (build: $log)")
    return 1
  fi
  echo "sanitize.sh: $kind: built in $((SECONDS - start)) s"
}

# The first line that says what a report found.
what_found() {
  grep -m1 -E 'runtime error:' "$1" || grep -m1 -E '^SUMMARY: ' "$1" || grep -m1 -E 'ERROR: |WARNING: ' "$1" || echo "(see $1)"
}

# run_tests KIND DIR LOGDIR CTEST_SELECTION...
run_tests() {
  local kind=$1 dir=$2 logdir=$3; shift 3
  local log=$dir/sanitize-ctest.log rc=0
  echo "sanitize.sh: $kind: running the tests (log: $log)"
  ctest --test-dir "$dir" -j "$JOBS" --output-on-failure -LE '^slurm$' "$@" >"$log" 2>&1 || rc=$?
  # " 3/17 Test  #2: name ......   Passed    0.11 sec" (or ***Failed, ***Timeout, Not Run, ...)
  local lines
  lines=$(sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: ([^ ]+) [ .]*(\*\*\*)?(.*[^ ]) +([0-9.]+) sec$/\1|\3|\4/p' "$log" |
          sort -t'|' -k1,1)
  if [ -z "$lines" ]; then
    cat "$log"
    SUMMARY+=("$kind  FAIL  (ctest ran no test: $log)")
    return 1
  fi
  local name status secs verdict report details d line sep bad=0
  while IFS='|' read -r name status secs; do
    case "$status" in
      Passed) verdict=PASS; details=() ;;
      Skipped) verdict=SKIP; details=() ;;
      *) verdict=FAIL; details=("$status") ;;
    esac
    for report in "$logdir"/*."$name".[0-9]*; do
      [ -e "$report" ] || continue
      verdict=FAIL
      details+=("$(what_found "$report") ($report)")
    done
    [ "$verdict" = FAIL ] && bad=1
    line=$(printf '%s  %-4s  %-36s %7s s' "$kind" "$verdict" "$name" "$secs")
    sep="  "
    for d in "${details[@]}"; do line="$line$sep$d"; sep="; "; done
    SUMMARY+=("$line")
  done <<<"$lines"
  # Reports of child processes (holdfastd, runctl, helpers) are not named after a suite.
  local exe
  for report in "$logdir"/*; do
    [ -e "$report" ] || continue
    exe=$(basename "$report" | sed -E 's/^[^.]+\.(.*)\.[0-9]+$/\1/')
    if ! grep -q "^$exe|" <<<"$lines"; then
      bad=1
      SUMMARY+=("$kind  FAIL  report from $exe: $(what_found "$report") ($report)")
    fi
  done
  if [ "$bad" = 1 ] || [ "$rc" != 0 ]; then
    echo "---- $kind: ctest output ($log) ----"
    cat "$log"
    for report in "$logdir"/*; do
      [ -e "$report" ] || continue
      echo "---- $kind: sanitizer report $report ----"
      head -n 200 "$report"
    done
    return 1
  fi
}

run_asan() {
  local dir=$ASAN_BUILD_DIR logdir=$ASAN_BUILD_DIR/sanitizer-logs
  configure asan "$dir" address,undefined || return 1
  # Every test of this build: the executables ctest runs (their add_dependencies bring holdfastd,
  # runctl, holdfast-health and the helpers); not the benchmarks, which no test runs.
  local tests targets=() t
  tests=$(ctest --test-dir "$dir" -N -LE '^slurm$' | sed -nE 's/^ *Test +#[0-9]+: (.+)$/\1/p')
  local known
  known=$(cmake --build "$dir" --target help | sed -nE 's/^(\.\.\. )?([A-Za-z0-9_.+-]+)(: .*)?$/\2/p')
  for t in $tests; do
    if grep -qx -- "$t" <<<"$known"; then targets+=("$t"); fi
  done
  local ok=0
  build asan "$dir" "${targets[@]}" || { ok=1; [ "$KEEP_GOING" = 1 ] || return 1; }
  rm -rf "$logdir" && mkdir -p "$logdir"
  ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$logdir/asan:log_exe_name=1" \
  LSAN_OPTIONS="log_path=$logdir/asan:log_exe_name=1$(supp lsan.supp)" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logdir/ubsan:log_exe_name=1$(supp ubsan.supp)" \
    run_tests asan "$dir" "$logdir" || ok=1
  return $ok
}

run_tsan() {
  local dir=$TSAN_BUILD_DIR logdir=$TSAN_BUILD_DIR/sanitizer-logs
  configure tsan "$dir" thread || return 1
  local listed t
  listed=$(ctest --test-dir "$dir" -N | sed -nE 's/^ *Test +#[0-9]+: (.+)$/\1/p')
  for t in "${TSAN_SUITES[@]}"; do
    if ! grep -qx -- "$t" <<<"$listed"; then
      SUMMARY+=("tsan  FAIL  $t is not a test of this build (renamed? update TSAN_SUITES in $0)")
      return 1
    fi
  done
  # Only these suites' targets (and what they depend on, holdfastd among them).
  local ok=0
  build tsan "$dir" "${TSAN_SUITES[@]}" || { ok=1; [ "$KEEP_GOING" = 1 ] || return 1; }
  rm -rf "$logdir" && mkdir -p "$logdir"
  local regex
  regex="^($(IFS='|'; echo "${TSAN_SUITES[*]}"))\$"
  TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:log_path=$logdir/tsan:log_exe_name=1$(supp tsan.supp)" \
    run_tests tsan "$dir" "$logdir" -R "$regex" || ok=1
  return $ok
}

START=$SECONDS
for kind in "${KINDS[@]}"; do
  if ! "run_$kind"; then
    FAILED=1
    [ "$KEEP_GOING" = 1 ] || break
  fi
done

echo "==== sanitize.sh: summary ($((SECONDS - START)) s) ===="
for line in "${SUMMARY[@]}"; do echo "$line"; done
if [ "$FAILED" = 1 ]; then
  echo "sanitize.sh: FAILED"
  exit 1
fi
echo "sanitize.sh: all passed"
