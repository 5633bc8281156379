#!/usr/bin/python3
"""Supervision benchmark: how fast holdfastd notices a fault and gets training going again.

  bench/supervision_bench.sh [--build-dir build] [--quick] [--rounds 3] [--duration-s 600]
                             [--fault-every-s 60] [--cpu-s 60] [--cpu-ranks 8]
                             [--only latency,cpu,ratio] [--no-docs] [--keep]

Four measurements, one command (definitions in docs/benchmarks.md, "## Supervision"):

1. latency: `rounds` rounds, each of three alternated runs -- holdfastd (2 ranks of
   holdfast-train), torchrun at its default --monitor_interval, torchrun at 0.1 s
   (bench/supervision/ddp_peer.py: the same GPT in PyTorch DDP over gloo, torch.save
   checkpoints every K steps and resume). A holdfastd run takes three faults in turn:
   an injected compute hang (--inject-fault hang@1:S), a SIGKILL of rank 1 and a SIGSTOP
   of rank 0; a torchrun run takes one SIGKILL of worker rank 1.
2. cpu: holdfastd supervising `cpu-ranks` ranks for `cpu-s` seconds: utime+stime delta of
   the daemon over wall time, VmRSS sampled every 0.2 s (max) and VmHWM.
3. ratio: one holdfastd run of `duration-s` with a fault every `fault-every-s` (the first
   at half an interval), alternating SIGKILL of a rank and SIGSTOP of a rank; effective
   training time ratio = productive step time / wall time.

--quick: ratio run of 120 s (2 faults). Prints the tables and rewrites
the "## Supervision" section of docs/benchmarks.md (other sections stay) unless --no-docs.
Timestamps: a thread reads the daemon's stdout and stamps each line; another polls the
metrics JSONL every 5 ms and stamps each new line (the same poller serves both sides).
"""

import argparse
import datetime
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(REPO, "bench", "supervision", "ddp_peer.py")
DOCS = os.path.join(REPO, "docs", "benchmarks.md")
PYTHON = "/usr/bin/python3"
SECTION = "## Supervision"
CKPT_EVERY = 50  # steps between checkpoints, both sides
WARM_STEPS = 100  # steps before the first fault of a run (p99 and caches settled)
KILL_JITTER_S = 5.0  # a uniform delay before each kill: a random phase of torchrun's 5 s monitor loop
TIMEOUT_S = 180  # any single wait; a run that exceeds it is reported as failed


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg():
    return "%.2f" % os.getloadavg()[0]


# ------------------------------------------------------------------ watchers ----

class LineStamps:
    """Lines with the unix time each was seen; wait() blocks until a predicate matches."""

    def __init__(self):
        self.lines = []  # (time, text)
        self.cond = threading.Condition()
        self.closed = False

    def add(self, t, text):
        with self.cond:
            self.lines.append((t, text))
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait(self, pred, start=0, timeout=TIMEOUT_S):
        """First (index, time, text) at index >= start with pred(text); None on timeout/close."""
        deadline = time.time() + timeout
        i = start
        with self.cond:
            while True:
                while i < len(self.lines):
                    t, text = self.lines[i]
                    if pred(text):
                        return i, t, text
                    i += 1
                left = deadline - time.time()
                if left <= 0 or self.closed:
                    return None
                self.cond.wait(min(left, 0.5))

    def __len__(self):
        with self.cond:
            return len(self.lines)


class PipeReader(threading.Thread):
    def __init__(self, pipe, stamps, copy_path):
        super().__init__(daemon=True)
        self.pipe, self.stamps, self.copy = pipe, stamps, open(copy_path, "w")

    def run(self):
        for raw in iter(self.pipe.readline, b""):
            text = raw.decode(errors="replace").rstrip("\n")
            self.stamps.add(time.time(), text)
            self.copy.write(text + "\n")
            self.copy.flush()
        self.stamps.close()


