"""tk.Model, tk.Sequential and tk.models.load_model: trainkit's own models (include/trainkit/nn/model.h) with Keras'
methods.

    model = tk.Sequential([tk.Input((784,)), tk.layers.Dense(256, activation="relu"), tk.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=128, epochs=10, validation_split=0.1)
    model.evaluate(x_test, y_test); model.predict(x_test); model.summary(); model.save("m.keras")

The model is a tk::Model made from the layers' Keras config by trainkit's Keras config reader (the code that loads
.keras files); fit / evaluate / predict run in C++ on the NumPy arrays in place, with the GIL released. A model saved
here is a Keras 3 file: keras.models.load_model reads it.
"""

import json
import os
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _trainkit
from ._arrays import as_arrays, as_class_weight, as_sample_weight, split_validation
from ._objects import serialize
from . import data as tk_data
from .data import Dataset
from .keras_bridge import Plan, _batch_size, _verbose
from .layers import InputLayer, KerasTensor, Layer, _LoadedLayer, _unique_name


class History:
    """What fit returns, as keras.callbacks.History: history (metric -> per-epoch values), epoch, params, model."""

    def __init__(self, epoch: List[int], history: Dict[str, List[float]], params: Dict[str, Any], model: "Model"):
        self.epoch = list(epoch)
        self.history = {k: list(v) for k, v in history.items()}
        self.params = dict(params)
        self.model = model

    def __repr__(self) -> str:
        return f"<trainkit.History epochs={len(self.epoch)} keys={list(self.history)}>"


class _Callbacks:
    """The dispatcher trainkit's loop calls (python/src/callbacks.h) for a native model's callbacks: objects with
    any of Keras' hooks (keras.callbacks.Callback subclasses, or plain objects). Each method returns True when a
    callback set model.stop_training."""

    _HOOKS = ("on_train_begin", "on_epoch_begin", "on_train_batch_begin", "on_train_batch_end", "on_epoch_end",
              "on_train_end")

    def __init__(self, model: "Model", callbacks: Sequence[Any]) -> None:
        self.model = model
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            if not any(callable(getattr(cb, h, None)) for h in self._HOOKS):
                raise ValueError(f"fit: callbacks: {cb!r} has none of Keras' hooks ({', '.join(self._HOOKS)})")
        self.batch_begin = any(callable(getattr(cb, "on_train_batch_begin", None)) for cb in self.callbacks)
        self.batch_end = any(callable(getattr(cb, "on_train_batch_end", None)) for cb in self.callbacks)

    def _call(self, hook: str, *args: Any) -> bool:
        for cb in self.callbacks:
            fn = getattr(cb, hook, None)
            if callable(fn):
                fn(*args)
        return bool(self.model.stop_training)

    def on_train_begin(self, params: Dict[str, Any], logs: Dict[str, float]) -> bool:
        self.model.stop_training = False
        for cb in self.callbacks:
            if callable(getattr(cb, "set_model", None)):
                try:
                    cb.set_model(self.model)
                except Exception:  # a Keras callback that insists on a keras.Model: it keeps model None
                    pass
            if callable(getattr(cb, "set_params", None)):
                cb.set_params(dict(params))
        return self._call("on_train_begin", logs)

    def on_epoch_begin(self, epoch: int, logs: Dict[str, float]) -> bool:
        return self._call("on_epoch_begin", epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: Dict[str, float]) -> bool:
        return self._call("on_train_batch_begin", batch, logs)

    def on_train_batch_end(self, batch: int, logs: Dict[str, float]) -> bool:
        return self._call("on_train_batch_end", batch, logs)

    def on_epoch_end(self, epoch: int, logs: Dict[str, float]) -> bool:
        return self._call("on_epoch_end", epoch, logs)

    def on_train_end(self, logs: Dict[str, float]) -> bool:
        return self._call("on_train_end", logs)


def _tensor_ref(name: str, node: int, dtype: str) -> Dict[str, Any]:
    return {"class_name": "__keras_tensor__", "config": {"shape": None, "dtype": dtype, "keras_history": [name, node, 0]}}


