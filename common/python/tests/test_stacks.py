"""The holdfast module answers holdfastd's stack request (holdfast._stacks).

A real signal to this process: the dump lands in PROGRESS_PATH.pystack after
the marker line holdfastd checks, naming the function the thread is in.

Run: /usr/bin/python3 -B -m unittest -v test_stacks   (from this folder)
"""

import os
import signal
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.pop("HOLDFAST_PROGRESS_PATH", None)

import holdfast  # noqa: E402
from holdfast import _stacks  # noqa: E402


def wait_here_for_the_dump(path):
    # The handler runs when the signal arrives, in this frame.
    os.kill(os.getpid(), _stacks.STACK_SIGNAL)
    with open(path) as f:
        return f.read()


class StacksTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "rank.rec")
        self.assertTrue(holdfast.init(self.path, rank=0))

    def tearDown(self):
        holdfast.close()
        self.dir.cleanup()

    def test_marker_names_this_process_and_a_realtime_signal(self):
        with open(self.path + ".pystack") as f:
            first = f.readline()
        self.assertEqual(first, "holdfast-pystack pid=%d signal=%d\n" % (os.getpid(), _stacks.STACK_SIGNAL))
        self.assertTrue(signal.SIGRTMIN <= _stacks.STACK_SIGNAL <= signal.SIGRTMAX)
        for taken in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):  # the contract's signals
            self.assertNotEqual(_stacks.STACK_SIGNAL, taken)

    def test_signal_dumps_the_stack_naming_the_function(self):
        text = wait_here_for_the_dump(self.path + ".pystack")
        self.assertIn("most recent call first", text)
        self.assertIn("in wait_here_for_the_dump", text)
        self.assertIn("Current thread", text)

    def test_close_unregisters_so_the_signal_is_not_handled(self):
        holdfast.close()
        self.assertIn(signal.getsignal(_stacks.STACK_SIGNAL), (signal.SIG_DFL, None))


if __name__ == "__main__":
    unittest.main()
