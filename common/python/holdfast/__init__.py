"""Progress reporting for a job supervised by holdfastd.

holdfastd creates one shared-memory progress record per rank and passes its
path in HOLDFAST_PROGRESS_PATH; this module writes that record exactly as the
C++ trainer does (common/progress_record.h; the layout, in
docs/progress-record.md, is the contract). With it the daemon sees the job's
step and phase, judges hangs against step times, and names the rank that never
entered a collective the others wait in.

    import holdfast
    holdfast.instrument_torch_distributed()          # optional: dist.all_reduce & co.
    model.register_comm_hook(None, holdfast.ddp_comm_hook)  # optional: DDP buckets
    for step in range(start, steps):
        batch = next(it)
        with holdfast.phase("forward"):
            loss = model(batch)
        with holdfast.phase("backward"):
            loss.backward()
        with holdfast.phase("optimizer"):
            opt.step()
        holdfast.step(step + 1)                       # completed steps

Without HOLDFAST_PROGRESS_PATH every call is a no-op (a function call and an
attribute lookup). Standard library only; torch is imported only by the
collective wrappers, which need it anyway.

Thread-safety: updates may come from any thread (DDP calls its communication
hook and completes futures off the training thread); phase() contexts belong
to one thread, the training loop's. A process forked from the rank (a
DataLoader worker) writes nothing: the record is the rank's.
"""

import os
import sys

from holdfast import _record
from holdfast._record import COLLECTIVE_KINDS, PHASES

__all__ = [
    "enabled", "init", "close", "step", "phase", "set_phase", "checkpoint_committed", "checkpoint_failed",
    "issue_collective", "wait_collective", "collective_done", "collective", "instrument_torch_distributed",
    "ddp_comm_hook",
]

ENV_PROGRESS_PATH = "HOLDFAST_PROGRESS_PATH"
ENV_RANK = "HOLDFAST_RANK"

_rec = None  # the open _record._Record, or None: every call is a no-op


def _warn(message):
    sys.stderr.write("holdfast: " + message + "\n")


def init(path=None, rank=None):
    """Opens the record at `path` (default: $HOLDFAST_PROGRESS_PATH) for `rank`
    (default: $HOLDFAST_RANK; else the rank the supervisor wrote in the record).

    Called on import; call it again only to write another record (tests). With
    no path the module is a no-op. A record that cannot be opened is reported
    on stderr and the module stays a no-op: progress reporting never stops the
    training it reports on.
    """
    global _rec
    close()
    if path is None:
        path = os.environ.get(ENV_PROGRESS_PATH) or None
    if path is None:
        return False
    if rank is None and os.environ.get(ENV_RANK):
        try:
            rank = int(os.environ[ENV_RANK])
        except ValueError:
            _warn("ignoring %s=%r (not an integer)" % (ENV_RANK, os.environ[ENV_RANK]))
    if sys.byteorder != "little":
        _warn("progress record disabled: the record is little-endian and this host is not")
        return False
    try:
        _rec = _record._Record(path, rank)
    except (OSError, ValueError) as e:
        _warn("progress record %s disabled: %s" % (path, e))
        return False
    return True


def close():
    """Unmaps the record; later calls are no-ops until init()."""
    global _rec
    rec, _rec = _rec, None
    if rec is not None:
        rec.close()


def enabled():
    """Whether calls write a record (the job runs under holdfastd)."""
    return _rec is not None


def _phase_value(name):
    try:
        return PHASES[name]
    except KeyError:
        raise ValueError("unknown phase %r (one of %s)" % (name, ", ".join(PHASES))) from None


def _kind_value(kind):
    try:
        return COLLECTIVE_KINDS[kind]
    except KeyError:
        raise ValueError("unknown collective kind %r (one of %s)" % (kind, ", ".join(COLLECTIVE_KINDS))) from None


def step(completed):
    """`completed` optimiser steps are done (absolute, e.g. 1 after the first
    step of a fresh run, N+1 after the first step resumed from N). Records the
    step's duration and starts the next step, in phase "data"."""
    rec = _rec
    if rec is not None:
        rec.step(completed)


