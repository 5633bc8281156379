#!/usr/bin/env python3
"""A PyTorch DDP training job that holdfastd supervises with hang triage.

    holdfastd --run-dir runs/ddp --config examples/pytorch_ddp/job.toml

Plain PyTorch (Debian's python3-torch works): a small character-level language
model (embedding, two MLP layers over a context window), DistributedDataParallel
over Gloo, torch.optim.AdamW, checkpoints with torch.save. holdfastd launches it
with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
LOCAL_RANK), so the same script runs under torchrun unchanged.

What makes it restartable, bit for bit:
  - the batch of step s on rank r is a pure function of (seed, s, r): a restart
    needs no data-loader state, only the step;
  - every --checkpoint-every steps rank 0 writes model, optimizer and step with
    torch.save to a temporary file, fsyncs it and renames it into place; all
    ranks resume from the newest one at start;
  - no dropout, deterministic CPU kernels: a resumed run's losses are those of
    an uninterrupted one.

Progress for holdfastd (`import holdfast`, common/python; a no-op when not
supervised): the step, the phase, and every collective — DDP's bucket
all-reduces through holdfast.ddp_comm_hook, the loss all-reduce through
holdfast.instrument_torch_distributed — so a rank stuck outside a collective
its peers wait in is named, with the collective. --no-progress runs without
the module: holdfastd still restarts crashes, and says progress is unknown.

The signal contract (docs/job-contract.md) through the module, no signal code
here: holdfast.install_signal_handlers(); every step every rank asks
holdfast.should_checkpoint() (`runctl checkpoint`) and holdfast.should_stop()
(`runctl stop`, a preemption or time-limit warning), agreed across ranks, so
all ranks save at the same step; rank 0 reports each commit with its path
(holdfast.checkpoint_committed(step, path): lineage records it and its size);
after a stop's checkpoint the job exits 75 (holdfast.EXIT_STOPPED). It resumes
from holdfast.resume_step() when the supervisor names one (`runctl resume
--from-step N`), else from its newest checkpoint. Extra checkpoints change
nothing in the training: the final parameters stay bit-identical.

Writes one JSON line per step to OUT/metrics-rank<r>.jsonl and the final loss
to OUT/final.json (rank 0).
"""

import argparse
import json
import os
import sys
import time

# The progress module first (standard library only, quick): its handlers are in
# place before the slow torch import, so a `runctl checkpoint` that arrives
# while the job starts is counted instead of killing it (SIGUSR2's default).
holdfast = None
if "--no-progress" not in sys.argv[1:]:
    import holdfast  # common/python; holdfastd's job.toml puts it on PYTHONPATH
    holdfast.install_signal_handlers()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a text file (bytes are tokens)")
    ap.add_argument("--out", required=True, help="checkpoints, metrics and final.json go here")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    ap.add_argument("--context", type=int, default=16)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--step-sleep", type=float, default=0.0,
                    help="seconds of extra 'compute' per step (tests use it to slow the run down)")
    ap.add_argument("--no-progress", action="store_true", help="do not import holdfast (no progress record)")
    return ap.parse_args()


class CharModel(nn.Module):
    def __init__(self, context, width):
        super().__init__()
        self.embed = nn.Embedding(256, 32)
        self.fc1 = nn.Linear(context * 32, width)
        self.fc2 = nn.Linear(width, width)
        self.head = nn.Linear(width, 256)

    def forward(self, x):
        h = self.embed(x).flatten(1)
        h = F.gelu(self.fc1(h))
        h = F.gelu(self.fc2(h))
        return self.head(h)


