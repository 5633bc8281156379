"""The progress record's layout and its writer (docs/progress-record.md).

The layout is the contract shared with common/progress_record.h
(ProgressRecordLayout): one 1400-byte little-endian record per rank, every field
naturally aligned. Fields are written through typed memoryviews of the mapping,
so that each one is a single native store of its width (struct's "<Q" packs
byte by byte), and the sequence lock is bumped around every update.

Thread-safety: one _Record may be updated from several threads (DDP runs its
communication hook and completion callbacks off the training thread); a lock
serialises the updates so that the sequence lock stays odd/even in pairs. The
phase stack of the phase() context manager belongs to the training thread.
"""

import mmap
import os
import threading
import time

MAGIC = 0x31474F5250464C48  # "HLFPROG1"
VERSION = 4
SIZE = 1400
RING_SIZE = 16
RING_ENTRY_SIZE = 40
ERROR_SIZE = 160

# Byte offsets (common/progress_record.h, static_asserts there pin the same).
OFF_MAGIC = 0
OFF_VERSION = 8
OFF_SIZE = 12
OFF_RANK = 16
OFF_PID = 20
OFF_SEQ = 24
OFF_STEP = 32
OFF_PHASE = 40
OFF_COLLECTIVE_KIND = 44
OFF_COLLECTIVES_ISSUED = 48
OFF_COLLECTIVES_DONE = 56
OFF_WAITING_ON = 64
OFF_PHASE_STARTED_NS = 72
OFF_STEP_STARTED_NS = 80
OFF_HEARTBEAT_NS = 88
OFF_LAST_STEP_NS = 96
OFF_CHECKPOINT_STEP = 104
OFF_RING_HEAD = 112
OFF_RING = 120
OFF_CHECKPOINT_FAILURES = 760
OFF_CHECKPOINT_FAILED_STEP = 768
OFF_CHECKPOINT_ERROR = 776
OFF_RESTORED_STEP = 936
OFF_RESTORE_TIER = 944
OFF_RESTORE_SKIPPED = 948
OFF_MESH = 952  # i32 tensor, pipeline, expert (0 = not reported), u32 reserved
OFF_GROUP_ISSUED = 968  # 6 x u64
OFF_RING_DETAIL = 1016  # 16 x 24 B, entry i describes ring[i]
RING_DETAIL_SIZE = 24
# Within a detail: {u64 group_seq, u8 group, u8 send_what, u8 recv_what, u8 pad,
# i32 send_to, i32 recv_from, i16 send_micro, i16 recv_micro}. This module
# labels a collective's group when the job declared its mesh (set_mesh);
# otherwise group 0 (unknown). It labels no peers (-1): point-to-point
# messages are not recorded.
DETAIL_SEND_TO = 12
# CollectiveGroup (common/progress_record.h): group_issued[g - 1] counts group g.
GROUPS = {"world": 1, "dp": 2, "tp": 3, "pp": 4, "ep": 5, "edp": 6}
# Within a ring entry: {u64 seq, u32 kind, u32 reserved, u64 bytes, i64 issued_ns, i64 completed_ns}.
ENTRY_SEQ = 0
ENTRY_KIND = 8
ENTRY_BYTES = 16
ENTRY_ISSUED_NS = 24
ENTRY_COMPLETED_NS = 32

assert OFF_RING + RING_SIZE * RING_ENTRY_SIZE == OFF_CHECKPOINT_FAILURES
assert OFF_CHECKPOINT_ERROR + ERROR_SIZE == OFF_RESTORED_STEP
assert OFF_RESTORE_SKIPPED + 4 == OFF_MESH
assert OFF_RING_DETAIL + RING_SIZE * RING_DETAIL_SIZE == SIZE

# Values are part of the layout (Phase, CollectiveKind in progress_record.h).
PHASES = {
    "starting": 0,
    "data": 1,
    "forward": 2,
    "backward": 3,
    "collective": 4,
    "optimizer": 5,
    "checkpoint": 6,
    "eval": 7,
    "done": 8,
}
PHASE_COLLECTIVE = 4
PHASE_DATA = 1
COLLECTIVE_KINDS = {"allreduce": 1, "broadcast": 2, "barrier": 3, "allgather": 4, "reduce_scatter": 5}
RESTORE_TIERS = {"none": 1, "disk": 2, "memory": 3}  # RestoreTier; 0 = not reported

