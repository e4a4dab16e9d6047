#!/usr/bin/env python3
"""PyTorch DistributedDataParallel (gloo) peer for bench/data_parallel.sh: the default MLP or the tutorial CNN
on Fashion-MNIST, global batch 128 split across --procs processes of --threads threads each (rank r takes rows
r::procs of each global batch). --procs 1 runs plain PyTorch in one process (no DDP).

Prints exactly one JSON line on stdout (rank 0, global samples/s); logging goes to stderr.
  .venv/bin/python bench/peers/torch_ddp.py --model mlp|cnn [--procs 2] [--threads 1] [--epochs 2] [--max-steps 0]
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _idx import DATA_DIR, load_fashion_mnist  # noqa: E402
from _models import build  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    if args.procs > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=args.procs)
    x_np, y_np = load_fashion_mnist(args.data_dir)
    bs = args.batch_size
    if args.max_steps > 0:
        m = min(x_np.shape[0], args.max_steps * bs)
        x_np, y_np = x_np[:m], y_np[:m]
    n = x_np.shape[0]
    shape = (n, 1, 28, 28) if args.model == "cnn" else (n, 784)
    x = torch.from_numpy(np.ascontiguousarray(x_np.reshape(shape)))
    y = torch.from_numpy(y_np)
    model = build(torch, args.model)
    if args.procs > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)  # bucket_cap_mb 25, gloo all-reduce
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(args.seed)  # the same permutation on every rank

    def run_epoch():
        perm = torch.from_numpy(rng.permutation(n))
        model.train()
        for i in range(0, n, bs):
            idx = perm[i:i + bs][rank::args.procs]  # this rank's rows of the global batch
            opt.zero_grad(set_to_none=True)
            loss = crit(model(x[idx]), y[idx])
            loss.backward()  # DDP averages over ranks: equal shards make it the global batch's mean
            opt.step()

    seconds = []
    for e in range(1 + args.epochs):
        t0 = time.perf_counter()
        run_epoch()
        if e > 0:
            seconds.append(time.perf_counter() - t0)
    if rank == 0:
        print(json.dumps({"peer": "pytorch-ddp-gloo" if args.procs > 1 else "pytorch", "model": args.model,
                          "processes": args.procs, "threads": args.threads, "version": torch.__version__,
                          "batch_size": bs, "samples_per_s": round(n * len(seconds) / sum(seconds), 1)}),
              flush=True)
    if args.procs > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs (after 1 warm-up)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--max-steps", type=int, default=0, help="each epoch: the first N global batches (0: all)")
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.procs == 1:
        worker(0, args, 0)
        return
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.procs, join=True)


if __name__ == "__main__":
    main()