def _functional_config(
    inputs: List[KerasTensor], outputs: List[KerasTensor], name: str
) -> Tuple[Dict[str, Any], List[Layer]]:
    """The Keras 3 Functional config of the graph from `inputs` to `outputs` (what model.to_json() holds), and its
    layers in order."""
    order: List[Layer] = []  # layers, inputs before the layers that read them
    nodes: Dict[int, List[int]] = {}  # id(layer) -> its calls in this graph (indices into layer._nodes)
    seen = set()

    def visit(t: KerasTensor) -> None:
        layer, node, _ = t._history
        key = (id(layer), node)
        if key in seen:
            return
        seen.add(key)
        if not isinstance(layer, InputLayer):
            for x in layer._nodes[node]:
                visit(x)
        if id(layer) not in nodes:
            nodes[id(layer)] = []
            order.append(layer)
        nodes[id(layer)].append(node)

    for t in inputs + outputs:
        visit(t)
    for t in inputs:
        if not isinstance(t, KerasTensor) or not isinstance(t._history[0], InputLayer):
            raise ValueError(f"tk.Model: inputs must be tk.Input tensors, got {t!r}")
    given = {id(t._history[0]) for t in inputs}
    stray = [layer.name for layer in order if isinstance(layer, InputLayer) and id(layer) not in given]
    if stray:
        raise ValueError(f"tk.Model '{name}': the outputs depend on the input(s) {stray}, which are not in inputs")

    def ref(t: KerasTensor) -> Dict[str, Any]:
        layer, node, _ = t._history
        return _tensor_ref(layer.name, sorted(nodes[id(layer)]).index(node), t.dtype)

    layers = []
    for layer in order:
        obj = layer._keras_object()
        inbound = []
        if not isinstance(layer, InputLayer):
            for node in sorted(nodes[id(layer)]):
                ins = layer._nodes[node]
                args = [ref(ins[0])] if len(ins) == 1 else [[ref(x) for x in ins]]
                inbound.append({"args": args, "kwargs": {}})
        obj["inbound_nodes"] = inbound
        layers.append(obj)
    ins = [[t._history[0].name, 0, 0] for t in inputs]
    outs = [ref(t)["config"]["keras_history"] for t in outputs]
    return {
        "module": "keras.src.models.functional",
        "class_name": "Functional",
        "config": {
            "name": name,
            "trainable": True,
            "layers": layers,
            "input_layers": ins[0] if len(ins) == 1 else ins,
            "output_layers": outs[0] if len(outs) == 1 else outs,
        },
        "registered_name": "Functional",
    }, order


