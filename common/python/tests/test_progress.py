"""The holdfast module writes the record of docs/progress-record.md.

The record is decoded here with struct at the offsets the document gives, not
with the module's own constants, so a drift of either shows. Byte
compatibility with the C++ reader is common/progress_record_python_test.cc.

Run: /usr/bin/python3 -B -m unittest -v test_progress   (from this folder)
"""

import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.pop("HOLDFAST_PROGRESS_PATH", None)

import holdfast  # noqa: E402
from holdfast import _record  # noqa: E402

MAGIC = 0x31474F5250464C48
PHASE = {"starting": 0, "data": 1, "forward": 2, "backward": 3, "collective": 4, "optimizer": 5,
         "checkpoint": 6, "eval": 7, "done": 8}
ALLREDUCE, BROADCAST, BARRIER, ALLGATHER = 1, 2, 3, 4

_HEADER = struct.Struct("<QIIiiQqIIQQQqqqqqQ")  # offsets 0..119
_ENTRY = struct.Struct("<QIIQqq")  # 40 bytes
_HEADER_FIELDS = ("magic", "version", "size", "rank", "pid", "seq", "step", "phase", "collective_kind",
                  "collectives_issued", "collectives_done", "waiting_on", "phase_started_ns", "step_started_ns",
                  "heartbeat_ns", "last_step_ns", "checkpoint_step", "ring_head")


def read_record(path):
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= 1400, len(data)
    assert _HEADER.size == 120 and _ENTRY.size == 40
    r = dict(zip(_HEADER_FIELDS, _HEADER.unpack_from(data, 0)))
    r["ring"] = [dict(zip(("seq", "kind", "reserved", "bytes", "issued_ns", "completed_ns"),
                          _ENTRY.unpack_from(data, 120 + 40 * i))) for i in range(16)]
    r["checkpoint_failures"], r["checkpoint_failed_step"] = struct.unpack_from("<Qq", data, 760)
    r["checkpoint_error"] = data[776:936]
    r["restored_step"], r["restore_tier"], r["restore_skipped"] = struct.unpack_from("<qII", data, 936)
    r["mesh"] = struct.unpack_from("<iii", data, 952)
    r["group_issued"] = struct.unpack_from("<6Q", data, 968)
    r["ring_detail"] = [dict(zip(("group_seq", "group", "send_what", "recv_what", "pad", "send_to", "recv_from",
                                  "send_micro", "recv_micro"), struct.unpack_from("<QBBBBiihh", data, 1016 + 24 * i)))
                        for i in range(16)]
    return r


def create_like_the_daemon(path, rank):
    """What CreateProgressFile leaves: a zeroed, initialised record."""
    data = bytearray(1400)
    struct.pack_into("<QIIi", data, 0, MAGIC, 4, 1400, rank)
    struct.pack_into("<q", data, 104, -1)  # checkpoint_step
    struct.pack_into("<q", data, 88, 12345)  # heartbeat_ns
    struct.pack_into("<q", data, 768, -1)  # checkpoint_failed_step
    struct.pack_into("<q", data, 936, -1)  # restored_step
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, bytes(data))
    os.close(fd)


class RecordTestCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "rank0.progress")

    def tearDown(self):
        holdfast.close()
        self.dir.cleanup()

    def open(self, rank=3):
        create_like_the_daemon(self.path, rank)
        self.assertTrue(holdfast.init(self.path))
        return read_record(self.path)


