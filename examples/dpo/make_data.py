#!/usr/bin/env python3
"""Writes the DPO example's preference pairs (deterministic: the same bytes every run).

Each line is {"prompt": "23+58=", "chosen": "81\n", "rejected": WRONG}, a and b in 0..99.
The rejected answer is wrong in a way a small model can learn to disprefer:
  --kind copy  the first operand echoed back ("23\n"): learnable from any prompt.
  --kind sum   the sum off by 1..9 up or down (its units digit wrong): needs the
               units digit of a + b.
Usage: make_data.py OUT.jsonl [--pairs N] [--kind copy|sum] [--seed S]
"""
import argparse
import json
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--pairs", type=int, default=4000)
    ap.add_argument("--kind", choices=["copy", "sum"], default="copy")
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with open(args.out, "w", encoding="utf-8") as f:
        for _ in range(args.pairs):
            a, b = rng.randrange(100), rng.randrange(100)
            right = a + b
            if args.kind == "copy":
                wrong = a if a != right else a + 1
            else:
                wrong = right + rng.choice([-1, 1]) * rng.randrange(1, 10)
                if wrong < 0:
                    wrong = right + rng.randrange(1, 10)
            f.write(json.dumps({"prompt": f"{a}+{b}=", "chosen": f"{right}\n", "rejected": f"{wrong}\n"}) + "\n")


if __name__ == "__main__":
    main()
