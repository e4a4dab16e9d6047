#!/usr/bin/env python3
"""PyTorch eager peer benchmark: TensorFlow-tutorial CNN on Fashion-MNIST.

conv(32,5x5,same,relu) -> maxpool2 -> conv(64,5x5,same,relu) -> maxpool2 ->
flatten -> dense(1024,relu) -> dropout(0.4) -> dense(10) logits; Adam(1e-3).
Inputs are NCHW (N,1,28,28) scaled to [0,1].

Prints exactly one JSON line on stdout; all logging goes to stderr.
  .venv/bin/python bench/peers/torch_cnn.py [--epochs 2] [--batch-size 128] [--threads 2] [--max-steps 0]
"""
import argparse
import json
import os
import sys
import time

if "cuda" not in " ".join(sys.argv[1:]):  # the CPU benchmark must not touch a GPU
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _idx import DATA_DIR, load_fashion_mnist  # noqa: E402
from _models import build  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs (after 1 warm-up)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor, C++ kernels)")
    ap.add_argument("--max-steps", type=int, default=0,
                    help="limit each epoch (warm-up included) to N batches; 0 = full epoch")
    ap.add_argument("--autocast", action="store_true",
                    help="CPU autocast to bfloat16 (torch.autocast('cpu', torch.bfloat16)): PyTorch's mixed precision")
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the training set is copied to the GPU once)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)

    x_np, y_np = load_fashion_mnist(args.data_dir)
    bs = args.batch_size
    if args.max_steps > 0:
        # Subset of max_steps full batches; shuffled within it every epoch.
        m = min(x_np.shape[0], args.max_steps * bs)
        x_np, y_np = x_np[:m], y_np[:m]
    n = x_np.shape[0]
    dev = torch.device(args.device)
    x = torch.from_numpy(np.ascontiguousarray(x_np.reshape(n, 1, 28, 28))).to(dev)
    y = torch.from_numpy(y_np).to(dev)
    log("pytorch %s, threads=%d, n=%d, batch=%d, max_steps=%d" % (
        torch.__version__, torch.get_num_threads(), n, bs, args.max_steps))

    model = build(torch, "cnn").to(dev)
    if args.compile:
        model = torch.compile(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(args.seed)

    def run_epoch():
        perm = torch.from_numpy(rng.permutation(n)).to(dev)
        total, correct, seen = 0.0, 0, 0
        model.train()
        for i in range(0, n, bs):
            idx = perm[i:i + bs]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
                logits = model(xb)
                loss = crit(logits.float(), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            correct += int((logits.argmax(1) == yb).sum())
            seen += len(idx)
        return total / seen, correct / seen

    epoch_seconds = []
    for e in range(1 + args.epochs):
        t0 = time.perf_counter()
        loss, acc = run_epoch()
        dt = time.perf_counter() - t0
        tag = "warm-up" if e == 0 else "timed"
        log("epoch %d (%s): %.3f s, loss %.4f, acc %.4f" % (e, tag, dt, loss, acc))
        if e > 0:
            epoch_seconds.append(dt)

    if dev.type == "cuda":
        torch.cuda.synchronize()
    sps = n * len(epoch_seconds) / sum(epoch_seconds)
    print(json.dumps({
        "peer": ("pytorch-compile" if args.compile else "pytorch") + ("-autocast-bf16" if args.autocast else ""),
        "version": torch.__version__,
        "threads": args.threads,
        "device": str(dev) + (" " + torch.cuda.get_device_name(dev) if dev.type == "cuda" else ""),
        "batch_size": bs,
        "samples_per_s": round(sps, 1),
        "epoch_seconds": [round(s, 4) for s in epoch_seconds],
    }), flush=True)


if __name__ == "__main__":
    main()