class DisabledTest(unittest.TestCase):
    def test_every_call_is_a_no_op_without_a_record(self):
        holdfast.close()
        self.assertFalse(holdfast.enabled())
        holdfast.step(1)
        with holdfast.phase("forward"):
            pass
        holdfast.set_phase("done")
        holdfast.checkpoint_committed(5)
        holdfast.checkpoint_failed(5, "x")
        seq = holdfast.issue_collective("allreduce", 8)
        self.assertEqual(seq, 0)
        holdfast.collective_done(seq, holdfast.wait_collective(seq, "allreduce"))
        with holdfast.collective("barrier"):
            pass

    def test_names_are_checked_even_when_disabled(self):
        holdfast.close()
        with self.assertRaises(ValueError):
            holdfast.phase("fwd")
        with self.assertRaises(ValueError):
            holdfast.issue_collective("all_to_all")

    def test_unopenable_record_leaves_the_module_disabled(self):
        self.assertFalse(holdfast.init("/nonexistent-dir/rank0.progress"))
        self.assertFalse(holdfast.enabled())
        holdfast.step(1)


class LayoutTest(RecordTestCase):
    def test_keeps_the_daemons_header_and_writes_pid_and_rank(self):
        os.environ["HOLDFAST_RANK"] = "5"
        try:
            r = self.open(rank=5)
        finally:
            del os.environ["HOLDFAST_RANK"]
        self.assertEqual((r["magic"], r["version"], r["size"]), (MAGIC, 4, 1400))
        self.assertEqual(r["rank"], 5)
        self.assertEqual(r["pid"], os.getpid())
        self.assertEqual(r["phase"], PHASE["starting"])
        self.assertEqual(r["checkpoint_step"], -1)
        self.assertEqual(r["checkpoint_failed_step"], -1)
        self.assertEqual((r["restored_step"], r["restore_tier"]), (-1, 0))
        self.assertEqual(r["seq"], 0)

    def test_rank_defaults_to_the_one_the_daemon_wrote(self):
        r = self.open(rank=7)
        self.assertEqual(r["rank"], 7)

    def test_missing_or_foreign_file_is_initialised(self):
        with open(self.path, "wb") as f:
            f.write(b"not a record")
        self.assertTrue(holdfast.init(self.path, rank=2))
        r = read_record(self.path)
        self.assertEqual(os.path.getsize(self.path), 1400)
        self.assertEqual((r["magic"], r["version"], r["size"], r["rank"]), (MAGIC, 4, 1400, 2))
        self.assertEqual((r["checkpoint_step"], r["checkpoint_failed_step"]), (-1, -1))
        self.assertGreater(r["heartbeat_ns"], 0)
        holdfast.close()
        os.unlink(self.path)
        self.assertTrue(holdfast.init(self.path, rank=4))
        self.assertEqual(read_record(self.path)["rank"], 4)
        self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o600)

    def test_module_constants_match_the_document(self):
        self.assertEqual(_record.SIZE, 1400)
        self.assertEqual(_record.OFF_MESH, 952)
        self.assertEqual(_record.OFF_GROUP_ISSUED, 968)
        self.assertEqual(_record.OFF_RING_DETAIL, 1016)
        self.assertEqual(_record.OFF_RESTORED_STEP, 936)
        self.assertEqual(_record.OFF_RING, 120)
        self.assertEqual(_record.OFF_CHECKPOINT_FAILURES, 760)
        self.assertEqual(_record.OFF_CHECKPOINT_ERROR, 776)
        self.assertEqual(_record.PHASES, PHASE)


