#!/usr/bin/python3
"""Checks holdfast-train's DPO step against an independent PyTorch implementation.

  check_dpo.py --holdfast-train PATH [--objective dpo|reward] [--steps 3] [--tolerance 1e-4] [--keep DIR]

--objective reward checks the reward model's step instead (train.objective =
"reward", model.reward_head): r = a Linear(C, 1) head on ln_f's output at each
text's last token (the last position whose target is scored), loss = mean
-logsigmoid(r_chosen - r_rejected) (Bradley-Terry), the same metrics.

1. Writes 200 preference pairs (examples/dpo/make_data.py --kind copy) and a tiny
   DPO config (no dropout, no holdout) into a temporary folder.
2. Runs holdfast-train --dump-init D0 --dump-final DN for --steps steps.
3. From D0 (policy and frozen reference alike: no dpo.reference, no init_from),
   re-does every step in PyTorch: the same pairs (the sampler of
   docs/data-sampling.md), pi/ref = summed log-probs of the response tokens,
   loss = mean -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), float64
   gradient norm and clipping, torch.optim.AdamW with the same schedule.
4. Compares each step's loss, rewards_chosen, rewards_rejected, reward_margin,
   reward_accuracy (metrics.jsonl) and, at the end, every parameter (DN against
   the reference's), all within --tolerance (absolute). Exits 0 when they agree.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_reference as ref  # noqa: E402

CONFIG = """
[model]
n_layer = 2
n_head = 4
n_embd = 32
block_size = 16
dropout = 0.0
[data]
format = "preference"
path = "pairs.jsonl"
[train]
objective = "dpo"
steps = {steps}
micro_batch = 4
grad_accum = 2
seed = 5
[optim]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 2
{extra}
"""
DPO_EXTRA = "[dpo]\nbeta = 0.5"
REWARD_EXTRA = ""


def load_pairs(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip(" \t\n\r\v\f"):
                o = json.loads(line)
                pairs.append(tuple(o[k].encode("utf-8") for k in ("prompt", "chosen", "rejected")))
    return pairs


def row(prompt, response, T):
    seq = list(prompt) + list(response) + [0]
    n = min(len(seq), T + 1)
    x = [seq[t] if t < n - 1 else 0 for t in range(T)]
    y = [seq[t + 1] if len(prompt) <= t + 1 < n else -1 for t in range(T)]
    return x, y


def batch(pairs, seed, indices, T):
    key = ref.split_mix64(seed)
    xs, ys = [], []
    for i in indices:
        p, c, r = pairs[ref.split_mix64(key ^ i) % len(pairs)]
        for resp in (c, r):
            x, y = row(p, resp, T)
            xs.append(x)
            ys.append(y)
    return torch.tensor(xs), torch.tensor(ys)


def logits_of(model, idx):
    T = idx.size(1)
    x = model.wte(idx) + model.wpe(torch.arange(T))
    for block in model.h:
        x = block(x)
    return model.ln_f(x) @ model.wte.weight.t()


def rewards_of(model, x, y):
    """The reward head at each row's last token (holdfast's Gpt::Rewards)."""
    T = x.size(1)
    feats = model.wte(x) + model.wpe(torch.arange(T))
    for block in model.h:
        feats = block(feats)
    feats = model.ln_f(feats)
    last = (torch.arange(T) * (y != -1)).amax(1)
    return model.reward_head(feats[torch.arange(x.size(0)), last]).squeeze(-1)


def seq_logp(model, x, y):
    logp = F.log_softmax(logits_of(model, x).float(), dim=-1)
    picked = logp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * (y != -1)).sum(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--holdfast-train", required=True)
    ap.add_argument("--objective", choices=("dpo", "reward"), default="dpo")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--keep")
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = args.keep or tempfile.mkdtemp(prefix="check_dpo.")
    os.makedirs(work, exist_ok=True)
    try:
        subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "examples", "dpo", "make_data.py"),
                        os.path.join(work, "pairs.jsonl"), "--pairs", "200", "--kind", "copy"], check=True)
        cfg_path = os.path.join(work, "dpo.toml")
        with open(cfg_path, "w") as f:
            text = CONFIG.format(steps=args.steps, extra=DPO_EXTRA if args.objective == "dpo" else REWARD_EXTRA)
            if args.objective == "reward":
                text = text.replace('objective = "dpo"', 'objective = "reward"').replace(
                    "dropout = 0.0", "dropout = 0.0\nreward_head = true")
            f.write(text)
        d0, dn = os.path.join(work, "init"), os.path.join(work, "final")
        out = subprocess.run([args.holdfast_train, "--config", cfg_path, "--dump-init", d0, "--dump-final", dn,
                              "--metrics", os.path.join(work, "cpp.jsonl")], capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stdout + out.stderr)
            return 1
        cpp = [json.loads(l) for l in open(os.path.join(work, "cpp.jsonl")) if l.strip()]
        cfg = ref.load_config(cfg_path)
        m, t, o = cfg["model"], cfg["train"], cfg["optim"]
        for key, default in (("dropout", 0.0), ("bias", True), ("vocab_size", 256)):
            m.setdefault(key, default)
        beta = 0.5
        reward = args.objective == "reward"
        policy, reference = ref.GPT(m), ref.GPT(m)
        if reward:
            policy.reward_head = torch.nn.Linear(m["n_embd"], 1)
        ref.load_init(policy, d0)
        if not reward:
            ref.load_init(reference, d0)
        policy.train()
        reference.eval()
        opt = ref.make_optimizer(policy, o)
        pairs = load_pairs(os.path.join(work, "pairs.jsonl"))
        B, A, T = t["micro_batch"], t["grad_accum"], m["block_size"]
        worst = 0.0
        for s in range(args.steps):
            opt.zero_grad(set_to_none=True)
            sums = np.zeros(5)
            for a in range(A):
                first = s * B * A + a * B
                x, y = batch(pairs, t["seed"], range(first, first + B), T)
                if reward:
                    r = rewards_of(policy, x, y).view(B, 2)
                    rc, rr = r[:, 0], r[:, 1]
                else:
                    pi = seq_logp(policy, x, y).view(B, 2)
                    with torch.no_grad():
                        rf = seq_logp(reference, x, y).view(B, 2)
                    ratio = pi - rf
                    rc, rr = beta * ratio[:, 0], beta * ratio[:, 1]
                loss = (-F.logsigmoid(rc - rr)).mean()
                (loss / A).backward()
                rc, rr = rc.detach().double(), rr.detach().double()
                sums += np.array([loss.item(), rc.mean().item(), rr.mean().item(), (rc - rr).mean().item(),
                                  (rc > rr).double().mean().item()])
            norm = ref.grad_norm64(policy.parameters())
            ref.clip_gradients(list(policy.parameters()), norm, o["grad_clip"])
            for g in opt.param_groups:
                g["lr"] = ref.lr_at(s, o, t["steps"])
            opt.step()
            want = dict(zip(["loss", "rewards_chosen", "rewards_rejected", "reward_margin", "reward_accuracy"],
                            sums / A))
            got = cpp[s]
            for k, v in want.items():
                d = abs(got[k] - v)
                worst = max(worst, d)
                print(f"step {s + 1} {k:17s} holdfast {got[k]: .8f}  pytorch {v: .8f}  diff {d:.2e}")
                if d > args.tolerance:
                    print(f"FAIL: step {s + 1} {k} differs by {d:.3e} > {args.tolerance}")
                    return 1
        final = ref.GPT(m)
        if reward:
            final.reward_head = torch.nn.Linear(m["n_embd"], 1)
        ref.load_init(final, dn)
        pdiff = max((a - b).abs().max().item()
                    for (_, a), (_, b) in zip(sorted(final.named_parameters()), sorted(policy.named_parameters())))
        print(f"parameters after {args.steps} steps: max abs diff {pdiff:.2e}")
        if pdiff > args.tolerance:
            print(f"FAIL: parameters differ by {pdiff:.3e} > {args.tolerance}")
            return 1
        print(f"OK: {'reward model' if reward else 'DPO'} loss, rewards and parameters agree within {args.tolerance} (largest metric diff {worst:.2e})")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
