"""The signal contract of docs/job-contract.md as the holdfast module gives it
to a job: real signals to this process, and the cross-rank agreement between
two real processes over torch.distributed (Gloo) when torch is installed.

Run: /usr/bin/python3 -B -m unittest -v test_signals   (from this folder)
"""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
os.environ.pop("HOLDFAST_PROGRESS_PATH", None)

import holdfast  # noqa: E402
from holdfast import _signals  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

SIGNALS = (signal.SIGUSR2, signal.SIGTERM, signal.SIGUSR1)


class SignalTestCase(unittest.TestCase):
    def setUp(self):
        self.saved_env = dict(os.environ)
        self.saved_handlers = {s: signal.getsignal(s) for s in SIGNALS}
        for s in SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        _signals.uninstall()

    def tearDown(self):
        _signals.uninstall()
        for s, h in self.saved_handlers.items():
            signal.signal(s, h)
        os.environ.clear()
        os.environ.update(self.saved_env)
        holdfast.close()

    def supervised(self):
        os.environ["HOLDFAST_RANK"] = "0"


class InstallTest(SignalTestCase):
    def test_not_supervised_installs_nothing_and_keeps_the_default_actions(self):
        os.environ.pop("HOLDFAST_RANK", None)
        self.assertEqual(holdfast.install_signal_handlers(), [])
        for s in SIGNALS:
            self.assertIs(signal.getsignal(s), signal.SIG_DFL)
        self.assertFalse(holdfast.should_checkpoint())
        self.assertFalse(holdfast.should_stop())

    def test_supervised_installs_on_the_three_signals(self):
        self.supervised()
        self.assertEqual(sorted(holdfast.install_signal_handlers()), ["SIGTERM", "SIGUSR1", "SIGUSR2"])
        self.assertEqual(sorted(holdfast.install_signal_handlers()), ["SIGTERM", "SIGUSR1", "SIGUSR2"],
                         "installing twice is harmless")

    def test_sigusr1_ignored_at_start_under_holdfastd_stays_ignored_quietly(self):
        # holdfastd starts its ranks so (the scheduler's warning is the daemon's).
        self.supervised()
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(sorted(holdfast.install_signal_handlers()), ["SIGTERM", "SIGUSR2"])
        self.assertIs(signal.getsignal(signal.SIGUSR1), signal.SIG_IGN)
        self.assertEqual(err.getvalue(), "")
        os.kill(os.getpid(), signal.SIGUSR1)
        self.assertFalse(holdfast.should_stop())

    def test_a_handler_the_job_installed_is_left_in_place_and_said(self):
        self.supervised()
        seen = []

        def own(signum, frame):
            seen.append(signum)

        signal.signal(signal.SIGUSR2, own)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            handled = holdfast.install_signal_handlers()
        self.assertNotIn("SIGUSR2", handled)
        self.assertIs(signal.getsignal(signal.SIGUSR2), own)
        self.assertIn("SIGUSR2 already has a handler", err.getvalue())
        self.assertIn("replace=True", err.getvalue())
        os.kill(os.getpid(), signal.SIGUSR2)
        self.assertEqual(seen, [signal.SIGUSR2], "the job's handler still runs")
        self.assertFalse(holdfast.should_checkpoint())
        self.assertIn("SIGUSR2", holdfast.install_signal_handlers(replace=True))
        self.assertIsNot(signal.getsignal(signal.SIGUSR2), own)

    def test_uninstall_puts_back_what_was_there(self):
        self.supervised()
        holdfast.install_signal_handlers()
        _signals.uninstall()
        for s in SIGNALS:
            self.assertIs(signal.getsignal(s), signal.SIG_DFL)


class SingleProcessTest(SignalTestCase):
    def setUp(self):
        super().setUp()
        self.supervised()
        holdfast.install_signal_handlers()

    def test_sigusr2_asks_for_one_checkpoint_and_the_process_lives_on(self):
        self.assertFalse(holdfast.should_checkpoint())
        os.kill(os.getpid(), signal.SIGUSR2)
        self.assertTrue(holdfast.should_checkpoint())
        self.assertFalse(holdfast.should_checkpoint(), "once per request")
        self.assertFalse(holdfast.should_stop(), "a checkpoint request is not a stop")
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR2)
        self.assertTrue(holdfast.should_checkpoint())
        self.assertFalse(holdfast.should_checkpoint(), "two requests before one look: one checkpoint")

    def test_sigterm_and_sigusr1_ask_for_a_stop_that_stays(self):
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGUSR1, "SIGUSR1")):
            _signals.uninstall()
            holdfast.install_signal_handlers()
            self.assertFalse(holdfast.should_stop())
            os.kill(os.getpid(), sig)
            self.assertTrue(holdfast.should_stop(), name)
            self.assertTrue(holdfast.should_stop(), "from then on")
            self.assertEqual(holdfast.stop_signal(), name)
            self.assertFalse(holdfast.should_checkpoint(), "a stop is not a checkpoint request: should_stop() says save")

    def test_exit_code_of_a_stop_is_the_launch_contracts(self):
        self.assertEqual(holdfast.EXIT_STOPPED, 75)


class ResumeStepTest(unittest.TestCase):
    def tearDown(self):
        os.environ.pop("HOLDFAST_RESUME_FROM_STEP", None)

    def test_the_supervisors_step_or_none(self):
        os.environ.pop("HOLDFAST_RESUME_FROM_STEP", None)
        self.assertIsNone(holdfast.resume_step())
        os.environ["HOLDFAST_RESUME_FROM_STEP"] = "40"
        self.assertEqual(holdfast.resume_step(), 40)
        for bad in ("forty", "-3"):
            os.environ["HOLDFAST_RESUME_FROM_STEP"] = bad
            with self.assertRaisesRegex(ValueError, "HOLDFAST_RESUME_FROM_STEP"):
                holdfast.resume_step()


class CheckpointPathTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.saved_env = dict(os.environ)
        os.environ["HOLDFAST_RUN_DIR"] = os.path.join(self.dir, "run")
        os.environ["HOLDFAST_GENERATION"] = "3"
        holdfast.init(os.path.join(self.dir, "progress"), rank=1)

    def tearDown(self):
        holdfast.close()
        os.environ.clear()
        os.environ.update(self.saved_env)
        self.tmp.cleanup()

    def checkpoint_step(self):
        import struct
        with open(os.path.join(self.dir, "progress"), "rb") as f:
            return struct.unpack_from("<q", f.read(), 104)[0]

    def test_a_path_is_appended_to_the_ranks_report_file_before_the_step(self):
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            holdfast.checkpoint_committed(10, "out/ckpt-10.pt")
            holdfast.checkpoint_committed(20, os.path.join(self.dir, "out", "ckpt-20"))
        finally:
            os.chdir(cwd)
        self.assertEqual(self.checkpoint_step(), 20)
        with open(os.path.join(self.dir, "run", "job-checkpoints", "rank-1.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(lines, [
            {"step": 10, "path": os.path.join(self.dir, "out", "ckpt-10.pt"), "rank": 1, "generation": "3"},
            {"step": 20, "path": os.path.join(self.dir, "out", "ckpt-20"), "rank": 1, "generation": "3"},
        ], "absolute paths, one line per commit")

    def test_without_a_path_only_the_step_is_recorded(self):
        holdfast.checkpoint_committed(5)
        self.assertEqual(self.checkpoint_step(), 5)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "run", "job-checkpoints")))

    def test_without_a_run_dir_the_step_still_counts_and_stderr_says_why_no_path(self):
        del os.environ["HOLDFAST_RUN_DIR"]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            holdfast.checkpoint_committed(7, "ckpt-7.pt")
        self.assertEqual(self.checkpoint_step(), 7)
        self.assertIn("HOLDFAST_RUN_DIR is not set", err.getvalue())

    def test_a_bad_step_is_refused(self):
        for bad in (-1, "10", 1.5, True):
            with self.assertRaises(ValueError):
                holdfast.checkpoint_committed(bad, "x")
        self.assertEqual(self.checkpoint_step(), -1, "nothing recorded")


# Two ranks over Gloo: a signal reaches rank 0 at step `signal_step`, rank 1
# `lag` steps later (as SIGUSR2 from the daemon reaches ranks at different
# points of their loops). Each rank prints the steps it acted on and how many
# all_reduce calls the agreement made.
_RANK = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    import torch.distributed as dist
    import holdfast
    rank, kind, signal_step, lag = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    os.environ["HOLDFAST_RANK"] = str(rank)
    dist.init_process_group("gloo", init_method="file://" + sys.argv[6], rank=rank, world_size=2)
    calls = [0]
    real = dist.all_reduce
    def counting(*a, **k):
        calls[0] += 1
        return real(*a, **k)
    dist.all_reduce = counting
    holdfast.install_signal_handlers()
    sig = signal.SIGUSR2 if kind == "checkpoint" else signal.SIGTERM
    checkpoints, stopped_at = [], None
    for step in range(12):
        if step == signal_step + (lag if rank == 1 else 0):
            os.kill(os.getpid(), sig)
        if holdfast.should_checkpoint():
            checkpoints.append(step)
        if holdfast.should_stop():
            stopped_at = step
            break
    print(json.dumps({"checkpoints": checkpoints, "stopped_at": stopped_at, "all_reduces": calls[0]}))
    dist.destroy_process_group()
""")


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (apt-get install python3-torch)")
class AgreementTest(unittest.TestCase):
    def run_ranks(self, kind, signal_step, lag):
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "rank.py")
            with open(script, "w") as f:
                f.write(_RANK)
            env = dict(os.environ, OMP_NUM_THREADS="1")
            env.pop("HOLDFAST_PROGRESS_PATH", None)
            procs = [subprocess.Popen([sys.executable, "-B", script, os.path.join(HERE, ".."), str(r), kind,
                                       str(signal_step), str(lag), os.path.join(d, "store")],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
                     for r in range(2)]
            out = []
            for p in procs:
                stdout, stderr = p.communicate(timeout=240)
                self.assertEqual(p.returncode, 0, stderr)
                out.append(json.loads(stdout.strip().splitlines()[-1]))
            return out

    def test_a_checkpoint_request_is_acted_on_once_at_the_same_step_on_every_rank(self):
        r0, r1 = self.run_ranks("checkpoint", signal_step=3, lag=2)
        self.assertEqual(r0["checkpoints"], [3], "at the first agreement that sees it")
        self.assertEqual(r1["checkpoints"], [3], "rank 1 acts with rank 0, and not again when its own signal lands")
        self.assertIsNone(r0["stopped_at"])
        self.assertEqual(r0["all_reduces"], 12, "asking both questions each step costs one all_reduce a step")

    def test_a_stop_reaching_one_rank_stops_every_rank_at_that_step(self):
        r0, r1 = self.run_ranks("stop", signal_step=4, lag=3)
        self.assertEqual(r0["stopped_at"], 4)
        self.assertEqual(r1["stopped_at"], 4)


if __name__ == "__main__":
    unittest.main()
