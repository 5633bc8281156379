#!/usr/bin/env bash
# Checkpoint benchmark: one command, prints a markdown table.
#
#   bench/checkpoint_bench.sh [BUILD_DIR] [DATA_DIR] [MB]
#   (environment: ROUNDS=5, COMPUTE_MS=250, RANKS=4)
#
# BUILD_DIR (default ./build) must hold checkpoint/checkpoint_bench (ninja
# checkpoint_bench). DATA_DIR (default BUILD_DIR/bench-checkpoint) is where every
# measurement writes, so dd, our writer and torch.save share one disk. MB is
# the state size (default 400).
#
# A shared disk and CPU are noisy (2-4x between runs), so the script runs
# ROUNDS rounds, each one `dd conv=fsync` of the same size and one round of
# checkpoint_bench (2 synchronous and 2 deferred saves, a verified load), in
# alternating order (dd first in odd rounds), and reports medians. Ratios are
# medians of the per-round ratios, so dd and our writer are compared under the
# same load. COMPUTE_MS is the stand-in for one training step's forward and
# backward that runs between a deferred Save and its staging fence.
# Restore: each round also measures a one-rank restore + verify (the loader's
# overlapped read and checksum, and the same read with the checksum in turn, as
# before), against a plain sequential read of the same shard file, after one
# untimed read of it (this VM's disk is cached by its host: a file read a
# second time comes faster, which favoured whatever ran second), in an order
# that rotates with the round; and RANKS ranks (threads) restoring a
# RANKS-rank checkpoint of the same state as holdfast-train does, against every
# rank reading and checksumming every shard (the resume before) and one
# sequential read of all shards.
# Also compares with Python torch.save (+ fsync) through /usr/bin/python3
# (Debian's python3-torch), once.
set -euo pipefail

BUILD_DIR=${1:-build}
DATA_DIR=${2:-$BUILD_DIR/bench-checkpoint}
MB=${3:-400}
ROUNDS=${ROUNDS:-5}
COMPUTE_MS=${COMPUTE_MS:-250}
RANKS=${RANKS:-4}
BENCH=$BUILD_DIR/checkpoint/checkpoint_bench
[ -x "$BENCH" ] || { echo "checkpoint_bench.sh: $BENCH missing; run: ninja -C $BUILD_DIR checkpoint_bench" >&2; exit 2; }
# The in-memory snapshot tier's folder (tmpfs): the same restore from memory.
MEM_DIR=${MEM_DIR:-/dev/shm/hf-checkpoint-bench-$$}
rm -rf "$DATA_DIR"
mkdir -p "$DATA_DIR"
trap 'rm -rf "$DATA_DIR" "$MEM_DIR"' EXIT
ROWS=$DATA_DIR/rounds.tsv

# dd: sequential write of the same size in 64 MB blocks, fsync'd at the end,
# from random bytes already in the page cache (this VM's disk writes zeros from
# /dev/zero several times faster than data).
head -c $(( MB * 1000000 )) /dev/urandom > "$DATA_DIR/random.src"
cat "$DATA_DIR/random.src" > /dev/null
run_dd() {
  local line bytes secs
  line=$(dd if="$DATA_DIR/random.src" of="$DATA_DIR/dd.bin" bs=64M conv=fsync 2>&1 | tail -1)
  rm -f "$DATA_DIR/dd.bin"
  bytes=$(echo "$line" | awk '{print $1}')
  secs=$(echo "$line" | sed -E 's/.*copied, ([0-9.]+) s.*/\1/')
  awk -v b="$bytes" -v s="$secs" 'BEGIN{printf "%.1f", b/s/1e6}'
}
run_ours() {
  "$BENCH" --dir "$DATA_DIR/ckpt" --mb "$MB" --reps 1 --compute-ms "$COMPUTE_MS" --order "$r" --ranks "$RANKS" \
    --memory-dir "$MEM_DIR" > "$DATA_DIR/round.out"
  rm -rf "$DATA_DIR/ckpt"
}

for (( r = 1; r <= ROUNDS; r++ )); do
  if (( r % 2 == 1 )); then dd_MBps=$(run_dd); run_ours; else run_ours; dd_MBps=$(run_dd); fi
  { echo "round=$r"; echo "dd_MBps=$dd_MBps"; echo "loadavg=$(cut -d' ' -f1 /proc/loadavg)"; cat "$DATA_DIR/round.out"; } |
    paste -sd' ' >> "$ROWS"
  echo "checkpoint_bench.sh: round $r/$ROUNDS done (dd $dd_MBps MB/s)" >&2
done
rm -f "$DATA_DIR/random.src"

# torch.save of a state of the same size, fsync'd; then torch.load from the device.
torch_out=$(/usr/bin/python3 - "$DATA_DIR/state.pt" "$MB" <<'PY' || true
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
print(f"torch_save_s={saves[1]:.6f} torch_bytes={size} torch_load_s={load:.6f}")
PY
)

/usr/bin/python3 - "$ROWS" "$MB" "$COMPUTE_MS" "$torch_out" <<'PY'
import statistics, sys
rows_path, mb, compute_ms, torch_out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def kv(line):
    return {k: float(v) for k, v in (f.split("=", 1) for f in line.split())}
rows = [kv(l) for l in open(rows_path) if l.strip()]
med = lambda key: statistics.median(r[key] for r in rows)
medr = lambda f: statistics.median(f(r) for r in rows)
with open("/proc/loadavg") as f:
    load_end = " ".join(f.read().split()[:3])