def _as_list(x: Any) -> List[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


class Model:
    """A functional model: tk.Model(inputs, outputs) over tk.Input tensors and layers called on them."""

    def __init__(self, inputs: Any = None, outputs: Any = None, name: Optional[str] = None) -> None:
        self.name: str = name or _unique_name("functional")
        self.stop_training = False
        self._bridge: Optional["_trainkit.Bridge"] = None
        self._compile_config: Optional[Dict[str, Any]] = None
        self._layers: List[Layer] = []
        self._device = "cpu"
        self._dtype_policy: Optional[str] = None
        if inputs is None and outputs is None:
            return  # subclasses (Sequential) and load_model set the model up
        ins, outs = _as_list(inputs), _as_list(outputs)
        if not ins or not outs or not all(isinstance(t, KerasTensor) for t in ins + outs):
            raise ValueError("tk.Model(inputs, outputs): tk.Input tensors, and tensors made by calling layers on them")
        config, self._layers = _functional_config(ins, outs, self.name)
        self._build(config)

    # ------------------------------------------------------------------------------------------ building
    @property
    def _label(self) -> str:
        return f"model '{self.name}'"

    def _build(self, config: Dict[str, Any]) -> None:
        """The trainkit model from its Keras config, compiled when compile() was called first."""
        bridge = _trainkit.Bridge(json.dumps(config), self._label, False)
        if self._device != "cpu":
            bridge.set_device(self._device)
        if self._dtype_policy is not None:
            bridge.set_dtype_policy(self._dtype_policy)
        if self._compile_config is not None:
            self._compile_bridge(bridge, self._compile_config)
        self._set_bridge(bridge)

    def _set_bridge(self, bridge: "_trainkit.Bridge") -> None:
        self._bridge = bridge
        loaded = json.loads(bridge.to_json())
        by_name = {layer.name: layer for layer in self._layers}
        layers = []
        for obj in loaded["config"]["layers"]:
            name = obj.get("config", {}).get("name", obj.get("name"))
            if obj.get("class_name") == "InputLayer" and loaded["class_name"] == "Sequential":
                continue  # Keras' Sequential.layers leaves the input out
            layers.append(by_name.get(name) or _LoadedLayer(obj))
        for layer in layers:
            layer._model = weakref.ref(self)
        self._layers = layers
        for layer in layers:
            if getattr(layer, "_adapted", None) is not None:
                self._set_adapted(layer)

    def _set_adapted(self, layer: Layer) -> None:
        """An adapted layer's statistics (Normalization.adapt) into this model's weights of that layer."""
        current = self._layer_weights(layer.name)
        if len(current) != 3:
            raise ValueError(f"{self._label}: layer '{layer.name}' has no adapted weights (mean, variance, count)")
        self._set_layer_weights(layer.name, layer._adapted_weights(current[2]))  # type: ignore[attr-defined]

    def _ensure_built(self, x: Optional[List[np.ndarray]] = None) -> "_trainkit.Bridge":
        if self._bridge is None:
            raise ValueError(f"{self._label} is not built: give it an input (tk.Input) or fit it on data first")
        return self._bridge

    @property
    def built(self) -> bool:
        return self._bridge is not None

    @property
    def layers(self) -> List[Layer]:
        return list(self._layers)

    def get_layer(self, name: Optional[str] = None, index: Optional[int] = None) -> Layer:
        if index is not None:
            return self._layers[index]
        for layer in self._layers:
            if layer.name == name:
                return layer
        raise ValueError(f"{self._label} has no layer named '{name}' (its layers: {[lr.name for lr in self._layers]})")

    # ------------------------------------------------------------------------------------------ where and how
    def set_device(self, device: str) -> None:
        """Where the model runs: "cpu", "cuda", "cuda:1" (Model::set_device). Before the first fit / evaluate /
        predict (a ValueError afterwards); NotImplementedError when this build has no backend for it."""
        if self._bridge is not None:
            self._bridge.set_device(device)
        else:
            _trainkit.device_name(device)  # a ValueError for a name trainkit does not know, now
        self._device = device

    def set_dtype_policy(self, policy: str) -> None:
        """Keras' dtype policy for every layer without its own: "float32", "mixed_float16", "mixed_bfloat16"
        (Model::set_dtype_policy). Before the first fit / evaluate / predict."""
        if self._bridge is not None:
            self._bridge.set_dtype_policy(policy)
        self._dtype_policy = policy

    # ------------------------------------------------------------------------------------------ compile
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Optional[Sequence[Any]] = None) -> None:
        """Keras' compile: optimizer (a name, tk.optimizers.X or keras.optimizers.X), loss (a name, tk.losses.X or
        keras.losses.X; a list for several outputs), metrics (names such as "accuracy", or keras.metrics objects)."""
        if loss is None:
            raise ValueError(f"compile: {self._label}: give a loss (e.g. loss='sparse_categorical_crossentropy')")
        losses = [serialize(l, "loss") for l in loss] if isinstance(loss, (list, tuple)) else serialize(loss, "loss")
        if metrics is not None and not isinstance(metrics, (list, tuple)):
            raise ValueError(f"compile: metrics must be a list, got {metrics!r}")
        config = {
            "optimizer": serialize(optimizer, "optimizer"),
            "loss": losses,
            "metrics": [serialize(m, "metric") for m in metrics] if metrics else None,
        }
        if self._bridge is not None:
            self._compile_bridge(self._bridge, config)
        self._compile_config = config

    def _compile_bridge(self, bridge: "_trainkit.Bridge", config: Dict[str, Any]) -> None:
        try:
            bridge.compile(json.dumps(config), self._label)
        except _trainkit.UnsupportedError as e:
            # An unknown name is a bad argument (Keras' ValueError); the config reader calls every refusal unsupported.
            if "unknown" in str(e):
                raise ValueError(str(e)) from None
            raise

    @property
    def compiled(self) -> bool:
        return self._compile_config is not None or (self._bridge is not None and self._bridge.compiled)

    def _compiled_bridge(self, what: str, x: Optional[List[np.ndarray]] = None) -> "_trainkit.Bridge":
        bridge = self._ensure_built(x)
        if not bridge.compiled:
            raise ValueError(f"{what}: {self._label} is not compiled: call model.compile(optimizer=..., loss=...) first")
        return bridge

    # ------------------------------------------------------------------------------------------ training
    def fit(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: Union[int, str, None] = None,
        epochs: int = 1,
        verbose: Union[int, str] = "auto",
        callbacks: Optional[Sequence[Any]] = None,
        validation_split: float = 0.0,
        validation_data: Any = None,
        shuffle: bool = True,
        class_weight: Optional[Dict[int, float]] = None,
        sample_weight: Any = None,
        initial_epoch: int = 0,
        steps_per_epoch: Optional[int] = None,
        validation_steps: Optional[int] = None,
        seed: int = 0,
        backup_dir: Union[str, "os.PathLike[str]", None] = None,
    ) -> History:
        """Keras' fit on arrays (x, y) or on a tk.data.Dataset of (x, y) batches; returns a History.

        batch_size="auto": the largest batch whose memory plan fits the device budget. seed: the shuffle order
        (0: from tk.utils.set_random_seed). steps_per_epoch / validation_steps: batches per epoch / per validation
        (None: one pass; a repeated Dataset needs steps_per_epoch). backup_dir: crash-safe resume, as
        `trainkit fit --backup-dir`. sample_weight (one weight per row; a Dataset's elements may carry it as
        (x, y, sample_weight)), class_weight ({class id: weight}) and validation_data=(x, y, sample_weight) weight the
        loss as Keras does (compile's metrics are not weighted).
        Ctrl-C stops at the next step boundary (KeyboardInterrupt; the model keeps the steps that ran)."""
        if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 1:
            raise ValueError(f"fit: epochs must be a positive integer, got {epochs!r}")
        if not 0.0 <= float(validation_split) < 1.0:
            raise ValueError(f"fit: validation_split must be in [0, 1), got {validation_split!r}")
        args = _trainkit.FitArgs()
        args.epochs = int(epochs)
        args.verbose = _verbose(verbose)
        args.validation_split = float(validation_split)
        args.shuffle = bool(shuffle)
        args.initial_epoch = int(initial_epoch)
        args.seed = int(seed)
        args.class_weight = as_class_weight(class_weight, "fit")
        for what, steps in (("steps_per_epoch", steps_per_epoch), ("validation_steps", validation_steps)):
            if steps is not None:
                if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
                    raise ValueError(f"fit: {what} must be None or a positive integer, got {steps!r}")
                setattr(args, what, int(steps))
        if isinstance(x, Dataset) and x.cardinality() == tk_data.INFINITE_CARDINALITY and steps_per_epoch is None:
            raise ValueError("fit: the dataset repeats forever: give steps_per_epoch")
        if backup_dir is not None:
            args.backup_dir = os.fspath(backup_dir)
        dispatcher = _Callbacks(self, callbacks) if callbacks else None
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError("fit: y must be None when x is a tk.data.Dataset (its elements hold the targets)")
            if batch_size is not None:
                raise ValueError("fit: batch_size must be None when x is a tk.data.Dataset (the dataset batches)")
            if validation_split:
                raise ValueError("fit: validation_split is not supported with a tk.data.Dataset: give validation_data")
            if sample_weight is not None:
                raise ValueError("fit: sample_weight must be None when x is a tk.data.Dataset (its elements carry the "
                                 "weights: (x, y, sample_weight))")
            val = None
            if validation_data is not None:
                val = validation_data if isinstance(validation_data, Dataset) else self._val_dataset(validation_data)
            bridge = self._compiled_bridge("fit", self._first_batch(x))
            epoch, history, params = bridge.fit_dataset(x._native, args, None if val is None else val._native,
                                                        dispatcher)
            return History(epoch, history, params, self)
        if x is None or y is None:
            raise ValueError("fit: give x and y (arrays), or x = a tk.data.Dataset of (x, y) batches")
        xs, ys = as_arrays(x, "fit: x"), as_arrays(y, "fit: y")
        weights = as_sample_weight(sample_weight, "fit: sample_weight")
        args.batch_size = _batch_size(batch_size)
        bridge = self._compiled_bridge("fit", xs)
        val, val_weights = None, None
        if validation_data is not None:
            if isinstance(validation_data, Dataset):
                raise ValueError("fit: validation_data is a tk.data.Dataset: fit on a Dataset too, or give (x_val, y_val)")
            vx, vy, vw = self._val_arrays(validation_data)
            val, val_weights = (vx, vy), vw
        epoch, history, params = bridge.fit(xs, ys, args, val, dispatcher, weights, val_weights)
        return History(epoch, history, params, self)

    def _first_batch(self, dataset: Dataset) -> Optional[List[np.ndarray]]:
        """An unbuilt model's first data from a dataset (one element read), to build it as Keras does."""
        if self._bridge is not None:
            return None
        for element in dataset:
            return [element[0] if isinstance(element, tuple) else element]
        raise ValueError("fit: the dataset is empty")

    @staticmethod
    def _val_arrays(validation_data: Any) -> Tuple[List[np.ndarray], List[np.ndarray], Optional[np.ndarray]]:
        if isinstance(validation_data, Dataset):
            raise ValueError("fit: validation_data is a tk.data.Dataset: fit on a Dataset too, or give (x_val, y_val)")
        vx, vy, vw = split_validation(validation_data, "fit")
        return (as_arrays(vx, "fit: validation_data x"), as_arrays(vy, "fit: validation_data y"),
                as_sample_weight(vw, "fit: validation_data sample_weight"))

    def _val_dataset(self, validation_data: Any) -> Dataset:
        vx, vy, vw = self._val_arrays(validation_data)
        return Dataset.from_tensor_slices(tuple(vx + vy + ([] if vw is None else [vw]))).batch(32)

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: Optional[int] = None,
        verbose: Union[int, str] = "auto",
        sample_weight: Any = None,
        return_dict: bool = False,
    ) -> Union[float, List[float], Dict[str, float]]:
        """The loss and metrics (Keras' shapes: the loss alone, [loss, metric, ...], or a dict). sample_weight weights
        the loss as Keras does (a Dataset's elements may carry it: (x, y, sample_weight))."""
        del verbose  # evaluate prints nothing
        if isinstance(x, Dataset):
            if y is not None or batch_size is not None or sample_weight is not None:
                raise ValueError("evaluate: y, batch_size and sample_weight must be None when x is a tk.data.Dataset")
            logs = self._compiled_bridge("evaluate", self._first_batch(x)).evaluate_dataset(x._native)
        else:
            if x is None or y is None:
                raise ValueError("evaluate: give x and y (arrays), or x = a tk.data.Dataset of (x, y) batches")
            xs, ys = as_arrays(x, "evaluate: x"), as_arrays(y, "evaluate: y")
            batch = _batch_size(batch_size)
            if batch == _trainkit.AUTO_BATCH_SIZE:
                raise ValueError("evaluate: batch_size='auto' applies to fit only")
            weights = as_sample_weight(sample_weight, "evaluate: sample_weight")
            logs = self._compiled_bridge("evaluate", xs).evaluate(xs, ys, batch, weights)
        if return_dict:
            return dict(logs)
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: Optional[int] = None, verbose: Union[int, str] = "auto") -> Any:
        """The model's outputs as NumPy arrays (a list for several outputs)."""
        del verbose
        if isinstance(x, Dataset):
            if batch_size is not None:
                raise ValueError("predict: batch_size must be None when x is a tk.data.Dataset")
            outs = self._ensure_built(self._first_batch(x)).predict_dataset(x._native)
        else:
            xs = as_arrays(x, "predict: x")
            batch = _batch_size(batch_size)
            if batch == _trainkit.AUTO_BATCH_SIZE:
                raise ValueError("predict: batch_size='auto' applies to fit only")
            outs = self._ensure_built(xs).predict(xs, batch)
        return outs[0] if len(outs) == 1 else outs

    def __call__(self, x: Any) -> Any:
        """On arrays: predict (Keras' model(x) in inference mode)."""
        return self.predict(x)

    # ------------------------------------------------------------------------------------------ inspection
    def summary(self, print_fn: Optional[Callable[[str], Any]] = None) -> None:
        """Keras' table: layers, output shapes, parameter counts."""
        text = self._ensure_built().summary().rstrip("\n")
        (print_fn or print)(text)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython
        p.text(self._bridge.summary() if self._bridge is not None else repr(self))

    def __repr__(self) -> str:
        return f"<trainkit.{type(self).__name__} name={self.name}, built={self.built}>"

    def count_params(self) -> int:
        return self._ensure_built().count_params()

    def to_json(self) -> str:
        """The model's Keras 3 config (what a .keras file's config.json holds)."""
        return self._ensure_built().to_json()

    def plan(self, batch_size: int = 32) -> Plan:
        """The memory plan of one training step at batch_size (a notebook shows it as SVG)."""
        return Plan(self._compiled_bridge("plan").memory_plan(_batch_size(batch_size)))

    # ------------------------------------------------------------------------------------------ weights and files
    def get_weights(self) -> List[np.ndarray]:
        return list(self._ensure_built().get_weights())

    def set_weights(self, weights: Sequence[Any]) -> None:
        # (np.asarray, not ascontiguousarray, which makes a scalar weight such as Normalization's count 1-D)
        self._ensure_built().set_weights([np.asarray(w, dtype=np.float32, order="C") for w in weights])

    def _layer_weights(self, name: str) -> List[np.ndarray]:
        bridge = self._ensure_built()
        at = 0
        weights = bridge.get_weights()
        for layer_name, shapes in bridge.weight_layout():
            if layer_name == name:
                return list(weights[at : at + len(shapes)])
            at += len(shapes)
        return []

    def _set_layer_weights(self, name: str, values: Sequence[Any]) -> None:
        bridge = self._ensure_built()
        weights = list(bridge.get_weights())
        at = 0
        for layer_name, shapes in bridge.weight_layout():
            if layer_name == name:
                if len(values) != len(shapes):
                    raise ValueError(f"layer '{name}' has {len(shapes)} weights, got {len(values)}")
                for i, (v, s) in enumerate(zip(values, shapes)):
                    if tuple(np.shape(v)) != tuple(s):
                        raise ValueError(f"layer '{name}': weight {i} has shape {tuple(s)}, got {np.shape(v)}")
                    weights[at + i] = v
                self.set_weights(weights)
                return
            at += len(shapes)
        if values:
            raise ValueError(f"layer '{name}' has no weights")

    def save(self, filepath: Union[str, "os.PathLike[str]"], overwrite: bool = True) -> None:
        """A Keras 3 file: .keras (config, weights, optimizer state) or .weights.h5 (weights alone), written
        atomically. overwrite=False: FileExistsError when the file exists."""
        path = os.fspath(filepath)
        if not overwrite and os.path.exists(path):
            raise FileExistsError(f"save: '{path}' exists (overwrite=False)")
        bridge = self._ensure_built()
        if path.endswith(".weights.h5"):
            bridge.save_weights(path)
        elif path.endswith(".keras"):
            bridge.save(path)
        else:
            raise ValueError(f"save: '{path}': the file name must end in .keras (or .weights.h5 for the weights alone)")

    def save_weights(self, filepath: Union[str, "os.PathLike[str]"], overwrite: bool = True) -> None:
        path = os.fspath(filepath)
        if not path.endswith(".weights.h5"):
            raise ValueError(f"save_weights: '{path}': the file name must end in .weights.h5")
        if not overwrite and os.path.exists(path):
            raise FileExistsError(f"save_weights: '{path}' exists (overwrite=False)")
        self._ensure_built().save_weights(path)

    def load_weights(self, filepath: Union[str, "os.PathLike[str]"]) -> None:
        """Weights from a .weights.h5, a .keras file or a Keras 2 .h5 (checked against this model's layers)."""
        path = os.fspath(filepath)
        if not os.path.exists(path):
            raise FileNotFoundError(f"load_weights: no file '{path}'")
        self._ensure_built().load_weights(path)


