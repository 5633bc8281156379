#!/usr/bin/python3
"""PyTorch reference for holdfast-train: the same GPT, sampler, schedule and AdamW.

It exists so that CI can check the C++ trainer op for op (check_parity.py) and so
that bench/trainer_bench.py has an honest PyTorch peer to time it against. It must
stay a plain transcription of the trainer's contract, not an optimised program:
nanoGPT layout, float32 master weights, torch.optim.AdamW, float64 clipping norm.

Run it with Debian's interpreter (/usr/bin/python3, python3-torch); it needs
only the standard library, torch and numpy.

  gpt_reference.py --config F (--init DIR | --random-init) [--steps N]
                   [--device cpu|cuda|auto] [--metrics OUT.jsonl]
                   [--set section.key=value ...] [--ddp N]

--init DIR reads DIR/params.json + DIR/params.bin, written by
`holdfast-train --dump-init DIR`. --ddp N trains with N processes
(torch.distributed on 127.0.0.1 + DistributedDataParallel: gloo on the CPU,
NCCL on GPUs, rank r on cuda:r), each rank with train.micro_batch samples and
train.threads threads, as `holdfast-train --nproc N`. Metrics are JSON lines
{"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms"}, written by rank
0; step_ms covers sampling the batch, forward, backward, gradient all-reduce,
clipping and the optimizer step.

Device and precision (train.device, train.precision; --device overrides the
former):
- train.device: "cpu" (the reference's default, so that benchmarks and parity
  runs stay on the CPU unless asked; holdfast-train's default is "auto"),
  "cuda", or "auto" = cuda when torch.cuda.is_available(), else cpu. On CUDA
  with torch >= 2 attention is F.scaled_dot_product_attention(is_causal=True),
  as holdfast-train's CUDA path; elsewhere the explicit masked softmax.
- train.precision: "fp32", or "bf16" = the forward pass and the loss under
  torch.autocast(device_type, dtype=torch.bfloat16): every nn.Linear, the
  attention score and value matmuls and the tied lm_head matmul run in
  bfloat16; parameters, gradients, the AdamW moments and the residual stream
  stay float32 (the clipping norm float64, below). The attention softmax and
  the cross-entropy (its log_softmax) take float32 inputs, which is what CUDA
  autocast does to them anyway (its float32 list); they are pinned here because
  torch 1.13's CPU autocast would run both in bfloat16, and the CPU run is the
  one CI can check. GELU runs in bfloat16 (autocast on both devices), LayerNorm
  on the float32 residual stream, so in float32.

Gradient norm and clipping, by design not clip_grad_norm_: the logged
grad_norm is the float64 norm of all gradients,
    norm = sqrt(sum over tensors of (g.double() ** 2).sum()),
and when optim.grad_clip > 0 every gradient is multiplied by
    float32(min(1, grad_clip / (norm + 1e-6)))
(clip_grad_norm_'s coefficient, computed from the float64 norm). holdfast-train
does the same: sum of squares accumulated in float64 over its float32
gradients, the same coefficient, applied as a float32 factor. Both float32
alternatives are measurably off: at step 1 of a 3-layer, 192-wide model the
float32 norm of the whole flat buffer is 7.29310417, the float64 norm
7.29335600, and clip_grad_norm_ (float32 per-tensor norms) 7.29335260; at
step 1 of parity.toml 3.22069788, 3.22070558 and 3.22070527. The clipping
factor feeds every later step, so the choice shows in the trajectory too.
"""

import argparse
import contextlib
import json
import math
import os
import socket
import sys
import time
import tomllib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- config ----

DEFAULTS = {
    "model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128,
              "vocab_size": 256, "dropout": 0.0, "bias": True},
    "data": {"format": "text", "path": ""},
    "train": {"steps": 100, "micro_batch": 8, "grad_accum": 1, "seed": 1337,
              "threads": 1, "device": "cpu", "precision": "fp32"},
    "optim": {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 10, "decay_steps": 0,
              "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
              "grad_clip": 1.0},
}
CHOICES = {("train", "device"): ("auto", "cpu", "cuda"), ("train", "precision"): ("fp32", "bf16")}


def _parse_value(text):
    """A --set value is a TOML value when it parses as one, else a bare string."""
    try:
        return tomllib.loads("v = " + text)["v"]
    except tomllib.TOMLDecodeError:
        return text


