"""Collectives of torch.distributed recorded in the progress record.

Two ways in, because DDP's gradient allreduces never pass through the Python
functions of torch.distributed:

- instrument(): wraps torch.distributed.all_reduce, broadcast, barrier and
  all_gather. A call records the collective as issued; a blocking call waits
  in it (phase "collective", waiting_on = its number) until it returns; with
  async_op=True the returned handle does so in wait(), and the collective is
  done when wait() returns, is_completed() says so, or its get_future()
  completes.
- ddp_comm_hook(): DDP's default averaging allreduce, each bucket recorded as
  a collective. DDP waits for the buckets inside backward(), where no Python
  code of ours runs; so once the last bucket of the iteration (bucket.is_last())
  is issued, the rank is recorded as waiting in the oldest bucket still in
  flight, then the next, until all are done and the phase it interrupted is set
  again. A rank that never reaches its last bucket (stuck in forward or
  backward) is then the one whose collectives_issued is behind.

Only the names above are wrapped, only in the torch.distributed namespace
(torch's own internal calls and DDP's broadcasts are not counted). Completion
callbacks run on torch's threads; the record serialises them.

After holdfast.set_mesh(), a wrapped call's collective is labelled with the
mesh group its `group` argument is (holdfast.mesh_group() of the process
group's ranks, looked up once per group), and counted in that group.
"""

import functools
import inspect
import threading

import holdfast
from holdfast._record import COLLECTIVE_KINDS, GROUPS

_WRAPPED = (
    ("all_reduce", COLLECTIVE_KINDS["allreduce"], "tensor"),
    ("broadcast", COLLECTIVE_KINDS["broadcast"], "tensor"),
    ("barrier", COLLECTIVE_KINDS["barrier"], None),
    ("all_gather", COLLECTIVE_KINDS["allgather"], "tensor"),
)
_ALLREDUCE = COLLECTIVE_KINDS["allreduce"]


def _tensor_bytes(t):
    try:
        return int(t.numel()) * int(t.element_size())
    except (AttributeError, TypeError):
        return 0


class _Work:
    """An async_op handle that records its wait and completion; the rest is the handle's."""

    def __init__(self, work, rec, seq, kind):
        self._work = work
        self._rec = rec
        self._seq = seq
        self._kind = kind

    def wait(self, *args, **kwargs):
        rec, seq = self._rec, self._seq
        previous = rec.wait_collective(seq, self._kind)
        try:
            result = self._work.wait(*args, **kwargs)
        except BaseException:
            rec.stop_waiting(seq, previous)
            raise
        rec.collective_done(seq, previous)
        return result

    def is_completed(self):
        completed = self._work.is_completed()
        if completed:
            self._rec.collective_done(self._seq)
        return completed

    def get_future(self):
        rec, seq = self._rec, self._seq

        def done(fut):
            value = fut.value()
            rec.collective_done(seq)
            return value

        return self._work.get_future().then(done)

    def __getattr__(self, name):
        return getattr(self._work, name)


_labels = {}  # (id(process group), mesh) -> (the group, its GROUPS value); the group kept so the id stays its own
_labels_lock = threading.Lock()


def _group_ranks(dist, group, world):
    """The global ranks of a process group (None / WORLD: every rank)."""
    if group is None or group is getattr(getattr(dist, "GroupMember", None), "WORLD", None):
        return list(range(world))
    get = getattr(dist, "get_process_group_ranks", None)  # torch 2.x
    if get is not None:
        return list(get(group))
    c10d = getattr(dist, "distributed_c10d", dist)
    return list(c10d._pg_group_ranks[group].keys())  # torch 1.13: {global rank: group rank}


def _group_label(dist, group):
    """The GROUPS value of `group` under the declared mesh; 0 without one or when it is no mesh group."""
    if holdfast._mesh is None:
        return 0
    key = (id(group), holdfast._mesh)
    with _labels_lock:
        hit = _labels.get(key)
        if hit is not None and hit[0] is group:
            return hit[1]
    try:
        world, rank = dist.get_world_size(), dist.get_rank()
        name = holdfast.mesh_group(world, rank, _group_ranks(dist, group, world))
    except Exception:  # noqa: BLE001 - a label is never worth failing the collective for
        name = None
    value = GROUPS.get(name, 0)
    with _labels_lock:
        _labels[key] = (group, value)
    return value


