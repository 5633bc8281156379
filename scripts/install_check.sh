#!/usr/bin/env bash
# Installs Holdfast from a build and runs it from the install, with nothing from the source
# tree or the build on PATH or PYTHONPATH (README "Install"):
#   1. cmake --install BUILD --prefix TMP; every program, hook, runbook, example, the
#      quickstart and the Python module where cmake/HoldfastInstall.cmake puts them;
#   2. the installed quickstart (TMP/share/holdfast/scripts/quickstart.sh): a rank killed, the
#      run recovered, and `runctl triage` naming the installed runbook file;
#   3. examples/pytorch_ddp as installed: TMP/bin/holdfastd supervising the installed train.py,
#      PYTHONPATH the installed module, the module's progress reaching holdfastd;
#   4. an integration suite against the install (HOLDFAST_PREFIX=TMP: tests/support BuildPath);
#   5. cpack -G DEB, dpkg -i of holdfast and python3-holdfast, /usr/bin/holdfastd --help,
#      /usr/bin/runctl --help, and a supervised Python job with /usr/bin/holdfastd and the
#      python3-holdfast module (no PYTHONPATH); then dpkg -r of both (root only; skipped, and
#      said, where they were installed before, so that this machine is left as it was).
# Everything it makes goes under one temporary folder, removed at the end.
#
#   scripts/install_check.sh              BUILD_DIR (default build) must be built
#   INSTALL_CHECK_SUITE='gtest-filter'    which tests of daemon_supervision_test step 4 runs
#                                         (default: a killed and a stopped rank; '*': the whole suite)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${BUILD_DIR:-build}
[ -x "$BUILD/daemon/holdfastd" ] && [ -x "$BUILD/tests/daemon_supervision_test" ] && [ -f "$BUILD/CPackConfig.cmake" ] ||
  { echo "install_check: $BUILD is not a configured, built tree with its tests (scripts/build.sh)" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd)
SUITE=${INSTALL_CHECK_SUITE:-SupervisionTest.SigkillOfARankIsACrashThatRestartsFromTheCheckpoint:SupervisionTest.SigstopOfARankIsAHangNamingThatRank}