class _Phase:
    """Context manager: the phase while inside; the previous phase again on exit."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __enter__(self):
        rec = _rec
        if rec is not None:
            rec.enter_phase(self.value)
        return self

    def __exit__(self, *exc):
        rec = _rec
        if rec is not None:
            rec.exit_phase()
        return False


_PHASE_CONTEXTS = {name: _Phase(value) for name, value in PHASES.items()}


def phase(name):
    """`with holdfast.phase("forward"):` -- one of data, forward, backward,
    optimizer, checkpoint, eval (also starting, collective, done). Contexts
    nest; leaving one restores the phase it interrupted. The daemon allows a
    rank in "checkpoint" or "eval" longer without a step (daemon/triage.h)."""
    context = _PHASE_CONTEXTS.get(name)
    if context is None:
        _phase_value(name)  # raises ValueError naming the phases
    return context


def set_phase(name):
    """Sets the phase without a context (e.g. set_phase("done") before exiting)."""
    value = _phase_value(name)
    rec = _rec
    if rec is not None:
        rec.set_phase(value)


def checkpoint_committed(step):
    """A checkpoint of `step` is committed (visible to a restart)."""
    rec = _rec
    if rec is not None:
        rec.set_checkpoint_step(step)


def checkpoint_failed(step, message):
    """A checkpoint save of `step` failed and training goes on without it: the
    daemon records a checkpoint_failed event with `message` (its first 159
    UTF-8 bytes)."""
    rec = _rec
    if rec is not None:
        rec.record_checkpoint_failure(step, message)


def issue_collective(kind, nbytes=0):
    """This rank entered a collective ("allreduce", "broadcast", "barrier",
    "allgather", "reduce_scatter") of `nbytes`; returns its sequence number (0 when disabled)."""
    value = _kind_value(kind)
    rec = _rec
    if rec is None:
        return 0
    return rec.issue_collective(value, nbytes)


def wait_collective(seq, kind):
    """The rank blocks until collective `seq` completes (phase "collective");
    returns the phase it interrupted, for collective_done()."""
    value = _kind_value(kind)
    rec = _rec
    if rec is None or seq == 0:
        return None
    return rec.wait_collective(seq, value)


def collective_done(seq, restore_phase=None):
    """Collective `seq` completed; a wait in it ends, and the phase returned by
    wait_collective() (if given) is set again."""
    rec = _rec
    if rec is not None and seq != 0:
        rec.collective_done(seq, restore_phase)


class collective:
    """`with holdfast.collective("allreduce", nbytes):` around a blocking
    collective of another library: issued on entry, waited in while inside,
    done on a normal exit (on an exception it is left not done)."""

    __slots__ = ("kind", "nbytes", "seq", "previous")

    def __init__(self, kind, nbytes=0):
        self.kind = _kind_value(kind)
        self.nbytes = nbytes
        self.seq = 0
        self.previous = None

    def __enter__(self):
        rec = _rec
        if rec is not None:
            self.seq = rec.issue_collective(self.kind, self.nbytes)
            self.previous = rec.wait_collective(self.seq, self.kind)
        return self

    def __exit__(self, exc_type, exc, tb):
        rec = _rec
        if rec is not None and self.seq != 0:
            if exc_type is None:
                rec.collective_done(self.seq, self.previous)
            else:
                rec.stop_waiting(self.seq, self.previous)
        return False


def instrument_torch_distributed(dist=None):
    """Wraps torch.distributed's all_reduce, broadcast, barrier and all_gather
    (see holdfast._torch). Idempotent; call it before the training code takes
    its own references (`from torch.distributed import all_reduce`)."""
    from holdfast import _torch
    _torch.instrument(dist)


def uninstrument_torch_distributed(dist=None):
    """Undoes instrument_torch_distributed()."""
    from holdfast import _torch
    _torch.uninstrument(dist)


def ddp_comm_hook(state, bucket):
    """A DDP communication hook: `model.register_comm_hook(None, holdfast.ddp_comm_hook)`.
    Averages each gradient bucket with an allreduce over `state` (a process
    group; None: the default group), as DDP's default does, recording it as a
    collective (see holdfast._torch)."""
    from holdfast import _torch
    return _torch.ddp_comm_hook(state, bucket)


def _after_fork_in_child():
    # A forked child (DataLoader worker) is not the rank: drop the record
    # without unmapping what the parent still uses (the mapping is shared).
    global _rec
    _rec = None


os.register_at_fork(after_in_child=_after_fork_in_child)
init()
