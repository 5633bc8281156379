#!/usr/bin/python3
"""Eager PyTorch on the same GPU: the peer of holdfast-gpu-bench's step time.

  gpu_eager_bench.py --config CFG [--set k=v ...] [--steps 20] [--warmup 5] [--out result.json]

The model is tests/reference/gpt_reference.py's GPT (nanoGPT's layout), the data
its Dataset (the same samples holdfast-train draws), on cuda:0: forward under
torch.autocast(bfloat16) when train.precision = "bf16", fused scaled-dot-product
attention, torch.optim.AdamW(fused=True) with nanoGPT's decay groups, and
clip_grad_norm_ — the fastest eager PyTorch setup without torch.compile.
Prints and writes the median step time (each step ends in a synchronising
loss.item(), as holdfast-train's metrics do).
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))

import torch  # noqa: E402

import gpt_reference as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark); cpu only to check this script")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark needs a GPU")
    cfg = ref.load_config(args.config, args.set)
    m, t, o, d = cfg["model"], cfg["train"], cfg["optim"], cfg["data"]
    dev = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    cuda = dev.type == "cuda"
    torch.manual_seed(t["seed"])
    model = ref.GPT(m)
    model.init_random(m["n_layer"])
    model.to(dev).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                            **({"fused": True} if cuda else {}))
    data = ref.Dataset(d["format"], d["path"], m["block_size"], m["vocab_size"], t["seed"])
    B, A = t["micro_batch"], t["grad_accum"]
    bf16 = t.get("precision", "fp32") == "bf16"
    times, cursor = [], 0
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for micro in range(A):
            x, y = data.batch(range(cursor + micro * B, cursor + (micro + 1) * B))
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                loss = model(x, y) / A
            loss.backward()
            total += loss.detach()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        opt.step()
        total = float(total)
        cursor += B * A
        if step >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    result = {"peer": f"eager PyTorch {torch.__version__}",
              "device": torch.cuda.get_device_name(0) if cuda else "cpu",
              "step_ms_median": statistics.median(times), "loss_last": total,
              "params": sum(p.numel() for p in model.parameters())}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
