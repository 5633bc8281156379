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

The signal contract (docs/job-contract.md) without signal code:

    holdfast.install_signal_handlers()               # SIGUSR2, SIGTERM, SIGUSR1
    start = holdfast.resume_step() or newest_checkpoint_step() or 0
    for step in range(start, steps):
        ...                                            # one training step
        stop = holdfast.should_stop()                  # every rank, every step
        if holdfast.should_checkpoint() or stop or step + 1 == steps:
            path = save(step + 1)                      # e.g. rank 0 writes, all barrier
            holdfast.checkpoint_committed(step + 1, path)
        if stop:
            sys.exit(holdfast.EXIT_STOPPED)            # 75: stopped after a checkpoint

Without HOLDFAST_PROGRESS_PATH every call is a no-op (a function call and an
attribute lookup), and install_signal_handlers() installs nothing when no
supervisor started the process. Standard library only; torch is imported only
by the collective wrappers and by the agreement of should_checkpoint() /
should_stop() when torch.distributed is initialised, which need it anyway.

Thread-safety: updates may come from any thread (DDP calls its communication
hook and completes futures off the training thread); phase() contexts belong
to one thread, the training loop's. A process forked from the rank (a
DataLoader worker) writes nothing: the record is the rank's.
"""

import json
import os
import sys

from holdfast import _record, _signals, _stacks
from holdfast._record import COLLECTIVE_KINDS, PHASES
from holdfast._signals import should_checkpoint, should_stop, stop_signal

__all__ = [
    "enabled", "init", "close", "step", "phase", "set_phase", "checkpoint_committed", "checkpoint_failed",
    "issue_collective", "wait_collective", "collective_done", "collective", "instrument_torch_distributed",
    "ddp_comm_hook", "install_signal_handlers", "should_checkpoint", "should_stop", "stop_signal", "resume_step",
    "resumed", "EXIT_STOPPED",
]

ENV_PROGRESS_PATH = "HOLDFAST_PROGRESS_PATH"
ENV_RANK = "HOLDFAST_RANK"
ENV_RUN_DIR = "HOLDFAST_RUN_DIR"
ENV_RESUME_FROM_STEP = "HOLDFAST_RESUME_FROM_STEP"

# Exit code of a rank that stopped after committing a checkpoint (common/launch_contract.h
# kRankExitPreempted, EX_TEMPFAIL): the supervisor resumes it later, never calls it a crash.
EXIT_STOPPED = 75
# Where checkpoint_committed(step, path) reports paths: RUN_DIR/job-checkpoints/rank-<R>.jsonl
# (daemon/job_checkpoints.h reads them).
JOB_CHECKPOINTS_DIR = "job-checkpoints"

_rec = None  # the open _record._Record, or None: every call is a no-op
_mesh = None  # (tensor, pipeline, expert) as set_mesh() declared it, or None


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
    # holdfastd can then ask for this process's Python stacks when it hangs (holdfast._stacks).
    _stacks.register(path)
    return True


def close():
    """Unmaps the record; later calls are no-ops until init()."""
    global _rec
    rec, _rec = _rec, None
    if rec is not None:
        rec.close()
    _stacks.unregister()


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


def _rank():
    rec = _rec
    if rec is not None:
        return rec._i32[_record.OFF_RANK // 4]
    try:
        return int(os.environ.get(ENV_RANK, "0"))
    except ValueError:
        return 0


def _report_path(step, path):
    """Appends {"step", "path", "rank", "generation"} to RUN_DIR/job-checkpoints/rank-<R>.jsonl
    in one write, fsynced: the daemon reads it once the record says the step is committed."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        _warn("checkpoint path of step %d not reported: %s is not set (not under holdfastd?)" % (step, ENV_RUN_DIR))
        return
    rank = _rank()
    line = json.dumps({"step": step, "path": os.path.abspath(os.fspath(path)), "rank": rank,
                       "generation": os.environ.get("HOLDFAST_GENERATION", "")}) + "\n"
    folder = os.path.join(run_dir, JOB_CHECKPOINTS_DIR)
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, "rank-%d.jsonl" % rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT |
                     os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        _warn("checkpoint path of step %d not reported (%s): lineage records the step without it" % (step, e))


def checkpoint_committed(step, path=None):
    """A checkpoint of `step` (completed steps) is committed: durable, and what
    a restart would load. With `path` (the file or folder holding it; relative
    to the current directory) the daemon records that path and its size in
    lineage and `runctl resume --from-step` can go back to it; pass it on the
    rank(s) that wrote it, the others may pass None. Every rank calls this: the
    daemon records the step once every rank has reported it."""
    rec = _rec
    if rec is None:
        return
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError("checkpoint_committed: step must be an int >= 0, got %r" % (step,))
    if path is not None:
        _report_path(step, path)  # before the step: the daemon looks for the path once it sees the step
    rec.set_checkpoint_step(step)