class Sequential(Model):
    """A stack of layers, each reading the previous one's output (keras.Sequential)."""

    def __init__(self, layers: Optional[Sequence[Any]] = None, name: Optional[str] = None) -> None:
        super().__init__(name=name or _unique_name("sequential"))
        self._input: Optional[InputLayer] = None
        for layer in layers or []:
            self.add(layer, rebuild=False)
        if self._input is not None and self._layers:
            self._build(self._config())

    def add(self, layer: Any, rebuild: bool = True) -> None:
        """Appends a layer (or sets the input: tk.Input(...) / tk.layers.InputLayer first)."""
        if isinstance(layer, KerasTensor) and isinstance(layer._history[0], InputLayer):
            layer = layer._history[0]
        if isinstance(layer, InputLayer):
            if self._input is not None or self._layers:
                raise ValueError(f"Sequential '{self.name}': the input must come first, and once")
            self._input = layer
            return
        if not isinstance(layer, Layer):
            raise ValueError(f"Sequential '{self.name}': {layer!r} is not a trainkit layer (tk.layers.*)")
        old = self._bridge
        self._layers.append(layer)
        if rebuild and self._input is not None:
            weights = {name: (shapes, self._layer_weights(name)) for name, shapes in old.weight_layout()} if old else {}
            self._build(self._config())
            for name, (_, values) in weights.items():  # the layers that were there keep their weights
                self._set_layer_weights(name, values)

    def _config(self, input_shape: Optional[Tuple[int, ...]] = None, dtype: str = "float32") -> Dict[str, Any]:
        layers = [layer._keras_object() for layer in self._layers]
        if self._input is not None:
            inp = self._input._keras_object()
        else:
            inp = InputLayer(shape=input_shape, dtype=dtype)._keras_object()
        return {
            "module": "keras",
            "class_name": "Sequential",
            "config": {"name": self.name, "trainable": True, "layers": [inp, *layers]},
            "registered_name": None,
        }

    def _ensure_built(self, x: Optional[List[np.ndarray]] = None) -> "_trainkit.Bridge":
        if self._bridge is None and x is not None and self._layers:
            # Built on the first data, as Keras: the input shape is the data's (without the batch axis).
            self._build(self._config(tuple(int(d) for d in x[0].shape[1:])))
        if self._bridge is None:
            raise ValueError(
                f"Sequential '{self.name}' is not built: start it with tk.Input(shape), or fit / predict it on data"
            )
        return self._bridge


def load_model(filepath: Union[str, "os.PathLike[str]"], compile: bool = True) -> Model:
    """A model from a .keras file (or a Keras 2 .h5): compiled with its optimizer state when compile=True."""
    path = os.fspath(filepath)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load_model: no file '{path}'")
    bridge = _trainkit.Bridge.load(path, bool(compile))
    cls = json.loads(bridge.to_json())["class_name"]
    model: Model = Sequential.__new__(Sequential) if cls == "Sequential" else Model.__new__(Model)
    Model.__init__(model, name=bridge.name)
    if isinstance(model, Sequential):
        model._input = None
    model._set_bridge(bridge)
    return model


__all__ = ["History", "Model", "Sequential", "load_model"]