class StepAndPhaseTest(RecordTestCase):
    def test_step_records_completed_steps_their_time_and_starts_the_next_in_data(self):
        self.open()
        holdfast.step(10)  # resumed at 10: no timer ran, so no duration
        r = read_record(self.path)
        self.assertEqual(r["step"], 10)
        self.assertEqual(r["phase"], PHASE["data"])
        self.assertEqual(r["last_step_ns"], 0)
        self.assertGreater(r["step_started_ns"], 0)
        self.assertEqual(r["phase_started_ns"], r["step_started_ns"])
        self.assertEqual(r["seq"] % 2, 0)
        holdfast.step(11)
        r2 = read_record(self.path)
        self.assertEqual(r2["step"], 11)
        self.assertEqual(r2["last_step_ns"], r2["step_started_ns"] - r["step_started_ns"])
        self.assertGreater(r2["last_step_ns"], 0)
        self.assertEqual(r2["heartbeat_ns"], r2["step_started_ns"])
        self.assertEqual(r2["seq"], r["seq"] + 2)

    def test_first_phase_starts_the_first_steps_timer(self):
        self.open()
        with holdfast.phase("forward"):
            started = read_record(self.path)["step_started_ns"]
        holdfast.step(1)
        r = read_record(self.path)
        self.assertGreater(started, 0)
        self.assertEqual(r["last_step_ns"], r["step_started_ns"] - started)

    def test_phases_nest_and_restore_what_they_interrupted(self):
        self.open()
        holdfast.step(0)
        seen = []
        with holdfast.phase("eval"):
            seen.append(read_record(self.path)["phase"])
            with holdfast.phase("checkpoint"):
                seen.append(read_record(self.path)["phase"])
            seen.append(read_record(self.path)["phase"])
        seen.append(read_record(self.path)["phase"])
        self.assertEqual(seen, [PHASE["eval"], PHASE["checkpoint"], PHASE["eval"], PHASE["data"]])
        for name in ("forward", "backward", "optimizer"):
            with holdfast.phase(name):
                r = read_record(self.path)
                self.assertEqual(r["phase"], PHASE[name])
                self.assertEqual(r["seq"] % 2, 0)
        holdfast.set_phase("done")
        self.assertEqual(read_record(self.path)["phase"], PHASE["done"])

    def test_exception_inside_a_phase_still_restores(self):
        self.open()
        holdfast.step(3)
        with self.assertRaises(RuntimeError):
            with holdfast.phase("forward"):
                raise RuntimeError("boom")
        self.assertEqual(read_record(self.path)["phase"], PHASE["data"])


class CheckpointTest(RecordTestCase):
    def test_committed_and_failed_checkpoints(self):
        self.open()
        holdfast.checkpoint_committed(100)
        holdfast.checkpoint_failed(120, "mkdir /ck/step-120: Not a directory")
        r = read_record(self.path)
        self.assertEqual(r["checkpoint_step"], 100)
        self.assertEqual(r["checkpoint_failures"], 1)
        self.assertEqual(r["checkpoint_failed_step"], 120)
        self.assertEqual(r["checkpoint_error"].rstrip(b"\0"), b"mkdir /ck/step-120: Not a directory")

        # Cut at 159 bytes, never through a character; nothing of the earlier text remains.
        long = "x" * 158 + "\u00e9 and more"
        holdfast.checkpoint_failed(140, long)
        r = read_record(self.path)
        self.assertEqual(r["checkpoint_failures"], 2)
        self.assertEqual(r["checkpoint_error"], b"x" * 158 + b"\0" * 2)


class ResumedTest(RecordTestCase):
    def test_resumed_from_a_tier_and_a_fresh_start(self):
        self.open()
        holdfast.resumed(40)
        r = read_record(self.path)
        self.assertEqual((r["restored_step"], r["restore_tier"], r["restore_skipped"]), (40, 2, 0))
        holdfast.resumed(41, "memory")
        self.assertEqual(read_record(self.path)["restore_tier"], 3)
        holdfast.resumed(None)
        r = read_record(self.path)
        self.assertEqual((r["restored_step"], r["restore_tier"]), (-1, 1))

    def test_bad_arguments_are_refused_and_change_nothing(self):
        self.open()
        holdfast.resumed(7, "memory")
        for step, tier in ((-3, "disk"), (True, "disk"), ("7", "disk"), (7, "tape"), (7, "none")):
            with self.assertRaises(ValueError):
                holdfast.resumed(step, tier)
        r = read_record(self.path)
        self.assertEqual((r["restored_step"], r["restore_tier"]), (7, 3))


