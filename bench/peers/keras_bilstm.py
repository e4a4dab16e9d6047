#!/usr/bin/env python3
"""Keras 3 peer of bench/bilstm_step.cpp (KERAS_BACKEND as set, jax by default): Embedding(10000, 128) ->
Bidirectional(LSTM(64)) -> Dense(2), sparse categorical crossentropy from logits, Adam; batch 64, T 80, one
train_on_batch per step. Prints one JSON line."""
import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--t", type=int, default=80)
p.add_argument("--units", type=int, default=64)
a = p.parse_args()
keras.utils.set_random_seed(1)
inp = keras.Input((a.t,), dtype="int32")
h = keras.layers.Bidirectional(keras.layers.LSTM(a.units))(keras.layers.Embedding(10000, 128)(inp))
model = keras.Model(inp, keras.layers.Dense(2)(h))
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(1)
x = rng.integers(0, 10000, (a.batch, a.t)).astype(np.int32)
y = rng.integers(0, 2, (a.batch,)).astype(np.int32)
for _ in range(3):
    model.train_on_batch(x, y)
ms = []
for _ in range(a.steps):
    t0 = time.perf_counter()
    model.train_on_batch(x, y)
    ms.append(1e3 * (time.perf_counter() - t0))
ms.sort()
print(json.dumps({"peer": "keras %s (%s)" % (keras.__version__, keras.backend.backend()), "batch": a.batch,
                  "T": a.t, "units": a.units, "step_ms_median": round(ms[len(ms) // 2], 3),
                  "step_ms_min": round(ms[0], 3)}))
