#!/usr/bin/env python3
"""Keras 3 peer of bench/transformer_step.cpp (KERAS_BACKEND from the environment, jax by default): the same 2-block
post-norm encoder (MultiHeadAttention(4, 32) + Add + LayerNormalization(1e-5), Dense(512, relu) -> Dense(128) + Add +
LayerNormalization) at batch 32, T 128, MSE and SGD, one compiled train_on_batch per step. Prints one JSON line."""
import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--steps-t", type=int, default=128)
a = p.parse_args()
L = keras.layers
d = 128
inp = keras.Input((a.steps_t, d))
x = inp
for _ in range(2):
    x = L.LayerNormalization(epsilon=1e-5)(L.Add()([x, L.MultiHeadAttention(4, 32)(x, x)]))
    x = L.LayerNormalization(epsilon=1e-5)(L.Add()([x, L.Dense(d)(L.Dense(512, activation="relu")(x))]))
model = keras.Model(inp, x)
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
rng = np.random.default_rng(1)
xs = rng.standard_normal((a.batch, a.steps_t, d)).astype(np.float32)
ys = rng.standard_normal((a.batch, a.steps_t, d)).astype(np.float32)
for _ in range(3):
    model.train_on_batch(xs, ys)
ms = []
for _ in range(a.steps):
    t0 = time.perf_counter()
    model.train_on_batch(xs, ys)
    ms.append(1e3 * (time.perf_counter() - t0))
ms.sort()
print(json.dumps({"peer": "keras %s (%s)" % (keras.__version__, keras.backend.backend()),
                  "shape": [a.batch, a.steps_t, d], "step_ms_median": round(ms[len(ms) // 2], 3),
                  "step_ms_min": round(ms[0], 3)}))
