#!/usr/bin/env bash
# Builds the libFuzzer targets and runs each for N seconds (docs/reliability.md, "Fuzzing").
#
#   scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--only a,b]
#   scripts/fuzz.sh --make-seeds [--build-dir DIR]   # rewrites tests/fuzz/corpus from real writers
#
# Configures DIR (default build-fuzz) with clang, -DHOLDFAST_FUZZ=ON and no LibTorch, CUDA or
# tests, builds only the fuzz targets (ninja holdfast_fuzz; JOBS=n to limit), then runs each
# target for N seconds (default 10: the CI smoke) on a scratch copy of its seeds
# (tests/fuzz/corpus/<target>), one after the other, and prints a table. Exits 1 when a target
# crashed, leaked, timed out or ran out of memory; the input that did it is kept under
# DIR/fuzz-crashes/<target>/ and the command that reproduces it is printed. Exits 2 on a usage
# or build error. Targets: manifest, shard_header, progress_record, control_protocol,
# cluster_protocol, job_config, trainer_config. Needs clang and libFuzzer (scripts/setup.sh:
# clang, libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

SECONDS_EACH=10
BUILD_DIR=build-fuzz
ONLY=""
MAKE_SEEDS=0
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_EACH=${2:?}; shift 2 ;;
    --build-dir) BUILD_DIR=${2:?}; shift 2 ;;
    --only) ONLY=${2:?}; shift 2 ;;
    --make-seeds) MAKE_SEEDS=1; shift ;;
    -h|--help) usage ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
case "$SECONDS_EACH" in ''|*[!0-9]*) echo "fuzz.sh: --seconds takes a whole number, got '$SECONDS_EACH'" >&2; exit 2 ;; esac
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac

if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang is not installed: run scripts/setup.sh (Debian packages clang, libclang-rt-14-dev)" >&2
  exit 2
fi
if [ ! -e "$(clang++ -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a" ]; then
  echo "fuzz.sh: libFuzzer is missing: run scripts/setup.sh (Debian package libclang-rt-14-dev)" >&2
  exit 2
fi

echo "fuzz.sh: configuring $BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DHOLDFAST_FUZZ=ON -DHOLDFAST_WITH_TORCH=OFF -DHOLDFAST_WITH_CUDA=OFF -DHOLDFAST_BUILD_TESTS=OFF \
  -DHOLDFAST_WERROR=ON >"$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log" >&2; echo "fuzz.sh: cmake failed" >&2; exit 2; }
rm -f "$BUILD_DIR.configure.log"

if [ "$MAKE_SEEDS" = 1 ]; then
  ninja -C "$BUILD_DIR" -j "${JOBS:-$(nproc)}" fuzz_seed_corpus
  "$BUILD_DIR/daemon/fuzz_seed_corpus" . tests/fuzz/corpus
  exit 0
fi

# "<corpus> <cmake target> <executable> [libFuzzer flags]" per line, written by cmake
# (holdfast_fuzz_target).
mapfile -t LINES < "$BUILD_DIR/fuzz_targets.txt"
declare -a NAMES=() TARGETS=() EXES=() FLAGS=()
for line in "${LINES[@]}"; do
  [ -n "$line" ] || continue
  read -r name target exe flags <<<"$line"
  NAMES+=("$name"); TARGETS+=("$target"); EXES+=("$exe"); FLAGS+=("$flags")
done
if [ -n "$ONLY" ]; then
  IFS=, read -r -a WANT <<<"$ONLY"
  for w in "${WANT[@]}"; do
    found=0
    for n in "${NAMES[@]}"; do [ "$n" = "$w" ] && found=1; done
    if [ $found = 0 ]; then echo "fuzz.sh: no target '$w' (targets: ${NAMES[*]})" >&2; exit 2; fi
  done
else
  WANT=("${NAMES[@]}")
fi
SEL=()
for i in "${!NAMES[@]}"; do
  for w in "${WANT[@]}"; do [ "${NAMES[$i]}" = "$w" ] && SEL+=("$i"); done
done

BUILD_TARGETS=()
for i in "${SEL[@]}"; do BUILD_TARGETS+=("${TARGETS[$i]}"); done
# The seed writer too, so that it cannot fall behind the code it encodes unseen.
[ -n "$ONLY" ] || BUILD_TARGETS+=(fuzz_seed_corpus)
echo "fuzz.sh: building ${BUILD_TARGETS[*]}"
ninja -C "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${BUILD_TARGETS[@]}" >"$BUILD_DIR/fuzz-build.log" 2>&1 || {
  tail -50 "$BUILD_DIR/fuzz-build.log" >&2; echo "fuzz.sh: build failed ($BUILD_DIR/fuzz-build.log)" >&2; exit 2; }

failed=0
ROWS=()
REPRO=()
for i in "${SEL[@]}"; do
  name=${NAMES[$i]}
  exe=${EXES[$i]}
  work="$BUILD_DIR/fuzz-work/$name"
  crashes="$BUILD_DIR/fuzz-crashes/$name"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$crashes"
  if [ -d "tests/fuzz/corpus/$name" ]; then cp "tests/fuzz/corpus/$name"/* "$work/corpus/"; fi
  echo "fuzz.sh: running $name for ${SECONDS_EACH} s"
  rc=0
  # shellcheck disable=SC2086 # FLAGS: one word per flag
  (cd "$work" && "$exe" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=30 -rss_limit_mb=4096 \
     -artifact_prefix="$crashes/" ${FLAGS[$i]} corpus) >"$work/log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  last=$(grep -E '(cov|ft): [0-9]+' "$work/log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/log" | tail -1)
  if [ $rc -eq 0 ] && [ -z "$artifact" ]; then
    found=0; result=ok
  else
    found=1; failed=1
    result=$(grep -m1 -oE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer): [a-zA-Z -]+|runtime error: .*|check failed: .*' "$work/log" | cut -c1-60 || true)
    [ -n "$result" ] || result="exit $rc"
    REPRO+=("$name: $exe ${FLAGS[$i]} ${artifact:-<no input saved>}    (log: $work/log)")
  fi
  ROWS+=("$(printf '%-18s %12s %6s %7s %8s  %s' "$name" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$found" "$result")")
done

echo
printf '%-18s %12s %6s %7s %8s  %s\n' target runs cov ft crashes result
for r in "${ROWS[@]}"; do echo "$r"; done
if [ $failed -ne 0 ]; then
  echo
  echo "fuzz.sh: FAILED. To reproduce (runs the saved input once, with the sanitizer report):"
  for r in "${REPRO[@]}"; do echo "  $r"; done
  exit 1
fi