shard = rows[0]["shard_bytes"]
sync = med("sync_save_s")
print(f"State: {mb} MB (shard file {shard/1e6:.1f} MB); {len(rows)} rounds, dd and our writer alternated;")
print(f"medians; ratios are medians of per-round ratios. Load average per round (1 min): "
      f"{', '.join('%.1f' % r['loadavg'] for r in rows)}; at the end: {load_end}.\n")
print("| measure | value | ratio | goal |\n|---|---|---|---|")
print(f"| training stall per save: Save + staging fence, after a {compute_ms:.0f} ms stand-in for forward+backward "
      f"| {med('stall_s')*1e3:.1f} ms (fence {med('fence_s')*1e3:.1f} ms) "
      f"| {medr(lambda r: r['stall_s']/r['sync_save_s']):.4f} of a synchronous save | <= 0.02 |")
print(f"| worst case: fence right after Save (no compute to hide the copy) | {med('stall_nocompute_s')*1e3:.1f} ms "
      f"| {medr(lambda r: r['stall_nocompute_s']/r['sync_save_s']):.4f} | |")
print(f"| before: Save copying every buffer itself | {med('eager_stall_s')*1e3:.1f} ms "
      f"| {medr(lambda r: r['eager_stall_s']/r['sync_save_s']):.4f} | |")
print(f"| synchronous save (Save + Flush: copy, XXH3, write, fsync, manifest) | {sync:.3f} s | | |")
print(f"| write bandwidth (write {rows[0]['chunk_mb']:.0f} MB chunks + fsync + rename + folder fsync) "
      f"| {med('write_MBps'):.0f} MB/s | {medr(lambda r: r['write_MBps']/r['dd_MBps']):.2f} of dd bs=64M conv=fsync "
      f"(median {med('dd_MBps'):.0f} MB/s; per round {', '.join('%.2f' % (r['write_MBps']/r['dd_MBps']) for r in rows)}) "
      f"| >= 0.9 |")
print(f"| background staging (deferred copy + XXH3, overlaps training) | {med('stage_s')*1e3:.0f} ms | | |")
print(f"| whole background pipeline (staging + write) | {med('pipeline_MBps'):.0f} MB/s "
      f"| {medr(lambda r: r['pipeline_MBps']/r['dd_MBps']):.2f} of dd | |")
rv = lambda key: medr(lambda r: r[key]/r['seq_read_MBps'])
print(f"| restore + verify, one rank (RestoreNewest: read with the XXH3 overlapped; page cache dropped) "
      f"| {med('restore_verify_MBps'):.0f} MB/s | {rv('restore_verify_MBps'):.2f} of a sequential read of the same "
      f"file ({med('seq_read_MBps'):.0f} MB/s; per round "
      f"{', '.join('%.2f' % (r['restore_verify_MBps']/r['seq_read_MBps']) for r in rows)}) | >= 0.8 |")
print(f"| before: the same read with the XXH3 in turn, one thread | {med('restore_serial_MBps'):.0f} MB/s "
      f"| {rv('restore_serial_MBps'):.2f} (per round "
      f"{', '.join('%.2f' % (r['restore_serial_MBps']/r['seq_read_MBps']) for r in rows)}) | |")
n = int(rows[0]['ranks'])
print(f"| {n} ranks (threads) restore a {n}-rank checkpoint, each its own shard + every shard's params "
      f"({rows[0]['ranks_max_rank_bytes']/1e6:.0f} of {rows[0]['ranks_ckpt_bytes']/1e6:.0f} MB per rank, "
      f"1/{n} of the checksums) | {med('ranks_restore_s'):.3f} s "
      f"| {medr(lambda r: r['ranks_seq_read_s']/r['ranks_restore_s']):.2f} of one sequential read of all shards "
      f"({med('ranks_seq_read_s'):.3f} s) | |")
print(f"| before: every rank reads and checksums every shard (LoadNewestAll, in turn) | {med('ranks_loadall_s'):.3f} s "
      f"| {medr(lambda r: r['ranks_seq_read_s']/r['ranks_loadall_s']):.2f}; the new restore takes "
      f"{medr(lambda r: r['ranks_restore_s']/r['ranks_loadall_s']):.2f} of its time | |")
print(f"| restore + verify from a memory snapshot (the same RestoreNewest from tmpfs, docs/memory-snapshots.md) "
      f"| {shard/med('memory_restore_s')/1e6:.0f} MB/s ({med('memory_restore_s'):.3f} s) "
      f"| {medr(lambda r: r['memory_disk_restore_s']/r['memory_restore_s']):.2f}x faster than from the disk with the "
      f"page cache dropped, in turn with it ({med('memory_disk_restore_s'):.3f} s; per round "
      f"{', '.join('%.2f' % (r['memory_disk_restore_s']/r['memory_restore_s']) for r in rows)}) | |")
if torch_out.strip():
    t = kv(torch_out)
    tbw = t["torch_bytes"] / t["torch_save_s"] / 1e6
    print(f"| torch.save + fsync (python3-torch), same state, once | {t['torch_save_s']:.3f} s ({tbw:.0f} MB/s) "
          f"| our synchronous save is {sync/t['torch_save_s']:.2f}x its time | |")
    lbw = t["torch_bytes"] / t["torch_load_s"] / 1e6
    print(f"| torch.load (page cache dropped), once | {t['torch_load_s']:.3f} s ({lbw:.0f} MB/s) "
          f"| restore+verify is {med('restore_verify_MBps')/lbw:.2f}x its bandwidth | |")
else:
    print("| torch.save / torch.load | not run (python3-torch missing) | | |")
PY
