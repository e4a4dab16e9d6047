#!/usr/bin/env python3
"""Keras 3 peer for bench/resnet_accuracy.sh (issue 31's accuracy must-show): a small ResNet on Fashion-MNIST.

The model: 28x28x1 uint8-range input, Rescaling(1/255) inside the model, a 3x3 stem convolution (--filters' first),
then three stages of residual blocks (--filters, default 16, 32, 64; --blocks per stage, default 1). A block is
conv3x3 -> BN -> relu -> conv3x3 -> BN, added to the shortcut, then relu; the first block of each stage strides its
first convolution by 2 (stage 1: --first-stride, default 2, so the stages run at 14x14, 7x7 and 4x4) and its shortcut
is then a strided 1x1 convolution + BN (also when the width changes). GlobalAveragePooling2D, Dense(10, softmax).
Compiled with Adam (Keras' defaults), sparse categorical crossentropy and accuracy.

  --save FILE      seed the weights with --seed, save the untrained compiled model (what trainkit trains), exit
  --train FILE     load FILE (the same untrained model), fit it for --epochs with batch 128 (shuffled each epoch,
                   as Keras' fit does) and print {"peer": "keras-...", "seed": S, "test_accuracy": ...}

Prints one JSON line on stdout; logging goes to stderr. Backend: KERAS_BACKEND (jax by default here).
  KERAS_BACKEND=jax python bench/peers/keras_resnet_accuracy.py --seed 1 --save m.keras
  KERAS_BACKEND=jax python bench/peers/keras_resnet_accuracy.py --seed 1 --train m.keras --epochs 10
"""
import argparse
import contextlib
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def build(keras, filters, blocks, first_stride, schedule, epochs, batch_size, l2, dropout, flip):
    L = keras.layers
    reg = keras.regularizers.L2(l2) if l2 > 0 else None  # on every kernel

    def conv_bn(x, filters, kernel, stride):
        x = L.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False, kernel_regularizer=reg)(x)
        return L.BatchNormalization()(x)

    def block(x, filters, stride):
        shortcut = x if stride == 1 and x.shape[-1] == filters else conv_bn(x, filters, 1, stride)
        y = L.ReLU()(conv_bn(x, filters, 3, stride))
        y = conv_bn(y, filters, 3, 1)
        return L.ReLU()(L.Add()([y, shortcut]))

    inputs = keras.Input((28, 28, 1))
    x = L.Rescaling(1.0 / 255)(inputs)
    if flip:  # training-only augmentation: each image mirrored left-right with probability 1/2
        x = L.RandomFlip("horizontal")(x)
    x = L.ReLU()(conv_bn(x, filters[0], 3, 1))
    for stage, width in enumerate(filters):
        for b in range(blocks):
            x = block(x, width, (2 if stage > 0 else first_stride) if b == 0 else 1)
    x = L.GlobalAveragePooling2D()(x)
    if dropout > 0:
        x = L.Dropout(dropout)(x)
    outputs = L.Dense(10, activation="softmax", kernel_regularizer=reg)(x)
    model = keras.Model(inputs, outputs, name="small_resnet")
    learning_rate = 0.001  # Keras' default
    if schedule == "cosine":  # from 1e-3 down to 0 over the whole run
        steps = epochs * -(-60000 // batch_size)
        learning_rate = keras.optimizers.schedules.CosineDecay(0.001, decay_steps=steps)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--filters", default="16,32,64", help="filters of the three stages (the stem has the first)")
    ap.add_argument("--blocks", type=int, default=1, help="residual blocks per stage")
    ap.add_argument("--first-stride", type=int, default=2, choices=(1, 2),
                    help="stride of the first stage's first block (2: stages at 14x14, 7x7, 4x4; 1: 28, 14, 7)")
    ap.add_argument("--lr-schedule", default="constant", choices=("constant", "cosine"),
                    help="Adam's learning rate: Keras' constant 1e-3, or CosineDecay from 1e-3 to 0 over --epochs "
                    "epochs of --batch-size batches (the schedule is saved in the file, so both sides follow it)")
    ap.add_argument("--l2", type=float, default=0.0,
                    help="kernel_regularizer=L2(this) on every convolution and the Dense layer (0: none)")
    ap.add_argument("--dropout", type=float, default=0.0, help="Dropout(this) before the Dense layer (0: none)")
    ap.add_argument("--flip", action="store_true", help="RandomFlip(\"horizontal\") after the Rescaling")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--save", default="")
    ap.add_argument("--train", default="")
    args = ap.parse_args()
    if bool(args.save) == bool(args.train):
        ap.error("give exactly one of --save FILE and --train FILE")
    import keras
    import numpy as np

    keras.utils.set_random_seed(args.seed)
    if args.save:
        filters = [int(f) for f in args.filters.split(",")]
        if len(filters) != 3:
            ap.error("--filters takes three comma-separated widths, got " + args.filters)
        model = build(keras, filters, args.blocks, args.first_stride, args.lr_schedule, args.epochs,
                      args.batch_size, args.l2, args.dropout, args.flip)
        model.save(args.save)
        print(json.dumps({"saved": args.save, "seed": args.seed, "filters": filters, "blocks": args.blocks,
                          "first_stride": args.first_stride, "lr_schedule": args.lr_schedule, "l2": args.l2, "dropout": args.dropout, "flip": args.flip, "params": model.count_params()}), flush=True)
        return
    from _idx import load_fashion_mnist

    x_train, y_train = load_fashion_mnist(split="train")
    x_test, y_test = load_fashion_mnist(split="test")
    # (N, 28, 28, 1) float32 pixels in 0..255 (_idx gives them scaled to [0, 1]): the model's Rescaling scales them,
    # as it does the uint8 pixels trainkit's CLI feeds it.
    x_train = np.rint(x_train * 255).reshape(-1, 28, 28, 1).astype(np.float32)
    x_test = np.rint(x_test * 255).reshape(-1, 28, 28, 1).astype(np.float32)
    model = keras.models.load_model(args.train)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # the epoch lines: stdout carries the one JSON line
        model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, verbose=2)
    seconds = time.perf_counter() - t0
    loss, acc = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    print(json.dumps({"peer": "keras-" + keras.backend.backend(), "version": "keras " + keras.__version__,
                      "seed": args.seed, "epochs": args.epochs, "test_loss": round(float(loss), 4),
                      "test_accuracy": round(float(acc), 4), "fit_seconds": round(seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
