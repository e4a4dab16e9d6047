#!/usr/bin/env python3
"""PyTorch peer of bench/memory_peak.cpp: peak CPU memory of training two MLPs.

Models (nn.Sequential of nn.Linear + nn.ReLU; CrossEntropyLoss on logits; Adam lr 1e-3; batch 128 of
random Fashion-MNIST-shaped data, x (128, 784) float32 and y (128,) int64, created before the model):
  mlp       784-256-128-10
  deep_mlp  784 -> 40 x Linear(512) + ReLU -> 10
Theoretical minimum = 4 B x 4 x params (weights + gradients + 2 Adam slots)
                    + 4 B x batch x (784 + sum of layer widths) (the input batch + every layer's output).

How PyTorch's CPU peak is measured (each model and each method in a fresh child process, so that memory
freed by an earlier model -- and kept by glibc -- cannot hide a later one's):

  rss_delta_bytes (kernel view). After torch is imported, the threads set (torch.set_num_threads(2)) and
    x, y created: write "5" to /proc/self/clear_refs (resets VmHWM to the current VmRSS), read VmRSS,
    build the model and the optimizer, run 3 steps (zero_grad(set_to_none=True), forward, loss,
    backward, step), read VmHWM. rss_delta_bytes = VmHWM - VmRSS_before. Caveats: RSS counts pages
    touched, not bytes in use: it includes glibc malloc's caching (freed chunks below the mmap threshold
    stay in the heap, and glibc may not return memory to the kernel at all), page granularity (4 KiB),
    the lazy one-time state the first step creates (autograd engine, OpenMP/oneDNN/MKL scratch and thread
    stacks, code pages of kernels first run), and Python objects. It is the number `top` would show.
    Measured this way on torch 2.15 it is dominated by a one-time cost: constructing torch.optim.Adam
    imports ~900 Python modules (torch._dynamo, sympy, mpmath, ...), ~150 MB of RSS, before any tensor.
  rss_delta_warm_bytes: the same, in a process that first built a tiny 784-16-10 model with Adam, ran one
    step on it and dropped it (gc.collect()) before the VmHWM reset, so that one-time state is excluded.

  profiler_peak_bytes (allocator view). In another fresh process, after x, y exist:
    torch.profiler.profile(activities=[ProfilerActivity.CPU], profile_memory=True) around model
    construction + the same 3 steps. With profile_memory the c10 CPU allocator reports every tensor
    allocation (+bytes) and free (-bytes) as a "[memory]" event; we read those raw events
    (prof.profiler.kineto_results.events(), private but stable API; FunctionEvent aggregates only expose
    per-op net sums, which hide the transient peak inside an op) and take the running maximum of their sum
    in time order, starting at 0 at the profiler's start. That is the analogue of trainkit's
    measured_bytes (its allocator's peak minus the baseline after x, y): live tensor bytes of weights,
    gradients, Adam slots, activations and temporaries. Caveats: only allocations through c10's CPU
    allocator are seen (oneDNN/MKL/OpenMP internal buffers and Python objects are not); allocations on two
    intra-op threads are ordered by timestamp; the profiler itself adds no tensor allocations but slows
    the run. profiler_step_peaks_bytes gives the same running sum's maximum within each step (absolute,
    i.e. including weights and optimizer state). If the raw events are unavailable the value is null.

Prints one JSON line per model on stdout; logs go to stderr.
  .venv/bin/python bench/peers/torch_memory.py [--model mlp|deep_mlp] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

BATCH, FEATURES, CLASSES, STEPS = 128, 784, 10, 3
MODELS = {"mlp": [256, 128], "deep_mlp": [512] * 40}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def theoretical_min(hidden):
    params, fan_in = 0, FEATURES
    for u in hidden + [CLASSES]:
        params += fan_in * u + u
        fan_in = u
    activation_floats = BATCH * (FEATURES + sum(hidden) + CLASSES)
    return params, 4 * 4 * params + 4 * activation_floats, activation_floats


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None


def reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def build(torch, hidden):
    layers, fan_in = [], FEATURES
    for u in hidden:
        layers += [torch.nn.Linear(fan_in, u), torch.nn.ReLU()]
        fan_in = u
    layers.append(torch.nn.Linear(fan_in, CLASSES))
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3), torch.nn.CrossEntropyLoss()


def step(model, opt, crit, x, y):
    opt.zero_grad(set_to_none=True)
    loss = crit(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach().item()


def child(name, mode, threads):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.rand(BATCH, FEATURES)
    y = torch.randint(0, CLASSES, (BATCH,))
    hidden = MODELS[name]
    out = {}
    if mode in ("rss", "rss_warm"):
        if mode == "rss_warm":  # one-time state first: module imports, thread pools, kernel code pages
            import gc

            tiny, tiny_opt, tiny_crit = build(torch, [16])
            step(tiny, tiny_opt, tiny_crit, x, y)
            del tiny, tiny_opt, tiny_crit
            gc.collect()
        ok = reset_hwm()
        before = status_bytes("VmRSS")
        model, opt, crit = build(torch, hidden)
        for _ in range(STEPS):
            loss = step(model, opt, crit, x, y)
        hwm = status_bytes("VmHWM")
        key = "rss_delta_bytes" if mode == "rss" else "rss_delta_warm_bytes"
        out = {key: hwm - before if ok else None, "loss": round(loss, 4)}
    else:
        from torch.profiler import ProfilerActivity, profile, record_function

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with record_function("build"):
                model, opt, crit = build(torch, hidden)
            for s in range(STEPS):
                with record_function("step_%d" % s):
                    step(model, opt, crit, x, y)
        try:
            events = prof.profiler.kineto_results.events()
            mem = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
            marks = {e.name(): (e.start_ns(), e.end_ns()) for e in events
                     if e.name() == "build" or e.name().startswith("step_")}
            live = peak = 0
            step_peaks = [0] * STEPS
            for t, nbytes in mem:
                live += nbytes
                peak = max(peak, live)
                for s in range(STEPS):
                    a, b = marks.get("step_%d" % s, (0, -1))
                    if a <= t <= b:
                        step_peaks[s] = max(step_peaks[s], live)
            out = {"profiler_peak_bytes": peak, "profiler_step_peaks_bytes": step_peaks,
                   "profiler_live_bytes_after": live, "profiler_memory_events": len(mem)}
        except Exception as e:  # private API moved: say so rather than guess
            log("torch_memory: no raw profiler memory events (%r)" % (e,))
            out = {"profiler_peak_bytes": None}
    out["version"] = torch.__version__
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), help="one model (default: both)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", choices=["rss", "rss_warm", "profile"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.model, args.child, args.threads)
        return
    for name in [args.model] if args.model else ["mlp", "deep_mlp"]:
        r = {}
        for mode in ("rss", "rss_warm", "profile"):
            cmd = [sys.executable, os.path.abspath(__file__), "--model", name, "--threads", str(args.threads),
                   "--child", mode]
            res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
            r.update(json.loads(res.stdout.strip().splitlines()[-1]))
        params, tmin, act = theoretical_min(MODELS[name])
        line = {"runtime": "pytorch", "version": r.pop("version"), "model": name, "params": params,
                "batch_size": BATCH, "steps": STEPS, "threads": args.threads,
                "rss_delta_bytes": r.pop("rss_delta_bytes"), "rss_delta_warm_bytes": r.pop("rss_delta_warm_bytes"),
                "profiler_peak_bytes": r.pop("profiler_peak_bytes"),
                "theoretical_min_bytes": tmin,
                "theoretical_min_formula": "4*(4*%d params) + 4*(%d*(784+sum widths) = %d floats)"
                                           % (params, BATCH, act)}
        line.update(r)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
