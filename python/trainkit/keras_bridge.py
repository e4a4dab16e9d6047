"""The Keras bridge: train, evaluate and run a Keras 3 model object with trainkit's runtime.

Each call builds a trainkit model from the Keras model's config (model.to_json(): what a .keras file's config.json
holds, read by the same code as `trainkit fit --model m.keras`) and copies the Keras weights in, layer by layer by
name. fit writes the trained weights (and the optimizer's variables, where their count and shapes match Keras') back
into the Keras model, which then predicts, evaluates and saves with Keras as usual.
"""

import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _trainkit
from ._arrays import Arrays, as_arrays, as_class_weight, as_sample_weight, split_validation
from ._callbacks import KerasCallbacks, split_callbacks, tensorboard_args

BatchSize = Union[int, str, None]


def _label(model: Any) -> str:
    return f"Keras model '{getattr(model, 'name', type(model).__name__)}'"


def _keras_layers(model: Any) -> Dict[str, Any]:
    return {layer.name: layer for layer in model.layers}


def _bridge(model: Any, device: str, dtype_policy: Optional[str], need_compile: bool) -> "_trainkit.Bridge":
    """The trainkit model for `model`, holding its weights. Errors name the model (and the layer)."""
    if not getattr(model, "built", True) or not model.weights:
        raise ValueError(f"{_label(model)} is not built: give it an Input (keras.Input) or call it on data first")
    if need_compile and getattr(model, "optimizer", None) is None:
        raise ValueError(f"{_label(model)} is not compiled: call model.compile(optimizer=..., loss=...) first")
    bridge = _trainkit.Bridge(model.to_json(), _label(model), need_compile)
    if device != "cpu":
        bridge.set_device(device)
    if dtype_policy is not None:
        bridge.set_dtype_policy(dtype_policy)
    layers = _keras_layers(model)
    weights: List[np.ndarray] = []
    for name, shapes in bridge.weight_layout():
        layer = layers.get(name)
        if layer is None:
            raise ValueError(f"{_label(model)}: trainkit's layer '{name}' has no Keras layer of that name")
        values = layer.get_weights()
        got = [tuple(np.shape(v)) for v in values]
        if got != [tuple(s) for s in shapes]:
            raise ValueError(
                f"{_label(model)}: layer '{name}' ({type(layer).__name__}) has weights of shapes {got}; "
                f"trainkit's layer has {[tuple(s) for s in shapes]}"
            )
        weights.extend(np.ascontiguousarray(v, dtype=np.float32) for v in values)
    bridge.set_weights(weights)
    if need_compile:
        _load_optimizer_state(model, bridge)
    return bridge


def _keras_file_dtype(a: np.ndarray) -> np.ndarray:
    """As a .keras file stores a variable: integers (the iteration count) as int64, floats as float32."""
    return np.ascontiguousarray(a, dtype=np.int64 if a.dtype.kind in "iu" else np.float32)


def _load_optimizer_state(model: Any, bridge: "_trainkit.Bridge") -> None:
    """A Keras optimizer that has stepped (a Keras fit, or an earlier tk.fit) hands its state to trainkit's."""
    optimizer = model.optimizer
    if not optimizer.built or int(optimizer.iterations.numpy()) == 0:
        return  # nothing learned yet: trainkit's initial state is Keras' initial state
    try:
        bridge.set_optimizer_variables([_keras_file_dtype(v.numpy()) for v in optimizer.variables])
    except (_trainkit.FormatError, ValueError) as e:
        warnings.warn(f"{_label(model)}: the optimizer's state was not taken over; trainkit starts it afresh ({e})",
                      stacklevel=4)


def _write_back(model: Any, bridge: "_trainkit.Bridge") -> None:
    """The trainkit model's weights (and optimizer variables) into the Keras model."""
    layers = _keras_layers(model)
    trained = bridge.get_weights()
    at = 0
    for name, shapes in bridge.weight_layout():
        layers[name].set_weights(trained[at : at + len(shapes)])
        at += len(shapes)
    opt_vars = bridge.optimizer_variables()
    optimizer = getattr(model, "optimizer", None)
    if opt_vars is None or optimizer is None:
        return
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    keras_vars = list(optimizer.variables)
    shapes_match = len(keras_vars) == len(opt_vars) and all(
        tuple(v.shape) == tuple(np.shape(a)) for v, a in zip(keras_vars, opt_vars)
    )
    if not shapes_match:
        warnings.warn(
            f"{_label(model)}: the optimizer's variables were not written back (Keras has {len(keras_vars)}, "
            f"trainkit {len(opt_vars)}); the weights were",
            stacklevel=3,
        )
        return
    for v, a in zip(keras_vars, opt_vars):
        v.assign(np.asarray(a).astype(v.dtype).reshape(tuple(v.shape)))


