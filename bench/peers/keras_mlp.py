#!/usr/bin/env python3
"""Keras 3 (TensorFlow CPU backend) peer benchmark: MLP 784-256-128-10 on Fashion-MNIST.

Prints exactly one JSON line on stdout; all logging goes to stderr.
  .venv/bin/python bench/peers/keras_mlp.py [--epochs 2] [--batch-size 128] [--threads 2]
"""
import argparse
import json
import os
import sys
import time

os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _idx import DATA_DIR, load_fashion_mnist  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs (after 1 warm-up)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import tensorflow as tf

    # Must be set before TF executes anything (runtime is initialised lazily).
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.set_visible_devices([], "GPU")

    import keras

    keras.utils.set_random_seed(args.seed)
    x, y = load_fashion_mnist(args.data_dir)
    n = x.shape[0]
    log("keras %s / tensorflow %s, intra=%d inter=%d, n=%d, batch=%d" % (
        keras.__version__, tf.__version__,
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(), n, args.batch_size))

    model = keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            dt = time.perf_counter() - self._t0
            self.seconds.append(dt)
            logs = logs or {}
            log("epoch %d (%s): %.3f s, loss %.4f, acc %.4f" % (
                epoch, "warm-up" if epoch == 0 else "timed", dt,
                logs.get("loss", float("nan")), logs.get("accuracy", float("nan"))))

    timer = EpochTimer()
    model.fit(x, y, batch_size=args.batch_size, epochs=1 + args.epochs,
              verbose=0, shuffle=True, callbacks=[timer])

    epoch_seconds = timer.seconds[1:]
    sps = n * len(epoch_seconds) / sum(epoch_seconds)
    print(json.dumps({
        "peer": "keras",
        "version": keras.__version__,
        "backend": "tensorflow",
        "tensorflow_version": tf.__version__,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "samples_per_s": round(sps, 1),
        "epoch_seconds": [round(s, 4) for s in epoch_seconds],
    }), flush=True)


if __name__ == "__main__":
    main()