class CollectiveTest(RecordTestCase):
    def test_ring_wait_and_done(self):
        self.open()
        seqs = [holdfast.issue_collective("allreduce", 1000 + i) for i in range(18)]
        self.assertEqual(seqs, list(range(1, 19)))
        r = read_record(self.path)
        self.assertEqual(r["collectives_issued"], 18)
        self.assertEqual(r["ring_head"], 18)
        for n in (3, 17, 18):  # entry n at (n-1) % 16
            e = r["ring"][(n - 1) % 16]
            self.assertEqual((e["seq"], e["kind"], e["bytes"], e["completed_ns"]), (n, ALLREDUCE, 999 + n, 0))
            self.assertGreater(e["issued_ns"], 0)
            # Not labelled with a group (version 4's detail): group 0, no peers, no micro-batches.
            d = r["ring_detail"][(n - 1) % 16]
            self.assertEqual((d["group"], d["group_seq"], d["send_to"], d["recv_from"], d["send_micro"]),
                             (0, 0, -1, -1, -1))
        holdfast.step(1)
        previous = holdfast.wait_collective(18, "allreduce")
        r = read_record(self.path)
        self.assertEqual((r["phase"], r["waiting_on"], r["collective_kind"]), (PHASE["collective"], 18, ALLREDUCE))
        holdfast.collective_done(18, previous)
        r = read_record(self.path)
        self.assertEqual((r["phase"], r["waiting_on"], r["collectives_done"]), (PHASE["data"], 0, 18))
        self.assertGreater(r["ring"][1]["completed_ns"], 0)  # #18
        self.assertEqual(r["ring"][0]["completed_ns"], 0)  # #17
        self.assertEqual(r["seq"] % 2, 0)

    def test_collective_context(self):
        self.open()
        holdfast.step(1)
        with holdfast.collective("broadcast", 64):
            r = read_record(self.path)
            self.assertEqual((r["phase"], r["waiting_on"], r["collective_kind"]), (PHASE["collective"], 1, BROADCAST))
        r = read_record(self.path)
        self.assertEqual((r["phase"], r["waiting_on"], r["collectives_done"]), (PHASE["data"], 0, 1))
        with self.assertRaises(TimeoutError):
            with holdfast.collective("barrier"):
                raise TimeoutError()
        r = read_record(self.path)  # left undone, no longer waited in
        self.assertEqual((r["phase"], r["waiting_on"], r["collectives_issued"], r["collectives_done"]),
                         (PHASE["data"], 0, 2, 1))


