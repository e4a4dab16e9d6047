"""NumPy arrays as trainkit takes them: in place when their dtype is one trainkit reads and they are C-contiguous."""

from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np

# The dtypes trainkit reads as they are (uint8 images stay uint8 and are converted batch by batch as they are staged).
NATIVE_DTYPES = (np.float32, np.float16, np.int32, np.int64, np.uint8, np.bool_)


_NATIVE_KINDS = frozenset((np.dtype(t).kind, np.dtype(t).itemsize) for t in NATIVE_DTYPES)


def is_native(dtype: np.dtype) -> bool:
    """By kind and size, not type: an int64 array made from trainkit's tensors has type np.longlong, not np.int64
    (and this is cheap enough for a map function's every result)."""
    return (dtype.kind, dtype.itemsize) in _NATIVE_KINDS and dtype.isnative
ArrayLike = Any
Arrays = Union[ArrayLike, Sequence[ArrayLike]]


def as_array(a: ArrayLike, what: str) -> np.ndarray:
    """The array itself when trainkit can read it in place; otherwise a float32 (or C-contiguous) copy."""
    arr = np.asarray(a)
    if not is_native(arr.dtype):
        if arr.dtype.kind not in "fiub":
            raise ValueError(f"{what}: an array of dtype {arr.dtype} (trainkit reads numbers and bools)")
        arr = arr.astype(np.float32)  # float64 and other integer widths: float32, as Keras casts its inputs
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    if arr.ndim == 0:
        raise ValueError(f"{what}: a scalar, not an array of samples")
    return arr


def as_arrays(a: Arrays, what: str) -> List[np.ndarray]:
    """One array, or a list/tuple of arrays (a model with several inputs or outputs)."""
    if isinstance(a, dict):
        raise ValueError(f"{what}: a dict of arrays is not supported yet; pass a list in the model's input order")
    if isinstance(a, (list, tuple)):
        return [as_array(x, f"{what}[{i}]") for i, x in enumerate(a)]
    return [as_array(a, what)]


def as_sample_weight(w: Any, what: str) -> Any:
    """Keras' sample_weight: None, or one array read in place (float32; other dtypes become a float32 copy)."""
    if w is None:
        return None
    if isinstance(w, dict):
        raise ValueError(f"{what}: one array of per-row weights (a dict per output is not supported yet)")
    arr = np.asarray(w)
    if arr.dtype != np.float32 and arr.dtype.kind in "fiu":
        arr = arr.astype(np.float32)
    return as_array(arr, what)


def as_class_weight(class_weight: Any, what: str) -> Dict[int, float]:
    """Keras' class_weight: a dict {class id: weight} (keys ints, NumPy ints included)."""
    if class_weight is None:
        return {}
    if not isinstance(class_weight, dict):
        raise ValueError(f"{what}: class_weight must be a dict {{class id: weight}}, got {type(class_weight).__name__}")
    out: Dict[int, float] = {}
    for k, v in class_weight.items():
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise ValueError(f"{what}: class_weight's keys must be integer class ids, got {k!r}")
        out[int(k)] = float(v)
    return out


def split_validation(validation_data: Any, what: str) -> Tuple[Any, Any, Any]:
    """Keras' validation_data: (x_val, y_val) or (x_val, y_val, val_sample_weight)."""
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
        raise ValueError(f"{what}: validation_data must be a tuple (x_val, y_val) or (x_val, y_val, val_sample_weight)")
    w = validation_data[2] if len(validation_data) == 3 else None
    return validation_data[0], validation_data[1], w