# Indices into the typed views: offset // width.
_SEQ = OFF_SEQ // 8
_STEP = OFF_STEP // 8
_PHASE = OFF_PHASE // 4
_KIND = OFF_COLLECTIVE_KIND // 4
_ISSUED = OFF_COLLECTIVES_ISSUED // 8
_DONE = OFF_COLLECTIVES_DONE // 8
_WAITING = OFF_WAITING_ON // 8
_PHASE_STARTED = OFF_PHASE_STARTED_NS // 8
_STEP_STARTED = OFF_STEP_STARTED_NS // 8
_HEARTBEAT = OFF_HEARTBEAT_NS // 8
_LAST_STEP = OFF_LAST_STEP_NS // 8
_CHECKPOINT_STEP = OFF_CHECKPOINT_STEP // 8
_RING_HEAD = OFF_RING_HEAD // 8
_FAILURES = OFF_CHECKPOINT_FAILURES // 8
_FAILED_STEP = OFF_CHECKPOINT_FAILED_STEP // 8
_RESTORED_STEP = OFF_RESTORED_STEP // 8
_RESTORE_TIER = OFF_RESTORE_TIER // 4
_RESTORE_SKIPPED = OFF_RESTORE_SKIPPED // 4
_MESH = OFF_MESH // 4
_GROUP_ISSUED = OFF_GROUP_ISSUED // 8

_now = time.monotonic_ns  # CLOCK_MONOTONIC on Linux, as MonotonicNowNs() in C++