def load_config(path, overrides=()):
    """Reads the TOML file, applies section.key=value overrides and the defaults.

    A relative data.path is taken relative to the config file's folder.
    """
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    for item in overrides:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise SystemExit(f"--set {item!r}: expected section.key=value, e.g. train.steps=50")
        raw.setdefault(section, {})[name] = _parse_value(value.strip())
    cfg = {}
    for section, defaults in DEFAULTS.items():
        given = dict(raw.get(section, {}))
        cfg[section] = {k: given.pop(k, v) for k, v in defaults.items()}
        cfg[section].update(given)  # keys the reference does not use are kept, not fatal
    data_path = cfg["data"]["path"]
    if not data_path:
        raise SystemExit(f"{path}: [data] path is missing")
    if not os.path.isabs(data_path):
        cfg["data"]["path"] = os.path.join(os.path.dirname(os.path.abspath(path)), data_path)
    for section, key in (("optim", "lr"), ("optim", "min_lr"), ("optim", "weight_decay"),
                         ("optim", "beta1"), ("optim", "beta2"), ("optim", "eps"),
                         ("optim", "grad_clip"), ("model", "dropout")):
        cfg[section][key] = float(cfg[section][key])
    for (section, key), allowed in CHOICES.items():
        if cfg[section][key] not in allowed:
            raise SystemExit(f"{path}: {section}.{key} = {cfg[section][key]!r}: expected "
                             + " or ".join(f'"{a}"' for a in allowed))
    return cfg


def resolve_device(name, rank=0):
    """train.device to a torch.device; "auto" picks CUDA when there is a GPU.

    Rank r of a multi-GPU run takes cuda:r (modulo the GPUs visible), as
    holdfast-train's local ranks do.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("train.device = \"cuda\" but torch.cuda.is_available() is False "
                         f"(torch {torch.__version__}); use --device cpu")
    return torch.device("cuda", rank % torch.cuda.device_count())


# --------------------------------------------------------------- sampler ----

_MASK64 = (1 << 64) - 1


def split_mix64(x):
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class Dataset:
    """Global sample i is a pure function of (seed, i), whatever the world size."""

    def __init__(self, fmt, path, block_size, vocab_size, seed):
        self.fmt = fmt
        self.block_size = block_size
        self.key = split_mix64(seed & _MASK64)
        if fmt == "text":
            self.tokens = np.fromfile(path, dtype=np.uint8).astype(np.int64)
        elif fmt == "bin":
            self.tokens = np.fromfile(path, dtype="<u2").astype(np.int64)
        elif fmt == "sft":
            self.examples = []
            with open(path, "r", encoding="utf-8") as f:
                for line in f:
                    if line.strip(" \t\n\r\v\f"):  # ASCII whitespace only, as the C++
                        obj = json.loads(line)
                        self.examples.append((obj["prompt"].encode("utf-8"),
                                              obj["response"].encode("utf-8")))
            if not self.examples:
                raise SystemExit(f"{path}: no SFT examples")
            return
        else:
            raise SystemExit(f"data.format {fmt!r}: expected text, bin or sft")
        if len(self.tokens) <= block_size:
            raise SystemExit(f"{path}: {len(self.tokens)} tokens, need more than block_size {block_size}")
        if int(self.tokens.max()) >= vocab_size:
            raise SystemExit(f"{path}: token {int(self.tokens.max())} >= vocab_size {vocab_size}")

    def hash(self, i):
        return split_mix64(self.key ^ (i & _MASK64))

    def sample(self, i):
        T = self.block_size
        if self.fmt == "sft":
            prompt, response = self.examples[self.hash(i) % len(self.examples)]
            seq = list(prompt) + list(response) + [0]
            n = min(len(seq), T + 1)
            x = [seq[t] if t < n - 1 else 0 for t in range(T)]
            y = [seq[t + 1] if (t + 1 >= len(prompt) and t + 1 < n) else -1 for t in range(T)]
            return np.array(x, dtype=np.int64), np.array(y, dtype=np.int64)
        start = self.hash(i) % (len(self.tokens) - T)
        return self.tokens[start:start + T], self.tokens[start + 1:start + T + 1]

    def batch(self, indices):
        xs, ys = zip(*(self.sample(i) for i in indices))
        return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


# ----------------------------------------------------------------- model ----

_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0


class CausalSelfAttention(nn.Module):
    def __init__(self, C, n_head, T, bias, dropout):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)
        self.c_proj = nn.Linear(C, C, bias=bias)
        self.n_head = n_head
        self.n_embd = C
        self.dropout = dropout
        self.register_buffer("causal_mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if x.is_cuda and _HAS_SDPA:
            # holdfast-train's CUDA path (torch >= 2): the fused kernel, scale 1/sqrt(hs).
            p = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return F.dropout(self.c_proj(y), self.dropout, self.training)
        # Without a fused kernel (torch 1.x, or the CPU), holdfast-train computes
        # attention in float32 under bf16 too (trainer/model.h ComputeOptions).
        with torch.autocast(device_type=x.device.type, enabled=False):
            q, k, v = q.float(), k.float(), v.float()
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self.causal_mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = F.dropout(att, self.dropout, self.training)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.c_proj(y), self.dropout, self.training)


class MLP(nn.Module):
    def __init__(self, C, bias, dropout):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=bias)
        self.c_proj = nn.Linear(4 * C, C, bias=bias)
        self.dropout = dropout

    def forward(self, x):
        return F.dropout(self.c_proj(F.gelu(self.c_fc(x))), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, C, n_head, T, bias, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5, elementwise_affine=True)
        self.attn = CausalSelfAttention(C, n_head, T, bias, dropout)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5, elementwise_affine=True)
        self.mlp = MLP(C, bias, dropout)
        if not bias:
            # nanoGPT's LayerNorm(ndim, bias=False): "ln_1.weight" and no "ln_1.bias"
            # parameter at all (torch 1.13's nn.LayerNorm has no bias= flag).
            self.ln_1.bias = None
            self.ln_2.bias = None

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        C, T = m["n_embd"], m["block_size"]
        if C % m["n_head"]:
            raise SystemExit(f"n_embd {C} is not a multiple of n_head {m['n_head']}")
        self.block_size = T
        self.dropout = m["dropout"]
        self.wte = nn.Embedding(m["vocab_size"], C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, m["n_head"], T, m["bias"], m["dropout"])
                               for _ in range(m["n_layer"]))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        if not m["bias"]:
            self.ln_f.bias = None

    def init_random(self, n_layer):
        """nanoGPT's init; used only where no --init DIR is given (benchmarks)."""
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif "ln_" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("weight"):
                nn.init.normal_(p, 0.0, 0.02)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        x = F.dropout(x, self.dropout, self.training)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()  # tied lm_head, no bias
        # float32 under bf16 too: the log_softmax inside (module docstring).
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-1)


