#!/usr/bin/env python3
"""Summarizes bench/tensor_ops.sh: one JSON line per (framework, workload) per round, from tk_bench_tensor_ops,
bench/peers/torch_ops.py and bench/peers/keras_ops.py. Prints, per workload, each framework's median over the
rounds of its per-round median ms, the rounds themselves, and trainkit's time over each peer's (above 1: trainkit
is slower).

  python3 bench/summarize_ops.py runs.jsonl
"""
import json
import statistics
import sys

FRAMEWORKS = ("trainkit", "pytorch", "keras")

with open(sys.argv[1]) as f:
    runs = [json.loads(line) for line in f if line.strip().startswith("{")]
by = {}
for r in runs:
    by.setdefault(r["workload"], {}).setdefault(r["framework"], []).append(r)
tk_any = [r for r in runs if r["framework"] == "trainkit"]
if not tk_any:
    sys.exit("no trainkit run in " + sys.argv[1])
versions = {}
for r in runs:
    if r["framework"] != "trainkit":
        versions.setdefault(r["framework"], r.get("version", "?") + (
            " / tensorflow " + r["tensorflow_version"] if "tensorflow_version" in r else ""))
rounds = max(len(fw) for w in by.values() for fw in w.values())
print(f"cpu: {tk_any[0].get('cpu', '?')}, threads {tk_any[0].get('threads', '?')}, {rounds} interleaved rounds; "
      + ", ".join(f"{k} {v}" for k, v in versions.items()))
print("ms: median over rounds of each round's median; ratio = trainkit ms / peer ms (above 1: trainkit slower); "
      "cpu ms: the same of the process's CPU time per run (at one thread the figure a loaded machine disturbs least)")
print(f"{'workload':30s} {'framework':9s} {'median ms':>10s}  {'rounds (ms)':34s} {'tk/torch':>9s} {'tk/keras':>9s}"
      f" {'cpu ms':>8s} {'tk/torch':>9s} {'tk/keras':>9s}")


def median_of(rs, key):
    return statistics.median(r[key] for r in rs) if all(key in r for r in rs) else None


def ratios(med, fws, key):
    out = ""
    for peer in ("pytorch", "keras"):
        p = median_of(fws[peer], key) if peer in fws else None
        out += f" {med / p:8.2f}x" if med is not None and p else f" {'-':>9s}"
    return out


for workload, fws in by.items():
    for fw in FRAMEWORKS:
        if fw not in fws:
            continue
        rs = fws[fw]
        med, cpu = median_of(rs, "ms"), median_of(rs, "cpu_ms")
        each = " / ".join(f"{r['ms']:.3f}" for r in rs)
        line = f"{workload:30s} {fw:9s} {med:10.3f}  {each:34s}"
        line += ratios(med, fws, "ms") if fw == "trainkit" else " " * 20
        line += f" {cpu:8.3f}" if cpu is not None else f" {'-':>8s}"
        if fw == "trainkit":
            line += ratios(cpu, fws, "cpu_ms")
        print(line.rstrip())
