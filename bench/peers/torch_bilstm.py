#!/usr/bin/env python3
"""PyTorch eager peer of bench/bilstm_step.cpp: Embedding(10000, 128) -> nn.LSTM(128, 64, bidirectional) (last
steps of both directions concatenated, as Keras' Bidirectional(LSTM(64))) -> Linear(128, 2), cross entropy, Adam;
batch 64, T 80. Prints one JSON line."""
import argparse
import json
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--t", type=int, default=80)
p.add_argument("--units", type=int, default=64)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10000, 128)
        self.lstm = torch.nn.LSTM(128, a.units, batch_first=True, bidirectional=True)
        self.out = torch.nn.Linear(2 * a.units, 2)

    def forward(self, x):
        _, (h, _) = self.lstm(self.emb(x))  # h: (2, N, units), the last step of each direction
        return self.out(torch.cat([h[0], h[1]], dim=1))


net = Net()
opt = torch.optim.Adam(net.parameters())
x = torch.randint(0, 10000, (a.batch, a.t))
y = torch.randint(0, 2, (a.batch,))


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(net(x), y)
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
print(json.dumps({"peer": "torch eager %s nn.LSTM" % torch.__version__, "batch": a.batch, "T": a.t, "units": a.units,
                  "step_ms_median": round(ms[len(ms) // 2], 3), "step_ms_min": round(ms[0], 3)}))
