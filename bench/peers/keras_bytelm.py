"""A byte-level causal LSTM language model in Keras 3, for the learning comparison with trainkit (issue 32).

  KERAS_BACKEND=jax .venv-keras/bin/python bench/peers/keras_bytelm.py --out DIR [--epochs 3] [--t 64]

Concatenates the regular files of /usr/share/common-licenses (sorted by name, symlinks skipped) into DIR/text.txt,
cuts it as trainkit's Dataset::from_text_file does (x = bytes[s, s+T), y = bytes[s+1, s+T+1), s = 0, T, 2T, ...;
the last 10% of the sequences are validation), writes the untrained model DIR/initial.keras (Embedding(256, 64) ->
LSTM(128, return_sequences) -> Dense(256) logits; Adam 2e-3, sparse categorical crossentropy from logits) and
prints one JSON line per epoch ({"peer": "keras", "epoch", "steps", "loss", "val_loss"}).
"""
import argparse
import json
import os
import time

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--t", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--units", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    src = "/usr/share/common-licenses"
    names = sorted(n for n in os.listdir(src) if os.path.isfile(os.path.join(src, n))
                   and not os.path.islink(os.path.join(src, n)))
    text = b"".join(open(os.path.join(src, n), "rb").read() for n in names)
    open(os.path.join(a.out, "text.txt"), "wb").write(text)
    b = np.frombuffer(text, np.uint8).astype(np.int32)
    n = (len(b) - a.t - 1) // a.t + 1
    idx = np.arange(n)[:, None] * a.t + np.arange(a.t)[None, :]
    x, y = b[idx], b[idx + 1]
    n_train = n - n // 10
    keras.utils.set_random_seed(a.seed)
    model = keras.Sequential([keras.Input((a.t,), dtype="int32"), keras.layers.Embedding(256, 64),
                              keras.layers.LSTM(a.units, return_sequences=True), keras.layers.Dense(256)])
    model.compile(optimizer=keras.optimizers.Adam(2e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.save(os.path.join(a.out, "initial.keras"))
    steps = -(-n_train // a.batch)

    class Log(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            print(json.dumps({"peer": "keras " + keras.__version__, "epoch": epoch + 1, "steps": steps * (epoch + 1),
                              "sequences": [int(n_train), int(n - n_train)], "loss": logs["loss"],
                              "val_loss": logs["val_loss"], "epoch_s": round(time.perf_counter() - self.t0, 2)}),
                  flush=True)

    model.fit(x[:n_train], y[:n_train], batch_size=a.batch, epochs=a.epochs,
              validation_data=(x[n_train:], y[n_train:]), verbose=0, callbacks=[Log()])


if __name__ == "__main__":
    main()