def load_init(model, init_dir):
    """Copies DIR/params.{json,bin} (holdfast-params-v1) into the model, by name."""
    with open(os.path.join(init_dir, "params.json")) as f:
        meta = json.load(f)
    if meta.get("format") != "holdfast-params-v1" or meta.get("dtype") != "float32":
        raise SystemExit(f"{init_dir}/params.json: format {meta.get('format')!r} dtype "
                         f"{meta.get('dtype')!r}, expected holdfast-params-v1 float32")
    blob = np.fromfile(os.path.join(init_dir, "params.bin"), dtype="<f4")
    params = dict(model.named_parameters())
    seen = set()
    for t in meta["tensors"]:
        name = t["name"]
        if name not in params and ".ln_" in "." + name and name.endswith(".bias"):
            raise SystemExit(f"{init_dir}: holdfast-train dumped the LayerNorm bias {name!r}, but "
                             f"model.bias = false means LayerNorms without bias (nanoGPT's "
                             f"LayerNorm(ndim, bias=False)): the C++ model must not register it")
        if name not in params:
            raise SystemExit(f"{init_dir}: tensor {name!r} is not a parameter of the reference "
                             f"(has: {', '.join(params)})")
        p = params[name]
        if list(p.shape) != list(t["shape"]) or t["offset"] % 4 or t["numel"] != p.numel():
            raise SystemExit(f"{init_dir}: {name} shape {t['shape']} numel {t['numel']} offset "
                             f"{t['offset']}, reference expects {list(p.shape)}")
        first = t["offset"] // 4
        values = blob[first:first + t["numel"]]
        if values.size != t["numel"]:
            raise SystemExit(f"{init_dir}/params.bin is too short for {name}")
        with torch.no_grad():
            p.copy_(torch.from_numpy(values.copy()).view(p.shape))
        seen.add(name)
    missing = sorted(set(params) - seen)
    if missing:
        raise SystemExit(f"{init_dir}: params.json lacks {', '.join(missing)}")


# ------------------------------------------------------------- schedule -----

def lr_at(step, o, steps):
    """Learning rate of 0-based step `step`: linear warmup, then cosine to min_lr."""
    warmup = o["warmup_steps"]
    if step < warmup:
        return o["lr"] * (step + 1) / warmup
    decay = o["decay_steps"] or steps
    p = min(max((step - warmup) / max(1, decay - warmup), 0.0), 1.0)
    return o["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * p)) * (o["lr"] - o["min_lr"])


def make_optimizer(model, o):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": o["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])


# ----------------------------------------------------------------- train ----

def grad_norm64(params):
    """The float64 norm of all gradients: sqrt(sum over tensors of sum(g.double()**2)).

    Each tensor's sum of squares is a float64 dot product (a quarter of the
    time of pow + sum: the benchmark times this too); one sync at the end.
    """
    sums = []
    for p in params:
        if p.grad is not None:
            x = p.grad.detach().reshape(-1).double()
            sums.append(torch.dot(x, x))
    return math.sqrt(torch.stack(sums).sum().item()) if sums else 0.0


