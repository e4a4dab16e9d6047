"""tk.layers: trainkit's built-in layers (include/trainkit/nn/layers.h) with Keras 3's names, arguments and defaults.

    import trainkit as tk
    model = tk.Sequential([tk.Input((28, 28, 1)), tk.layers.Conv2D(16, 3, activation="relu"),
                           tk.layers.MaxPooling2D(), tk.layers.Flatten(), tk.layers.Dense(10)])

A layer here is its Keras config (the object a .keras file's config.json holds for it); the model made from the
layers is built by trainkit's C++ Keras config reader (src/io/keras_layers.cpp), the code that loads .keras files, so
every layer means exactly what the Keras layer of that name means. An argument trainkit lacks is a TypeError naming
it (as Python's own for an unknown keyword); a value of the wrong kind is a ValueError naming the layer and the
argument; a value trainkit does not run (e.g. Conv2D(padding="causal")) is a NotImplementedError when the model is
built. Functional models: call layers on `tk.Input` tensors and pass them to `tk.Model(inputs, outputs)`.
"""

import inspect
import re
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _trainkit

# ---------------------------------------------------------------------------------------------- automatic names
_name_counts: Dict[str, int] = {}


def _unique_name(prefix: str) -> str:
    """Keras' automatic names: "dense", "dense_1", ... per prefix, reset by tk.clear_session()."""
    n = _name_counts.get(prefix, 0)
    _name_counts[prefix] = n + 1
    return prefix if n == 0 else f"{prefix}_{n}"


def _reset_names() -> None:
    _name_counts.clear()


def _snake_case(class_name: str) -> str:
    """Keras' snake_case of a class name: Conv2D -> conv2d, BatchNormalization -> batch_normalization."""
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", class_name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


# ---------------------------------------------------------------------------------------------- argument checks
def _fail(cls: str, arg: str, want: str, got: Any) -> ValueError:
    return ValueError(f"{cls}: {arg} must be {want}, got {got!r}")


def _pos_int(cls: str, arg: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise _fail(cls, arg, "a positive integer", v)
    return int(v)


def _int(cls: str, arg: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _fail(cls, arg, "an integer", v)
    return int(v)


def _number(cls: str, arg: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise _fail(cls, arg, "a number", v)
    return float(v)


def _rate(cls: str, arg: str, v: Any) -> float:
    r = _number(cls, arg, v)
    if not 0.0 <= r < 1.0:
        raise _fail(cls, arg, "a rate in [0, 1)", v)
    return r


def _bool(cls: str, arg: str, v: Any) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise _fail(cls, arg, "True or False", v)
    return bool(v)


def _name_or_none(cls: str, arg: str, v: Any) -> Optional[str]:
    if v is not None and not isinstance(v, str):
        raise _fail(cls, arg, "a name (str) or None", v)
    return v


def _str(cls: str, arg: str, v: Any) -> str:
    if not isinstance(v, str):
        raise _fail(cls, arg, "a str", v)
    return v


def _padding(cls: str, arg: str, v: Any) -> str:
    if v not in ("valid", "same"):
        raise _fail(cls, arg, "'valid' or 'same'", v)
    return v


def _padding1d(cls: str, arg: str, v: Any) -> str:
    if v not in ("valid", "same", "causal"):
        raise _fail(cls, arg, "'valid', 'same' or 'causal'", v)
    return v


def _ints(n: int) -> Callable[[str, str, Any], Union[int, List[int]]]:
    """An int or a tuple of n ints (Keras' kernel_size=3 or (3, 3))."""

    def check(cls: str, arg: str, v: Any) -> Union[int, List[int]]:
        if isinstance(v, (tuple, list)):
            if len(v) != n or any(isinstance(e, bool) or not isinstance(e, (int, np.integer)) or e < 0 for e in v):
                raise _fail(cls, arg, f"an integer or a tuple of {n} integers", v)
            return [int(e) for e in v]
        return _pos_int(cls, arg, v)

    return check


def _ints_or_none(n: int) -> Callable[[str, str, Any], Any]:
    inner = _ints(n)
    return lambda cls, arg, v: None if v is None else inner(cls, arg, v)


def _shape(cls: str, arg: str, v: Any) -> List[int]:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        v = (v,)
    if not isinstance(v, (tuple, list)) or any(
        isinstance(e, bool) or not isinstance(e, (int, np.integer)) for e in v
    ):
        raise _fail(cls, arg, "a tuple of integers", v)
    return [int(e) for e in v]


def _noise_shape(cls: str, arg: str, v: Any) -> Optional[List[Optional[int]]]:
    if v is None:
        return None
    if not isinstance(v, (tuple, list)) or any(e is not None and not isinstance(e, (int, np.integer)) for e in v):
        raise _fail(cls, arg, "None or a tuple of integers / None", v)
    return [None if e is None else int(e) for e in v]


def _axis(cls: str, arg: str, v: Any) -> Union[int, List[int]]:
    if isinstance(v, (tuple, list)):
        return [_int(cls, arg, e) for e in v]
    return _int(cls, arg, v)


def _any(cls: str, arg: str, v: Any) -> Any:
    return v


def _padding2d(cls: str, arg: str, v: Any) -> Any:
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(e, (tuple, list)) for e in v):
        return [_shape(cls, arg, e) for e in v]
    return _ints(2)(cls, arg, v)


# ---------------------------------------------------------------------------------------------- symbolic tensors
class KerasTensor:
    """A symbolic tensor of a functional model: tk.Input(...) (shape (None, ...): the batch first) or a layer called on
    one (shape None: computed when the model is built)."""

    def __init__(self, shape: Optional[Tuple[Optional[int], ...]], dtype: str, layer: "Layer", node: int, index: int = 0):
        self.shape = shape
        self.dtype = dtype
        self._history = (layer, node, index)

    def __repr__(self) -> str:
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype}, name={self._history[0].name}>"


def _flat_tensors(inputs: Any) -> List[KerasTensor]:
    if isinstance(inputs, KerasTensor):
        return [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, KerasTensor) for t in inputs):
        return list(inputs)
    raise ValueError(
        f"a trainkit layer is called on tk.Input tensors (or the outputs of layers called on them) to make a "
        f"functional model, got {type(inputs).__name__}; to compute on arrays, put the layer in a model and predict"
    )


