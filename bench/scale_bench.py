#!/usr/bin/python3
"""Scale harness: what supervision costs at many ranks over many nodes (issue 28).

  bench/scale_bench.sh [--build-dir build] [--sizes 1x8,8x8,64x8,8x64,64x32] [--measure-s 20]
                       [--step-ms 500] [--hang-s 10] [--faults crash,hang,lost] [--no-docs] [--keep]

Real holdfastd daemons -- a leader and N-1 followers, each on a loopback address of its own
(127.0.0.1 leads, follower k binds 127.1.x.y) and named by host (vm-n<k>) -- supervise R
simulated ranks each (bench/simrank.cc, holdfast-simrank: the real progress record through
the real writer, a real barrier of the generation's ranks in shared memory, the trainer's
answers to the daemon's signals; no LibTorch). One size is `NODESxRANKS_PER_NODE`. For each:

1. start-up: every daemon started -> every rank running (runctl status --json).
2. steady state over --measure-s: the leader's and follower 1's CPU (utime+stime over wall)
   and RSS (VmRSS max, VmHWM); cluster-protocol bytes per second (ss -ti: bytes received and
   acknowledged on the leader's cluster port); lineage rows written per second and lineage.db
   growth per hour; `runctl status` (and --json) response time (median of 5) and size.
3. faults, each timed from the harness's act to the leader's own log lines:
   crash  SIGKILL of a rank on the last node -> CRASH logged -> every rank stopped
          ("restarting in") -> the next generation started -> every rank running again;
   hang   CONTROL/hang.<rank> (the rank stops stepping in forward; its peers wait in the
          allreduce) -> HANG logged, then `runctl triage latest` time and size, and whether it
          names the rank;
   lost   SIGKILL of the last follower's daemon and ranks (its process group); the run is
          elastic (job.min_nodes = N-1) -> NODE LOST logged -> the next generation without it.
   Each cause is checked in lineage (the incident's kind and rank or host).
4. clean-up: every process group ended, and nothing left: no process, no progress record in
   the run's progress_dir, no /dev/shm/holdfast-sim-* barrier (reported, and the run fails).

Prints a table per size and, unless --no-docs, rewrites the "## Supervision at scale" section of
docs/benchmarks.md with the table and an SVG of the leader's costs against ranks.
The machine carries every daemon and every simulated rank: its load is in the table.
"""

import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs", "benchmarks.md")
SVG = os.path.join(REPO, "docs", "scale-leader.svg")
SECTION = "## Supervision at scale"
TIMEOUT_S = 600


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_kb(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def log_time(line):
    """Epoch seconds of a holdfastd log line ("[2026-12-04T01:29:23.060Z] ...")."""
    m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z\]", line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def started_ranks(line):
    """K of the leader's "generation N started: K ranks" line."""
    return int(re.search(r"started: (\d+) ranks", line).group(1))


def follower_addr(k):
    return f"127.1.{k // 200}.{k % 200 + 1}"