def clip_gradients(params, norm, max_norm):
    """Scales every gradient by float32(min(1, max_norm / (norm + 1e-6))), as holdfast-train.

    clip_grad_norm_'s coefficient, but from the float64 norm; the factor is
    rounded to float32 first, the factor holdfast-train's AdamW multiplies by.
    """
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        factor = float(np.float32(coef))
        for p in params:
            if p.grad is not None:
                p.grad.mul_(factor)


def train(cfg, init_dir, metrics_path, rank=0, world=1):
    """Trains cfg["train"]["steps"] steps; rank 0 writes metrics. Returns the losses."""
    m, t, o = cfg["model"], cfg["train"], cfg["optim"]
    device = resolve_device(t["device"], rank)
    bf16 = t["precision"] == "bf16"
    torch.manual_seed(t["seed"])
    torch.set_num_threads(t["threads"])
    data = Dataset(cfg["data"]["format"], cfg["data"]["path"], m["block_size"],
                   m["vocab_size"], t["seed"])
    model = GPT(m)
    if init_dir:
        load_init(model, init_dir)
    else:
        model.init_random(m["n_layer"])
    model.to(device)
    model.train()
    net = model
    if world > 1:
        # No buffer ever changes (the causal mask is constant), so re-broadcasting
        # them every forward would only tax the Python side of the benchmark.
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            broadcast_buffers=False)
    opt = make_optimizer(model, o)
    params = list(model.parameters())
    steps, mb, accum = t["steps"], t["micro_batch"], t["grad_accum"]
    G = mb * accum * world
    tokens_per_step = G * m["block_size"]
    out = open(metrics_path, "w") if (metrics_path and rank == 0) else None
    losses = []
    for step in range(steps):
        t0 = time.perf_counter()
        lr = lr_at(step, o, steps)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for a in range(accum):
            # Micro-step a of rank r: a block of micro_batch samples; with
            # grad_accum 1 this is s*G + r*micro_batch + b (docs/data-sampling.md).
            first = step * G + (a * world + rank) * mb
            x, y = (v.to(device) for v in data.batch(range(first, first + mb)))
            defer_sync = world > 1 and a < accum - 1  # all-reduce after the last micro-step only
            with (net.no_sync() if defer_sync else contextlib.nullcontext()):
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
                    loss = net(x, y)
                (loss / accum).backward()
            loss_sum += loss.item()
        step_loss = loss_sum / accum
        if world > 1:
            buf = torch.tensor([step_loss], dtype=torch.float64, device=device)
            torch.distributed.all_reduce(buf)
            step_loss = buf.item() / world
        grad_norm = grad_norm64(params)
        if o["grad_clip"] > 0:
            clip_gradients(params, grad_norm, o["grad_clip"])
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        losses.append(step_loss)
        if out:
            out.write(json.dumps({"step": step + 1, "loss": step_loss, "lr": lr,
                                  "grad_norm": grad_norm,
                                  "tokens_per_s": tokens_per_step / dt,
                                  "step_ms": dt * 1e3}) + "\n")
            out.flush()
    if out:
        out.close()
    return losses


def _ddp_worker(rank, world, port, cfg, init_dir, metrics_path):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = resolve_device(cfg["train"]["device"], rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's communicator binds to the current device
    backend = "nccl" if device.type == "cuda" else "gloo"
    torch.distributed.init_process_group(backend, rank=rank, world_size=world)
    try:
        train(cfg, init_dir, metrics_path, rank, world)
    finally:
        torch.distributed.destroy_process_group()


def train_ddp(cfg, init_dir, metrics_path, world):
    """Spawns `world` ranks on 127.0.0.1 (gloo + DDP, NCCL on GPUs); rank 0 writes the metrics."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp
    mp.spawn(_ddp_worker, args=(world, port, cfg, init_dir, metrics_path), nprocs=world)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--init", help="folder with params.json + params.bin from --dump-init")
    src.add_argument("--random-init", action="store_true", help="nanoGPT init from train.seed")
    ap.add_argument("--steps", type=int, help="overrides train.steps")
    ap.add_argument("--metrics", help="JSONL output (rank 0)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--ddp", type=int, default=1, metavar="N",
                    help="ranks (DDP: gloo on the CPU, NCCL on GPUs)")
    ap.add_argument("--device", choices=("cpu", "cuda", "auto"),
                    help="overrides train.device (the reference's default: cpu)")
    args = ap.parse_args(argv)
    overrides = list(args.set) + ([f"train.steps={args.steps}"] if args.steps else [])
    if args.device:
        overrides.append(f"train.device={args.device}")
    cfg = load_config(args.config, overrides)
    if args.ddp > 1:
        train_ddp(cfg, args.init, args.metrics, args.ddp)
    else:
        train(cfg, args.init, args.metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
