#!/usr/bin/env bash
# Sets up, builds (warnings are errors) and runs every test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build} scripts/build.sh -DHOLDFAST_WERROR=ON
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-2}" "$@"