# ---------------------------------------------------------------------------------------------- layers
class Layer:
    """A trainkit layer: its Keras class name and config. Call it on KerasTensors to build a functional model."""

    _class_name = "Layer"
    _spec: Dict[str, Tuple[Any, Callable[[str, str, Any], Any]]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = self._class_name
        try:
            bound = self.__signature__.bind(*args, **kwargs)  # type: ignore[attr-defined]
        except TypeError as e:
            raise TypeError(f"tk.layers.{cls}: {e}") from None
        bound.apply_defaults()
        config: Dict[str, Any] = {}
        for arg, value in bound.arguments.items():
            if arg == "name":
                continue
            checked = self._spec[arg][1](cls, arg, value)
            if checked is not None:
                config[arg] = checked
        name = _name_or_none(cls, "name", bound.arguments.get("name"))
        self.name: str = name if name else _unique_name(_snake_case(cls))
        self._config = config
        self._nodes: List[List[KerasTensor]] = []  # functional calls: each call's input tensors
        self._model: Optional["weakref.ref[Any]"] = None  # the model it was built in (get_weights)
        self._adapted: Optional[List[np.ndarray]] = None  # statistics adapt() computed, set in every model built

    @property
    def class_name(self) -> str:
        return self._class_name

    def get_config(self) -> Dict[str, Any]:
        """The Keras config of this layer, as given (a model's to_json() holds the full one trainkit writes)."""
        return {"name": self.name, **self._config}

    def _keras_object(self) -> Dict[str, Any]:
        return {
            "module": "keras.layers",
            "class_name": self._class_name,
            "config": self.get_config(),
            "registered_name": None,
            "name": self.name,
        }

    def __call__(self, inputs: Any) -> KerasTensor:
        ins = _flat_tensors(inputs)
        self._nodes.append(ins)
        # The output shape is not computed here (None): trainkit's C++ layers compute it when tk.Model(inputs, outputs)
        # builds the model (model.summary() shows it); an input's shape is known.
        return KerasTensor(None, ins[0].dtype, self, len(self._nodes) - 1)

    def get_weights(self) -> List[np.ndarray]:
        """The layer's weights in the model that built it (copies, Keras' order)."""
        model = self._model() if self._model is not None else None
        if model is None:
            raise ValueError(f"layer '{self.name}' is not built: it gets weights when a model holding it is built")
        return model._layer_weights(self.name)

    def set_weights(self, weights: Sequence[Any]) -> None:
        model = self._model() if self._model is not None else None
        if model is None:
            raise ValueError(f"layer '{self.name}' is not built: it gets weights when a model holding it is built")
        model._set_layer_weights(self.name, weights)

    @property
    def weights(self) -> List[np.ndarray]:
        return self.get_weights()

    def __repr__(self) -> str:
        return f"<trainkit.layers.{self._class_name} name={self.name}>"


class _LoadedLayer(Layer):
    """A layer of a model read from a file or a Keras config (tk.models.load_model): its class name and config."""

    def __init__(self, obj: Dict[str, Any]) -> None:  # noqa: D107 (no Keras signature: built from a config)
        self._class_name = obj.get("class_name", "Layer")
        config = dict(obj.get("config", {}))
        self.name = config.pop("name", "") or obj.get("name", "")
        self._config = config
        self._nodes = []
        self._model = None


def _make(class_name: str, doc: str, params: Sequence[Tuple[str, Any, Callable[[str, str, Any], Any]]]) -> type:
    """A Layer subclass with Keras' signature: the parameters (name, default, check) then name=None."""
    sig_params = []
    for arg, default, _ in params:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        sig_params.append(inspect.Parameter(arg, kind, default=default))
    sig_params.append(inspect.Parameter("name", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))
    spec = {arg: (default, check) for arg, default, check in params}
    spec["name"] = (None, _name_or_none)
    cls = type(class_name, (Layer,), {"_class_name": class_name, "_spec": spec, "__doc__": doc})
    cls.__signature__ = inspect.Signature(sig_params)  # type: ignore[attr-defined]
    cls.__module__ = __name__
    return cls


_R = inspect.Parameter.empty  # a required argument
_act = _name_or_none
_init = _str


def _seed(cls: str, arg: str, v: Any) -> Optional[int]:
    return None if v is None else _int(cls, arg, v)


def _opt_number(cls: str, arg: str, v: Any) -> Optional[float]:
    return None if v is None else _number(cls, arg, v)


Dense = _make(
    "Dense",
    "Densely connected: activation(x @ kernel + bias) over the last axis; kernel (in, units), bias (units,).",
    [
        ("units", _R, _pos_int),
        ("activation", None, _act),
        ("use_bias", True, _bool),
        ("kernel_initializer", "glorot_uniform", _init),
        ("bias_initializer", "zeros", _init),
        ("dtype", None, _name_or_none),
    ],
)
Activation = _make("Activation", "An activation by Keras name (relu, softmax, gelu, ...).", [("activation", _R, _str)])
Dropout = _make(
    "Dropout",
    "Zeroes inputs with probability `rate` in training, scaling the rest by 1/(1-rate).",
    [("rate", _R, _rate), ("noise_shape", None, _noise_shape), ("seed", None, _seed)],
)
SpatialDropout1D = _make("SpatialDropout1D", "Drops whole channels of (N, steps, C).", [("rate", _R, _rate), ("seed", None, _seed)])
SpatialDropout2D = _make("SpatialDropout2D", "Drops whole channels of (N, H, W, C).", [("rate", _R, _rate), ("seed", None, _seed)])
Flatten = _make("Flatten", "(N, ...) -> (N, product of the rest).", [])
Reshape = _make("Reshape", "Per-sample reshape (the batch axis is kept).", [("target_shape", _R, _shape)])
Rescaling = _make(
    "Rescaling",
    "x * scale + offset (on a model input it is applied while batches are staged: uint8 images stay uint8).",
    [("scale", _R, _number), ("offset", 0.0, _number)],
)
Identity = _make("Identity", "Returns its input.", [])
Permute = _make("Permute", "Permutes the axes after the batch (1-based, as Keras).", [("dims", _R, _shape)])
RepeatVector = _make("RepeatVector", "(N, F) -> (N, n, F).", [("n", _R, _pos_int)])
Masking = _make("Masking", "Masks time steps whose features all equal mask_value.", [("mask_value", 0.0, _number)])

_conv_common = [
    ("activation", None, _act),
    ("use_bias", True, _bool),
    ("kernel_initializer", "glorot_uniform", _init),
    ("bias_initializer", "zeros", _init),
    ("dtype", None, _name_or_none),
]
Conv2D = _make(
    "Conv2D",
    "2D convolution, channels_last: kernel (kh, kw, in / groups, filters), bias (filters,).",
    [
        ("filters", _R, _pos_int),
        ("kernel_size", _R, _ints(2)),
        ("strides", (1, 1), _ints(2)),
        ("padding", "valid", _padding),
        ("dilation_rate", (1, 1), _ints(2)),
        ("groups", 1, _pos_int),
        *_conv_common,
    ],
)
Conv1D = _make(
    "Conv1D",
    "1D convolution over (N, steps, channels); padding 'valid', 'same' or 'causal'.",
    [
        ("filters", _R, _pos_int),
        ("kernel_size", _R, _ints(1)),
        ("strides", 1, _ints(1)),
        ("padding", "valid", _padding1d),
        ("dilation_rate", 1, _ints(1)),
        ("groups", 1, _pos_int),
        *_conv_common,
    ],
)
Conv2DTranspose = _make(
    "Conv2DTranspose",
    "Transposed 2D convolution: kernel (kh, kw, filters, in_channels).",
    [
        ("filters", _R, _pos_int),
        ("kernel_size", _R, _ints(2)),
        ("strides", (1, 1), _ints(2)),
        ("padding", "valid", _padding),
        ("output_padding", None, _ints_or_none(2)),
        ("dilation_rate", (1, 1), _ints(2)),
        *_conv_common,
    ],
)
DepthwiseConv2D = _make(
    "DepthwiseConv2D",
    "Each input channel convolved with its own depth_multiplier filters.",
    [
        ("kernel_size", _R, _ints(2)),
        ("strides", (1, 1), _ints(2)),
        ("padding", "valid", _padding),
        ("depth_multiplier", 1, _pos_int),
        ("dilation_rate", (1, 1), _ints(2)),
        ("activation", None, _act),
        ("use_bias", True, _bool),
        ("depthwise_initializer", "glorot_uniform", _init),
        ("bias_initializer", "zeros", _init),
        ("dtype", None, _name_or_none),
    ],
)
SeparableConv2D = _make(
    "SeparableConv2D",
    "A depthwise convolution then a 1x1 one.",
    [
        ("filters", _R, _pos_int),
        ("kernel_size", _R, _ints(2)),
        ("strides", (1, 1), _ints(2)),
        ("padding", "valid", _padding),
        ("depth_multiplier", 1, _pos_int),
        ("dilation_rate", (1, 1), _ints(2)),
        ("activation", None, _act),
        ("use_bias", True, _bool),
        ("depthwise_initializer", "glorot_uniform", _init),
        ("pointwise_initializer", "glorot_uniform", _init),
        ("bias_initializer", "zeros", _init),
        ("dtype", None, _name_or_none),
    ],
)
_pool2d = [("pool_size", (2, 2), _ints(2)), ("strides", None, _ints_or_none(2)), ("padding", "valid", _padding)]
_pool1d = [("pool_size", 2, _ints(1)), ("strides", None, _ints_or_none(1)), ("padding", "valid", _padding)]  # noqa: E501
MaxPooling2D = _make("MaxPooling2D", "Max over pool_size windows (strides default: pool_size).", _pool2d)
AveragePooling2D = _make("AveragePooling2D", "Mean over pool_size windows (padding excluded).", _pool2d)
MaxPooling1D = _make("MaxPooling1D", "Max over pool_size steps.", _pool1d)
AveragePooling1D = _make("AveragePooling1D", "Mean over pool_size steps.", _pool1d)
GlobalAveragePooling2D = _make("GlobalAveragePooling2D", "(N, H, W, C) -> (N, C).", [])
GlobalMaxPooling2D = _make("GlobalMaxPooling2D", "(N, H, W, C) -> (N, C).", [])
GlobalAveragePooling1D = _make("GlobalAveragePooling1D", "(N, steps, C) -> (N, C).", [("keepdims", False, _bool)])
GlobalMaxPooling1D = _make("GlobalMaxPooling1D", "(N, steps, C) -> (N, C).", [("keepdims", False, _bool)])
ZeroPadding2D = _make("ZeroPadding2D", "Zeros around H and W.", [("padding", (1, 1), _padding2d)])
UpSampling2D = _make("UpSampling2D", "Nearest-neighbour upsampling.", [("size", (2, 2), _ints(2))])
ZeroPadding1D = _make("ZeroPadding1D", "Zeros around the steps.", [("padding", 1, _ints(2))])
UpSampling1D = _make("UpSampling1D", "Each step repeated.", [("size", 2, _pos_int)])
Cropping1D = _make("Cropping1D", "Steps removed at each end.", [("cropping", (1, 1), _ints(2))])
Cropping2D = _make("Cropping2D", "Rows and columns removed at the edges.", [("cropping", ((0, 0), (0, 0)), _padding2d)])
BatchNormalization = _make(
    "BatchNormalization",
    "Over the last axis: gamma, beta (trainable), moving_mean, moving_variance.",
    [
        ("axis", -1, _int),
        ("momentum", 0.99, _number),
        ("epsilon", 0.001, _number),
        ("synchronized", False, _bool),
    ],
)
LayerNormalization = _make(
    "LayerNormalization",
    "Per sample over `axis`: (x - mean) / sqrt(variance + epsilon) * gamma + beta.",
    [
        ("axis", -1, _axis),
        ("epsilon", 0.001, _number),
        ("center", True, _bool),
        ("scale", True, _bool),
        ("rms_scaling", False, _bool),
        ("beta_initializer", "zeros", _init),
        ("gamma_initializer", "ones", _init),
    ],
)
Embedding = _make(
    "Embedding",
    "Token ids (N, ...) -> (N, ..., output_dim); ids from an int32 / int64 tk.Input.",
    [
        ("input_dim", _R, _pos_int),
        ("output_dim", _R, _pos_int),
        ("embeddings_initializer", "uniform", _init),
        ("mask_zero", False, _bool),
    ],
)
_rnn_common = [
    ("use_bias", True, _bool),
    ("kernel_initializer", "glorot_uniform", _init),
    ("recurrent_initializer", "orthogonal", _init),
    ("bias_initializer", "zeros", _init),
    ("dropout", 0.0, _rate),
    ("seed", None, _seed),
    ("return_sequences", False, _bool),
    ("go_backwards", False, _bool),
    ("dtype", None, _name_or_none),
]
SimpleRNN = _make("SimpleRNN", "Keras 3's SimpleRNN.", [("units", _R, _pos_int), ("activation", "tanh", _str), *_rnn_common])
LSTM = _make(
    "LSTM",
    "Keras 3's LSTM (gates i, f, c, o).",
    [
        ("units", _R, _pos_int),
        ("activation", "tanh", _str),
        ("recurrent_activation", "sigmoid", _str),
        ("unit_forget_bias", True, _bool),
        *_rnn_common,
    ],
)
GRU = _make(
    "GRU",
    "Keras 3's GRU (gates z, r, h; reset_after).",
    [
        ("units", _R, _pos_int),
        ("activation", "tanh", _str),
        ("recurrent_activation", "sigmoid", _str),
        ("reset_after", True, _bool),
        *_rnn_common,
    ],
)
ReLU = _make(
    "ReLU",
    "max(x, 0), with Keras' max_value, negative_slope and threshold.",
    [("max_value", None, _opt_number), ("negative_slope", 0.0, _number), ("threshold", 0.0, _number)],
)
LeakyReLU = _make("LeakyReLU", "x for x > 0, negative_slope * x otherwise.", [("negative_slope", 0.3, _number)])
ELU = _make("ELU", "x for x > 0, alpha * (exp(x) - 1) otherwise.", [("alpha", 1.0, _number)])
Softmax = _make("Softmax", "Softmax over `axis`.", [("axis", -1, _int)])
Add = _make("Add", "The sum of its inputs (Keras' broadcasting).", [])
Subtract = _make("Subtract", "The first input minus the second.", [])
Multiply = _make("Multiply", "The product of its inputs.", [])
Average = _make("Average", "The mean of its inputs.", [])
Maximum = _make("Maximum", "The elementwise maximum of its inputs.", [])
Minimum = _make("Minimum", "The elementwise minimum of its inputs.", [])
Concatenate = _make("Concatenate", "Its inputs joined along `axis`.", [("axis", -1, _int)])
def _axis_or_none(cls: str, arg: str, v: Any) -> Union[int, List[int]]:
    return [] if v is None else _axis(cls, arg, v)  # Keras' axis=None: no kept axis (its config holds [])


class Normalization(
    _make(
        "Normalization",
        "(x - mean) / sqrt(variance): a given mean and variance, or those adapt(data) computes.",
        [("axis", -1, _axis_or_none), ("mean", None, _any), ("variance", None, _any), ("invert", False, _bool)],
    )
):
    def adapt(self, data: Any) -> None:
        """Keras' adapt: the mean and (biased) variance of `data` over every axis but the layer's `axis`, computed by
        trainkit's C++ adapt (tk::layers::adapt) in double precision. data: an array (batch first; any numeric dtype,
        read in place when trainkit reads its dtype) or a tk.data.Dataset of batches (the first component of each
        element, as Keras takes x from (x, y)). The layer keeps them as its weights mean and variance (count stays 0,
        as in Keras 3): in the model holding it now, and in every model built with it later."""
        cls = self._class_name
        if self._config.get("mean") is not None:
            raise ValueError(f"{cls} '{self.name}': adapt() needs a layer without a given mean and variance")
        axis = self._config.get("axis", -1)
        axis = [axis] if isinstance(axis, int) else list(axis)
        from ._arrays import as_array  # (late: layers.py is imported before the data module)
        from .data import Dataset

        if isinstance(data, Dataset):
            mean, variance = _trainkit.normalization_adapt(axis, self.name, data._native)
        elif isinstance(data, np.ndarray) or hasattr(data, "__array__"):
            mean, variance = _trainkit.normalization_adapt(axis, self.name, as_array(data, f"{cls}.adapt"))
        else:
            raise TypeError(
                f"{cls}.adapt: data must be an array or a tk.data.Dataset of batches, got {type(data).__name__} "
                f"(for a list of batches: tk.data.Dataset.from_tensor_slices(x).batch(n))"
            )
        self._adapted = [mean, variance]
        model = self._model() if self._model is not None else None
        if model is not None and model.built:
            model._set_adapted(self)

    def _adapted_weights(self, count: Any) -> List[Any]:
        return [*self._adapted, count]




_DTYPES = {"float32": "float32", "int32": "int32", "int64": "int64"}


class InputLayer(Layer):
    """A model's input: samples of `shape` (without the batch axis), float32, or int32 / int64 token ids."""

    _class_name = "InputLayer"

    def __init__(self, shape: Any = None, dtype: Optional[str] = None, name: Optional[str] = None) -> None:
        if shape is None:
            raise ValueError("InputLayer: give the shape of one sample, e.g. shape=(784,)")
        dims = _shape("InputLayer", "shape", shape)
        if any(d < 1 for d in dims):
            raise ValueError(f"InputLayer: shape {tuple(shape)!r} must hold known, positive dimensions")
        dt = "float32" if dtype is None else str(np.dtype(dtype))
        if dt not in _DTYPES:
            raise ValueError(f"InputLayer: dtype {dtype!r}: trainkit's inputs are float32, or int32 / int64 token ids")
        self.name = name if name else _unique_name("input_layer")
        self._config = {"batch_shape": [None, *dims], "dtype": dt}
        self._nodes = []
        self._model = None
        self.shape: Tuple[int, ...] = tuple(dims)
        self.dtype = dt
        self.output = KerasTensor((None, *dims), dt, self, 0)


def Input(shape: Any = None, dtype: Optional[str] = None, name: Optional[str] = None) -> KerasTensor:
    """keras.Input: the symbolic input of a model, samples of `shape` (the batch axis is not given)."""
    return InputLayer(shape=shape, dtype=dtype, name=name).output


__all__ = [
    n
    for n, v in list(globals().items())
    if isinstance(v, type) and issubclass(v, Layer) and not n.startswith("_")
] + ["Input", "KerasTensor"]
