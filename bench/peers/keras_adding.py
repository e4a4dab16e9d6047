"""The adding problem (Hochreiter & Schmidhuber 1997; T = 100) in Keras 3: the data, the model's initial weights
(a .keras file trainkit loads, so both start from the same weights) and Keras' own learning curve.

  KERAS_BACKEND=jax .venv-keras/bin/python bench/peers/keras_adding.py --out DIR [--epochs 30] [--units 32]

Writes DIR/{x_train,y_train,x_val,y_val}.npy (float32), DIR/initial.keras (compiled: Adam, MSE) and prints one JSON
line per epoch ({"peer": "keras", "epoch": e, "loss": .., "val_loss": ..}).
Input (T, 2): channel 0 uniform [0, 1), channel 1 marks one step in the first half and one in the second;
target: the sum of the two marked values (predicting 1.0 always gives MSE ~0.167).
"""
import argparse
import json
import os
import time

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402


def adding(n, t, rng):
    x = np.zeros((n, t, 2), np.float32)
    x[:, :, 0] = rng.uniform(0, 1, (n, t))
    a = rng.integers(0, t // 2, n)
    b = rng.integers(t // 2, t, n)
    x[np.arange(n), a, 1] = 1
    x[np.arange(n), b, 1] = 1
    y = (x[np.arange(n), a, 0] + x[np.arange(n), b, 0]).astype(np.float32).reshape(n, 1)
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--units", type=int, default=32)
    p.add_argument("--t", type=int, default=100)
    p.add_argument("--train", type=int, default=6400)
    p.add_argument("--val", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    x, y = adding(a.train, a.t, rng)
    xv, yv = adding(a.val, a.t, rng)
    for name, arr in [("x_train", x), ("y_train", y), ("x_val", xv), ("y_val", yv)]:
        np.save(os.path.join(a.out, name + ".npy"), arr)
    keras.utils.set_random_seed(a.seed)
    model = keras.Sequential([keras.Input((a.t, 2)), keras.layers.LSTM(a.units), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(a.lr), loss="mse")
    model.save(os.path.join(a.out, "initial.keras"))

    class Log(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            print(json.dumps({"peer": "keras " + keras.__version__, "epoch": epoch + 1, "loss": logs["loss"],
                              "val_loss": logs["val_loss"], "epoch_s": round(time.perf_counter() - self.t0, 2)}),
                  flush=True)

    model.fit(x, y, batch_size=a.batch, epochs=a.epochs, validation_data=(xv, yv), verbose=0, callbacks=[Log()])


if __name__ == "__main__":
    main()
