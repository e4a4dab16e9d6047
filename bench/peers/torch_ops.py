#!/usr/bin/env python3
"""PyTorch (CPU, eager) peer of bench/tensor_ops.cpp: LayerNorm forward + backward, softmax, batched matmul.

Prints one JSON line per workload on stdout; all logging goes to stderr. Each workload: --warmup untimed
iterations, then --iters iterations timed one by one; "ms" is their median.
  .venv/bin/python bench/peers/torch_ops.py [--iters 30] [--warmup 5] [--threads 2] [--only layer_norm]
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # the CPU benchmark must not touch a GPU


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def timed(fn, warmup, iters):
    """Wall ms per run, and (in CPU_MS) the process's CPU ms per run, as tk_bench_tensor_ops' cpu_ms."""
    for _ in range(warmup):
        fn()
    runs, CPU_MS[:] = [], []
    for _ in range(iters):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        runs.append(1e3 * (time.perf_counter() - t0))
        CPU_MS.append(1e3 * (time.process_time() - c0))
    return runs


CPU_MS = []  # the last timed()'s CPU ms per run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30, help="timed iterations (after --warmup untimed ones)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="layer_norm, softmax, batch_matmul, log_softmax or softmax_grad (default: all)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    g = torch.Generator().manual_seed(0)
    log("pytorch %s, threads=%d" % (torch.__version__, torch.get_num_threads()))

    def emit(workload, shapes, runs):
        print(json.dumps({
            "framework": "pytorch", "workload": workload, "shapes": shapes,
            "ms": round(statistics.median(runs), 4), "min_ms": round(min(runs), 4),
            "cpu_ms": round(statistics.median(CPU_MS), 4),
            "version": torch.__version__, "threads": torch.get_num_threads(),
            "runs_ms": [round(r, 4) for r in runs],
        }), flush=True)

    if args.only in ("", "layer_norm"):
        x = torch.randn(4096, 512, generator=g, requires_grad=True)
        dy = torch.randn(4096, 512, generator=g)
        gamma = torch.ones(512, requires_grad=True)
        beta = torch.zeros(512, requires_grad=True)

        def layer_norm():
            x.grad = gamma.grad = beta.grad = None  # no accumulation into the previous iteration's gradients
            y = F.layer_norm(x, (512,), gamma, beta, eps=1e-3)  # Keras' default epsilon, as trainkit's
            y.backward(dy)
            return y

        emit("layer_norm_fwd_bwd", "x (4096, 512), gamma/beta (512), y.backward(dy)",
             timed(layer_norm, args.warmup, args.iters))

    if args.only in ("", "softmax"):
        s = torch.randn(4096, 1024, generator=g)
        with torch.no_grad():
            emit("softmax_fwd", "(4096, 1024), last axis", timed(lambda: torch.softmax(s, -1), args.warmup, args.iters))

    if args.only in ("", "log_softmax"):
        s = torch.randn(4096, 1024, generator=g)
        with torch.no_grad():
            emit("log_softmax_fwd", "(4096, 1024), last axis",
                 timed(lambda: torch.log_softmax(s, -1), args.warmup, args.iters))

    if args.only in ("", "softmax_grad"):
        y = torch.softmax(torch.randn(4096, 1024, generator=g), -1)
        dy = torch.randn(4096, 1024, generator=g)
        with torch.no_grad():  # the kernel autograd runs for softmax's backward
            emit("softmax_grad", "dy, y (4096, 1024), last axis",
                 timed(lambda: torch._softmax_backward_data(dy, y, -1, torch.float32), args.warmup, args.iters))

    if args.only in ("", "batch_matmul"):
        a = torch.randn(64, 128, 64, generator=g)
        b = torch.randn(64, 64, 128, generator=g)
        with torch.no_grad():
            emit("batch_matmul_fwd", "(64, 128, 64) x (64, 64, 128)",
                 timed(lambda: torch.bmm(a, b), args.warmup, args.iters))


if __name__ == "__main__":
    main()