class FilePoller(threading.Thread):
    """Polls a growing JSONL file every 5 ms; each complete line is stamped when first seen."""

    def __init__(self, path, stamps, period=0.005):
        super().__init__(daemon=True)
        self.path, self.stamps, self.period = path, stamps, period
        self.stop = threading.Event()

    def run(self):
        pos, buf = 0, b""
        while not self.stop.is_set():
            try:
                with open(self.path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = b""
            now = time.time()
            if chunk:
                pos += len(chunk)
                buf += chunk
                *done, buf = buf.split(b"\n")
                for line in done:
                    try:
                        self.stamps.add(now, json.loads(line))
                    except ValueError:
                        pass
            self.stop.wait(self.period)


def step_of(rec):
    return rec.get("step", -1) if isinstance(rec, dict) else -1


# ----------------------------------------------------------------- processes ----

def proc_children(pid):
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                kids.append(int(d))
        except (OSError, ValueError):
            pass
    return kids


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        kids = proc_children(todo.pop())
        out += kids
        todo += kids
    return out


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return {}
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def rank_pid(root, rank, key, timeout=60):
    """Pid of the descendant of `root` whose environment has key=rank."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for p in descendants(root):
            env = environ(p)
            if env.get(key) == str(rank) and ("HOLDFAST_RANK" in env or "TORCHELASTIC_RESTART_COUNT" in env):
                return p
        # A warm spare's /proc/PID/environ is its spare environment (its rank's was set later):
        # the rank is the newest generation's progress record it has mapped.
        best = None
        for p in descendants(root):
            if "HOLDFAST_SPARE_FD" not in environ(p):
                continue
            try:
                with open(f"/proc/{p}/maps") as f:
                    for g, r in re.findall(r"-g(\d+)-r(\d+)\.rec$", f.read(), re.M):
                        if int(r) == rank and (best is None or int(g) > best[0]):
                            best = (int(g), p)
            except OSError:
                pass
        if best:
            return best[1]
        time.sleep(0.05)
    raise RuntimeError(f"no rank {rank} under pid {root}")


def end_group(proc, sig=signal.SIGTERM, grace=20):
    """Stops a process started in its own session, then its whole group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------- configs ----

def write_train_config(work):
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "wb") as out:
        for name in ("GPL-3", "LGPL-2.1", "Apache-2.0"):
            with open(os.path.join("/usr/share/common-licenses", name), "rb") as f:
                out.write(f.read())
    path = os.path.join(work, "train.toml")
    with open(path, "w") as f:
        f.write(f"""[model]
n_layer = 2
n_head = 4
n_embd = 64
block_size = 64
dropout = 0.0
[data]
format = "text"
path = "{corpus}"
[train]
steps = 100000000
micro_batch = 4
seed = 11
threads = 1
log_every = 1000
[optim]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
[dist]
bucket_mb = 0.05
[checkpoint]
every_steps = {CKPT_EVERY}
keep_last = 2
""")
    return path


def recovery_section(args):
    """The job file's [recovery] for --memory-mb / --warm-spares ("" without them)."""
    keys = []
    if getattr(args, "memory_mb", 0):
        keys.append(f"memory_budget_mb = {args.memory_mb}")
        if getattr(args, "snapshot_every", 1) != 1:
            keys.append(f"snapshot_every = {args.snapshot_every}")
    if getattr(args, "warm_spares", False):
        keys.append("warm_spares = true")
    return "[recovery]\n" + "".join(k + "\n" for k in keys) if keys else ""


