#!/usr/bin/env bash
# Validates holdfast-train on a GPU machine in one call, and writes every result into one folder.
#
#   scripts/gpu_check.sh [OUT_DIR]        (default: $OUT where the device tool sets it, else /tmp/gpu-check)
#
# For a machine with an NVIDIA GPU, the CUDA toolkit (nvcc), python3 with a CUDA PyTorch (its
# LibTorch is found through torch.utils.cmake_prefix_path), cmake and ninja, but none of our Debian
# packages and no network: they come from .gpu-bundle/, which scripts/gpu_bundle.sh prepares on a
# Debian machine (git-ignored; the device tool's run takes it with carry: [".gpu-bundle"]).
#
# Steps (each runs whatever happened before it; the summary says PASS, FAIL or SKIP per step):
#   build     the whole tree against the machine's LibTorch and CUDA, -Werror
#   tests     ctest -L gpu (placement, AdamW kernel, CPU agreement, bit-exact resume, staging) and
#             the NCCL communicator test at world size 1
#   health    holdfast-health --checks gpu,nccl --json (the probes with their measured values)
#   parity    check_parity.py on the GPU: fp32 (1e-4) and bf16 (1e-2) per-step loss against eager
#             PyTorch running the same model, data and initial weights on the same GPU
#   moe       the mixture-of-experts model ([moe], 4 experts, top 2; what one GPU runs of issue 26:
#             tensor, pipeline and expert parallelism need several ranks and run on CPUs only)
#             20 steps on the GPU in fp32 against the same on the CPU: per-step loss within 1e-3
#   supervise holdfastd runs examples/gpu on the GPU with the memory snapshot tier on; the rank is
#             SIGKILLed after its first checkpoint (step 100), at step 150 or later; the run must recover
#             from its newest memory snapshot and finish; runctl status and lineage at the end
#   bench     holdfast-gpu-bench (step time, MFU, checkpoint stall ratio, staging bandwidth ratio)
#             and bench/gpu_eager_bench.py (eager PyTorch step time), GPT-2 124M-sized, bf16
# Files (at most 8, as the device tool returns them): summary.md, results.json, bench.json,
# eager.json, health.json, and logs.tar.gz with every step's full log.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RESULTS=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$RESULTS"
LOGS=$(mktemp -d /tmp/gpu-check-logs.XXXXXX)
JOBS=$(nproc)
BUILD=$ROOT/build-gpu
PY=$(command -v python3)
export PYTHONUNBUFFERED=1
declare -A STATUS NOTE
ORDER=()

step() {  # step NAME STATUS NOTE
  ORDER+=("$1"); STATUS[$1]=$2; NOTE[$1]=$3
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$LOGS/steps.tsv"
  echo "== $1: $2 — $3"
}
run_logged() {  # run_logged LOG TIMEOUT_S CMD...: the output goes to the log and to stdout's tail
  local log=$1 t=$2; shift 2
  echo "\$ $*" >"$LOGS/$log"
  timeout "$t" "$@" >>"$LOGS/$log" 2>&1
  local rc=$?
  tail -n 5 "$LOGS/$log"
  return $rc
}
finish() {
  {
    echo "# GPU check — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
    echo "PyTorch: $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)"
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -n 1)"
    echo
    echo "| step | result | what |"
    echo "| --- | --- | --- |"
    for s in "${ORDER[@]}"; do echo "| $s | ${STATUS[$s]} | ${NOTE[$s]} |"; done
  } >"$RESULTS/summary.md"
  "$PY" -c '
import json, sys
rows = [l.rstrip("\n").split("\t", 2) for l in open(sys.argv[1]) if l.strip()]
json.dump({n: {"result": r, "note": w} for n, r, w in rows}, open(sys.argv[2], "w"), indent=2)' \
    "$LOGS/steps.tsv" "$RESULTS/results.json" 2>/dev/null
  tar -C "$LOGS" -czf "$RESULTS/logs.tar.gz" . 2>/dev/null
  cat "$RESULTS/summary.md"
}
trap finish EXIT

# ---- build ---------------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  step build SKIP "no NVIDIA GPU on this machine: nothing here can be validated"
  exit 0
fi
if [ ! -x .gpu-bundle/unpack.sh ]; then
  step build FAIL ".gpu-bundle/ is missing: run scripts/gpu_bundle.sh on a Debian machine and carry .gpu-bundle"
  exit 1
