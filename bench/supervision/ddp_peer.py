#!/usr/bin/python3
"""The torchrun peer of holdfast-train for bench/supervision_bench.py.

Run under `python3 -m torch.distributed.run --nproc_per_node N ... ddp_peer.py`:
the same GPT, sampler and AdamW as tests/reference/gpt_reference.py (which it
imports), DDP over gloo, and the same fault tolerance a holdfast-train job has:
every `--every` steps rank 0 saves model + optimizer + step with torch.save
(to a temporary file, fsync, rename: a crash never leaves a half checkpoint),
and a (re)started worker group resumes from the newest one.

  ddp_peer.py --config TRAIN.toml --ckpt-dir D --metrics OUT.jsonl [--every K] [--steps N]

Metrics: JSON lines {"step", "loss", "step_ms", "time", "restart"} written by
rank 0 (appended across restarts); "time" is unix seconds at the end of the
step, "restart" is torchelastic's TORCHELASTIC_RESTART_COUNT.
"""

import argparse
import glob
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

import gpt_reference as ref  # noqa: E402


def newest_checkpoint(ckpt_dir):
    paths = glob.glob(os.path.join(ckpt_dir, "step-*.pt"))
    return max(paths, key=lambda p: int(os.path.basename(p)[5:-3])) if paths else None


def save(ckpt_dir, step, model, opt):
    tmp = os.path.join(ckpt_dir, f".tmp-{step}.pt")
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(ckpt_dir, f"step-{step:08d}.pt"))
    for old in sorted(glob.glob(os.path.join(ckpt_dir, "step-*.pt")))[:-2]:
        os.unlink(old)  # keep the last two, as checkpoint.keep_last would


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--steps", type=int, default=10**9)
    args = ap.parse_args()

    cfg = ref.load_config(args.config)
    m, t, o = cfg["model"], cfg["train"], cfg["optim"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(t["seed"])
    torch.set_num_threads(t["threads"])
    data = ref.Dataset(cfg["data"]["format"], cfg["data"]["path"], m["block_size"],
                       m["vocab_size"], t["seed"])
    model = ref.GPT(m)
    model.init_random(m["n_layer"])
    opt = ref.make_optimizer(model, o)
    start = 0
    path = newest_checkpoint(args.ckpt_dir)
    if path:
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    model.train()
    net = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    params = list(model.parameters())
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    out = open(args.metrics, "a") if rank == 0 else None
    os.makedirs(args.ckpt_dir, exist_ok=True)
    mb, G = t["micro_batch"], t["micro_batch"] * world
    for step in range(start, args.steps):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = ref.lr_at(step, o, args.steps)
        opt.zero_grad(set_to_none=True)
        first = step * G + rank * mb
        x, y = data.batch(range(first, first + mb))
        loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, o["grad_clip"])
        opt.step()
        dt = time.perf_counter() - t0
        if out:
            out.write(json.dumps({"step": step + 1, "loss": loss.item(), "step_ms": dt * 1e3,
                                  "time": time.time(), "restart": restart}) + "\n")
            out.flush()
        if rank == 0 and (step + 1) % args.every == 0:
            save(args.ckpt_dir, step + 1, model, opt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
