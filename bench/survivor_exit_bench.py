#!/usr/bin/python3
"""How long a surviving rank takes to exit after its peer is SIGKILLed.

One holdfastd run (bench/supervision_bench.py's job: 2 ranks, a tiny GPT, a checkpoint every
50 steps, term_grace_s 3). Each round SIGKILLs rank 1 and times rank 0 until it is gone; the
daemon restarts the run from its newest checkpoint and the next round waits for training.
A survivor that outlives --stall-s is a stall: it sits until the daemon's grace SIGKILL, so
each one costs a restart term_grace_s. Kills go either at a random phase of the checkpoint
period (--aim random) or just after a checkpoint step (--aim checkpoint), where a peer can die
between saving a step and publishing its shard — the case that used to stall.

  bench/survivor_exit_bench.py --build-dir build [--kills 40] [--aim random|checkpoint|both]
                               [--capture]   # on a stall: kernel stacks (+ gdb if installed)

Prints one line per kill and a JSON summary per aim: kills, stalls, median and max seconds.
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import supervision_bench as sb  # noqa: E402


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        return st[st.rindex(")") + 2] != "Z"
    except OSError:
        return False


def capture(pid, path):
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stack") as f:
                stack = f.read()
        except OSError as e:
            comm, stack = "?", str(e)
        out.append(f"--- tid {tid} ({comm})\n{stack}")
    if shutil.which("gdb"):
        gdb = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                             capture_output=True, text=True, timeout=60)
        out.append("=== gdb\n" + gdb.stdout)
    with open(path, "w") as f:
        f.write("\n".join(out))


def run(a, aim, work):
    args = argparse.Namespace(train_bin=os.path.join(a.build_dir, "trainer/holdfast-train"),
                              daemon_bin=os.path.join(a.build_dir, "daemon/holdfastd"))
    args.train_config = sb.write_train_config(work)
    d = sb.Daemon(args, work, "run-" + aim, 2,
                  supervise={"restart_budget": a.kills + 5, "term_grace_s": a.grace})
    stalls, exits = 0, []
    try:
        _, _, rec = d.wait_step(1)
        for k in range(a.kills):
            # Past the generation's first checkpoint (every 50 steps): at a random phase of the
            # period, or on the step right after a checkpoint step.
            ahead = 49 if aim == "checkpoint" else 50 + random.randint(0, 49)
            d.wait_step(sb.step_of(rec) + ahead, len(d.metrics.lines) - 1)
            time.sleep(random.uniform(0, 0.015 if aim == "checkpoint" else 0.03))
            r0, r1 = d.rank_pid(0), d.rank_pid(1)
            mark = len(d.out)
            t_kill = time.time()
            os.kill(r1, signal.SIGKILL)
            stalled = False
            while alive(r0):
                if not stalled and time.time() - t_kill > a.stall_s:
                    stalled = True
                    stalls += 1
                    if a.capture:
                        capture(r0, os.path.join(work, f"stall-{aim}-{k}-pid{r0}.txt"))
                time.sleep(0.005)
            dt = time.time() - t_kill
            exits.append(dt)
            d.wait_log(r"generation \d+ started", mark)
            _, _, rec = d.metrics.wait(lambda m: True, d._first_metric_after(time.time()))
            print(f"{aim} kill {k}: rank 0 gone {dt:.3f} s after the SIGKILL of rank 1"
                  f"{'  STALL' if stalled else ''}", flush=True)
    finally:
        d.stop()
    return {"aim": aim, "kills": len(exits), "stalls": stalls,
            "median_s": round(statistics.median(exits), 3), "max_s": round(max(exits), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--aim", choices=["random", "checkpoint", "both"], default="both")
    ap.add_argument("--stall-s", type=float, default=1.0)
    ap.add_argument("--grace", type=float, default=3.0, help="the daemon's term_grace_s")
    ap.add_argument("--capture", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    random.seed(a.seed)
    work = tempfile.mkdtemp(prefix="hf-survivor-")
    print(f"work folder {work}; load average {os.getloadavg()[0]:.2f}", flush=True)
    for aim in (["checkpoint", "random"] if a.aim == "both" else [a.aim]):
        print(json.dumps(run(a, aim, work)), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