class Daemon:
    """One holdfastd run in DIR: job file, stdout stamps, metrics stamps."""

    def __init__(self, args, work, name, nproc, fault="", supervise=None):
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir)
        self.metrics_path = os.path.join(self.dir, "metrics.jsonl")
        # The trainer writes its fault marker into output.dir without creating it.
        os.makedirs(os.path.join(self.dir, "out"))
        cmd = [args.train_bin, "--config", args.train_config, "--metrics", self.metrics_path,
               "--set", "output.dir=" + os.path.join(self.dir, "out"),
               "--set", "checkpoint.dir=" + os.path.join(self.dir, "ck")]
        if fault:
            cmd += ["--inject-fault", fault]
        # hang_min_s pinned at 5 s (the default is 60 s, for large jobs): the injected hang's
        # detection is then this allowance, as in earlier figures, and a ratio run is not
        # dominated by one minute per hang.
        sup = {"restart_budget": 20, "hang_min_s": 5}
        sup.update(supervise or {})
        with open(os.path.join(self.dir, "job.toml"), "w") as f:
            f.write("[job]\nname = \"supervision-bench\"\ncommand = [" + ", ".join(json.dumps(c) for c in cmd) +
                    f"]\nnproc = {nproc}\ncheckpoint_dir = {json.dumps(os.path.join(self.dir, 'ck'))}\n"
                    "[supervise]\n" + "".join(f"{k} = {v}\n" for k, v in sup.items()) + recovery_section(args))
        self.out = LineStamps()
        self.metrics = LineStamps()
        self.t_start = time.time()
        self.proc = subprocess.Popen([args.daemon_bin, "--run-dir", os.path.join(self.dir, "run"), "--config",
                                      os.path.join(self.dir, "job.toml")], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        PipeReader(self.proc.stdout, self.out, os.path.join(self.dir, "daemon.log")).start()
        self.poller = FilePoller(self.metrics_path, self.metrics)
        self.poller.start()

    def rank_pid(self, rank):
        return rank_pid(self.proc.pid, rank, "HOLDFAST_RANK")

    def wait_step(self, step, start=0):
        r = self.metrics.wait(lambda m: step_of(m) >= step, start)
        if r is None:
            raise RuntimeError(f"{self.dir}: no step {step} (see daemon.log)")
        return r

    def wait_log(self, pattern, start=0):
        rx = re.compile(pattern)
        r = self.out.wait(lambda s: rx.search(s) is not None, start)
        if r is None:
            raise RuntimeError(f"{self.dir}: no log line /{pattern}/ (see daemon.log)")
        return r

    def log_time(self, text, seen):
        """The daemon's own [HH:MM:SS.mmm] stamp as unix time (the date from when it was seen)."""
        m = re.match(r"\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\]", text)
        if not m:
            return seen
        base = datetime.datetime.fromtimestamp(seen)
        t = base.replace(hour=int(m[1]), minute=int(m[2]), second=int(m[3]), microsecond=int(m[4]) * 1000)
        best = min((t + datetime.timedelta(days=d) for d in (-1, 0, 1)), key=lambda x: abs(x.timestamp() - seen))
        return best.timestamp()

    def recover(self, t_fault, gen_from):
        """After a fault: the generation-started line, then the new generation's first step.

        The first metrics line seen after `generation g started` is the new generation's: the
        old ranks are all gone before a launch. Its step - 1 is the checkpoint the trainer
        restored (the daemon's "from step N" can be older: ranks stopped after a hang commit
        a preemption checkpoint on their way out).
        """
        i, t_gen, text = self.wait_log(r"generation \d+ started", gen_from)
        r = self.metrics.wait(lambda m: True, self._first_metric_after(t_gen))
        if r is None:
            raise RuntimeError(f"{self.dir}: no step after the restart (see daemon.log)")
        _, t_prod, rec = r
        self.last_relaunch = self.log_time(text, t_gen) - t_fault  # fault -> new ranks launched
        return i, step_of(rec) - 1, t_prod - t_fault

    def _first_metric_after(self, t):
        with self.metrics.cond:
            for j, (tt, _) in enumerate(self.metrics.lines):
                if tt >= t:
                    return j
            return len(self.metrics.lines)

    def stop(self):
        end_group(self.proc, signal.SIGTERM, grace=30)
        self.poller.stop.set()
        time.sleep(0.05)

    def lineage_events(self):
        db = os.path.join(self.dir, "run", "lineage.db")
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return con.execute("SELECT time_ms, kind, rank, summary FROM event WHERE incident=1 "
                               "ORDER BY time_ms").fetchall()
        finally:
            con.close()


# ------------------------------------------------------------------- latency ----

def holdfast_round(args, work, n, hang_step):
    """SIGKILL, injected hang, SIGSTOP on one holdfastd run. Returns a dict of figures.

    The crash comes first so that its restart waits the first (shortest) backoff, as a
    first failure under torchrun would; the injected hang fires at `hang_step` of the
    generation after it.
    """
    d = Daemon(args, work, f"hf-{n}", 2, fault=f"hang@1:{hang_step}")
    res = {"load": loadavg()}
    try:
        # 1. SIGKILL of rank 1
        d.wait_step(WARM_STEPS + random.randint(0, CKPT_EVERY - 1))
        time.sleep(random.uniform(0, KILL_JITTER_S))
        victim = d.rank_pid(1)
        mark = len(d.out)
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        i, t_seen, text = d.wait_log(r"CRASH: ", mark)
        res["crash_detect"] = d.log_time(text, t_seen) - t_kill
        res["t_kill"] = t_kill
        i, restored, res["crash_recover"] = d.recover(t_kill, i)
        res["crash_relaunch"] = d.last_relaunch
        if restored + WARM_STEPS >= hang_step:
            raise RuntimeError(f"the crash came too late (restored step {restored}) for the hang at {hang_step}")
        # 2. injected compute hang: its start is the marker file's mtime
        marker = os.path.join(d.dir, "out", f"fault-hang-rank1-step{hang_step}.fired")
        i, t_seen, text = d.wait_log(r"HANG: ", i)
        t_fault = os.stat(marker).st_mtime_ns / 1e9
        res["inj_hang_detect"] = d.log_time(text, t_seen) - t_fault
        res["inj_hang_allowance"] = allowance(text)
        i, restored, res["inj_hang_recover"] = d.recover(t_fault, i)
        # 3. SIGSTOP of rank 0, half-way between checkpoints: a rank stopped while a checkpoint
        # is in flight gets checkpoint_allowance_s (300 s), which would be a different measure.
        target = restored + WARM_STEPS
        target += (CKPT_EVERY // 2 - target) % CKPT_EVERY
        d.wait_step(target)
        victim = d.rank_pid(0)
        mark = len(d.out)
        t_stop = time.time()
        os.kill(victim, signal.SIGSTOP)
        i, t_seen, text = d.wait_log(r"HANG: ", mark)
        res["stop_hang_detect"] = d.log_time(text, t_seen) - t_stop
        res["stop_hang_allowance"] = allowance(text)
        res["t_stop"] = t_stop
        i, restored, res["stop_hang_recover"] = d.recover(t_stop, i)
    finally:
        d.stop()
    try:
        ev = d.lineage_events()
        crash = [e for e in ev if e[1] == "crash"]
        hangs = [e for e in ev if e[1] == "hang"]
        if crash and "t_kill" in res:
            res["crash_recorded"] = crash[0][0] / 1000 - res["t_kill"]
        if len(hangs) >= 2 and "t_stop" in res:
            res["stop_hang_recorded"] = hangs[1][0] / 1000 - res["t_stop"]
    except sqlite3.Error as e:
        res["lineage_error"] = str(e)
    return res


def allowance(text):
    m = re.search(r"no step for ([\d.]+) s; (\w+) allowance ([\d.]+) s", text)
    return f"{m[2]} {m[3]} s" if m else "?"


def torchrun_round(args, work, n, monitor):
    d = os.path.join(work, f"tr-{n}-{monitor or 'default'}")
    os.makedirs(d)
    metrics_path = os.path.join(d, "metrics.jsonl")
    cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--max_restarts", "3",
           "--redirects", "1", "--tee", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    if monitor:
        cmd += ["--monitor_interval", str(monitor)]
    cmd += [PEER, "--config", args.train_config, "--ckpt-dir", os.path.join(d, "ck"), "--metrics", metrics_path,
            "--every", str(CKPT_EVERY)]
    stamps = LineStamps()
    poller = FilePoller(metrics_path, stamps)
    res = {"load": loadavg()}
    with open(os.path.join(d, "torchrun.log"), "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, cwd=d)
    poller.start()
    try:
        target = WARM_STEPS + random.randint(0, CKPT_EVERY - 1)
        if stamps.wait(lambda m: step_of(m) >= target) is None:
            raise RuntimeError(f"{d}: torchrun never reached step {target} (see torchrun.log)")
        time.sleep(random.uniform(0, KILL_JITTER_S))
        victim = rank_pid(proc.pid, 1, "RANK")
        mark = len(stamps)
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        r = stamps.wait(lambda m: m.get("restart", 0) >= 1, mark)
        if r is None:
            raise RuntimeError(f"{d}: no step after the restart (see torchrun.log)")
        _, t_prod, rec = r
        res["crash_recover"] = t_prod - t_kill
        res["crash_recover_own"] = rec["time"] - t_kill  # the worker's own clock, a cross-check
    finally:
        end_group(proc, signal.SIGTERM, grace=20)
        poller.stop.set()
    return res


def run_latency(args, work):
    rows = {"hf": [], "tr_default": [], "tr_fast": []}
    for n in range(args.rounds):
        for side in args.sides.split(","):
            log(f"latency round {n + 1}/{args.rounds}: {side} (load {loadavg()})")
            try:
                if side == "hf":
                    r = holdfast_round(args, work, n, hang_step=8 * WARM_STEPS + random.randint(0, CKPT_EVERY - 1))
                else:
                    r = torchrun_round(args, work, n, None if side == "tr_default" else args.fast_monitor)
            except (RuntimeError, OSError) as e:
                log(f"  FAILED: {e}")
                r = {"error": str(e), "load": loadavg()}
            log("  " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in r.items() if not k.startswith("t_")))
            rows[side].append(r)
    return rows


# ----------------------------------------------------------------------- cpu ----

def proc_cpu_s(pid):
    """CPU seconds of pid: /proc/PID/schedstat (ns) where the kernel has it, else stat's ticks."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def run_cpu(args, work):
    log(f"cpu/rss: {args.cpu_ranks} ranks for {args.cpu_s} s (load {loadavg()})")
    d = Daemon(args, work, "cpu", args.cpu_ranks)
    res = {"load_before": loadavg()}
    try:
        d.wait_step(20)  # every rank started and stepping
        pid = d.proc.pid
        c0, t0 = proc_cpu_s(pid), time.time()
        rss = []
        while time.time() - t0 < args.cpu_s:
            rss.append(proc_status_kb(pid, "VmRSS"))
            time.sleep(0.2)
        c1, t1 = proc_cpu_s(pid), time.time()
        res.update(cpu_pct=100 * (c1 - c0) / (t1 - t0), cpu_s=c1 - c0, wall_s=t1 - t0, rss_max_kb=max(rss),
                   rss_median_kb=statistics.median(rss), hwm_kb=proc_status_kb(pid, "VmHWM"),
                   incidents=sum(1 for _, t in d.out.lines if "CRASH:" in t or "HANG:" in t),
                   steps=max(step_of(m) for _, m in d.metrics.lines))
        res["load_after"] = loadavg()
    finally:
        d.stop()
    log("  " + ", ".join(f"{k}={v}" for k, v in res.items()))
    return res


# --------------------------------------------------------------------- ratio ----

def redone_per_restart(lines):
    """Steps each restart ran again: the old generation's last step minus the step the new one
    resumed from (its first step - 1), for every change of generation in the metrics lines."""
    redone, last = [], None
    for m in lines:
        if last is not None and m.get("generation", 0) != last.get("generation", 0):
            redone.append(max(0, step_of(last) - (step_of(m) - 1)))
        last = m
    return redone


def run_ratio(args, work):
    log(f"ratio: {args.duration_s} s, a fault every {args.fault_every_s} s (load {loadavg()})")
    d = Daemon(args, work, "ratio", 2, supervise={"restart_budget": 1000})
    res = {"load_before": loadavg(), "faults": []}
    try:
        t0 = d.t_start
        k = 0
        while True:
            t_next = t0 + args.fault_every_s * (k + 0.5)
            if t_next >= t0 + args.duration_s:
                break
            while time.time() < t_next:
                time.sleep(0.05)
            kind = "SIGKILL" if k % 2 == 0 else "SIGSTOP"
            rank = (k // 2) % 2
            try:
                victim = d.rank_pid(rank, ) if d.proc.poll() is None else None
            except RuntimeError:
                victim = None
            if victim is None:
                log(f"  fault {k}: no rank {rank} to hit (daemon restarting?)")
            else:
                os.kill(victim, signal.SIGKILL if kind == "SIGKILL" else signal.SIGSTOP)
                res["faults"].append((time.time() - t0, kind, rank))
                log(f"  fault {k}: {kind} rank {rank} at {time.time() - t0:.1f} s")
            k += 1
        while time.time() < t0 + args.duration_s:
            time.sleep(0.05)
        t_end = time.time()
    finally:
        d.stop()
    res["load_after"] = loadavg()
    # The file holds every step each generation ran, in order; a restarted generation
    # rewrites steps after its checkpoint, so the last line of each step number survives.
    final = {}
    last_t = t0
    for t, m in d.metrics.lines:
        if t > t_end:
            break
        final[m["step"]] = m["step_ms"]
        last_t = t
    # Steps above the final step are ones a later generation never redid: they survive only
    # if the run ended in them (the last generation); drop any beyond the last line's step.
    last_step = step_of(d.metrics.lines[-1][1]) if d.metrics.lines else 0
    surviving = {s: ms for s, ms in final.items() if s <= last_step}
    wall = t_end - t0
    t_first = t0 + res["faults"][0][0] if res["faults"] else t_end
    ran = [m["step_ms"] for _, m in d.metrics.lines]
    median_ms = statistics.median(ran) if ran else 0
    # A step a fault froze (SIGSTOP, then continued to a preemption checkpoint) survives with the
    # stall in its step_ms: a step over 10x the median counts as one median step.
    capped = [ms if ms <= 10 * median_ms else median_ms for ms in surviving.values()]
    res.update(wall_s=wall, steps_final=last_step, steps_ran=len(ran), productive_s=sum(capped) / 1000,
               stalled_steps=sum(1 for ms in surviving.values() if ms > 10 * median_ms),
               median_step_ms=median_ms)
    res["ratio"] = res["productive_s"] / wall
    res["redone_per_fault"] = redone_per_restart([m for _, m in d.metrics.lines])
    before = [m["step_ms"] for t, m in d.metrics.lines if t <= t_first]
    res["ratio_before_first_fault"] = sum(min(ms, 10 * median_ms) for ms in before) / 1000 / (t_first - t0)
    res["ratio_median"] = last_step * median_ms / 1000 / wall
    text = [t for _, t in d.out.lines]
    res["backoff_s"] = sum(float(m[1]) for t in text for m in [re.search(r"restarting in ([\d.]+) s", t)] if m)
    res["incidents"] = {"crash": sum("CRASH:" in t for t in text), "hang": sum("HANG:" in t for t in text)}
    res["generations"] = sum(1 for t in text if re.search(r"generation \d+ started", t))
    log("  " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()))
    return res


# ---------------------------------------------------------------------- docs ----

def med(rows, key):
    vals = [r[key] for r in rows if key in r]
    return (statistics.median(vals), vals) if vals else (None, [])


def fmt_s(pair):
    m, vals = pair
    if m is None:
        return "n/a"
    return f"{m:.2f} s ({', '.join(f'{v:.2f}' for v in vals)})"


def loads(rows):
    vals = [float(r["load"]) for r in rows if "load" in r]
    return f"{min(vals):.1f}–{max(vals):.1f}" if vals else "?"


def report(args, lat, cpu, ratio):
    out = [SECTION, ""]
    mi = machine()
    out.append(f"`bench/supervision_bench.sh{' --quick' if args.quick else ''}` (one command; "
               f"`--help` for options). Machine: {mi}. Date: {datetime.date.today()}. "
               "Every figure below carries the 1-minute load average it was measured at: on the shared "
               "2-core development VM other builds ran at the same time, so read them as upper bounds.")
    out.append("")
    out.append("Job: holdfast-train, 2 layers, 64 wide, 4 heads, context 64, micro_batch 4, 1 thread per rank, "
               f"float32 CPU, checkpoint every {CKPT_EVERY} steps; holdfastd at its defaults (poll_ms 200, "
               "hang_factor 5, stopped_hang_s 1, term_grace_s 3, backoff_initial_s 0.25, backoff_max_s 30) except "
               "restart_budget and hang_min_s 5 (default 60). The torchrun peer is bench/supervision/ddp_peer.py: the same model, sampler and "
               "AdamW in PyTorch DDP over gloo (tests/reference/gpt_reference.py), rank 0 torch.save-ing model + "
               f"optimizer every {CKPT_EVERY} steps (fsync + rename) and every (re)started worker resuming from "
               "the newest, under `python3 -m torch.distributed.run --nproc_per_node 2 --max_restarts 3 "
               "--redirects 1 --tee 2` (Debian's torchrun on Python 3.11 crashes without the last two).")
    out.append("")
    out.append("Definitions:")
    out.append("")
    out.append("- **crash detection latency**: the benchmark's SIGKILL of rank 1 → the time stamp of the "
               "daemon's `CRASH:` log line (its own clock; \"recorded\" = the lineage `event.time_ms`).")
    out.append("- **hang detection latency**: the hang's start → the daemon's `HANG:` log line, with the "
               "allowance that applied (max(hang_min_s, hang_factor × p99 step time); for a rank in job-control stop, "
               "stopped_hang_s; from the HANG line). "
               "Two hangs: a SIGSTOP of rank 0 half-way between two checkpoints (start = the kill(2) call), and the trainer's injected "
               "compute hang `--inject-fault hang@1:S`, S = 800-849 (start = the mtime of the fault's marker file, written "
               "just before `FAULT INJECTED` is logged).")
    out.append("- **fault → next productive step**: the fault → the first metrics line of the new "
               "generation whose step is beyond the checkpoint it restored (holdfast: the first line "
               "seen after the daemon's `generation g started`; torchrun: the first line written with "
               "TORCHELASTIC_RESTART_COUNT ≥ 1). Both sides' metrics files are polled every 5 ms by the "
               "same code, and a line is timed when first seen. Each SIGKILL comes 100-149 steps into the "
               f"run plus a uniform 0-{KILL_JITTER_S:g} s delay, so that it falls at a random phase of "
               "torchrun's monitor loop.")
    out.append("- **effective training time ratio**: productive ÷ wall, over one run with a fault every "
               f"{args.fault_every_s:g} s (the first at half an interval; SIGKILL of a rank and SIGSTOP of a "
               "rank alternating). productive = the time of the steps that survive (a restarted generation "
               "redoes the steps after its checkpoint; their first runs are lost): the sum of step_ms over "
               "the last run of each step number, a step over 10x the median counting as one median step "
               "(a SIGSTOP-ed rank, continued by the daemon, finishes its step and commits it with the whole "
               "stall in its step_ms); a second figure takes final step × median step_ms. wall = daemon start → end of the run, so the first "
               "start-up, checkpoints and the time between steps count as overhead.")
    out.append("")
    if lat:
        hf, trd, trf = lat["hf"], lat["tr_default"], lat["tr_fast"]
        hf_rec = med(hf, "crash_recover")[0]
        trd_rec = med(trd, "crash_recover")[0]
        trf_rec = med(trf, "crash_recover")[0]
        allow_s = sorted({r.get("stop_hang_allowance", "?") for r in hf if "error" not in r})
        allow_i = sorted({r.get("inj_hang_allowance", "?") for r in hf if "error" not in r})
        out.append(f"Latency: medians over {args.rounds} alternated rounds (holdfastd, torchrun default, "
                   f"torchrun --monitor_interval {args.fast_monitor}), runs in parentheses.")
        out.append("")
        out.append("| measure | holdfastd | torchrun (default monitor_interval) | torchrun (monitor_interval "
                   f"{args.fast_monitor}) | load avg (hf / default / fast) |")
        out.append("| --- | --- | --- | --- | --- |")
        out.append(f"| crash detection (SIGKILL → CRASH logged) | {fmt_s(med(hf, 'crash_detect'))} | | | {loads(hf)} |")
        out.append(f"| crash detection (SIGKILL → lineage event) | {fmt_s(med(hf, 'crash_recorded'))} | | | |")
        out.append(f"| crash → next productive step | {fmt_s(med(hf, 'crash_recover'))} | "
                   f"{fmt_s(med(trd, 'crash_recover'))} | {fmt_s(med(trf, 'crash_recover'))} | "
                   f"{loads(hf)} / {loads(trd)} / {loads(trf)} |")
        out.append(f"| … of which SIGKILL → daemon logged `generation g started` (stop peers, backoff, spawn) | "
                   f"{fmt_s(med(hf, 'crash_relaunch'))} | | | |")
        out.append(f"| hang detection, SIGSTOP of rank 0 (allowance {', '.join(allow_s)}) | "
                   f"{fmt_s(med(hf, 'stop_hang_detect'))} | | | {loads(hf)} |")
        out.append(f"| hang detection, SIGSTOP of rank 0 (SIGSTOP → lineage event) | "
                   f"{fmt_s(med(hf, 'stop_hang_recorded'))} | | | |")
        out.append(f"| hang detection, injected compute hang (allowance {', '.join(allow_i)}) | "
                   f"{fmt_s(med(hf, 'inj_hang_detect'))} | | | |")
        out.append(f"| SIGSTOP hang → next productive step | {fmt_s(med(hf, 'stop_hang_recover'))} | | | |")
        out.append(f"| injected hang → next productive step | {fmt_s(med(hf, 'inj_hang_recover'))} | | | |")
        out.append("")
        if hf_rec and trd_rec:
            verdict = "meets" if trd_rec / hf_rec >= 3 else "misses"
            out.append(f"Crash → next productive step: torchrun at its default takes {trd_rec / hf_rec:.2f}x "
                       f"holdfastd's time ({verdict} the goal of >= 3x)"
                       + (f"; at monitor_interval {args.fast_monitor} it takes {trf_rec / hf_rec:.2f}x." if trf_rec
                          else "."))
            out.append("")
        out.append("Reading the table: crash detection is the SIGCHLD path (no polling). Hang detection is the "
                   "allowance plus up to one poll_ms. The injected compute hang waits out the step allowance (the "
                   "stall counts from the last completed step, so it can be named slightly before 5 s; at this "
                   "step time hang_factor × p99 is far below hang_min_s, so hang_min_s decides); a SIGSTOPped "
                   "rank is hung once seen stopped for stopped_hang_s (1 s), whatever the step allowance. After a "
                   "hang the daemon SIGKILLs the rank(s) triage names (a rank spinning in compute never acts on "
                   "TERM) and sends TERM to the others, whose collective then fails. What remains of "
                   "crash → next productive step after the relaunch is the new ranks' start-up (loading "
                   "libtorch, rendezvous, checkpoint restore), which a loaded machine stretches most.")
        out.append("")
        errors = [f"{side} round {i + 1}: {r['error']}" for side in lat for i, r in enumerate(lat[side])
                  if "error" in r]
        if errors:
            out.append("Failed runs (left out of the medians): " + "; ".join(errors))
            out.append("")
    if cpu:
        out.append(f"Daemon cost: holdfastd supervising {args.cpu_ranks} ranks of the same job for "
                   f"{cpu['wall_s']:.0f} s after all ranks stepped (load {cpu['load_before']} → "
                   f"{cpu['load_after']}; {cpu['steps']} steps, {cpu['incidents']} incidents).")
        out.append("")
        out.append("| measure | value | goal |")
        out.append("| --- | --- | --- |")
        out.append(f"| CPU (time on CPU ÷ wall; /proc/PID/schedstat, else utime+stime) | {cpu['cpu_pct']:.3f}% of a core ({cpu['cpu_s']:.2f} s) | <= 0.5% |")
        out.append(f"| VmRSS, max of 0.2 s samples (median) | {cpu['rss_max_kb'] / 1024:.1f} MiB "
                   f"({cpu['rss_median_kb'] / 1024:.1f}) | <= 16 MB |")
        out.append(f"| VmHWM (peak over the daemon's life) | {cpu['hwm_kb'] / 1024:.1f} MiB | |")
        out.append("")
    if ratio:
        out.append(f"Effective training time: one run of {ratio['wall_s']:.0f} s, {len(ratio['faults'])} faults "
                   f"({', '.join(f'{k} r{r} at {t:.0f} s' for t, k, r in ratio['faults'])}); load "
                   f"{ratio['load_before']} → {ratio['load_after']}.")
        out.append("")
        out.append("| measure | value |")
        out.append("| --- | --- |")
        out.append(f"| **effective training time ratio** (sum of step_ms of the last run of each step number ÷ wall; "
                   f"{ratio['stalled_steps']} stalled step(s) counted as one median step) | **{ratio['ratio']:.3f}** |")
        out.append(f"| same with final step × median step_ms (sensitive to the load changing during the run) | "
                   f"{ratio['ratio_median']:.3f} |")
        out.append(f"| the same ratio over the fault-free stretch (daemon start → first fault): start-up, "
                   f"checkpoints and time between steps | {ratio['ratio_before_first_fault']:.3f} |")
        out.append(f"| final step; steps run (incl. redone) | {ratio['steps_final']}; {ratio['steps_ran']} |")
        if ratio.get("redone_per_fault"):
            r = ratio["redone_per_fault"]
            out.append(f"| steps redone per restart: median (each) | {statistics.median(r):g} ({', '.join(map(str, r))}) |")
        out.append(f"| median step_ms | {ratio['median_step_ms']:.1f} |")
        out.append(f"| incidents recorded; generations | {ratio['incidents']['crash']} crash, "
                   f"{ratio['incidents']['hang']} hang; {ratio['generations']} |")
        out.append(f"| restart backoff waited (sum) | {ratio['backoff_s']:.2f} s |")
        out.append("")
        out.append(f"Restart backoff took {ratio['backoff_s']:.1f} s = {100 * ratio['backoff_s'] / ratio['wall_s']:.1f}% "
                   "of the wall time: a generation that trained before it failed is restarted at once; only "
                   "generations that fail before their first step back off (backoff_initial_s × 2^(n-1), capped "
                   "at backoff_max_s). An earlier build that never reset the backoff spent 121.75 s of 600 "
                   "(ratio 0.738) on it.")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}"


def write_docs(section):
    text = open(DOCS).read() if os.path.exists(DOCS) else "# Benchmarks\n"
    start = text.find("\n" + SECTION + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[:start + 1] + section + ("\n" + text[end + 1:] if end >= 0 else "")
    with open(DOCS, "w") as f:
        f.write(text)


# ---------------------------------------------------------------------- main ----

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--quick", action="store_true", help="ratio run of 120 s (2 faults) instead of 600 s")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=600)
    ap.add_argument("--fault-every-s", type=float, default=60)
    ap.add_argument("--cpu-s", type=float, default=60)
    ap.add_argument("--cpu-ranks", type=int, default=8)
    ap.add_argument("--fast-monitor", type=float, default=0.1)
    ap.add_argument("--only", default="latency,cpu,ratio")
    ap.add_argument("--sides", default="hf,tr_default,tr_fast",
                    help="latency sides to run: hf (holdfastd), tr_default, tr_fast (torchrun); "
                         "e.g. hf alone to compare two holdfastd builds")
    ap.add_argument("--memory-mb", type=int, default=0,
                    help="holdfastd side: [recovery] memory_budget_mb (in-memory snapshots every step; 0 = off)")
    ap.add_argument("--snapshot-every", type=int, default=1,
                    help="with --memory-mb: [recovery] snapshot_every (steps between memory snapshots)")
    ap.add_argument("--warm-spares", action="store_true",
                    help="holdfastd side: [recovery] warm_spares = true (docs/warm-restarts.md)")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, lineage.db)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save-json", help="write every measured figure here")
    ap.add_argument("--load-json", help="take the parts not run now (--only) from a --save-json file")
    args = ap.parse_args()
    if args.quick:
        args.duration_s = 120
    random.seed(args.seed)
    args.daemon_bin = os.path.join(args.build_dir, "daemon", "holdfastd")
    args.train_bin = os.path.join(args.build_dir, "trainer", "holdfast-train")
    for b in (args.daemon_bin, args.train_bin):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is missing: build it (ninja -C {args.build_dir} holdfastd holdfast-train), "
                     "LibTorch ON, or pass --build-dir")
    only = set(args.only.split(","))
    work = tempfile.mkdtemp(prefix="supervision-bench-")
    args.train_config = write_train_config(work)
    log(f"work folder {work}; load {loadavg()}")
    lat = cpu = ratio = None
    try:
        if "latency" in only:
            lat = run_latency(args, work)
        if "cpu" in only:
            try:
                cpu = run_cpu(args, work)
            except (RuntimeError, OSError) as e:
                log(f"cpu/rss FAILED: {e}")
        if "ratio" in only:
            try:
                ratio = run_ratio(args, work)
            except (RuntimeError, OSError) as e:
                log(f"ratio FAILED: {e}")
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.save_json:
        with open(args.save_json, "w") as f:
            json.dump({"latency": lat, "cpu": cpu, "ratio": ratio}, f, indent=1)
    if args.load_json:
        with open(args.load_json) as f:
            old = json.load(f)
        lat, cpu, ratio = lat or old.get("latency"), cpu or old.get("cpu"), ratio or old.get("ratio")
    section = report(args, lat, cpu, ratio)
    print(section)
    if not args.no_docs:
        write_docs(section)
        log(f"wrote the {SECTION!r} section of {DOCS}")


if __name__ == "__main__":
    main()
