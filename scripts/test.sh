#!/usr/bin/env bash
# Sets up, builds (warnings are errors), checks the structure rules (scripts/check_structure.py)
# and runs every test suite: the main build's ctest (unit,
# integration, the quick soak over the fault matrix, the Slurm suite), the install check
# (scripts/install_check.sh: cmake --install, runs from the install, the .deb), then the sanitizer builds
# (scripts/sanitize.sh: ASan/UBSan of everything without LibTorch, TSan of the threaded suites)
# and a short run of every fuzz target (scripts/fuzz.sh). Every stage runs even when an earlier
# one failed; the exit status says whether all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
BUILD_DIR=${BUILD_DIR:-build} scripts/build.sh -DHOLDFAST_WERROR=ON || exit 1
failed=()
python3 scripts/check_structure.py || failed+=(structure)
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-2}" "$@" || failed+=(ctest)
if [ $# -eq 0 ]; then  # with ctest arguments (a selection), only ctest runs
  BUILD_DIR=${BUILD_DIR:-build} scripts/install_check.sh || failed+=(install)
  scripts/sanitize.sh --keep-going || failed+=(sanitizers)
  scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-10}" || failed+=(fuzz)
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "scripts/test.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "scripts/test.sh: all passed"