def _entry(i):
    """Indices of ring entry i: (seq u64, kind u32, bytes u64, issued i64, completed i64)."""
    base = OFF_RING + i * RING_ENTRY_SIZE
    return ((base + ENTRY_SEQ) // 8, (base + ENTRY_KIND) // 4, (base + ENTRY_BYTES) // 8,
            (base + ENTRY_ISSUED_NS) // 8, (base + ENTRY_COMPLETED_NS) // 8)


_ENTRIES = tuple(_entry(i) for i in range(RING_SIZE))
# Byte range of detail i, and what an unlabelled collective writes there
# (group 0, no peers, no micro-batches), as ProgressWriter does.
_DETAILS = tuple((OFF_RING_DETAIL + i * RING_DETAIL_SIZE, OFF_RING_DETAIL + (i + 1) * RING_DETAIL_SIZE)
                 for i in range(RING_SIZE))
_UNLABELLED = bytes(DETAIL_SEND_TO) + (-1).to_bytes(4, "little", signed=True) * 2 + b"\xff" * 4
assert len(_UNLABELLED) == RING_DETAIL_SIZE


def truncate_utf8(text, limit):
    """text encoded as UTF-8, cut to at most `limit` bytes at a character boundary."""
    data = text.encode("utf-8", "replace") if isinstance(text, str) else bytes(text)
    if len(data) <= limit:
        return data
    n = limit
    while n > 0 and (data[n] & 0xC0) == 0x80:
        n -= 1
    return data[:n]


class _Record:
    """A mapped record, written as ProgressWriter writes it."""

    def __init__(self, path, rank=None):
        # As ProgressWriter::Open: the supervisor normally created and
        # initialised the file; create, size and initialise it if not.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < SIZE:
                os.ftruncate(fd, SIZE)
            self._mm = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.path = path
        self._mv = memoryview(self._mm)
        self._u64 = self._mv.cast("Q")
        self._i64 = self._mv.cast("q")
        self._u32 = self._mv.cast("I")
        self._i32 = self._mv.cast("i")
        self._lock = threading.Lock()
        self._phase_stack = []  # training thread only (phase())
        u64, u32, i64, i32 = self._u64, self._u32, self._i64, self._i32
        if u64[OFF_MAGIC // 8] != MAGIC or u32[OFF_VERSION // 4] != VERSION:
            self._mv[:] = bytes(SIZE)
            u32[OFF_VERSION // 4] = VERSION
            u32[OFF_SIZE // 4] = SIZE
            i32[OFF_RANK // 4] = rank if rank is not None else 0
            i64[_CHECKPOINT_STEP] = -1
            i64[_FAILED_STEP] = -1
            i64[_RESTORED_STEP] = -1
            i64[_HEARTBEAT] = _now()
            u64[OFF_MAGIC // 8] = MAGIC
        i32[OFF_PID // 4] = os.getpid()
        if rank is not None:
            i32[OFF_RANK // 4] = rank

    def close(self):
        for view in (self._u64, self._i64, self._u32, self._i32, self._mv):
            view.release()
        self._mm.close()

    # The sequence lock: callers hold self._lock.
    def _begin(self):
        self._u64[_SEQ] += 1

    def _end(self, now):
        self._i64[_HEARTBEAT] = now
        self._u64[_SEQ] += 1

    def phase_value(self):
        return self._u32[_PHASE]

    def set_phase(self, value):
        with self._lock:
            self._begin()
            now = _now()
            self._u32[_PHASE] = value
            self._i64[_PHASE_STARTED] = now
            self._end(now)

    def enter_phase(self, value):
        """Sets the phase; the first phase a process enters also starts its first step's timer."""
        with self._lock:
            self._begin()
            now = _now()
            self._phase_stack.append(self._u32[_PHASE])
            self._u32[_PHASE] = value
            self._i64[_PHASE_STARTED] = now
            if self._i64[_STEP_STARTED] == 0:
                self._i64[_STEP_STARTED] = now
            self._end(now)

    def exit_phase(self):
        previous = self._phase_stack.pop() if self._phase_stack else PHASE_DATA
        self.set_phase(previous)

    def step(self, completed):
        """EndStep(completed) and BeginStep() in one update: the next step starts now, in data."""
        with self._lock:
            self._begin()
            now = _now()
            i64 = self._i64
            i64[_STEP] = completed
            started = i64[_STEP_STARTED]
            if started != 0:
                i64[_LAST_STEP] = now - started
            i64[_STEP_STARTED] = now
            self._u32[_PHASE] = PHASE_DATA
            i64[_PHASE_STARTED] = now
            self._end(now)

    def set_mesh(self, tensor, pipeline, expert):
        with self._lock:
            self._begin()
            i32 = self._i32
            i32[_MESH], i32[_MESH + 1], i32[_MESH + 2] = tensor, pipeline, expert
            self._end(_now())

    def issue_collective(self, kind, nbytes, group=0):
        """`group`: a GROUPS value (0 = unknown), counted in group_issued."""
        with self._lock:
            self._begin()
            now = _now()
            u64 = self._u64
            seq = u64[_ISSUED] + 1
            u64[_ISSUED] = seq
            head = u64[_RING_HEAD]
            e_seq, e_kind, e_bytes, e_issued, e_completed = _ENTRIES[head % RING_SIZE]
            u64[e_seq] = seq
            self._u32[e_kind] = kind
            u64[e_bytes] = nbytes
            self._i64[e_issued] = now
            self._i64[e_completed] = 0
            d_begin, d_end = _DETAILS[head % RING_SIZE]
            self._mv[d_begin:d_end] = _UNLABELLED
            if group:
                count = u64[_GROUP_ISSUED + group - 1] + 1
                u64[_GROUP_ISSUED + group - 1] = count
                u64[d_begin // 8] = count
                self._mv[d_begin + 8] = group
            u64[_RING_HEAD] = head + 1
            self._end(now)
        return seq

    def wait_collective(self, seq, kind):
        """Phase collective, blocked in `seq`; returns the phase it replaced."""
        with self._lock:
            self._begin()
            now = _now()
            previous = self._u32[_PHASE]
            self._u32[_PHASE] = PHASE_COLLECTIVE
            self._i64[_PHASE_STARTED] = now
            self._u64[_WAITING] = seq
            self._u32[_KIND] = kind
            self._end(now)
        return previous

    def collective_done(self, seq, restore_phase=None, next_waiting=None):
        """Collective `seq` finished (CollectiveDone). A wait in it ends: the rank
        waits in `next_waiting` instead if given (DDP's buckets, waited on in
        order), and goes back to `restore_phase` if given (the waiter knows it
        waits no more). Marking the same collective done twice is harmless."""
        with self._lock:
            self._begin()
            now = _now()
            u64 = self._u64
            if seq > u64[_DONE]:
                u64[_DONE] = seq
            if next_waiting is not None:
                u64[_WAITING] = next_waiting
            elif u64[_WAITING] == seq:
                u64[_WAITING] = 0
            if restore_phase is not None:
                self._u32[_PHASE] = restore_phase
                self._i64[_PHASE_STARTED] = now
            for e_seq, _, _, _, e_completed in _ENTRIES:
                if u64[e_seq] == seq and self._i64[e_completed] == 0:
                    self._i64[e_completed] = now
            self._end(now)

    def stop_waiting(self, seq, restore_phase):
        """The wait in `seq` ended without it completing (an exception): not done."""
        with self._lock:
            self._begin()
            now = _now()
            if self._u64[_WAITING] == seq:
                self._u64[_WAITING] = 0
            if restore_phase is not None:
                self._u32[_PHASE] = restore_phase
                self._i64[_PHASE_STARTED] = now
            self._end(now)

    def set_checkpoint_step(self, step):
        with self._lock:
            self._begin()
            self._i64[_CHECKPOINT_STEP] = step
            self._end(_now())

    def record_checkpoint_failure(self, step, message):
        data = truncate_utf8(message, ERROR_SIZE - 1)
        with self._lock:
            self._begin()
            self._u64[_FAILURES] += 1
            self._i64[_FAILED_STEP] = step
            self._mv[OFF_CHECKPOINT_ERROR:OFF_CHECKPOINT_ERROR + ERROR_SIZE] = data + bytes(ERROR_SIZE - len(data))
            self._end(_now())

    def set_restored(self, step, tier, skipped):
        with self._lock:
            self._begin()
            self._i64[_RESTORED_STEP] = step
            self._u32[_RESTORE_TIER] = tier
            self._u32[_RESTORE_SKIPPED] = skipped
            self._end(_now())
