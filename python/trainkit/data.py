"""tk.data: tf.data's input pipeline, run by trainkit's C++ one (include/trainkit/data/dataset.h).

    ds = tk.data.Dataset.from_tensor_slices((x, y)).shuffle(10000, seed=1).batch(128).prefetch(tk.data.AUTOTUNE)
    model.fit(ds, epochs=10)

The arrays are read in place (no copy; the datasets made from them keep them alive), and the pipeline runs on
trainkit's threads without the GIL. Elements are flat tuples of arrays: a model's inputs, then its targets.
`map` is not bound: a Python function per element would take the GIL on the pipeline's threads.
"""

from typing import Any, Iterator, Optional, Tuple

import numpy as np

from . import _trainkit
from ._arrays import as_array

AUTOTUNE: int = _trainkit.DATA_AUTOTUNE
INFINITE_CARDINALITY: int = _trainkit.INFINITE_CARDINALITY
UNKNOWN_CARDINALITY: int = _trainkit.UNKNOWN_CARDINALITY


def _count(what: str, v: Any, allow: Tuple[int, ...] = ()) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or (v < 1 and int(v) not in allow):
        extra = f" (or {', '.join(map(str, allow))})" if allow else ""
        raise ValueError(f"Dataset.{what}: a positive integer{extra}, got {v!r}")
    return int(v)


class Dataset:
    """A lazy pipeline of elements (tuples of arrays); each method returns a new Dataset."""

    def __init__(self, native: "_trainkit.Dataset", keep: Tuple[np.ndarray, ...]) -> None:
        self._native = native
        self._keep = keep  # the arrays the pipeline reads in place

    @staticmethod
    def from_tensor_slices(tensors: Any) -> "Dataset":
        """Element i = (tensors[0][i], tensors[1][i], ...): an array, or a tuple / list of arrays of equal length."""
        if isinstance(tensors, dict):
            raise ValueError("Dataset.from_tensor_slices: a dict is not supported; pass a tuple (x, y)")
        parts = list(tensors) if isinstance(tensors, (tuple, list)) else [tensors]
        if not parts:
            raise ValueError("Dataset.from_tensor_slices: no arrays")
        arrays = tuple(as_array(a, f"Dataset.from_tensor_slices[{i}]") for i, a in enumerate(parts))
        lengths = {len(a) for a in arrays}
        if len(lengths) != 1:
            raise ValueError(
                f"Dataset.from_tensor_slices: the arrays' first dimensions differ ({[len(a) for a in arrays]})"
            )
        return Dataset(_trainkit.Dataset.from_tensor_slices(list(arrays)), arrays)

    def _derive(self, native: "_trainkit.Dataset") -> "Dataset":
        return Dataset(native, self._keep)

    def shuffle(self, buffer_size: int, seed: Optional[int] = None, reshuffle_each_iteration: bool = True) -> "Dataset":
        """Samples uniformly from a buffer of buffer_size elements; seed None: from tk.utils.set_random_seed."""
        seed_value = 0 if seed is None else int(seed)
        return self._derive(
            self._native.shuffle(_count("shuffle", buffer_size), seed_value, bool(reshuffle_each_iteration))
        )

    def batch(self, batch_size: int, drop_remainder: bool = False) -> "Dataset":
        return self._derive(self._native.batch(_count("batch", batch_size), bool(drop_remainder)))

    def prefetch(self, buffer_size: int) -> "Dataset":
        """Prepares the next elements on a thread while the consumer works; AUTOTUNE sizes the buffer."""
        return self._derive(self._native.prefetch(_count("prefetch", buffer_size, (AUTOTUNE,))))

    def repeat(self, count: Optional[int] = None) -> "Dataset":
        return self._derive(self._native.repeat(-1 if count is None else _count("repeat", count, (-1,))))

    def take(self, count: int) -> "Dataset":
        return self._derive(self._native.take(_count("take", count, (-1, 0))))

    def skip(self, count: int) -> "Dataset":
        return self._derive(self._native.skip(_count("skip", count, (-1, 0))))

    def cache(self, filename: str = "") -> "Dataset":
        """In memory (""), or a file written on the first complete pass and read on later ones."""
        return self._derive(self._native.cache(str(filename)))

    def shard(self, num_shards: int, index: int) -> "Dataset":
        n = _count("shard", num_shards)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < n:
            raise ValueError(f"Dataset.shard: index must be in [0, {n}), got {index!r}")
        return self._derive(self._native.shard(n, int(index)))

    def unbatch(self) -> "Dataset":
        return self._derive(self._native.unbatch())

    def map(self, *args: Any, **kwargs: Any) -> "Dataset":
        raise NotImplementedError(
            "tk.data.Dataset.map: a Python function per element is not supported (it would hold the GIL on the "
            "pipeline's threads); prepare the arrays with NumPy first, or use layers such as tk.layers.Rescaling"
        )

    def cardinality(self) -> int:
        """Elements per pass; INFINITE_CARDINALITY or UNKNOWN_CARDINALITY."""
        return self._native.cardinality()

    def __len__(self) -> int:
        n = self.cardinality()
        if n < 0:
            raise TypeError("the dataset's length is " + ("infinite" if n == INFINITE_CARDINALITY else "unknown"))
        return n

    def __iter__(self) -> Iterator[Tuple[np.ndarray, ...]]:
        """One pass: each element as a tuple of NumPy arrays (copies)."""
        it = self._native.iterator()
        for element in it:
            yield element if len(element) != 1 else element[0]
        del it

    def as_numpy_iterator(self) -> Iterator[Any]:
        return iter(self)

    def __repr__(self) -> str:
        return f"<trainkit.data.Dataset {self._native.describe()}>"


__all__ = ["AUTOTUNE", "Dataset", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY"]
