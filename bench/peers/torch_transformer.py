#!/usr/bin/env python3
"""PyTorch eager peer of bench/transformer_step.cpp: one training step of two nn.TransformerEncoderLayer (d 128,
4 heads, ff 512, relu, post-norm, dropout 0, batch_first) at batch 32, T 128, MSE loss and SGD. Prints one JSON
line, with
the resident peak's growth over the step (VmHWM reset before the model is built, as bench/transformer_step.cpp
does)."""
import argparse
import json
import time

from _proc import reset_hwm, status_bytes

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--steps-t", type=int, default=128)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
d = 128


x = torch.randn(a.batch, a.steps_t, d)
y = torch.randn(a.batch, a.steps_t, d)
reset_hwm()
rss_before = status_bytes("VmRSS")
layer = lambda: torch.nn.TransformerEncoderLayer(d, 4, 512, dropout=0.0, batch_first=True)  # noqa: E731
model = torch.nn.Sequential(layer(), layer())
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


for _ in range(3):
    step()
ms = []
for _ in range(a.steps):
    t0 = time.perf_counter()
    step()
    ms.append(1e3 * (time.perf_counter() - t0))
ms.sort()
print(json.dumps({"peer": "torch eager %s" % torch.__version__, "shape": [a.batch, a.steps_t, d],
                  "step_ms_median": round(ms[len(ms) // 2], 3), "step_ms_min": round(ms[0], 3),
                  "rss_peak_growth_bytes": status_bytes("VmHWM") - rss_before}))