fi
DEPS=/tmp/hf-deps
TORCH_CMAKE=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
NCCL_LIB=$(ls "$SITE"/nvidia/nccl/lib/libnccl.so* 2>/dev/null | head -n 1)
NCCL_ARGS=()
if ! ls /usr/local/cuda/lib64/libnccl.so* >/dev/null 2>&1 && [ -n "$NCCL_LIB" ]; then
  NCCL_ARGS=(-DNCCL_INCLUDE_DIR="$SITE/nvidia/nccl/include" -DNCCL_LIBRARY="$NCCL_LIB")
fi
if run_logged build.log 420 bash -c "
    set -e
    .gpu-bundle/unpack.sh $DEPS
    . $DEPS/env.sh
    cmake -S . -B '$BUILD' -G Ninja -C $DEPS/bundle.cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_PREFIX_PATH='$DEPS/usr;$TORCH_CMAKE' -DHOLDFAST_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DTORCH_CUDA_ARCH_LIST=9.0 ${NCCL_ARGS[*]}
    ninja -C '$BUILD' -j $JOBS holdfast-train holdfastd runctl holdfast-health holdfast-health-gpu \
      holdfast-gpu-bench trainer_gpu_test comm_nccl_communicator_test"; then
  step build PASS "built with -Werror against PyTorch's LibTorch ($TORCH_CMAKE) and /usr/local/cuda"
else
  step build FAIL "see logs.tar.gz: build.log"
  exit 1
fi
# shellcheck disable=SC1091
. "$DEPS/env.sh"

# ---- tests ---------------------------------------------------------------------------------
if run_logged tests.log 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure &&
   run_logged tests.log.nccl 120 "$BUILD/trainer/comm/comm_nccl_communicator_test"; then
  if grep -q "Skipped" "$LOGS/tests.log"; then
    step tests SKIP "the GPU tests skipped themselves: $(grep -m1 'no GPU to test' "$LOGS/tests.log")"
  else
    step tests PASS "trainer_gpu_test (placement, AdamW kernel, CPU agreement, bit-exact resume, staging) and NCCL at world size 1"
  fi
else
  step tests FAIL "see logs.tar.gz: tests.log"
fi

# ---- health --------------------------------------------------------------------------------
run_logged health.log 180 "$BUILD/health/holdfast-health" --checks gpu,nccl --json
rc=$?
cp "$LOGS/health.log" "$RESULTS/health.json" 2>/dev/null
if [ $rc -eq 0 ]; then step health PASS "holdfast-health gpu,nccl: every check passed (values in health.json)"
else step health FAIL "holdfast-health gpu,nccl exited $rc (health.json)"; fi

# ---- parity --------------------------------------------------------------------------------
for prec in fp32 bf16; do
  tol=1e-4; [ "$prec" = bf16 ] && tol=1e-2
  if run_logged "parity_$prec.log" 150 "$PY" tests/reference/check_parity.py --holdfast-train "$BUILD/trainer/holdfast-train" \
       --python "$PY" --device cuda --precision "$prec" --steps 50 --tolerance "$tol"; then
    step "parity-$prec" PASS "$(grep -m1 'max relative loss difference' "$LOGS/parity_$prec.log")"
  else
    step "parity-$prec" FAIL "$(grep -m1 -E 'max relative loss|FAIL' "$LOGS/parity_$prec.log")"
  fi
done

