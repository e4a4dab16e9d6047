#!/usr/bin/env python3
"""PyTorch eager peer of bench/depthwise_step.cpp: one training step of a depthwise 3x3 convolution (groups = C,
padding 1, no bias) at batch 64, 16x16x96 (MobileNetV2-like), MSE loss and SGD, channels_last memory format as
trainkit's NHWC. Prints one JSON line."""
import argparse
import json
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--size", type=int, default=16)
p.add_argument("--channels", type=int, default=96)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
c = a.channels
conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(conv.parameters(), lr=0.01)
x = torch.randn(a.batch, c, a.size, a.size).to(memory_format=torch.channels_last)
y = torch.randn(a.batch, c, a.size, a.size).to(memory_format=torch.channels_last)


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(conv(x), y)
    loss.backward()
    opt.step()


for _ in range(5):
    step()
ms = []
for _ in range(a.steps):
    t0 = time.perf_counter()
    step()
    ms.append(1e3 * (time.perf_counter() - t0))
ms.sort()
print(json.dumps({"peer": "torch eager %s" % torch.__version__, "shape": [a.batch, a.size, a.size, c], "kernel": 3,
                  "step_ms_median": round(ms[len(ms) // 2], 3), "step_ms_min": round(ms[0], 3)}))