def _batch_size(batch_size: BatchSize) -> int:
    if batch_size is None:
        return 32  # Keras' default
    if isinstance(batch_size, str):
        if batch_size != "auto":
            raise ValueError(f"batch_size={batch_size!r}: a positive integer or 'auto'")
        return _trainkit.AUTO_BATCH_SIZE
    if int(batch_size) < 1:
        raise ValueError(f"batch_size={batch_size}: a positive integer or 'auto'")
    return int(batch_size)


def _verbose(verbose: Union[int, str]) -> int:
    if verbose == "auto":
        return -1  # a progress bar on a terminal, one line per epoch otherwise (as Keras)
    return int(verbose)


def _oom(message: str, plan: "_trainkit.MemoryPlan") -> "_trainkit.OutOfMemoryError":
    err = _trainkit.OutOfMemoryError(f"{message}\n{plan.to_string()}")
    err.plan = Plan(plan)
    return err


def _check_memory_limit(
    bridge: "_trainkit.Bridge", model: Any, batch: int, rows: int, memory_limit: Union[int, str]
) -> int:
    """The batch size to train with under `memory_limit` (bytes or '8GiB'), or OutOfMemoryError with the plan."""
    limit = memory_limit if isinstance(memory_limit, int) else _trainkit.parse_bytes(str(memory_limit))
    if batch == _trainkit.AUTO_BATCH_SIZE:
        batch = bridge.largest_batch_that_fits(limit, max(1, min(1024, rows)))
        if batch == 0:
            raise _oom(
                f"tk.fit: {_label(model)}: not even a batch of 1 fits memory_limit={memory_limit} "
                f"({_trainkit.format_bytes(limit)})",
                bridge.memory_plan(1),
            )
        return batch
    plan = bridge.memory_plan(batch)
    if plan.total > limit:
        raise _oom(
            f"tk.fit: {_label(model)}: a training step of batch {batch} needs {_trainkit.format_bytes(plan.total)}, "
            f"more than memory_limit={memory_limit} ({_trainkit.format_bytes(limit)}); use a smaller batch_size, "
            f"batch_size='auto', or dtype_policy='mixed_bfloat16'",
            plan,
        )
    return batch


def fit(
    model: Any,
    x: Arrays,
    y: Arrays,
    batch_size: BatchSize = None,
    epochs: int = 1,
    verbose: Union[int, str] = "auto",
    validation_split: float = 0.0,
    validation_data: Optional[Tuple[Any, ...]] = None,
    shuffle: bool = True,
    class_weight: Optional[Dict[int, float]] = None,
    sample_weight: Any = None,
    initial_epoch: int = 0,
    device: str = "cpu",
    dtype_policy: Optional[str] = None,
    memory_limit: Union[int, str, None] = None,
    seed: int = 0,
    callbacks: Optional[Sequence[Any]] = None,
    backup_dir: Union[str, "os.PathLike[str]", None] = None,
    backup_freq: Union[str, int] = "epoch",
    keep_backup: bool = False,
) -> Any:
    """Trains the compiled Keras model `model` with trainkit, as model.fit would; returns a keras History.

    The Keras model is changed only when training ran: it then holds the trained weights and optimizer state.
    memory_limit (bytes or '8GiB'): the planned training step must fit in it, checked before anything trains
    (tk.OutOfMemoryError carrying the plan otherwise); with batch_size='auto' the largest batch that fits.
    callbacks: Keras callbacks, called as model.fit calls them (docs/python.md, "Callbacks", says when the Keras
    model holds the current weights). backup_dir: crash-safe resume, as `trainkit fit --backup-dir`: the training
    state is saved there every epoch (or every backup_freq steps) and a later tk.fit with the same model, data and
    seed continues where it stopped; the backup is removed when training ends unless keep_backup.
    Ctrl-C stops at the next step boundary: the Keras model gets the weights of the steps that finished, then
    KeyboardInterrupt is raised. A callback raising leaves the same way, with its exception.
    sample_weight (one weight per row, or (rows, steps) for a sequence output), class_weight ({class id: weight}) and
    validation_data=(x, y, sample_weight) weight the loss as Keras does (compile's metrics are not weighted).
    """
    xs, ys = as_arrays(x, "fit: x"), as_arrays(y, "fit: y")
    weights = as_sample_weight(sample_weight, "fit: sample_weight")
    split = split_callbacks(callbacks, _label(model))
    bridge = _bridge(model, device, dtype_policy, need_compile=True)
    batch = _batch_size(batch_size)
    if memory_limit is not None:
        rows = int(len(xs[0]) * (1.0 - validation_split))
        batch = _check_memory_limit(bridge, model, batch, rows, memory_limit)
    args = _trainkit.FitArgs()
    args.batch_size = batch
    args.epochs = int(epochs)
    args.verbose = _verbose(verbose)
    args.validation_split = float(validation_split)
    args.shuffle = bool(shuffle)
    args.initial_epoch = int(initial_epoch)
    args.seed = int(seed)
    args.class_weight = as_class_weight(class_weight, "fit")
    if split["tensorboard"] is not None:
        tensorboard_args(split["tensorboard"], args, _label(model))
    if backup_dir is not None:
        args.backup_dir = os.fspath(backup_dir)
        if backup_freq != "epoch":
            if isinstance(backup_freq, bool) or not isinstance(backup_freq, int) or backup_freq < 1:
                raise ValueError(f"fit: backup_freq={backup_freq!r}: 'epoch' or a positive number of steps")
            args.backup_save_freq = backup_freq
        args.keep_backup = bool(keep_backup)
    elif keep_backup or backup_freq != "epoch":
        raise ValueError("fit: backup_freq and keep_backup need backup_dir")
    val, val_weights = None, None
    if validation_data is not None:
        vx, vy, vw = split_validation(validation_data, "fit")
        val = (as_arrays(vx, "fit: validation_data x"), as_arrays(vy, "fit: validation_data y"))
        val_weights = as_sample_weight(vw, "fit: validation_data sample_weight")
    dispatcher = KerasCallbacks(model, bridge, split["python"], _write_back)
    try:
        bridge.fit(xs, ys, args, val, dispatcher, weights, val_weights)
    except KeyboardInterrupt:
        _write_back(model, bridge)  # the steps that ran: the model is consistent, as after Keras' own interrupt
        raise
    except BaseException:
        if dispatcher.raised:  # a callback raised: as in Keras, the model keeps the steps that ran
            _write_back(model, bridge)
        raise
    _write_back(model, bridge)
    return split["history"]