class Cluster:
    def __init__(self, args, nodes, per_node, work):
        self.args, self.nodes, self.per_node, self.work = args, nodes, per_node, work
        self.run = os.path.join(work, "run")
        self.ctl = os.path.join(work, "ctl")
        self.shm = f"/dev/shm/holdfast-scale-{os.getpid()}-{nodes}x{per_node}"
        os.makedirs(self.ctl)
        b = args.build_dir
        self.runctl_bin = os.path.join(b, "cli", "runctl")
        job = os.path.join(work, "job.toml")
        with open(job, "w") as f:
            f.write("[job]\nname = \"scale\"\n")
            f.write(f"command = [\"{os.path.join(b, 'bench', 'holdfast-simrank')}\", \"--step-ms\", "
                    f"\"{args.step_ms}\", \"--jitter-ms\", \"{args.step_ms / 10}\", \"--control\", \"{self.ctl}\"]\n")
            f.write(f"nproc = {per_node}\n")
            if nodes > 1:
                f.write(f"min_nodes = {nodes - 1}\n")
            f.write(f"[supervise]\nhang_min_s = {args.hang_s}\nrestart_budget = 10\nstartup_timeout_s = 600\n"
                    f"term_grace_s = 5\nhealth_prelaunch = false\nhealth_poll_s = 0\nprogress_dir = \"{self.shm}\"\n")
        self.base = [os.path.join(b, "daemon", "holdfastd"), "--run-dir", self.run, "--config", job,
                     "--nodes", str(nodes)]
        self.procs = []
        self.logs = []

    def start(self):
        nodes, base, work = self.nodes, self.base, self.work
        self.t_start = time.time()
        for k in range(nodes):
            cmd = base + (["--addr", "127.0.0.1"] if k == 0 else ["--node-id", str(k), "--addr", follower_addr(k)])
            path = os.path.join(work, f"node{k}.log")
            out = open(path, "w")
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            self.logs.append(path)
            if k == 0 and nodes > 1:
                self.wait_for(lambda: os.path.exists(os.path.join(self.run, "cluster.addr")), 60, "cluster.addr")

    # ------------------------------------------------------------------ helpers
    def leader_lines(self):
        with open(self.logs[0], errors="replace") as f:
            return f.read().splitlines()

    def wait_for(self, pred, timeout, what):
        t0 = time.time()
        while time.time() - t0 < timeout:
            v = pred()
            if v:
                return v
            if self.procs and self.procs[0].poll() is not None:
                raise RuntimeError(f"the leader exited ({self.procs[0].returncode}) waiting for {what}")
            time.sleep(0.05)
        raise RuntimeError(f"timed out after {timeout} s waiting for {what}")

    def wait_log(self, pattern, after_index, timeout, what):
        rx = re.compile(pattern)

        def find():
            lines = self.leader_lines()
            for i in range(after_index, len(lines)):
                if rx.search(lines[i]):
                    return (i, lines[i])
            return None
        return self.wait_for(find, timeout, what)

    def runctl(self, *args):
        t0 = time.time()
        p = subprocess.run([self.runctl_bin, "--run-dir", self.run, *args], capture_output=True, text=True)
        return time.time() - t0, p.returncode, p.stdout + p.stderr

    def status(self):
        _, rc, out = self.runctl("status", "--json")
        try:
            d = json.loads(out)
        except ValueError:
            return None
        if not d.get("live"):
            return None
        return d.get("status")

    def running(self, generation=None, ranks=None):
        s = self.status()
        if not s:
            return None
        if generation is not None and s.get("generation") != generation:
            return None
        all_ranks = [r for n in s.get("nodes", []) for r in n.get("ranks", [])]
        want = ranks if ranks is not None else self.nodes * self.per_node
        if len(all_ranks) != want or any(r.get("state") != "running" or r.get("step", 0) < 2 for r in all_ranks):
            return None
        return s

    def rank_pid(self, s, rank):
        for n in s.get("nodes", []):
            for r in n.get("ranks", []):
                if r.get("rank") == rank:
                    return r.get("pid"), n.get("host")
        return None, None

    def cluster_port(self):
        with open(os.path.join(self.run, "cluster.addr")) as f:
            return int(f.read().strip().rsplit(":", 1)[1].split()[0])

    def cluster_bytes(self, port):
        """Bytes received + acknowledged over the leader's cluster connections (ss -ti)."""
        out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                             capture_output=True, text=True).stdout
        total = 0
        for m in re.finditer(r"bytes_(?:acked|received):(\d+)", out):
            total += int(m.group(1))
        return total

    def lineage_rows(self):
        db = os.path.join(self.run, "lineage.db")
        try:
            c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            n = sum(c.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables)
            c.close()
        except sqlite3.Error:
            n = 0
        size = sum(os.path.getsize(p) for p in glob.glob(db + "*") if os.path.isfile(p))
        return n, size

    def last_incident(self):
        db = os.path.join(self.run, "lineage.db")
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = c.execute("SELECT kind, rank, node, summary FROM event WHERE kind IN "
                            "('crash','hang','node_lost') ORDER BY id DESC LIMIT 1").fetchone()
        except sqlite3.Error as e:
            row = ("?", None, None, str(e))
        c.close()
        return row

    def stop(self):
        try:
            self.runctl("stop", "--wait")
        except OSError:
            pass
        deadline = time.time() + 90
        for p in self.procs:
            try:
                p.wait(max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def leftovers(self):
        # A process SIGKILLed with its group is gone only once it is reaped:
        # orphaned ranks are init's to reap, which can take a moment under
        # load. What is still there after 10 s was left behind.
        deadline = time.time() + 10
        while True:
            left = []
            for p in self.procs:
                try:
                    os.killpg(p.pid, 0)
                    left.append(f"process group {p.pid}")
                except ProcessLookupError:
                    pass
            left += glob.glob(os.path.join(self.shm, "*"))
            left += glob.glob("/dev/shm/holdfast-sim-*")
            if not left or time.time() > deadline:
                return left
            time.sleep(0.1)


def median_of(f, n=5):
    vals = [f() for _ in range(n)]
    return statistics.median(v[0] for v in vals), vals[-1]


def measure(args, nodes, per_node):
    ranks = nodes * per_node
    work = tempfile.mkdtemp(prefix=f"holdfast-scale-{nodes}x{per_node}-")
    res = {"nodes": nodes, "per_node": per_node, "ranks": ranks, "load_before": loadavg()}
    log(f"{nodes} nodes x {per_node} ranks = {ranks} ranks (load {res['load_before']:.1f}); {work}")
    c = Cluster(args, nodes, per_node, work)
    try:
        c.start()
        s = c.wait_for(c.running, TIMEOUT_S, f"all {ranks} ranks running")
        res["startup_s"] = time.time() - c.t_start
        log(f"  all running after {res['startup_s']:.1f} s")
        # ---- steady state
        lead, fol = c.procs[0].pid, (c.procs[1].pid if nodes > 1 else None)
        port = c.cluster_port() if nodes > 1 else None
        cpu0, fcpu0, t0 = proc_cpu_s(lead), (proc_cpu_s(fol) if fol else 0), time.time()
        b0 = c.cluster_bytes(port) if port else 0
        rows0, size0 = c.lineage_rows()
        rss, frss = [], []
        while time.time() - t0 < args.measure_s:
            rss.append(proc_status_kb(lead, "VmRSS"))
            if fol:
                frss.append(proc_status_kb(fol, "VmRSS"))
            time.sleep(0.5)
        wall = time.time() - t0
        res["leader_cpu_pct"] = 100 * (proc_cpu_s(lead) - cpu0) / wall
        res["follower_cpu_pct"] = 100 * (proc_cpu_s(fol) - fcpu0) / wall if fol else None
        res["leader_rss_mib"] = max(rss) / 1024
        res["leader_hwm_mib"] = proc_status_kb(lead, "VmHWM") / 1024
        res["follower_rss_mib"] = max(frss) / 1024 if frss else None
        res["cluster_bytes_s"] = (c.cluster_bytes(port) - b0) / wall if nodes > 1 else 0
        rows1, size1 = c.lineage_rows()
        res["lineage_rows_s"] = (rows1 - rows0) / wall
        res["lineage_mib_h"] = (size1 - size0) / wall * 3600 / 2**20
        res["load_steady"] = loadavg()
        st = [c.runctl("status") for _ in range(5)]
        js = [c.runctl("status", "--json") for _ in range(5)]
        res["status_ms"] = 1000 * statistics.median(x[0] for x in st)
        res["status_bytes"] = len(st[-1][2])
        res["status_lines"] = st[-1][2].count("\n")
        res["status_json_ms"] = 1000 * statistics.median(x[0] for x in js)
        res["status_json_bytes"] = len(js[-1][2])
        log("  steady: leader {:.2f}% CPU, {:.1f} MiB; status {:.0f} ms, {} lines".format(
            res["leader_cpu_pct"], res["leader_rss_mib"], res["status_ms"], res["status_lines"]))
        gen = s["generation"]
        # ---- crash: a rank on the last node
        if "crash" in args.faults:
            victim = ranks - 1
            pid, host = c.rank_pid(c.status(), victim)
            mark = len(c.leader_lines())
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)
            _, line = c.wait_log(r"CRASH: ", mark, 120, "the crash")
            res["crash_detect_s"] = log_time(line) - t_kill
            _, line = c.wait_log(r"restarting in ", mark, 120, "every rank stopped")
            res["crash_stopped_s"] = log_time(line) - t_kill
            _, line = c.wait_log(rf"generation {gen + 1} started", mark, 120, "the next generation")
            res["crash_next_gen_s"] = log_time(line) - t_kill
            n = started_ranks(line)
            c.wait_for(lambda: c.running(gen + 1, n), TIMEOUT_S, "the next generation running")
            res["crash_running_s"] = time.time() - t_kill
            kind, rank, _, summary = c.last_incident()
            res["crash_cause_ok"] = kind == "crash" and rank == victim
            gen += 1
            log(f"  crash: detected {res['crash_detect_s']:.2f} s, stopped {res['crash_stopped_s']:.2f} s, "
                f"next generation {res['crash_next_gen_s']:.2f} s, all running {res['crash_running_s']:.1f} s; "
                f"lineage: {kind} rank {rank} ({'ok' if res['crash_cause_ok'] else 'WRONG'})")
        # ---- hang: a rank of the leader's node (the crash was the last node's: a node
        # implicated twice would be left out of the elastic run)
        if "hang" in args.faults:
            victim = per_node // 2
            mark = len(c.leader_lines())
            t_hang = time.time()
            open(os.path.join(c.ctl, f"hang.{victim}"), "w").close()
            _, line = c.wait_log(r"HANG: ", mark, 300, "the hang")
            res["hang_detect_s"] = log_time(line) - t_hang
            res["hang_names_rank"] = f"rank {victim} " in line
            c.wait_for(lambda: c.last_incident()[0] == "hang", 120, "the hang in lineage")
            tt, rc, out = c.runctl("triage", "latest")
            res["triage_ms"], res["triage_bytes"], res["triage_lines"] = 1000 * tt, len(out), out.count("\n")
            res["triage_names_rank"] = f"culprit   rank {victim} " in out
            _, line = c.wait_log(rf"generation {gen + 1} started", mark, 120, "the generation after the hang")
            n = started_ranks(line)
            c.wait_for(lambda: c.running(gen + 1, n), TIMEOUT_S, "the generation after the hang running")
            kind, rank, _, _ = c.last_incident()
            res["hang_cause_ok"] = kind == "hang" and rank == victim
            gen += 1
            log(f"  hang: declared {res['hang_detect_s']:.2f} s after the request, names rank {victim}: "
                f"{res['hang_names_rank']}; triage {res['triage_ms']:.0f} ms, {res['triage_lines']} lines; "
                f"lineage: {kind} rank {rank}")
        # ---- lost follower: the last node's daemon and ranks
        if "lost" in args.faults and nodes > 1:
            mark = len(c.leader_lines())
            t_kill = time.time()
            os.killpg(c.procs[-1].pid, signal.SIGKILL)
            _, line = c.wait_log(r"NODE LOST: ", mark, 300, "the lost node")
            res["lost_detect_s"] = log_time(line) - t_kill
            _, line = c.wait_log(rf"generation {gen + 1} started", mark, 300, "the generation without it")
            res["lost_next_gen_s"] = log_time(line) - t_kill
            c.wait_for(lambda: c.running(gen + 1, ranks - per_node), TIMEOUT_S, "the smaller generation running")
            kind, _, host, _ = c.last_incident()
            res["lost_cause_ok"] = kind == "node_lost" and host == f"{platform.node()}-n{nodes - 1}"
            log(f"  lost node: noticed {res['lost_detect_s']:.2f} s, next generation {res['lost_next_gen_s']:.2f} s; "
                f"lineage: {kind} {host}")
    finally:
        c.stop()
        left = c.leftovers()
        res["leftovers"] = left
        if left:
            log(f"  LEFT BEHIND: {left}")
        for p in glob.glob("/dev/shm/holdfast-sim-*"):
            os.unlink(p)
        shutil.rmtree(c.shm, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res["load_after"] = loadavg()
    return res


# ------------------------------------------------------------------- report ----

def fmt(v, spec="{:.2f}"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float) and abs(v) < 0.005:
        v = 0.0  # a log line a millisecond before the harness's own clock read: "-0.00"
    return spec.format(v)


def table(rows):
    cols = [("ranks", "ranks", "{}"), ("nodes", "nodes", "{}"), ("startup s", "startup_s", "{:.1f}"),
            ("leader CPU %", "leader_cpu_pct", "{:.2f}"), ("leader RSS MiB", "leader_rss_mib", "{:.1f}"),
            ("follower CPU %", "follower_cpu_pct", "{:.2f}"), ("follower RSS MiB", "follower_rss_mib", "{:.1f}"),
            ("cluster B/s", "cluster_bytes_s", "{:.0f}"), ("status ms", "status_ms", "{:.0f}"),
            ("status lines/bytes", None, None), ("status --json KB", "status_json_bytes", None),
            ("crash: detected / stopped / next gen s", None, None), ("hang declared s", "hang_detect_s", "{:.2f}"),
            ("triage ms / lines", None, None), ("lost node: noticed / next gen s", None, None),
            ("causes in lineage", None, None), ("lineage rows/s", "lineage_rows_s", "{:.2f}"),
            ("lineage writes MiB/h", "lineage_mib_h", "{:.2f}"), ("load", "load_steady", "{:.1f}")]
    out = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for name, key, spec in cols:
            if name == "status lines/bytes":
                cells.append(f"{r.get('status_lines', '-')} / {r.get('status_bytes', '-')}")
            elif name == "status --json KB":
                cells.append(fmt(r.get("status_json_bytes", 0) / 1024, "{:.1f}"))
            elif name.startswith("crash"):
                cells.append(" / ".join(fmt(r.get(k)) for k in ("crash_detect_s", "crash_stopped_s", "crash_next_gen_s")))
            elif name.startswith("triage"):
                cells.append(f"{fmt(r.get('triage_ms'), '{:.0f}')} / {r.get('triage_lines', '-')}")
            elif name.startswith("lost"):
                cells.append(" / ".join(fmt(r.get(k)) for k in ("lost_detect_s", "lost_next_gen_s")))
            elif name == "causes in lineage":
                oks = [r.get(k) for k in ("crash_cause_ok", "hang_cause_ok", "lost_cause_ok") if k in r]
                names = [r.get(k) for k in ("hang_names_rank", "triage_names_rank") if k in r]
                cells.append("all right" if all(oks) and all(names) else "WRONG")
            else:
                cells.append(fmt(r.get(key), spec))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def fit(rows, key):
    """Least-squares exponent b of key ~ a * ranks^b (log-log), over rows with a positive value."""
    pts = [(math.log(r["ranks"]), math.log(r[key])) for r in rows if r.get(key) and r[key] > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return None if sxx == 0 else sum((x - mx) * (y - my) for x, y in pts) / sxx


def svg(rows):
    """The leader's CPU %, RSS MiB and status ms against ranks, log-log, one polyline each."""
    w, h, pad = 640, 320, 50
    series = [("leader CPU %", "leader_cpu_pct", "#1f77b4"), ("leader RSS MiB", "leader_rss_mib", "#2ca02c"),
              ("runctl status ms", "status_ms", "#d62728"), ("crash -> next generation s", "crash_next_gen_s", "#9467bd")]
    xs = [r["ranks"] for r in rows]
    vals = [r[k] for r in rows for _, k, _ in series if r.get(k)]
    if not xs or not vals:
        return ""
    x0, x1 = math.log10(min(xs)), math.log10(max(xs)) + 1e-9
    y0, y1 = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    y1 = max(y1, y0 + 1)

    def px(x):
        return pad + (math.log10(x) - x0) / (x1 - x0) * (w - 2 * pad)

    def py(y):
        return h - pad - (math.log10(y) - y0) / (y1 - y0) * (h - 2 * pad)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>']
    for x in sorted(set(xs)):
        parts.append(f'<text x="{px(x):.0f}" y="{h - pad + 15}" text-anchor="middle">{x}</text>')
    for e in range(int(y0), int(y1) + 1):
        parts.append(f'<text x="{pad - 5}" y="{py(10 ** e) + 4:.0f}" text-anchor="end">{10 ** e:g}</text>')
        parts.append(f'<line x1="{pad}" y1="{py(10 ** e):.0f}" x2="{w - pad}" y2="{py(10 ** e):.0f}" stroke="#eee"/>')
    parts.append(f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">simulated ranks (log)</text>')
    for i, (name, key, color) in enumerate(series):
        pts = [(r["ranks"], r[key]) for r in rows if r.get(key)]
        by = {}
        for x, y in pts:  # one point per rank count: the largest node count's
            by[x] = y
        pts = sorted(by.items())
        if not pts:
            continue
        parts.append('<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>'.format(
            color, " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)))
        for x, y in pts:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        parts.append(f'<text x="{pad + 10}" y="{pad - 30 + 13 * i}" fill="{color}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def machine():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) // 2**20
    return f"{cpu}, {os.cpu_count()} CPUs, {mem} GiB, Linux {platform.release()}"


def report(args, rows):
    lines = [SECTION, "",
             f"`bench/scale_bench.sh --sizes {args.sizes} --measure-s {args.measure_s} --step-ms {args.step_ms} "
             f"--hang-s {args.hang_s}` on {machine()}, {datetime.date.today()}. Real holdfastd daemons (a leader on "
             "127.0.0.1, each follower on a loopback address of its own, named by host), each supervising its "
             "simulated ranks (bench/simrank.cc: the real progress record, a real barrier of the generation in "
             "shared memory, the trainer's answers to signals; no LibTorch). Every daemon and every rank runs on "
             "this one machine, so the load column is the whole harness's: the figures are upper bounds of what "
             "the daemons cost on nodes of their own.", "",
             table(rows), "",
             "Crash figures are seconds from the harness's SIGKILL to the leader's log line: `CRASH` (noticed), "
             "`restarting in` (every rank of every node stopped), `generation N started` (every node sent its start and "
             "the leader's own ranks launched; the followers launch theirs meanwhile). Hang: from the request (the rank stops at its next step) to `HANG`; the step "
             f"allowance is hang_min_s = {args.hang_s} s. Lost node: SIGKILL of the last follower's process group "
             "to `NODE LOST`, then the elastic run's next generation without it. Lineage: rows added per second "
             "in steady state (none: a healthy run records its events, not its steps) and the bytes lineage.db and "
             "its WAL grew by, per hour (the generation's newest step, updated every few seconds; the WAL is folded back at each checkpoint).", ""]
    for key, name in (("leader_cpu_pct", "leader CPU"), ("leader_rss_mib", "leader RSS"), ("status_ms", "runctl status"),
                      ("cluster_bytes_s", "cluster bytes/s"), ("crash_next_gen_s", "crash -> next generation")):
        b = fit(rows, key)
        if b is not None:
            lines.append(f"- {name} grows as ranks^{b:.2f} (least squares, log-log, over the sizes above).")
    lines += ["", "![the leader's costs against ranks](scale-leader.svg)", ""]
    return "\n".join(lines) + "\n"


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--sizes", default="1x8,8x8,64x8,8x64,64x32")
    ap.add_argument("--measure-s", type=float, default=20)
    ap.add_argument("--step-ms", type=float, default=500)
    ap.add_argument("--hang-s", type=float, default=10)
    ap.add_argument("--faults", default="crash,hang,lost")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep each size's folder (logs, lineage.db)")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    args.faults = set(args.faults.split(","))
    sizes = []
    for s in args.sizes.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)", s.strip())
        if not m:
            ap.error(f"--sizes: '{s}' is not NODESxRANKS_PER_NODE (e.g. 64x32)")
        sizes.append((int(m.group(1)), int(m.group(2))))
    for exe in ("daemon/holdfastd", "cli/runctl", "bench/holdfast-simrank"):
        if not os.access(os.path.join(args.build_dir, exe), os.X_OK):
            ap.error(f"{exe} is not built in {args.build_dir} (scripts/build.sh)")
    rows, failed = [], []
    for nodes, per in sizes:
        try:
            rows.append(measure(args, nodes, per))
        except Exception as e:  # a size that breaks is reported, the others still run
            log(f"  {nodes}x{per} FAILED: {e}")
            failed.append(f"{nodes}x{per}: {e}")
    print(table(rows))
    with open(os.path.join(tempfile.gettempdir(), "holdfast-scale-results.json"), "w") as f:
        json.dump({"rows": rows, "failed": failed}, f, indent=1)
    if not args.no_docs and rows:
        write_docs(report(args, rows) + "".join(f"\nFailed: {x}\n" for x in failed))
        with open(SVG, "w") as f:
            f.write(svg(rows))
        log(f"wrote the {SECTION!r} section of {DOCS} and {SVG}")
    wrong = [r for r in rows if not all(r.get(k, True) for k in (
        "crash_cause_ok", "hang_cause_ok", "lost_cause_ok", "hang_names_rank", "triage_names_rank"))]
    for r in wrong:
        log(f"WRONG at {r['nodes']}x{r['per_node']}: a cause in lineage, the HANG line or triage did not name the fault")
    bad = failed or wrong or [r for r in rows if r["leftovers"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