WORK=$(mktemp -d /tmp/holdfast-install-check.XXXXXX)
PREFIX=$WORK/prefix
DEB_INSTALLED=0
cleanup() {
  if [ "$DEB_INSTALLED" = 1 ]; then
    dpkg -r python3-holdfast holdfast >"$WORK/dpkg-remove.log" 2>&1 ||
      { echo "install_check: dpkg -r failed:" >&2; cat "$WORK/dpkg-remove.log" >&2; }
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

T0=$SECONDS
step() { echo "== install_check [$((SECONDS - T0)) s]: $*"; }
fail() { echo "install_check: FAILED: $*" >&2; exit 1; }
# A command as a user of the install runs it: the install's bin/ and the system's, nothing else.
USER_PATH=$PREFIX/bin:/usr/bin:/bin
clean() { env -i HOME="$HOME" LANG=C.UTF-8 PATH="$USER_PATH" "$@"; }
# Prints the json field PATH (dotted) of stdin.
field() { python3 -c 'import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."): v = v[k]
print(v)' "$1"; }

# ---- 1. cmake --install ------------------------------------------------------------------
step "cmake --install $BUILD --prefix $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" || fail "cmake --install (see above)"
SHARE=$PREFIX/share/holdfast
for f in bin/holdfastd bin/runctl bin/holdfast-train bin/holdfast-rollout bin/holdfast-reward bin/holdfast-health \
         bin/holdfast-health-gpu libexec/holdfast/holdfast-prolog.sh libexec/holdfast/holdfast-slurmctld-epilog.sh \
         share/holdfast/scripts/quickstart.sh share/holdfast/runbooks/crash.md share/holdfast/examples/job.toml \
         share/holdfast/examples/pytorch_ddp/train.py share/holdfast/python/holdfast/__init__.py \
         lib/python3/dist-packages/holdfast.pth share/bash-completion/completions/runctl \
         share/bash-completion/completions/holdfastd; do
  [ -e "$PREFIX/$f" ] || fail "cmake --install did not install $f"
done
if [ -e "$BUILD/man/man1/runctl.1" ]; then  # help2man found at configure time
  for f in man1/holdfastd.1 man1/runctl.1 man1/holdfast-health.1 man1/holdfast-reward.1; do
    [ -s "$PREFIX/share/man/$f" ] || fail "cmake --install did not install share/man/$f"
  done
fi
if [ -e "$BUILD/scheduler/holdfast-slurmctld-epilog" ]; then
  [ -x "$PREFIX/sbin/holdfast-slurmctld-epilog" ] || fail "cmake --install did not install sbin/holdfast-slurmctld-epilog"
fi
# The installed hooks run the installed programs: the folder each finds from its own is theirs.
# (Not run here: a failing Prolog drains the node it runs on.)
hook_program() {  # hook_program HOOK PROGRAM
  local rel
  rel=$(sed -n 's/^holdfast_programs_from_here=//p' "$PREFIX/libexec/holdfast/$1")
  [ -n "$rel" ] && [ -x "$PREFIX/libexec/holdfast/$rel/$2" ] ||
    fail "the installed $1 does not find $2 ('$rel' from libexec/holdfast/)"
}
hook_program holdfast-prolog.sh holdfast-health
[ ! -e "$BUILD/scheduler/holdfast-slurmctld-epilog" ] || hook_program holdfast-slurmctld-epilog.sh holdfast-slurmctld-epilog
clean "$PREFIX/bin/holdfast-health" --help >/dev/null || fail "$PREFIX/bin/holdfast-health --help"

# ---- 2. the quickstart from the install ----------------------------------------------------
step "the installed quickstart ($SHARE/scripts/quickstart.sh)"
mkdir -p "$WORK/quickstart"
rc=0
(cd "$WORK/quickstart" && clean timeout 600 "$SHARE/scripts/quickstart.sh") >"$WORK/quickstart.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { tail -n 40 "$WORK/quickstart.log" >&2; fail "the installed quickstart exited $rc"; }
runbook="$SHARE/runbooks/crash.md"
grep -qF "runbook   crash.md  ($runbook)" "$WORK/quickstart.log" ||
  { grep runbook "$WORK/quickstart.log" >&2; fail "runctl triage from the install does not name $runbook"; }
# (status exits by the run's health: not 0 for a run that did not succeed, which the test below names)
state=$(clean runctl --run-dir "$WORK/quickstart/runs/quickstart" status latest --json | field run.state || true)
[ "$state" = succeeded ] || fail "the installed quickstart's run ended $state"
echo "   run succeeded after a killed rank; triage: runbook $runbook"

# ---- 3. a supervised Python job from the install -------------------------------------------
# examples/pytorch_ddp/job.toml as installed, its script and module taken from the install.
ddp_job() {  # ddp_job EXAMPLES PYTHONPATH_OR_EMPTY OUT
  local steps_line
  sed -e "s|\"examples/pytorch_ddp/train.py\"|\"$1/pytorch_ddp/train.py\"|" \
      -e "s|\"--steps\", \"[0-9]*\"|\"--steps\", \"40\"|" "$1/pytorch_ddp/job.toml" >"$3"
  if [ -n "$2" ]; then
    sed -i "s|^PYTHONPATH = \"common/python\"|PYTHONPATH = \"$2\"|" "$3"
    grep -qF "PYTHONPATH = \"$2\"" "$3" || fail "$1/pytorch_ddp/job.toml no longer sets PYTHONPATH = \"common/python\""
  else
    sed -i '/^PYTHONPATH = /d' "$3"
  fi
  grep -qF "\"$1/pytorch_ddp/train.py\"" "$3" || fail "$1/pytorch_ddp/job.toml no longer runs examples/pytorch_ddp/train.py"
  steps_line=$(grep -o '"--steps", "[0-9]*"' "$3" || true)
  [ "$steps_line" = '"--steps", "40"' ] || fail "$1/pytorch_ddp/job.toml no longer passes --steps N"
}
run_ddp() {  # run_ddp HOLDFASTD RUNCTL DIR: the job in DIR/runs/ddp (DIR/runs/ddp/job.toml); 40 steps
  local dir=$3 last
  (cd "$dir" && clean "$SHARE/scripts/make_corpus.sh" runs/ddp/corpus.txt >/dev/null &&
     clean timeout 300 "$1" --run-dir runs/ddp --config runs/ddp/job.toml >runs/ddp/holdfastd.log 2>&1) ||
    { tail -n 30 "$dir/runs/ddp/holdfastd.log" >&2; fail "$1 on the Python job exited non-zero"; }
  clean "$2" --run-dir "$dir/runs/ddp" status latest --json >"$dir/status.json" || true  # exits by the run's health
  [ "$(field run.state <"$dir/status.json")" = succeeded ] || fail "the Python job under $1 did not succeed"
  # Progress comes only through the holdfast module: its last step is the module's.
  last=$(field generation.last_step <"$dir/status.json")
  [ "$last" = 40 ] || fail "holdfastd saw the Python job reach step '$last', not 40: the holdfast module did not report"
  [ -s "$dir/runs/ddp/out/final.json" ] || fail "the Python job wrote no final.json"
}
step "examples/pytorch_ddp from the install (PYTHONPATH=$SHARE/python)"
mkdir -p "$WORK/ddp/runs/ddp"
ddp_job "$SHARE/examples" "$SHARE/python" "$WORK/ddp/runs/ddp/job.toml"
run_ddp "$PREFIX/bin/holdfastd" "$PREFIX/bin/runctl" "$WORK/ddp"
echo "   2 ranks, 40 steps, progress from the installed module"

# ---- 4. an integration suite against the install -------------------------------------------
step "daemon_supervision_test against the install (HOLDFAST_PREFIX; $SUITE)"
env HOLDFAST_PREFIX="$PREFIX" HOLDFAST_BUILD_DIR="$BUILD" HOLDFAST_SOURCE_DIR="$SRC" \
  timeout 900 "$BUILD/tests/daemon_supervision_test" --gtest_filter="$SUITE" >"$WORK/suite.log" 2>&1 ||
  { tail -n 40 "$WORK/suite.log" >&2; fail "daemon_supervision_test against $PREFIX"; }
grep -E '^\[  PASSED  \]' "$WORK/suite.log" | sed 's/^/   /'

# ---- 5. the Debian packages ----------------------------------------------------------------
step "cpack -G DEB"
(cd "$BUILD" && cpack -G DEB -B "$WORK/deb" >"$WORK/cpack.log" 2>&1) || { cat "$WORK/cpack.log" >&2; fail "cpack -G DEB"; }
debs=("$WORK"/deb/holdfast_*.deb "$WORK"/deb/python3-holdfast_*.deb)
for d in "${debs[@]}"; do
  [ -f "$d" ] || fail "cpack made no $d"
  echo "   $(basename "$d"): $(dpkg-deb -f "$d" Depends)"
done
if [ "$(id -u)" -ne 0 ]; then
  echo "   dpkg -i SKIPPED: needs root"
elif dpkg-query -W -f='${Status}\n' holdfast python3-holdfast 2>/dev/null | grep -q "ok installed"; then
  echo "   dpkg -i SKIPPED: holdfast or python3-holdfast is already installed here; left as it is"
else
  step "dpkg -i ${debs[*]##*/}"
  DEB_INSTALLED=1
  dpkg -i "${debs[@]}" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -i"; }
  USER_PATH=/usr/bin:/bin  # from here the system's programs only
  /usr/bin/holdfastd --help >/dev/null || fail "/usr/bin/holdfastd --help"
  /usr/bin/runctl --help >/dev/null || fail "/usr/bin/runctl --help"
  module=$(cd / && clean python3 -c 'import holdfast; print(holdfast.__file__)')
  [ "$module" = /usr/share/holdfast/python/holdfast/__init__.py ] || fail "python3 imports holdfast from '$module'"
  SHARE=/usr/share/holdfast
  mkdir -p "$WORK/deb-ddp/runs/ddp"
  ddp_job /usr/share/holdfast/examples "" "$WORK/deb-ddp/runs/ddp/job.toml"
  run_ddp /usr/bin/holdfastd /usr/bin/runctl "$WORK/deb-ddp"
  echo "   /usr/bin/holdfastd ran the Python job, holdfast imported from $module"
  step "dpkg -r python3-holdfast holdfast"
  DEB_INSTALLED=0
  dpkg -r python3-holdfast holdfast >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -r"; }
  [ ! -e /usr/bin/holdfastd ] && [ ! -e /usr/share/holdfast ] || fail "dpkg -r left /usr/bin/holdfastd or /usr/share/holdfast"
fi
step "all passed"