def _wrap(orig, kind, tensor_param, dist):
    sig = inspect.signature(orig)
    names = list(sig.parameters)
    async_pos = names.index("async_op") if "async_op" in names else None
    tensor_pos = names.index(tensor_param) if tensor_param in names else None
    group_pos = names.index("group") if "group" in names else None

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        rec = holdfast._rec
        if rec is None:
            return orig(*args, **kwargs)
        if "async_op" in kwargs:
            async_op = kwargs["async_op"]
        else:
            async_op = async_pos is not None and len(args) > async_pos and args[async_pos]
        nbytes = 0
        if tensor_param is not None:
            if tensor_param in kwargs:
                nbytes = _tensor_bytes(kwargs[tensor_param])
            elif tensor_pos is not None and len(args) > tensor_pos:
                nbytes = _tensor_bytes(args[tensor_pos])
        if "group" in kwargs:
            group = kwargs["group"]
        else:
            group = args[group_pos] if group_pos is not None and len(args) > group_pos else None
        seq = rec.issue_collective(kind, nbytes, _group_label(dist, group) if group_pos is not None else 0)
        if async_op:
            work = orig(*args, **kwargs)
            if work is None:  # this rank is not in the group: nothing to wait for
                rec.collective_done(seq)
                return None
            return _Work(work, rec, seq, kind)
        previous = rec.wait_collective(seq, kind)
        try:
            result = orig(*args, **kwargs)
        except BaseException:
            rec.stop_waiting(seq, previous)
            raise
        rec.collective_done(seq, previous)
        return result

    wrapper._holdfast_original = orig
    return wrapper


def _module(dist):
    if dist is None:
        import torch.distributed as dist
    return dist


def instrument(dist=None):
    dist = _module(dist)
    for name, kind, tensor_param in _WRAPPED:
        orig = getattr(dist, name, None)
        if orig is None or hasattr(orig, "_holdfast_original"):
            continue
        setattr(dist, name, _wrap(orig, kind, tensor_param, dist))


def uninstrument(dist=None):
    dist = _module(dist)
    for name, _, _ in _WRAPPED:
        fn = getattr(dist, name, None)
        if fn is not None and hasattr(fn, "_holdfast_original"):
            setattr(dist, name, fn._holdfast_original)


class _HookWaits:
    """The DDP hook's buckets in flight and whether the rank waits in them."""

    def __init__(self):
        self.lock = threading.Lock()  # guards the fields below; taken before the record's
        self.in_flight = []  # (record, seq) in issue order
        self.waiting = False
        self.previous = None  # the phase the wait interrupted

    def issued(self, rec, seq, last):
        with self.lock:
            self.in_flight.append((rec, seq))
            if last and not self.waiting:
                oldest = self.in_flight[0][1]
                self.previous = rec.wait_collective(oldest, _ALLREDUCE)
                self.waiting = True

    def finished(self, rec, seq, ok):
        with self.lock:
            self.in_flight.remove((rec, seq))
            if not self.waiting:
                if ok:
                    rec.collective_done(seq)
            elif self.in_flight:
                if ok:
                    rec.collective_done(seq, next_waiting=self.in_flight[0][1])
            else:
                self.waiting = False
                if ok:
                    rec.collective_done(seq, restore_phase=self.previous, next_waiting=0)
                else:
                    rec.stop_waiting(seq, self.previous)


_hook_waits = _HookWaits()


def ddp_comm_hook(process_group, bucket):
    from torch.distributed import distributed_c10d as c10d  # never the wrapped functions

    group = process_group if process_group is not None else c10d.GroupMember.WORLD
    tensor = bucket.buffer()
    tensor.div_(group.size())
    rec = holdfast._rec
    if rec is None:
        fut = c10d.all_reduce(tensor, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    seq = rec.issue_collective(_ALLREDUCE, _tensor_bytes(tensor))
    fut = c10d.all_reduce(tensor, group=group, async_op=True).get_future()

    def done(f):
        try:
            value = f.value()[0]
        except BaseException:
            _hook_waits.finished(rec, seq, ok=False)
            raise
        _hook_waits.finished(rec, seq, ok=True)
        return value

    # In flight before the callback can run (it may run at once, here).
    _hook_waits.issued(rec, seq, bucket.is_last())
    return fut.then(done)
