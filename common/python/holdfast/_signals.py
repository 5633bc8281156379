"""The signal contract of docs/job-contract.md, as flags a training loop reads.

holdfastd asks a rank three things with signals:

- SIGUSR2: checkpoint now and keep training (`runctl checkpoint`);
- SIGTERM: checkpoint the last completed step and exit 75 (`runctl stop`, a
  stop of holdfastd, a preemption or Slurm's time-limit warning reaching
  holdfastd as SIGUSR1);
- SIGUSR1: the same as SIGTERM (a scheduler that signals the ranks directly),
  unless it was ignored at start: holdfastd starts its ranks so, and it stays
  ignored (the daemon acts on the scheduler's warning and stops the ranks with
  SIGTERM when it is time).

install() puts handlers on those signals that only count what arrived (a
Python signal handler runs between bytecodes of the main thread; it does no
I/O here). should_checkpoint() and should_stop() turn the counts into
decisions every rank takes at the same step: a DDP job that saves on rank 0
and then barriers must not have rank 1 decide one step later. With
torch.distributed initialised, one all_reduce(MAX) of two int64 counters
(16 bytes) agrees the ranks' counts; a signal that reached rank 0 before the
agreement and rank 1 after it is acted on once, at the first agreement that
sees it.

One agreement serves one call of each function: a loop that asks both once a
step does one collective a step; asking either again starts the next
agreement. Every rank must ask in the same order at the same points of its
loop (the agreement is a collective).

Thread-safety: the training thread only (the one that calls the functions);
handlers can only be installed from the main thread (Python's rule).
"""

import os
import signal
import sys

ENV_RANK = "HOLDFAST_RANK"

CHECKPOINT_SIGNALS = (signal.SIGUSR2,)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

# Counts of signals received by this process (handlers increment them).
_received = {"checkpoint": 0, "stop": 0}
_stop_signal = None  # the first stop signal's name, e.g. "SIGTERM"
_installed = {}  # signum -> the handler we replaced (to uninstall)

# The agreement in progress: counts every rank agreed on, and which of the two
# questions it has answered already.
_agreed = {"checkpoint": 0, "stop": 0}
_asked = {"checkpoint": True, "stop": True}  # True: the next ask starts a new agreement
_acted_checkpoint = 0  # checkpoint requests already answered True
_stopping = False


def _warn(message):
    sys.stderr.write("holdfast: " + message + "\n")


def _on_checkpoint(signum, frame):
    _received["checkpoint"] += 1


def _on_stop(signum, frame):
    global _stop_signal
    _received["stop"] += 1
    if _stop_signal is None:
        _stop_signal = signal.Signals(signum).name


def supervised():
    """Whether a Holdfast supervisor started this process (it sets HOLDFAST_RANK)."""
    return bool(os.environ.get(ENV_RANK))


def install(replace=False, force=False):
    """Installs the handlers; returns the signals it now handles (a list of names).

    Not supervised (no HOLDFAST_RANK), it installs nothing and returns []
    unless force=True: the default actions stay, as the job had them. A signal
    that already has a handler the job installed (anything but the default
    action) is left alone and said on stderr, unless replace=True.
    """
    if not (supervised() or force):
        return []
    handled = []
    for signums, handler in ((CHECKPOINT_SIGNALS, _on_checkpoint), (STOP_SIGNALS, _on_stop)):
        for signum in signums:
            name = signal.Signals(signum).name
            current = signal.getsignal(signum)
            if current in (_on_checkpoint, _on_stop):
                handled.append(name)
                continue
            if signum == signal.SIGUSR1 and current == signal.SIG_IGN and supervised():
                # holdfastd starts its ranks with SIGUSR1 ignored: the scheduler's
                # warning reaches every process of a Slurm step, and the daemon
                # decides when to stop (it may use the lead time, then sends SIGTERM).
                continue
            if current not in (signal.SIG_DFL, None) and not replace:
                _warn("%s already has a handler (%r): left in place, so holdfast.should_%s() does not see it; "
                      "pass replace=True to install_signal_handlers() to take it over"
                      % (name, current, "checkpoint" if handler is _on_checkpoint else "stop"))
                continue
            try:
                previous = signal.signal(signum, handler)
            except ValueError as e:  # not the main thread
                raise RuntimeError("holdfast.install_signal_handlers() must be called from the main thread: %s"
                                   % e) from None
            # Restart system calls the signal lands in (SA_RESTART): the handler
            # only counts, and a C++ library (Gloo, NCCL's proxy) need not see EINTR.
            signal.siginterrupt(signum, False)
            _installed.setdefault(signum, previous)
            handled.append(name)
    return handled


def uninstall():
    """Puts back the handlers install() replaced, and forgets every request (tests)."""
    global _stop_signal, _acted_checkpoint, _stopping
    for signum, previous in list(_installed.items()):
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _installed.clear()
    _received.update(checkpoint=0, stop=0)
    _agreed.update(checkpoint=0, stop=0)
    _asked.update(checkpoint=True, stop=True)
    _acted_checkpoint = 0
    _stopping = False
    _stop_signal = None


def _distributed():
    """torch.distributed when it is initialised with more than one rank, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return None
    except (RuntimeError, ValueError):
        return None
    return dist


def _agree():
    counts = [_received["checkpoint"], _received["stop"]]
    dist = _distributed()
    if dist is not None:
        import torch
        device = "cpu"
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        t = torch.tensor(counts, dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        counts = [int(v) for v in t.tolist()]
    _agreed["checkpoint"], _agreed["stop"] = counts
    _asked["checkpoint"] = _asked["stop"] = False


def _answer(question):
    if _asked[question]:
        _agree()
    _asked[question] = True
    return _agreed[question]


def should_checkpoint():
    """True (on every rank at once) when a checkpoint was asked for
    (`runctl checkpoint`) since the last True: save, then report it with
    holdfast.checkpoint_committed(step, path), and train on."""
    global _acted_checkpoint
    agreed = _answer("checkpoint")
    if agreed > _acted_checkpoint:
        _acted_checkpoint = agreed
        return True
    return False


def should_stop():
    """True (on every rank at once, and from then on) when the job is to stop:
    save the last completed step, report it, and exit with holdfast.EXIT_STOPPED (75)."""
    global _stopping
    if _answer("stop") > 0:
        _stopping = True
    return _stopping


def stop_signal():
    """The signal that asked this rank to stop ("SIGTERM", "SIGUSR1"), or None."""
    return _stop_signal
