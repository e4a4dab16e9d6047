#!/usr/bin/env python3
"""Keras 3 (TensorFlow CPU backend) peer of bench/tensor_ops.cpp: LayerNorm forward + backward, softmax, log-softmax,
batched matmul, each step a tf.function (graph mode, no XLA: what Keras' fit runs on a CPU-only machine).

Prints one JSON line per workload on stdout; all logging goes to stderr. Each workload: --warmup untimed
iterations (the first traces), then --iters iterations timed one by one; "ms" is their median.
  .venv/bin/python bench/peers/keras_ops.py [--iters 30] [--warmup 5] [--threads 2] [--only layer_norm]
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def timed(fn, warmup, iters):
    """Wall ms per run, and (in CPU_MS) the process's CPU ms per run, as tk_bench_tensor_ops' cpu_ms."""
    for _ in range(warmup):
        fn()
    runs, CPU_MS[:] = [], []
    for _ in range(iters):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        runs.append(1e3 * (time.perf_counter() - t0))
        CPU_MS.append(1e3 * (time.process_time() - c0))
    return runs


CPU_MS = []  # the last timed()'s CPU ms per run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30, help="timed iterations (after --warmup untimed ones)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="layer_norm, softmax, log_softmax or batch_matmul (default: all)")
    args = ap.parse_args()

    import tensorflow as tf

    # Must be set before TF executes anything (runtime is initialised lazily).
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.set_visible_devices([], "GPU")

    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    log("keras %s / tensorflow %s, intra=%d inter=%d" % (
        keras.__version__, tf.__version__, tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads()))

    def emit(workload, shapes, runs):
        print(json.dumps({
            "framework": "keras", "workload": workload, "shapes": shapes,
            "ms": round(statistics.median(runs), 4), "min_ms": round(min(runs), 4),
            "cpu_ms": round(statistics.median(CPU_MS), 4),
            "version": keras.__version__, "backend": "tensorflow", "tensorflow_version": tf.__version__,
            "mode": "tf.function", "threads": args.threads, "runs_ms": [round(r, 4) for r in runs],
        }), flush=True)

    def normal(*shape):
        return tf.constant(rng.standard_normal(shape, dtype=np.float32))

    if args.only in ("", "layer_norm"):
        x, dy = normal(4096, 512), normal(4096, 512)
        layer = keras.layers.LayerNormalization()  # epsilon 1e-3, gamma ones, beta zeros
        layer.build((None, 512))

        @tf.function
        def layer_norm(x, dy):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x)
            return y, tape.gradient(y, [x, layer.gamma, layer.beta], output_gradients=dy)

        emit("layer_norm_fwd_bwd", "x (4096, 512), gamma/beta (512), GradientTape output_gradients=dy",
             timed(lambda: layer_norm(x, dy), args.warmup, args.iters))

    if args.only in ("", "softmax"):
        s = normal(4096, 1024)
        softmax = tf.function(lambda v: keras.ops.softmax(v, axis=-1))
        emit("softmax_fwd", "(4096, 1024), last axis", timed(lambda: softmax(s), args.warmup, args.iters))

    if args.only in ("", "log_softmax"):
        s = normal(4096, 1024)
        log_softmax = tf.function(lambda v: keras.ops.log_softmax(v, axis=-1))
        emit("log_softmax_fwd", "(4096, 1024), last axis", timed(lambda: log_softmax(s), args.warmup, args.iters))

    if args.only in ("", "batch_matmul"):
        a, b = normal(64, 128, 64), normal(64, 64, 128)
        bmm = tf.function(tf.linalg.matmul)
        emit("batch_matmul_fwd", "(64, 128, 64) x (64, 64, 128)", timed(lambda: bmm(a, b), args.warmup, args.iters))


if __name__ == "__main__":
    main()