# ---- moe: the mixture-of-experts model on the GPU against the CPU ------------------------------
MOE=$LOGS/moe
mkdir -p "$MOE"
cat docs/*.md README.md >"$MOE/corpus.txt"
moe_run() {  # moe_run DEVICE
  run_logged "moe_$1.log" 300 "$BUILD/trainer/holdfast-train" --config examples/quickstart.toml \
    --set data.path="$MOE/corpus.txt" --set output.dir="$MOE/$1" --set train.steps=20 --set train.device="$1" \
    --set train.precision=fp32 --set moe.experts=4 --set moe.top_k=2 \
    --metrics "$MOE/$1.jsonl"
}
if moe_run cpu && moe_run cuda; then
  if note=$("$PY" - "$MOE/cpu.jsonl" "$MOE/cuda.jsonl" <<'PYEOF'
import json, sys
cpu, gpu = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(cpu, gpu))
print(f"{len(gpu)} steps, max relative loss difference GPU vs CPU {worst:.2g}")
sys.exit(0 if len(cpu) == len(gpu) == 20 and worst < 1e-3 else 1)
PYEOF
  ); then step moe PASS "$note"; else step moe FAIL "${note:-the metrics do not compare} (moe_cpu.log, moe_cuda.log)"; fi
else
  step moe FAIL "a MoE run failed (moe_cpu.log, moe_cuda.log)"
fi

# ---- supervise: a supervised GPU run that survives a SIGKILL ---------------------------------
RUN=$ROOT/runs/gpu
rm -rf "$RUN"; mkdir -p "$RUN"
cat docs/*.md README.md runbooks/*.md >"$RUN/corpus.txt"
sed -e "s#build/trainer/holdfast-train#$BUILD/trainer/holdfast-train#" \
    -e "s#\"--set\", \"output.dir=runs/gpu\"#\"--set\", \"output.dir=runs/gpu\", \"--set\", \"data.path=runs/gpu/corpus.txt\"#" \
    examples/gpu/job.toml >"$RUN/job.toml"
# The memory snapshot tier too: a snapshot every step from the same pinned staging buffer as the
# disk checkpoints (trainer/device_stager.h); the restart must restore from memory.
printf '\n[recovery]\nmemory_budget_mb = 8192\n' >>"$RUN/job.toml"
RUNCTL="$BUILD/cli/runctl --run-dir $RUN"
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} "$BUILD/daemon/holdfastd" --run-dir "$RUN" --config "$RUN/job.toml" \
  >"$LOGS/supervise.log" 2>&1 &
DAEMON=$!
victim=""
for _ in $(seq 1 360); do
  kill -0 "$DAEMON" 2>/dev/null || break
  victim=$($RUNCTL status --json 2>/dev/null | "$PY" -c '
import json, sys
try: s = json.load(sys.stdin).get("status") or {}
except Exception: sys.exit(0)
ranks = [r for n in s.get("nodes", []) for r in n.get("ranks", [])]
if ranks and all(r.get("step", 0) >= 150 for r in ranks): print(ranks[0]["pid"])' || true)
  [ -n "$victim" ] && break
  sleep 0.5
done
[ -n "$victim" ] && kill -9 "$victim"
timeout 240 tail --pid="$DAEMON" -f /dev/null || kill "$DAEMON"
wait "$DAEMON"; rc=$?
$RUNCTL status latest >"$LOGS/supervise_status.txt" 2>&1
$RUNCTL lineage latest >>"$LOGS/supervise_status.txt" 2>&1
cat "$LOGS/supervise_status.txt"
if [ -z "$victim" ]; then step supervise FAIL "the rank never reached step 150 (supervise.log)"
elif [ $rc -eq 0 ] && grep -qi "restart" "$LOGS/supervise_status.txt" &&
     grep -q "started from step [0-9]* (memory snapshot)" "$LOGS/supervise_status.txt"; then
  step supervise PASS "rank SIGKILLed at step >= 150, restarted from its newest memory snapshot on the GPU, run succeeded (runctl status and lineage in logs)"
elif [ $rc -eq 0 ] && grep -qi "restart" "$LOGS/supervise_status.txt"; then
  step supervise FAIL "the run recovered, but generation 1 did not restore from a memory snapshot (supervise_status.txt, the rank logs)"
else step supervise FAIL "holdfastd exited $rc after the kill (supervise.log, supervise_status.txt)"; fi

# ---- bench ---------------------------------------------------------------------------------
"$PY" - "$RUN/tokens.bin" docs README.md runbooks <<'EOF'
import array, os, sys
out, paths = sys.argv[1], sys.argv[2:]
data = b""
for p in paths:
    files = [p] if os.path.isfile(p) else sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".md"))
    for f in files:
        data += open(f, "rb").read()
while len(data) < 4_000_000:
    data += data
array.array("H", list(data)).tofile(open(out, "wb"))  # one uint16 token per byte (< 256 here; speed, not quality)
EOF
if run_logged bench.log 180 "$BUILD/trainer/holdfast-gpu-bench" --config bench/gpu_gpt2_124m.toml \
     --set "data.path=$RUN/tokens.bin" --steps 20 --warmup 5 --out "$RESULTS/bench.json" &&
   run_logged eager.log 120 "$PY" bench/gpu_eager_bench.py --config bench/gpu_gpt2_124m.toml \
     --set "data.path=$RUN/tokens.bin" --steps 20 --warmup 5 --out "$RESULTS/eager.json"; then
  step bench PASS "$("$PY" -c '
import json, sys
b, e = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"step {b[\"step_ms_median\"]:.1f} ms vs eager {e[\"step_ms_median\"]:.1f} ms "
      f"({b[\"step_ms_median\"]/e[\"step_ms_median\"]:.2f}x), MFU {b[\"mfu\"]:.3f}, "
      f"stall/sync {b[\"stall_ratio\"]:.4f}, staging/plain {b[\"staging_ratio\"]:.3f}")' "$RESULTS/bench.json" "$RESULTS/eager.json")"
else
  step bench FAIL "see logs.tar.gz: bench.log, eager.log"
fi
