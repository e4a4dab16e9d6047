"""trainkit from Python.

    import keras, trainkit as tk
    history = tk.fit(keras_model, x_train, y_train, batch_size=128, epochs=10, validation_split=0.1)
    keras_model.predict(x_test)          # the Keras model holds the weights trainkit trained

or, without Keras, trainkit's own models with Keras' names:

    model = tk.Sequential([tk.Input((784,)), tk.layers.Dense(256, activation="relu"), tk.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=128, epochs=10)

docs/python.md says what each function does (and what it does not do yet).
"""

import os as _os
from pathlib import Path as _Path

# The process libhdf5 reads files in (src/data/hdf5_isolation.h) is installed beside the CLI, not beside Python.
_helper = _Path(__file__).resolve().parent / "bin" / "trainkit-hdf5-helper"
if _helper.is_file():
    _os.environ.setdefault("TK_HDF5_HELPER", str(_helper))

from ._trainkit import (  # noqa: E402
    DeviceInfo,
    Error,
    FormatError,
    MemoryPlan,
    OutOfMemoryError,
    UnsupportedError,
    format_bytes,
    parse_bytes,
)
from . import _trainkit, config  # noqa: E402
from .keras_bridge import Plan, evaluate, fit, plan, predict  # noqa: E402
from . import data, datasets, layers, losses, models, optimizers, utils  # noqa: E402
from .layers import Input  # noqa: E402
from .models import History, Model, Sequential  # noqa: E402


def devices() -> "list[DeviceInfo]":
    """The devices this process may use: cpu:0 (and its logical devices), then cuda:0, cuda:1, ... where the CUDA
    backend is built and a GPU is present (CUDA_VISIBLE_DEVICES and TK_VISIBLE_DEVICES applied). `name` ("cuda:0"),
    `device_type` ("CPU"/"GPU"), `description` (the CPU model or GPU name), `total` bytes, and for a GPU `uuid`,
    `pci_bus_id`, `compute_capability`, `free`."""
    return _trainkit.list_devices()


def clear_session() -> None:
    """Resets the automatic layer and model names ("dense", "dense_1", ...) and trainkit's global seed stream, as
    keras.backend.clear_session() does; models already made keep working."""
    layers._reset_names()
    _trainkit.clear_session()


__version__ = "0.1.0"

__all__ = [
    "DeviceInfo",
    "Error",
    "FormatError",
    "History",
    "Input",
    "MemoryPlan",
    "Model",
    "OutOfMemoryError",
    "Plan",
    "Sequential",
    "UnsupportedError",
    "clear_session",
    "config",
    "data",
    "datasets",
    "devices",
    "evaluate",
    "fit",
    "format_bytes",
    "layers",
    "losses",
    "models",
    "optimizers",
    "parse_bytes",
    "plan",
    "predict",
    "utils",
]