def batch_for(tokens, step, rank, args):
    """Samples of (step, rank): the same bytes whatever happened before."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
    starts = torch.randint(0, len(tokens) - args.context - 1, (args.batch,), generator=g)
    idx = starts.unsqueeze(1) + torch.arange(args.context + 1).unsqueeze(0)
    window = tokens[idx]
    return window[:, :-1], window[:, -1]


def checkpoint_path(out, step):
    return os.path.join(out, f"ckpt-{step:08d}.pt")


def newest_checkpoint(out):
    best = None
    for name in os.listdir(out):
        if name.startswith("ckpt-") and name.endswith(".pt"):
            step = int(name[5:-3])
            best = max(best or 0, step)
    return best


def save_checkpoint(out, step, model, opt):
    path = checkpoint_path(out, step)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if holdfast is not None:
        holdfast.instrument_torch_distributed()
    os.makedirs(args.out, exist_ok=True)

    with open(args.data, "rb") as f:
        tokens = torch.tensor(list(f.read()), dtype=torch.long)
    model = CharModel(args.context, args.width)
    ddp = DDP(model)
    if holdfast is not None:
        ddp.register_comm_hook(None, holdfast.ddp_comm_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    start = 0
    resume = holdfast.resume_step() if holdfast is not None else None  # runctl resume --from-step N
    if resume is not None and not os.path.exists(checkpoint_path(args.out, resume)):
        print(f"rank {rank}: asked to resume from step {resume}, but {checkpoint_path(args.out, resume)} "
              "does not exist", file=sys.stderr, flush=True)
        return 1
    if resume is None:
        resume = newest_checkpoint(args.out)
    if resume is not None:
        state = torch.load(checkpoint_path(args.out, resume))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"]
        print(f"rank {rank}: resumed from the checkpoint of step {start}", flush=True)
    if holdfast is not None and resume is not None:
        holdfast.checkpoint_committed(start, checkpoint_path(args.out, start) if rank == 0 else None)
    if holdfast is not None:
        holdfast.resumed(start if resume is not None else None)  # lineage: where each generation started

    metrics = open(os.path.join(args.out, f"metrics-rank{rank}.jsonl"), "a")
    loss_value = float("nan")
    for step in range(start, args.steps):
        t0 = time.monotonic()
        x, y = batch_for(tokens, step, rank, args)
        if holdfast is not None:
            holdfast.set_phase("forward")
        loss = F.cross_entropy(ddp(x), y)
        if holdfast is not None:
            holdfast.set_phase("backward")
        opt.zero_grad(set_to_none=False)
        loss.backward()  # DDP all-reduces the gradient buckets here
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        if holdfast is not None:
            holdfast.set_phase("optimizer")
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the step's mean loss over ranks
        loss_value = mean.item() / world
        done = step + 1
        # Asked on every rank every step; one small all_reduce answers both, the same on every rank.
        asked = holdfast is not None and holdfast.should_checkpoint()
        stop = holdfast is not None and holdfast.should_stop() and done < args.steps
        if done % args.checkpoint_every == 0 or done == args.steps or asked or stop:
            if holdfast is not None:
                holdfast.set_phase("checkpoint")
            path = save_checkpoint(args.out, done, model, opt) if rank == 0 else None
            dist.barrier()  # every rank resumes from the same checkpoint
            if holdfast is not None:
                holdfast.checkpoint_committed(done, path)
        if holdfast is not None:
            holdfast.step(done)
        metrics.write(json.dumps({"step": done, "loss": loss_value, "step_ms": (time.monotonic() - t0) * 1e3}) + "\n")
        metrics.flush()
        if stop:
            print(f"rank {rank}: stopped after committing step {done} ({holdfast.stop_signal() or 'a peer'})",
                  flush=True)
            dist.destroy_process_group()
            return holdfast.EXIT_STOPPED
    final = os.path.join(args.out, "final.json")
    # A generation restarted after the last step (a rank that was slow to exit,
    # say) trains nothing: it keeps the final.json of the one that did.
    if rank == 0 and (start < args.steps or not os.path.exists(final)):
        with open(final, "w") as f:
            json.dump({"step": args.steps, "loss": loss_value,
                       "params_sum": float(sum(p.double().sum() for p in model.parameters()))}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