def evaluate(
    model: Any,
    x: Arrays,
    y: Arrays,
    batch_size: BatchSize = None,
    return_dict: bool = False,
    device: str = "cpu",
    dtype_policy: Optional[str] = None,
    sample_weight: Any = None,
) -> Union[float, List[float], Dict[str, float]]:
    """The compiled Keras model's loss and metrics on (x, y), computed by trainkit (as model.evaluate returns them);
    sample_weight weights the loss as Keras does."""
    xs, ys = as_arrays(x, "evaluate: x"), as_arrays(y, "evaluate: y")
    weights = as_sample_weight(sample_weight, "evaluate: sample_weight")
    bridge = _bridge(model, device, dtype_policy, need_compile=True)
    batch = _batch_size(batch_size)
    if batch == _trainkit.AUTO_BATCH_SIZE:
        raise ValueError("evaluate: batch_size='auto' applies to fit only")
    logs = bridge.evaluate(xs, ys, batch, weights)
    if return_dict:
        return dict(logs)
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def predict(
    model: Any, x: Arrays, batch_size: BatchSize = None, device: str = "cpu", dtype_policy: Optional[str] = None
) -> Union[np.ndarray, List[np.ndarray]]:
    """The Keras model's outputs on x, computed by trainkit: one array, or a list for several outputs."""
    xs = as_arrays(x, "predict: x")
    bridge = _bridge(model, device, dtype_policy, need_compile=False)
    batch = _batch_size(batch_size)
    if batch == _trainkit.AUTO_BATCH_SIZE:
        raise ValueError("predict: batch_size='auto' applies to fit only")
    outs = bridge.predict(xs, batch)
    return outs[0] if len(outs) == 1 else outs


class Plan:
    """The memory plan of one training step (what `trainkit plan` prints); a notebook shows it as its SVG."""

    def __init__(self, plan: "_trainkit.MemoryPlan") -> None:
        self.memory_plan = plan

    @property
    def total(self) -> int:
        return self.memory_plan.total

    @property
    def batch_size(self) -> int:
        return self.memory_plan.batch_size

    def __str__(self) -> str:
        return self.memory_plan.to_string()

    def __repr__(self) -> str:
        return f"<trainkit.Plan batch_size={self.batch_size} total={_trainkit.format_bytes(self.total)}>"

    def _repr_svg_(self) -> str:
        return self.memory_plan.svg()


def plan(model: Any, batch_size: int = 32, device: str = "cpu", dtype_policy: Optional[str] = None) -> Plan:
    """The memory plan of one training step of the compiled Keras model at `batch_size`, without running it."""
    bridge = _bridge(model, device, dtype_policy, need_compile=True)
    batch = _batch_size(batch_size)
    if batch == _trainkit.AUTO_BATCH_SIZE:
        raise ValueError("plan: give a batch size (fit(batch_size='auto') picks one from the plan)")
    return Plan(bridge.memory_plan(batch))
