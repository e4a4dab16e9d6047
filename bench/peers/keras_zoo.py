#!/usr/bin/env python3
"""Keras 3 (TensorFlow backend) peer: one training step of a keras.applications model at 32x32, 10 classes (logits),
SGD(0.01), sparse categorical crossentropy; the median of train_on_batch over --steps after --warmup. With --save,
also writes the compiled model as a .keras file (what bench/zoo_step.sh gives trainkit, so both train one model).

Prints one JSON line on stdout (bench/summarize.py); logging goes to stderr.
  .venv/bin/python bench/peers/keras_zoo.py --model resnet50 [--batch-size 32] [--threads 2] [--save m.keras]
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODELS = {"resnet50": "ResNet50", "resnet50v2": "ResNet50V2", "densenet121": "DenseNet121", "vgg16": "VGG16",
          "mobilenetv2": "MobileNetV2", "efficientnetb0": "EfficientNetB0"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save", default="")
    args = ap.parse_args()
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras

    model = getattr(keras.applications, MODELS[args.model])(
        input_shape=(32, 32, 3), weights=None, classes=10, classifier_activation=None)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if args.save:
        model.save(args.save)
    rng = np.random.default_rng(0)
    x = rng.random((args.batch_size, 32, 32, 3), dtype=np.float32)
    y = (np.arange(args.batch_size) % 10).astype(np.int32)
    ms = []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        model.train_on_batch(x, y)
        if s >= args.warmup:
            ms.append(1e3 * (time.perf_counter() - t0))
    med = statistics.median(ms)
    print(json.dumps({"peer": "keras-tf", "version": f"keras {keras.__version__}, tensorflow {tf.__version__}",
                      "threads": args.threads, "model": args.model, "batch_size": args.batch_size,
                      "step_ms": round(med, 2), "samples_per_s": round(1e3 * args.batch_size / med, 1)}), flush=True)


if __name__ == "__main__":
    main()
