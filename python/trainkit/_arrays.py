"""NumPy arrays as trainkit takes them: in place when their dtype is one trainkit reads and they are C-contiguous."""

from typing import Any, List, Sequence, Union

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
