"""Shared Fashion-MNIST IDX loader for the peer benchmarks (numpy + gzip only)."""
import gzip
import os

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def load_fashion_mnist(data_dir=DATA_DIR, split="train"):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"), "rb") as f:
        raw = f.read()
    magic, n, rows, cols = np.frombuffer(raw[:16], dtype=">u4")
    assert magic == 2051, magic
    x = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(int(n), int(rows) * int(cols))
    x = (x.astype(np.float32) / np.float32(255.0))
    with gzip.open(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"), "rb") as f:
        raw = f.read()
    magic, m = np.frombuffer(raw[:8], dtype=">u4")
    assert magic == 2049 and m == n, (magic, m, n)
    y = np.frombuffer(raw, dtype=np.uint8, offset=8).astype(np.int64)
    return np.ascontiguousarray(x), y