class MeshTest(RecordTestCase):
    """set_mesh() and the groups it labels (docs/parallelism.md, "The device mesh")."""

    def tearDown(self):
        holdfast._mesh = None
        super().tearDown()

    def test_mesh_groups_are_holdfast_trains(self):
        # world 16 as tp 2 x pp 2 x dp 4 with expert groups of 2: rank 13 is tp 1, dp 2, pp 1.
        mesh = (2, 2, 2)
        self.assertEqual(holdfast.mesh_group(16, 13, [12, 13], mesh), "tp")
        self.assertEqual(holdfast.mesh_group(16, 13, [15, 9, 11, 13], mesh), "dp")
        self.assertEqual(holdfast.mesh_group(16, 13, [5, 13], mesh), "pp")
        self.assertEqual(holdfast.mesh_group(16, 13, [13, 15], mesh), "ep")
        self.assertEqual(holdfast.mesh_group(16, 13, [9, 13], mesh), "edp")
        self.assertEqual(holdfast.mesh_group(16, 13, list(range(16)), mesh), "world")
        self.assertIsNone(holdfast.mesh_group(16, 13, [13, 14], mesh))
        self.assertIsNone(holdfast.mesh_group(12, 3, [2, 3], (2, 2, 4)), "expert groups that do not divide dp")
        self.assertIsNone(holdfast.mesh_group(16, 13, [12, 13]), "no mesh declared")

    def test_labelled_collectives_count_per_group(self):
        self.open()
        holdfast.set_mesh(tensor=2, pipeline=2)
        a = holdfast.issue_collective("allreduce", 64, group="tp")
        b = holdfast.issue_collective("reduce_scatter", 64, group="dp")
        c = holdfast.issue_collective("allreduce", 64, group="tp")
        d = holdfast.issue_collective("barrier")
        r = read_record(self.path)
        self.assertEqual((a, b, c, d), (1, 2, 3, 4))
        self.assertEqual(r["mesh"], (2, 2, 1))
        self.assertEqual(r["group_issued"], (0, 1, 2, 0, 0, 0))  # world, dp, tp, pp, ep, edp
        self.assertEqual([(e["group"], e["group_seq"]) for e in r["ring_detail"][:4]], [(3, 1), (2, 1), (3, 2), (0, 0)])
        self.assertEqual([e["send_to"] for e in r["ring_detail"][:4]], [-1] * 4)

    def test_bad_meshes_and_groups_are_refused_and_change_nothing(self):
        self.open()
        for bad in ({"tensor": 0}, {"pipeline": 2.0}, {"expert": True}, {"tensor": 1 << 21}):
            with self.assertRaises(ValueError):
                holdfast.set_mesh(**bad)
        with self.assertRaises(ValueError):
            holdfast.issue_collective("allreduce", 8, group="tensor")
        r = read_record(self.path)
        self.assertEqual((r["mesh"], r["collectives_issued"]), ((0, 0, 0), 0))
        self.assertIsNone(holdfast._mesh)


class FakeTensor:
    def __init__(self, n, width=4):
        self.n, self.width = n, width

    def numel(self):
        return self.n

    def element_size(self):
        return self.width


class FakeDist:
    """torch.distributed's four signatures; each call notes what the record said meanwhile."""

    def __init__(self, path):
        self.path = path
        self.seen = []

    def _call(self, async_op):
        self.seen.append(read_record(self.path))
        return FakeWork(self) if async_op else None

    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        return self._call(async_op)

    def broadcast(self, tensor, src, group=None, async_op=False):
        return self._call(async_op)

    def barrier(self, group=None, async_op=False, device_ids=None):
        return self._call(async_op)

    def all_gather(self, tensor_list, tensor, group=None, async_op=False):
        return self._call(async_op)


class FakeWork:
    def __init__(self, dist):
        self.dist = dist

    def wait(self, timeout=None):
        self.dist.seen.append(read_record(self.dist.path))
        return True

    def is_completed(self):
        return True

    def source_rank(self):
        return 0


