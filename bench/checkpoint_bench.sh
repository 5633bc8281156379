#!/usr/bin/env bash
# Checkpoint benchmark: one command, prints a markdown table.
#
#   bench/checkpoint_bench.sh [BUILD_DIR] [DATA_DIR] [MB]
#
# BUILD_DIR (default ./build) must hold checkpoint/checkpoint_bench (ninja
# checkpoint_bench). DATA_DIR (default BUILD_DIR/bench-checkpoint) is where every
# measurement writes, so dd, our writer and torch.save share one disk. MB is
# the state size (default 400). Compares against `dd conv=fsync` and Python
# torch.save (+ fsync) of the same state through /usr/bin/python3 (Debian's
# python3-torch).
set -euo pipefail

BUILD_DIR=${1:-build}
DATA_DIR=${2:-$BUILD_DIR/bench-checkpoint}
MB=${3:-400}
BENCH=$BUILD_DIR/checkpoint/checkpoint_bench
[ -x "$BENCH" ] || { echo "checkpoint_bench.sh: $BENCH missing; run: ninja -C $BUILD_DIR checkpoint_bench" >&2; exit 2; }
rm -rf "$DATA_DIR"
mkdir -p "$DATA_DIR"
trap 'rm -rf "$DATA_DIR"' EXIT

# dd: sequential write of the same size, fsync'd at the end, from random bytes
# already in the page cache (this VM's disk writes zeros from /dev/zero several
# times faster than data). Run before and after our writer; the faster of the
# two is the reference (a shared disk is noisy).
head -c $(( MB * 1000000 )) /dev/urandom > "$DATA_DIR/random.src"
cat "$DATA_DIR/random.src" > /dev/null
run_dd() {
  local line bytes secs
  line=$(dd if="$DATA_DIR/random.src" of="$DATA_DIR/dd.bin" bs=8M conv=fsync 2>&1 | tail -1)
  rm -f "$DATA_DIR/dd.bin"
  bytes=$(echo "$line" | awk '{print $1}')
  secs=$(echo "$line" | sed -E 's/.*copied, ([0-9.]+) s.*/\1/')
  awk -v b="$bytes" -v s="$secs" 'BEGIN{printf "%.1f", b/s/1e6}'
}
dd_before=$(run_dd)

# Our writer and loader.
out=$("$BENCH" --dir "$DATA_DIR/ckpt" --mb "$MB" --reps 3)
get() { echo "$out" | sed -n "s/^$1=//p"; }
rm -rf "$DATA_DIR/ckpt"
dd_after=$(run_dd)
dd_MBps=$(awk -v a="$dd_before" -v b="$dd_after" 'BEGIN{print (a > b ? a : b)}')
rm -f "$DATA_DIR/random.src"

# torch.save of a state of the same size, fsync'd; then torch.load from the device.
torch_out=$(/usr/bin/python3 - "$DATA_DIR/state.pt" "$MB" <<'PY'
import os, sys, time, torch
path, mb = sys.argv[1], int(sys.argv[2])
n = mb * 1000 * 1000 // 3 // 4
state = {"params": torch.randn(n), "adam.exp_avg": torch.randn(n), "adam.exp_avg_sq": torch.randn(n),
         "meta": {"step": 0, "data_cursor": 12345}}
saves = []
for _ in range(3):
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    saves.append(time.perf_counter() - t0)
size = os.path.getsize(path)
fd = os.open(path, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
t0 = time.perf_counter()
torch.load(path)
load = time.perf_counter() - t0
saves.sort()
print(f"torch_save_s={saves[1]:.6f}\ntorch_bytes={size}\ntorch_load_s={load:.6f}")
PY
)
tget() { echo "$torch_out" | sed -n "s/^$1=//p"; }

sync_s=$(get sync_save_s); stall_s=$(get stall_s); write=$(get write_MBps)
restore=$(get restore_verify_MBps); seqread=$(get seq_read_MBps); shard=$(get shard_bytes)
tsave=$(tget torch_save_s); tbytes=$(tget torch_bytes); tload=$(tget torch_load_s)

awk -v mb="$MB" -v shard="$shard" -v sync_s="$sync_s" -v stall_s="$stall_s" -v write="$write" -v dd="$dd_MBps" \
    -v restore="$restore" -v seqread="$seqread" -v tsave="$tsave" -v tbytes="$tbytes" -v tload="$tload" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" \
    -v dd1="$dd_before" -v dd2="$dd_after" 'BEGIN {
  printf "Load average at the end: %s\n\n", load
  printf "State: %d MB (shard file %.1f MB); medians of 3 saves/loads; same disk for every row.\n\n", mb, shard/1e6
  printf "| measure | value | ratio | goal |\n|---|---|---|---|\n"
  printf "| training stall per async save (copy into staging) | %.1f ms | %.4f of a synchronous save | <= 0.02 |\n", stall_s*1e3, stall_s/sync_s
  printf "| synchronous save (Save + Flush: copy, write, XXH3, fsync, manifest) | %.3f s | | |\n", sync_s
  printf "| background write bandwidth (write + XXH3 + fsync + rename) | %.0f MB/s | %.2f of dd conv=fsync (best of %.0f, %.0f MB/s) | >= 0.9 |\n", write, write/dd, dd1, dd2
  printf "| restore + verify bandwidth (page cache dropped) | %.0f MB/s | %.2f of a sequential read (%.0f MB/s) | |\n", restore, restore/seqread, seqread
  printf "| torch.save + fsync (python3-torch), same state | %.3f s (%.0f MB/s) | ours sync save is %.2fx its time; our stall %.4fx | |\n", tsave, tbytes/tsave/1e6, sync_s/tsave, stall_s/tsave
  printf "| torch.load (page cache dropped) | %.3f s (%.0f MB/s) | restore+verify is %.2fx its bandwidth | |\n", tload, tbytes/tload/1e6, restore/(tbytes/tload/1e6)
}'
