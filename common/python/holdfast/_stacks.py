"""Python stacks for holdfastd: the interpreter's stacks, on the daemon's request.

When holdfastd finds a hang, it reads every hung process's native stack with
eu-stack; for a Python rank that shows only the interpreter's C frames. So the
module registers faulthandler (standard library) on a signal of its own,
STACK_SIGNAL (SIGRTMIN+7: 41 on Linux with glibc; no other part of the job
contract, docs/job-contract.md, uses it), writing every thread's Python stack
into PROGRESS_PATH.pystack. The file's first line names the process and the
signal ("holdfast-pystack pid=1234 signal=41"): holdfastd sends the signal only
to the process the marker names, and only when the marker is there, so a job
without this module is never sent a signal whose default action would end it.

faulthandler dumps from its C signal handler, without the GIL: a rank blocked
in a C call (a Gloo allreduce, time.sleep) still answers. A stopped process
(SIGSTOP) cannot run any handler: holdfastd then has its native stack only.

Thread-safety: register()/unregister() from any one thread; the handler is
process-wide. A forked child keeps the handler, but holdfastd signals only
the pid the marker names.
"""

import faulthandler
import os
import signal
import sys

STACK_SIGNAL = signal.SIGRTMIN + 7
SUFFIX = ".pystack"

_file = None  # the open dump file while registered


def _warn(message):
    sys.stderr.write("holdfast: " + message + "\n")


def register(progress_path):
    """Registers the dump for this process next to `progress_path`; returns whether it did."""
    global _file
    unregister()
    if not hasattr(faulthandler, "register"):
        return False  # not on this platform
    current = signal.getsignal(STACK_SIGNAL)
    if current not in (signal.SIG_DFL, None):
        _warn("signal %d already has a handler (%r): Python stacks are not registered, holdfastd shows native "
              "stacks only" % (STACK_SIGNAL, current))
        return False
    path = progress_path + SUFFIX
    try:
        f = open(path, "w", encoding="utf-8")
        f.write("holdfast-pystack pid=%d signal=%d\n" % (os.getpid(), STACK_SIGNAL))
        f.flush()
        faulthandler.register(STACK_SIGNAL, file=f, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError) as e:
        _warn("Python stacks for holdfastd not registered (%s): %s" % (path, e))
        return False
    _file = f
    return True


def unregister():
    """Removes the handler and closes the file (the marker stays: holdfastd checks the pid)."""
    global _file
    if _file is None:
        return
    try:
        faulthandler.unregister(STACK_SIGNAL)
    except (ValueError, RuntimeError):
        pass
    _file.close()
    _file = None


def _after_fork_in_child():
    # The child is not the rank; its copy of the handler writes only if someone signals it.
    global _file
    _file = None