class InstrumentTest(RecordTestCase):
    def test_wrapped_calls_record_issue_wait_and_done(self):
        self.open()
        dist = FakeDist(self.path)
        holdfast.instrument_torch_distributed(dist)
        holdfast.instrument_torch_distributed(dist)  # idempotent
        holdfast.step(1)
        with holdfast.phase("backward"):
            dist.all_reduce(FakeTensor(256))
            dist.broadcast(FakeTensor(10, 8), 0)
            dist.barrier()
            dist.all_gather([], FakeTensor(3))
            during = [(r["phase"], r["waiting_on"], r["collective_kind"]) for r in dist.seen]
            self.assertEqual(during, [(PHASE["collective"], 1, ALLREDUCE), (PHASE["collective"], 2, BROADCAST),
                                      (PHASE["collective"], 3, BARRIER), (PHASE["collective"], 4, ALLGATHER)])
            r = read_record(self.path)
            self.assertEqual((r["phase"], r["waiting_on"]), (PHASE["backward"], 0))
            self.assertEqual((r["collectives_issued"], r["collectives_done"]), (4, 4))
            self.assertEqual([e["bytes"] for e in r["ring"][:4]], [1024, 80, 0, 12])
            self.assertEqual([e["kind"] for e in r["ring"][:4]], [ALLREDUCE, BROADCAST, BARRIER, ALLGATHER])

            dist.seen.clear()
            work = dist.all_reduce(FakeTensor(1), async_op=True)
            other = dist.barrier(None, True)  # async_op by position
            self.assertEqual(dist.seen[0]["phase"], PHASE["backward"])  # issuing does not block
            r = read_record(self.path)
            self.assertEqual((r["collectives_issued"], r["collectives_done"]), (6, 4))
            work.wait()
            self.assertEqual((dist.seen[-1]["phase"], dist.seen[-1]["waiting_on"]), (PHASE["collective"], 5))
            self.assertTrue(other.is_completed())
            self.assertEqual(other.source_rank(), 0)  # the rest is the handle's
            r = read_record(self.path)
            self.assertEqual((r["phase"], r["waiting_on"], r["collectives_done"]), (PHASE["backward"], 0, 6))
            self.assertGreater(r["ring"][5]["completed_ns"], 0)
        holdfast.uninstrument_torch_distributed(dist)
        dist.all_reduce(FakeTensor(1))
        self.assertEqual(read_record(self.path)["collectives_issued"], 6)

    def test_failed_collective_is_not_done(self):
        self.open()

        class Failing:
            def all_reduce(self, tensor, op=None, group=None, async_op=False):
                raise RuntimeError("peer closed the connection")

        dist = Failing()
        holdfast.instrument_torch_distributed(dist)
        holdfast.step(1)
        with self.assertRaises(RuntimeError):
            dist.all_reduce(FakeTensor(1))
        r = read_record(self.path)
        self.assertEqual((r["phase"], r["waiting_on"], r["collectives_issued"], r["collectives_done"]),
                         (PHASE["data"], 0, 1, 0))


class DdpWaitTest(RecordTestCase):
    """DDP waits for its buckets inside backward(): from the last bucket's
    issue on, the rank waits in the oldest bucket still in flight."""

    def test_waits_in_the_oldest_bucket_in_flight_after_the_last_is_issued(self):
        from holdfast import _torch
        self.open()
        rec = holdfast._rec
        waits = _torch._HookWaits()
        holdfast.step(1)
        with holdfast.phase("backward"):
            a = rec.issue_collective(ALLREDUCE, 100)
            waits.issued(rec, a, last=False)
            b = rec.issue_collective(ALLREDUCE, 100)
            self.assertEqual(read_record(self.path)["phase"], PHASE["backward"])
            c = rec.issue_collective(ALLREDUCE, 100)
            waits.issued(rec, b, last=False)
            waits.issued(rec, c, last=True)
            r = read_record(self.path)
            self.assertEqual((r["phase"], r["waiting_on"], r["collective_kind"]), (PHASE["collective"], a, ALLREDUCE))
            waits.finished(rec, b, ok=True)  # out of order: still waiting in a
            self.assertEqual(read_record(self.path)["waiting_on"], a)
            waits.finished(rec, a, ok=True)
            r = read_record(self.path)
            self.assertEqual((r["phase"], r["waiting_on"]), (PHASE["collective"], c))
            waits.finished(rec, c, ok=True)
            r = read_record(self.path)
            self.assertEqual((r["phase"], r["waiting_on"], r["collectives_done"]), (PHASE["backward"], 0, 3))
            self.assertTrue(all(e["completed_ns"] > 0 for e in r["ring"][:3]))


class ForkTest(RecordTestCase):
    def test_a_forked_child_writes_nothing(self):
        self.open()
        holdfast.step(4)
        pid = os.fork()
        if pid == 0:
            code = 0 if not holdfast.enabled() else 1
            holdfast.step(99)
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(read_record(self.path)["step"], 4)


def _torch_gloo():
    try:
        import torch
        import torch.distributed as dist
    except Exception:  # not installed, or broken
        return None
    if not dist.is_available() or not dist.is_gloo_available():
        return None
    return torch


