"""tf.data side of bench/pipeline.sh: the same pipelines as bench/pipeline.cpp, one JSON line each.

  python tfdata_pipeline.py throughput [--epochs 3]
  python tfdata_pipeline.py overlap --element-us 200 --step-ms 10 --parallel 2 [--elements 6400] [--batch 64]

overlap: tf.data cannot run an arbitrary C++ spin, so the per-element CPU cost is a chain of small matmuls
on one intra-op thread, calibrated to --element-us; the bound uses the cost measured here (sequential map,
no consumer), reported as element_us.
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def throughput(a):
    rng = np.random.default_rng(1)
    x = (rng.integers(0, 256, size=(60000, 784)) / 255.0).astype(np.float32)
    y = rng.integers(0, 10, size=(60000,)).astype(np.uint8)
    d = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10000, seed=42).batch(128).prefetch(tf.data.AUTOTUNE)
    for _ in d:  # warm-up pass
        pass
    t0 = time.perf_counter()
    batches = 0
    checksum = 0.0
    for _ in range(a.epochs):
        for bx, _ in d:
            checksum += float(bx[0, 0])
            batches += 1
    secs = time.perf_counter() - t0
    handoff = []
    it = iter(d)
    next(it)
    for _ in range(200):
        time.sleep(0.003)
        t = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        handoff.append((time.perf_counter() - t) * 1e6)
    print(json.dumps({"peer": "tf.data", "bench": "throughput", "batches_per_s": batches / secs,
                      "handoff_p50_us": float(np.percentile(handoff, 50)),
                      "handoff_p99_us": float(np.percentile(handoff, 99)), "tf": tf.__version__}))


def overlap(a):
    tf.config.threading.set_intra_op_parallelism_threads(1)
    m = tf.constant(np.random.default_rng(0).standard_normal((96, 96)).astype(np.float32) * 0.01)

    def costly(reps):
        def f(i):
            v = m
            for _ in range(reps):
                v = tf.linalg.matmul(v, m)
            return i + tf.cast(tf.reduce_sum(v) * 0.0, tf.int64)
        return f

    def per_element_us(reps, n=400):
        d = tf.data.Dataset.range(n).map(costly(reps))
        for _ in d.take(20):
            pass
        t = time.perf_counter()
        for _ in d:
            pass
        return (time.perf_counter() - t) / n * 1e6

    reps = max(1, round(a.element_us / per_element_us(1)))
    for _ in range(4):  # per-element overhead makes cost non-proportional to reps: refine
        element_us = per_element_us(reps)
        if abs(element_us - a.element_us) < 0.05 * a.element_us:
            break
        reps = max(1, round(reps * a.element_us / element_us))
    element_us = per_element_us(reps)
    d = (tf.data.Dataset.range(a.elements).map(costly(reps), num_parallel_calls=a.parallel)
         .batch(a.batch).prefetch(tf.data.AUTOTUNE))
    t0 = time.perf_counter()
    steps = 0
    for _ in d:
        time.sleep(a.step_ms * 1e-3)
        steps += 1
    secs = time.perf_counter() - t0
    compute = steps * a.step_ms * 1e-3
    load = a.elements * element_us * 1e-6 / a.parallel
    print(json.dumps({"peer": "tf.data", "bench": "overlap", "element_us": element_us, "step_ms": a.step_ms,
                      "parallel": a.parallel, "epoch_s": secs, "compute_s": compute, "load_over_parallel_s": load,
                      "ratio_to_bound": secs / max(compute, load), "tf": tf.__version__}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["throughput", "overlap"])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--element-us", type=float, default=200)
    p.add_argument("--step-ms", type=float, default=10)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--elements", type=int, default=6400)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    throughput(a) if a.mode == "throughput" else overlap(a)


if __name__ == "__main__":
    main()