def resumed(step, tier="disk"):
    """Says what this rank's state was restored from, once, before its first
    step: `step` the checkpoint's step (None: a fresh start, tier "none") and
    `tier` "disk" or "memory". The leading daemon records it as the
    generation's start (`runctl lineage`, `runctl status`); without it lineage
    shows the step the daemon expected, from checkpoints it saw committed."""
    rec = _rec
    if rec is None:
        return
    if step is None:
        step, tier = -1, "none"
    elif isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError("resumed: step must be an int >= 0 or None, got %r" % (step,))
    if tier not in _record.RESTORE_TIERS or (tier == "none") != (step == -1):
        raise ValueError("resumed: tier must be 'disk' or 'memory' with a step, 'none' without, got %r" % (tier,))
    rec.set_restored(step, _record.RESTORE_TIERS[tier], 0)


def install_signal_handlers(replace=False, force=False):
    """Handles the supervisor's signals (docs/job-contract.md): SIGUSR2 asks for
    a checkpoint (should_checkpoint()), SIGTERM and SIGUSR1 for a checkpoint and
    a stop (should_stop()). Returns the names of the signals now handled.

    A no-op returning [] when no supervisor started the process (no
    HOLDFAST_RANK), unless force=True. A signal the job already handles itself
    is left alone (said on stderr) unless replace=True. Call it from the main
    thread, before training starts."""
    return _signals.install(replace=replace, force=force)


def resume_step():
    """The checkpoint step the supervisor asks this run to resume from
    (`runctl resume --from-step N`: HOLDFAST_RESUME_FROM_STEP), or None: then
    resume from the newest checkpoint the job has, if any."""
    value = os.environ.get(ENV_RESUME_FROM_STEP, "")
    if value == "":
        return None
    try:
        step = int(value)
    except ValueError:
        raise ValueError("%s=%r is not a step (an integer >= 0)" % (ENV_RESUME_FROM_STEP, value)) from None
    if step < 0:
        raise ValueError("%s=%r is not a step (an integer >= 0)" % (ENV_RESUME_FROM_STEP, value))
    return step


def checkpoint_failed(step, message):
    """A checkpoint save of `step` failed and training goes on without it: the
    daemon records a checkpoint_failed event with `message` (its first 159
    UTF-8 bytes)."""
    rec = _rec
    if rec is not None:
        rec.record_checkpoint_failure(step, message)


def set_mesh(tensor=1, pipeline=1, expert=1):
    """Declares the job's device mesh, laid out as holdfast-train lays out its own
    (docs/parallelism.md, "The device mesh"): rank = tp + TP x (dp + DP x pp), DP =
    world / (TP x PP), expert groups of EP consecutive data-parallel ranks. The record
    then carries it, and each collective the wrapped torch.distributed calls issue is
    labelled with the mesh group its process group is (mesh_group()), so that
    holdfastd's triage follows who waits on whom in which group. Sizes must be
    integers from 1 to 2^20 (ValueError, nothing changed)."""
    global _mesh
    for name, v in (("tensor", tensor), ("pipeline", pipeline), ("expert", expert)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 1 << 20:
            raise ValueError("holdfast.set_mesh: %s must be an integer from 1 to 2^20, got %r" % (name, v))
    _mesh = (tensor, pipeline, expert)
    rec = _rec
    if rec is not None:
        rec.set_mesh(tensor, pipeline, expert)


def mesh_group(world, rank, ranks, mesh=None):
    """The name of the group of `mesh` (default: set_mesh()'s) that `rank` of
    `world` shares with exactly `ranks` (global ranks, any order): "dp", "tp",
    "pp", "ep", "edp" (checked in that order: a process group whose ranks are those
    of two mesh groups is the first), "world" for all of them; None without a mesh,
    for a world the mesh does not divide, or for ranks that are no mesh group."""
    mesh = mesh or _mesh
    if mesh is None:
        return None
    tp, pp, ep = mesh
    if world < 1 or world % (tp * pp) != 0 or (world // (tp * pp)) % ep != 0 or not 0 <= rank < world:
        return None
    dp_size = world // (tp * pp)
    t, d, p = rank % tp, (rank // tp) % dp_size, rank // (tp * dp_size)

    def at(t2, d2, p2):
        return t2 + tp * (d2 + dp_size * p2)

    first = (d // ep) * ep
    groups = (
        ("dp", [at(t, d2, p) for d2 in range(dp_size)]),
        ("tp", [at(t2, d, p) for t2 in range(tp)]),
        ("pp", [at(t, d, p2) for p2 in range(pp)]),
        ("ep", [at(t, d2, p) for d2 in range(first, first + ep)]),
        ("edp", [at(t, d2, p) for d2 in range(d % ep, dp_size, ep)]),
        ("world", list(range(world))),
    )
    wanted = sorted(ranks)
    for name, members in groups:
        if sorted(members) == wanted:
            return name
    return None


def issue_collective(kind, nbytes=0, group=None):
    """This rank entered a collective ("allreduce", "broadcast", "barrier",
    "allgather", "reduce_scatter") of `nbytes`, on `group` ("dp", "tp", "pp", "ep",
    "edp", "world"; None = not said); returns its sequence number (0 when disabled)."""
    value = _kind_value(kind)
    if group is not None and group not in _record.GROUPS:
        raise ValueError("holdfast: unknown group %r (one of %s)" % (group, ", ".join(_record.GROUPS)))
    rec = _rec
    if rec is None:
        return 0
    return rec.issue_collective(value, nbytes, _record.GROUPS.get(group, 0))


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
    _stacks._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
init()