@unittest.skipIf(_torch_gloo() is None, "torch with gloo is not installed")
class TorchTest(RecordTestCase):
    """The real torch.distributed (gloo, one process) and DDP."""

    def setUp(self):
        super().setUp()
        import torch.distributed as dist
        self.dist = dist
        dist.init_process_group("gloo", init_method="file://" + os.path.join(self.dir.name, "store"),
                                rank=0, world_size=1)

    def tearDown(self):
        holdfast.uninstrument_torch_distributed()
        self.dist.destroy_process_group()
        super().tearDown()

    def test_torch_distributed_calls(self):
        import torch
        self.open()
        holdfast.instrument_torch_distributed()
        t = torch.ones(8)
        self.dist.all_reduce(t)
        self.dist.broadcast(t, 0)
        self.dist.barrier()
        out = [torch.zeros(8)]
        self.dist.all_gather(out, t)
        self.assertTrue(torch.equal(out[0], t))
        work = self.dist.all_reduce(t, async_op=True)
        work.wait()
        fut = self.dist.all_reduce(t, async_op=True).get_future()
        fut.wait()
        r = read_record(self.path)
        self.assertEqual((r["collectives_issued"], r["collectives_done"], r["waiting_on"]), (6, 6, 0))
        self.assertEqual([e["kind"] for e in r["ring"][:6]], [ALLREDUCE, BROADCAST, BARRIER, ALLGATHER,
                                                              ALLREDUCE, ALLREDUCE])
        self.assertEqual(r["ring"][0]["bytes"], 32)
        self.assertTrue(all(e["completed_ns"] > 0 for e in r["ring"][:6]))
        self.assertEqual(r["phase"], PHASE["starting"])

    def test_a_declared_mesh_labels_the_process_groups(self):
        import torch
        self.open()
        holdfast.instrument_torch_distributed()
        try:
            holdfast.set_mesh()  # one rank: every group is {0}; dp is named first
            t = torch.ones(4)
            self.dist.all_reduce(t)
            self.dist.all_reduce(t, group=self.dist.new_group([0]))
            self.dist.barrier()
            r = read_record(self.path)
            self.assertEqual(r["mesh"], (1, 1, 1))
            self.assertEqual([(e["group"], e["group_seq"]) for e in r["ring_detail"][:3]], [(2, 1), (2, 2), (2, 3)])
            self.assertEqual(r["group_issued"][1], 3)
        finally:
            holdfast._mesh = None

    def test_ddp_comm_hook_records_each_bucket(self):
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        self.open()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        reference.load_state_dict(model.state_dict())
        ddp = DDP(model)
        ddp.register_comm_hook(None, holdfast.ddp_comm_hook)
        x = torch.randn(5, 16)
        for completed in (1, 2):
            ddp.zero_grad()
            with holdfast.phase("forward"):
                loss = ddp(x).square().sum()
            with holdfast.phase("backward"):
                loss.backward()
                r = read_record(self.path)
                self.assertEqual((r["phase"], r["waiting_on"]), (PHASE["backward"], 0))
            holdfast.step(completed)
        reference(x).square().sum().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            self.assertTrue(torch.allclose(p.grad, q.grad))  # averaged over a world of one
        r = read_record(self.path)
        self.assertGreaterEqual(r["collectives_issued"], 2)
        self.assertEqual(r["collectives_done"], r["collectives_issued"])
        n = min(r["ring_head"], 16)
        self.assertTrue(all(e["kind"] == ALLREDUCE and e["completed_ns"] > 0 and e["bytes"] > 0
                            for e in r["ring"][:n]))
        if r["ring_head"] <= 16:  # every bucket of both iterations is in the ring
            self.assertEqual(sum(e["bytes"] for e in r["ring"][:n]), 2 * sum(p.numel() * 4 for p in model.parameters()))


if __name__ == "__main__":
    unittest.main()
