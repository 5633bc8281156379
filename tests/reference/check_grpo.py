#!/usr/bin/python3
"""Checks holdfast-train's GRPO learner against an independent PyTorch implementation.

  check_grpo.py --build DIR [--steps 3] [--tolerance 1e-4] [--keep DIR]

1. Teaches a tiny GPT the add2 task by SFT for a few steps (holdfast-reward --emit sft,
   holdfast-train), so that completions' rewards differ within groups.
2. Runs a GRPO run of --steps steps as real processes: the reward service, one rollout
   worker and the learner with rl.ledger on (the learner writes the groups each step
   trained on), --dump-init D0 (the SFT weights: policy and reference) and --dump-final DN.
3. From D0, re-does every step in PyTorch from the ledger's groups: advantages
   (r - mean) / (std + 1e-4) with torch.std (unbiased), per token
   -min(ratio A, clamp(ratio, 1 - eps, 1 + eps) A) + beta (exp(ref - logp) - (ref - logp) - 1),
   ratio = exp(logp - behaviour), averaged per completion then over completions;
   float64 gradient norm and clipping, torch.optim.AdamW with the same schedule.
4. Compares each step's loss, reward and kl (metrics.jsonl) and, at the end, every
   parameter, all within --tolerance (absolute). Exits 0 when they agree.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_reference as ref  # noqa: E402

MODEL = """
[model]
n_layer = 2
n_head = 4
n_embd = 32
block_size = 16
vocab_size = 256
dropout = 0.0
"""

SFT = MODEL + """
[data]
format = "sft"
path = "sft.jsonl"
[train]
steps = 400
micro_batch = 32
seed = 3
[optim]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 10
weight_decay = 0.0
[output]
dir = "sft"
"""

GRPO = MODEL + """
[train]
objective = "grpo"
init_from = "sft/final"
steps = {steps}
micro_batch = 16
grad_accum = 4
seed = 9
[optim]
lr = 1e-3
min_lr = 1e-4
warmup_steps = 1
beta2 = 0.999
eps = 1e-6
weight_decay = 0.0
grad_clip = 0.5
[rl]
prompts_per_step = 4
group_size = 16
max_new_tokens = 5
temperature = 1.0
clip_eps = 0.2
kl_beta = 0.1
ledger = true
wait_timeout_s = 120
[output]
dir = "grpo"
"""


def logits_of(model, idx):
    T = idx.size(1)
    x = model.wte(idx) + model.wpe(torch.arange(T))
    for block in model.h:
        x = block(x)
    return model.ln_f(x) @ model.wte.weight.t()


def token_logp(model, idx):
    lp = F.log_softmax(logits_of(model, idx).float(), dim=-1)[:, :-1]
    return lp.gather(-1, idx[:, 1:].unsqueeze(-1)).squeeze(-1)


def step_tensors(groups):
    """The step's completions in the learner's order: idx, behaviour, mask, advantage, reward."""
    seqs = []
    for g in groups:
        r = torch.tensor([s["reward"] for s in g["samples"]], dtype=torch.float64)
        adv = (r - r.mean()) / (r.std() + 1e-4)
        for s, a in zip(g["samples"], adv.tolist()):
            seqs.append((g["prompt"], s["tokens"], s["logprobs"], a, s["reward"]))
    return seqs


def micro(seqs):
    L = max(len(p) + len(t) for p, t, _, _, _ in seqs)
    B = len(seqs)
    idx = torch.zeros(B, L, dtype=torch.long)
    beh = torch.zeros(B, L - 1)
    mask = torch.zeros(B, L - 1)
    adv = torch.zeros(B)
    for i, (p, t, lp, a, _) in enumerate(seqs):
        idx[i, :len(p) + len(t)] = torch.tensor(p + t)
        beh[i, len(p) - 1:len(p) - 1 + len(t)] = torch.tensor(lp)
        mask[i, len(p) - 1:len(p) - 1 + len(t)] = 1
        adv[i] = a
    return idx, beh, mask, adv


def grpo_loss(policy, reference, idx, beh, mask, adv, eps, beta):
    logp = token_logp(policy, idx)
    with torch.no_grad():
        rlp = token_logp(reference, idx)
    ratio = torch.exp(logp - beh)
    a = adv.unsqueeze(1)
    pg = -torch.min(ratio * a, torch.clamp(ratio, 1 - eps, 1 + eps) * a)
    d = rlp - logp
    kl = torch.exp(d) - d - 1
    n = mask.sum(1).clamp(min=1)
    loss = (((pg + beta * kl) * mask).sum(1) / n).mean()
    return loss, ((kl.detach() * mask).sum(1) / n).mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--keep")
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.build = os.path.abspath(args.build)
    train = os.path.join(args.build, "trainer", "holdfast-train")
    rollout = os.path.join(args.build, "trainer", "holdfast-rollout")
    reward = os.path.join(args.build, "trainer", "rl", "holdfast-reward")
    work = args.keep or tempfile.mkdtemp(prefix="check_grpo.")
    os.makedirs(work, exist_ok=True)
    procs = []
    try:
        subprocess.run([reward, "--task", "add2", "--emit", "sft", "--count", "2000", "--out",
                        os.path.join(work, "sft.jsonl")], check=True, capture_output=True, cwd=work)
        with open(os.path.join(work, "sft.toml"), "w") as f:
            f.write(SFT)
        subprocess.run([train, "--config", os.path.join(work, "sft.toml"), "--dump-final",
                        os.path.join(work, "sft", "final")], check=True, capture_output=True, cwd=work)
        cfg_path = os.path.join(work, "grpo.toml")
        with open(cfg_path, "w") as f:
            f.write(GRPO.format(steps=args.steps))
        rl = os.path.join(work, "grpo", "rl")
        os.makedirs(rl, exist_ok=True)
        procs.append(subprocess.Popen([reward, "--task", "add2", "--addr-file", os.path.join(rl, "reward.addr")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work))
        procs.append(subprocess.Popen([rollout, "--config", cfg_path], stdout=open(os.path.join(work, "w0.log"), "w"),
                                      stderr=subprocess.STDOUT, cwd=work))
        d0, dn = os.path.join(work, "init"), os.path.join(work, "final")
        out = subprocess.run([train, "--config", cfg_path, "--dump-init", d0, "--dump-final", dn, "--metrics",
                              os.path.join(work, "cpp.jsonl")], capture_output=True, text=True, cwd=work)
        if out.returncode != 0:
            print(out.stdout + out.stderr)
            return 1
        cpp = [r for r in (json.loads(l) for l in open(os.path.join(work, "cpp.jsonl")) if l.strip()) if "kl" in r]

        m = {"n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16, "vocab_size": 256, "dropout": 0.0,
             "bias": True}
        o = {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 1, "decay_steps": 0, "weight_decay": 0.0, "beta1": 0.9,
             "beta2": 0.999, "eps": 1e-6, "grad_clip": 0.5}
        eps, beta, B, A = 0.2, 0.1, 16, 4
        policy, reference = ref.GPT(m), ref.GPT(m)
        ref.load_init(policy, d0)
        ref.load_init(reference, d0)
        reference.eval()
        opt = ref.make_optimizer(policy, o)
        worst = 0.0
        mixed = 0
        for s in range(args.steps):
            with open(os.path.join(rl, "trained", f"s{s:08d}.jsonl")) as f:
                groups = [json.loads(l) for l in f if l.strip()]
            assert [g["version"] for g in groups] == [s] * len(groups), "synchronous: every group of its own step"
            mixed += sum(len({x["reward"] for x in g["samples"]}) > 1 for g in groups)
            seqs = step_tensors(groups)
            opt.zero_grad(set_to_none=True)
            loss_sum, kl_sum = 0.0, 0.0
            for a in range(A):
                part = seqs[a * B:(a + 1) * B]
                loss, kl = grpo_loss(policy, reference, *micro(part), eps, beta)
                (loss / A).backward()
                loss_sum += loss.item() / A
                kl_sum += kl / A
            norm = ref.grad_norm64(policy.parameters())
            ref.clip_gradients(list(policy.parameters()), norm, o["grad_clip"])
            for g in opt.param_groups:
                g["lr"] = ref.lr_at(s, o, args.steps)
            opt.step()
            want = {"loss": loss_sum, "kl": kl_sum, "reward": sum(x[4] for x in seqs) / len(seqs)}
            for k, v in want.items():
                d = abs(cpp[s][k] - v)
                worst = max(worst, d)
                print(f"step {s + 1} {k:7s} holdfast {cpp[s][k]: .8f}  pytorch {v: .8f}  diff {d:.2e}")
                if d > args.tolerance:
                    print(f"FAIL: step {s + 1} {k} differs by {d:.3e} > {args.tolerance}")
                    return 1
        if mixed == 0:
            print("FAIL: no group had differing rewards: the check would not exercise the policy gradient")
            return 1
        final = ref.GPT(m)
        ref.load_init(final, dn)
        pdiff = max((a - b).abs().max().item()
                    for (_, a), (_, b) in zip(sorted(final.named_parameters()), sorted(policy.named_parameters())))
        print(f"parameters after {args.steps} steps: max abs diff {pdiff:.2e} ({mixed} groups with mixed rewards)")
        if pdiff > args.tolerance:
            print(f"FAIL: parameters differ by {pdiff:.3e} > {args.tolerance}")
            return 1
        print(f"OK: GRPO loss, reward, KL and parameters agree within {args.tolerance} (largest metric diff {worst:.2e})")
        return 0
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
