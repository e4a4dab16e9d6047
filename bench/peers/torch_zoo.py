#!/usr/bin/env python3
"""PyTorch eager peer: one training step of a keras.applications model written in torch as Keras builds it
(torchvision is not installed). --model resnet50 (torchvision's resnet50 strides the 3x3 conv, Keras' the first
1x1): conv 7x7/2 + BN + relu, maxpool 3x3/2, stages of (3, 4, 6, 3) bottleneck blocks (64, 128, 256, 512 filters,
x4 out; a 1x1 shortcut conv in each stage's first block; stride 2 from stage 2 on the block's first 1x1), global
average pool, dense 10 logits; convolutions with bias and BatchNormalization eps 1.001e-5 as Keras'. 32x32 inputs,
SGD(0.01), cross entropy. The median of one step over --steps after --warmup; --channels-last runs NHWC (trainkit's
layout).

--model mobilenetv2: keras.applications.MobileNetV2 (alpha 1.0): conv 3x3/2 (32, "same": padded bottom/right) + BN +
ReLU6, 17 inverted residual blocks (expand 1x1 + BN + ReLU6 except the first, zero pad (0, 1) and depthwise 3x3 "valid"
when strided else "same", + BN + ReLU6, project 1x1 + BN, added to the input when shapes agree), conv 1x1 to 1280 +
BN + ReLU6, global average pool, dense 10 logits; no conv biases, BatchNormalization eps 1e-3 and momentum 0.999.

Prints one JSON line on stdout (bench/summarize.py); logging goes to stderr.
  .venv/bin/python bench/peers/torch_zoo.py [--model resnet50|mobilenetv2] [--batch-size 32] [--threads 2]
                                            [--channels-last]
"""
import argparse
import json
import os
import statistics
import time

from _proc import reset_hwm, status_bytes

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def build_resnet50(nn):
    def conv_bn(cin, cout, k, stride=1, pad=0):
        return [nn.Conv2d(cin, cout, k, stride, pad), nn.BatchNorm2d(cout, eps=1.001e-5, momentum=0.01)]

    class Block(nn.Module):
        def __init__(self, cin, filters, stride, shortcut):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(cin, filters, 1, stride), nn.ReLU(),
                                      *conv_bn(filters, filters, 3, 1, 1), nn.ReLU(),
                                      *conv_bn(filters, 4 * filters, 1))
            self.short = nn.Sequential(*conv_bn(cin, 4 * filters, 1, stride)) if shortcut else nn.Identity()

        def forward(self, x):
            return (self.body(x) + self.short(x)).relu()

    layers = [nn.ZeroPad2d(3), *conv_bn(3, 64, 7, 2), nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(3, 2)]
    cin = 64
    for i, (filters, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for b in range(blocks):
            layers.append(Block(cin, filters, (1 if i == 0 else 2) if b == 0 else 1, b == 0))
            cin = 4 * filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 10)]
    return nn.Sequential(*layers)


def build_mobilenetv2(nn):
    def conv_bn(cin, cout, k, stride=1, groups=1, relu6=True, pad="same"):
        same = pad == "same" and stride == 1  # "same" at stride 1 pads 1 each side; strided, (0, 1) before it
        layers = [] if same or k == 1 else [nn.ZeroPad2d((0, 1, 0, 1))]
        layers += [nn.Conv2d(cin, cout, k, stride, k // 2 if same else 0, groups=groups, bias=False),
                   nn.BatchNorm2d(cout, eps=1e-3, momentum=0.001)]
        return layers + ([nn.ReLU6()] if relu6 else [])

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expansion, first):
            super().__init__()
            hidden = cin * expansion
            expand = [] if first else conv_bn(cin, hidden, 1)
            self.body = nn.Sequential(*expand, *conv_bn(hidden, hidden, 3, stride, groups=hidden),
                                      *conv_bn(hidden, cout, 1, relu6=False))
            self.residual = cin == cout and stride == 1

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    layers = conv_bn(3, 32, 3, 2)
    cin, first = 32, True
    # (filters, stride, expansion, repeats) as keras.applications.MobileNetV2 lists its blocks.
    for filters, stride, expansion, repeats in [(16, 1, 1, 1), (24, 2, 6, 2), (32, 2, 6, 3), (64, 2, 6, 4),
                                                (96, 1, 6, 3), (160, 2, 6, 3), (320, 1, 6, 1)]:
        for r in range(repeats):
            layers.append(InvertedResidual(cin, filters, stride if r == 0 else 1, expansion, first))
            cin, first = filters, False
    layers += conv_bn(320, 1280, 1) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 10)]
    return nn.Sequential(*layers)


MODELS = {"resnet50": build_resnet50, "mobilenetv2": build_mobilenetv2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--channels-last", action="store_true")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    reset_hwm()  # VmHWM from here: the model, the step's tensors, the allocator
    rss_before = status_bytes("VmRSS")
    model = MODELS[args.model](torch.nn)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(args.batch_size, 3, 32, 32).contiguous(memory_format=fmt)
    y = torch.arange(args.batch_size) % 10
    ms = []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        if s >= args.warmup:
            ms.append(1e3 * (time.perf_counter() - t0))
    med = statistics.median(ms)
    params = sum(p.numel() for p in model.parameters())
    peer = "pytorch" + ("-channels-last" if args.channels_last else "")
    print(json.dumps({"peer": peer, "version": torch.__version__, "threads": args.threads, "model": args.model,
                      "params": params, "batch_size": args.batch_size,
                      "step_ms": round(med, 2), "samples_per_s": round(1e3 * args.batch_size / med, 1),
                      "rss_peak_growth_bytes": status_bytes("VmHWM") - rss_before}), flush=True)


if __name__ == "__main__":
    main()
