"""tk.data: tf.data's input pipeline, run by trainkit's C++ one (include/trainkit/data/dataset.h).

    ds = tk.data.Dataset.from_tensor_slices((x, y)).shuffle(10000, seed=1).batch(128).prefetch(tk.data.AUTOTUNE)
    model.fit(ds, epochs=10)

The arrays are read in place (no copy; the datasets made from them keep them alive), and the pipeline runs on
trainkit's threads without the GIL. Elements are flat tuples of arrays: a model's inputs, then its targets.

`map(fn)` runs a Python function inside the C++ pipeline: trainkit's map stage calls it (on its worker threads with
num_parallel_calls, else on the thread that asks for the next element), taking the GIL for each call. So Python code
runs one call at a time, and parallel calls overlap only where fn releases the GIL (NumPy on large arrays, image
decoders); map after batch (one call per batch) keeps the GIL cost per batch, as tf.data's guide advises.
"""

import atexit
import csv as _csv
import os
import weakref
import sys
import types
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _trainkit
from ._arrays import as_array, is_native

AUTOTUNE: int = _trainkit.DATA_AUTOTUNE
INFINITE_CARDINALITY: int = _trainkit.INFINITE_CARDINALITY
UNKNOWN_CARDINALITY: int = _trainkit.UNKNOWN_CARDINALITY


def _count(what: str, v: Any, allow: Tuple[int, ...] = ()) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or (v < 1 and int(v) not in allow):
        extra = f" (or {', '.join(map(str, allow))})" if allow else ""
        raise ValueError(f"Dataset.{what}: a positive integer{extra}, got {v!r}")
    return int(v)


def _component(value: Any, position: int) -> np.ndarray:
    """One component of a map function's result as trainkit takes it: a C-contiguous array of a dtype it reads."""
    if type(value) is np.ndarray and value.flags.c_contiguous and is_native(value.dtype):
        return value  # the common case, first
    if isinstance(value, (tuple, list, dict)):
        raise TypeError(
            f"Dataset.map: the function returned a nested {type(value).__name__} at position {position}: trainkit's "
            f"elements are flat tuples of arrays (a model's inputs, then its targets)"
        )
    arr = np.asarray(value)
    if not is_native(arr.dtype):
        if arr.dtype.kind not in "fiub":
            raise TypeError(
                f"Dataset.map: the function returned a {type(value).__name__} of dtype {arr.dtype} at position "
                f"{position}: trainkit's elements hold numbers and bools"
            )
        arr = arr.astype(np.float32)  # float64 and other integer widths: float32, as from_tensor_slices converts
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # (ascontiguousarray makes a 0-d array 1-d)


def _element_function(fn: Callable[..., Any]) -> Callable[..., Tuple[np.ndarray, ...]]:
    """fn as the pipeline calls it (python/src/dataset.cpp, map_python): components in, a flat tuple of arrays out."""

    def call(*components: np.ndarray) -> Tuple[np.ndarray, ...]:
        result = fn(*components)
        if isinstance(result, (tuple, list)):
            if not result:
                raise ValueError("Dataset.map: the function returned an empty tuple (an element needs a component)")
            return tuple(_component(v, i) for i, v in enumerate(result))
        if result is None or isinstance(result, dict):
            raise TypeError(
                f"Dataset.map: the function returned {type(result).__name__}: return an array, or a tuple of arrays"
            )
        return (_component(result, 0),)

    return call


# Passes in progress (iterators of Dataset.__iter__), stopped at exit before Python finalizes: a pass's threads that
# then waited for the GIL (a map function's) would be ended abruptly by Python, taking the process down.
_passes: "weakref.WeakSet[Any]" = weakref.WeakSet()


@atexit.register
def _stop_passes() -> None:
    for it in list(_passes):
        it.close()


class Dataset:
    """A lazy pipeline of elements (tuples of arrays); each method returns a new Dataset."""

    def __init__(
        self, native: "_trainkit.Dataset", keep: Tuple[np.ndarray, ...], fns: Tuple[Callable[..., Any], ...] = ()
    ) -> None:
        self._native = native
        self._keep = keep  # the arrays the pipeline reads in place
        self._fns = fns  # the map functions the pipeline calls (it holds no reference of its own: dataset.cpp)

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

    @staticmethod
    def from_npz(path: Union[str, "os.PathLike[str]"], keys: Optional[Sequence[str]] = None) -> "Dataset":
        """from_tensor_slices over the arrays of a .npz archive (np.savez / np.savez_compressed), read by trainkit's
        reader (tk::data::load_npz: float64 becomes float32, int8 / int16 / uint16 int32, uint8 stays uint8; see
        include/trainkit/data/npy.h): the members named in `keys`, in that order, or all of them in archive order."""
        file = os.fspath(path)
        if not os.path.isfile(file):
            raise FileNotFoundError(f"Dataset.from_npz: no file '{file}'")
        members = dict(_trainkit.load_npz(file))
        names = list(members) if keys is None else [str(k) for k in keys]
        missing = [k for k in names if k not in members]
        if missing or not names:
            raise ValueError(f"Dataset.from_npz: '{file}' has no member {missing or 'at all'} (it has {list(members)})")
        return Dataset.from_tensor_slices(tuple(members[k] for k in names))

    def _derive(self, native: "_trainkit.Dataset") -> "Dataset":
        return Dataset(native, self._keep, self._fns)

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

    def map(
        self,
        map_func: Callable[..., Any],
        num_parallel_calls: Optional[int] = None,
        deterministic: Optional[bool] = None,
        name: Optional[str] = None,
    ) -> "Dataset":
        """Element -> map_func(*components), as tf.data: a single-array element is passed as one argument, a tuple
        element as one argument per component (read-only NumPy arrays, views of the pipeline's tensors: no copy).
        map_func returns the new element: an array (or a number), or a tuple / list of them (flat: trainkit's elements
        are flat tuples, a model's inputs then its targets); float64 and other dtypes trainkit does not read become
        float32. num_parallel_calls: None (calls on the consuming thread), n threads, or AUTOTUNE; deterministic
        (None: True) keeps the input order with parallel calls, False yields whichever element is ready first.
        An exception raised by map_func is raised where the element is consumed (iteration, fit), unchanged."""
        if not callable(map_func):
            raise TypeError(f"Dataset.map: map_func must be callable, got {map_func!r}")
        calls = 0 if num_parallel_calls is None else _count("map(num_parallel_calls)", num_parallel_calls, (AUTOTUNE,))
        if deterministic is not None and not isinstance(deterministic, (bool, np.bool_)):
            raise ValueError(f"Dataset.map: deterministic must be None, True or False, got {deterministic!r}")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"Dataset.map: name must be None or a str, got {name!r}")
        fname = getattr(map_func, "__name__", "")
        stage = name or ("" if not fname or fname == "<lambda>" else f"map({fname})")  # "": "map"
        fn = _element_function(map_func)
        native = self._native.map(fn, self._keep, calls, deterministic is not False, stage)
        return Dataset(native, self._keep, self._fns + (fn,))

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
        _passes.add(it)
        try:
            for element in it:
                yield element if len(element) != 1 else element[0]
        finally:
            # The pass stops (its threads joined) while this frame still holds self, and with it the map functions
            # its threads call (borrowed by the native map stage). Without it, an error or an abandoned iteration
            # left the frame to be cleared later, self before it: a pass thread then called a freed function.
            it.close()

    def as_numpy_iterator(self) -> Iterator[Any]:
        return iter(self)

    def __repr__(self) -> str:
        return f"<trainkit.data.Dataset {self._native.describe()}>"


# ---------------------------------------------------------------------------------------------- CSV files
_CSV_DTYPES = {"float32": "float32", "float64": "float32", "int32": "int32", "int64": "int64", "uint8": "uint8",
               "bool": "bool"}


def _csv_column(i: int, default: Any) -> Tuple[str, Optional[float]]:
    """tf's record_defaults entry -> (trainkit dtype name, default or None): a dtype (the column is required), an
    empty array of a dtype (required), or a value (used for an empty field; its type is the column's)."""
    what = f"CsvDataset: record_defaults[{i}]"
    if isinstance(default, str) and default not in _CSV_DTYPES:
        raise NotImplementedError(f"{what}: string columns are not supported (trainkit's tensors hold numbers)")
    if isinstance(default, (type, np.dtype, str)):
        try:
            dtype = np.dtype(default)
        except TypeError:
            raise ValueError(f"{what}: {default!r} is not a dtype") from None
        value = None
    else:
        arr = np.asarray(default)
        if arr.size > 1:
            raise ValueError(f"{what}: a dtype or one default value, got {arr.size} values")
        dtype = arr.dtype if not isinstance(default, float) else np.dtype(np.float32)
        if isinstance(default, bool):
            dtype = np.dtype(np.bool_)
        elif isinstance(default, int):
            dtype = np.dtype(np.int32)  # tf: a Python int is an int32 default
        value = None if arr.size == 0 else arr.reshape(()).item()
    if dtype.kind in "USO":
        raise NotImplementedError(f"{what}: string columns are not supported (trainkit's tensors hold numbers)")
    name = _CSV_DTYPES.get(dtype.name)
    if name is None:
        raise NotImplementedError(f"{what}: dtype {dtype} (CSV columns: float32, int32, int64, uint8, bool)")
    return name, None if value is None else float(value)


class CsvDataset(Dataset):
    """tf.data.experimental.CsvDataset: one element per record of the CSV files (read one after the other), a tuple of
    scalars, one per selected column, parsed by trainkit's CSV reader (tk::data::open_csv, RFC 4180 quoting) on the
    pipeline's threads. record_defaults: one per selected column, a dtype (the field is required) or a default value
    for an empty field (its type is the column's: a Python float float32, an int int32); float64 columns are read as
    float32. Not supported (NotImplementedError): string columns, compression_type, use_quote_delim=False, an
    na_value other than "" (empty fields are the missing ones). buffer_size is accepted and unused."""

    def __init__(
        self,
        filenames: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]],
        record_defaults: Sequence[Any],
        compression_type: Optional[str] = None,
        buffer_size: Optional[int] = None,
        header: bool = False,
        field_delim: str = ",",
        use_quote_delim: bool = True,
        na_value: str = "",
        select_cols: Optional[Sequence[int]] = None,
        exclude_cols: Optional[Sequence[int]] = None,
    ) -> None:
        files = [os.fspath(filenames)] if isinstance(filenames, (str, os.PathLike)) else [os.fspath(f) for f in filenames]
        if not files:
            raise ValueError("CsvDataset: no files")
        for f in files:
            if not os.path.isfile(f):
                raise FileNotFoundError(f"CsvDataset: no file '{f}'")
        if compression_type not in (None, "", "NONE"):
            raise NotImplementedError(f"CsvDataset: compression_type={compression_type!r} (trainkit reads plain CSV)")
        if not use_quote_delim:
            raise NotImplementedError("CsvDataset: use_quote_delim=False (trainkit's reader always reads RFC 4180 quotes)")
        if na_value != "":
            raise NotImplementedError(f"CsvDataset: na_value={na_value!r} (an empty field is the missing value)")
        if select_cols is not None and exclude_cols is not None:
            raise ValueError("CsvDataset: give select_cols or exclude_cols, not both")
        if not isinstance(field_delim, str) or len(field_delim) != 1:
            raise ValueError(f"CsvDataset: field_delim must be one character, got {field_delim!r}")
        with open(files[0], newline="") as f:
            first = next(_csv.reader(f, delimiter=field_delim), None)
        if not first:
            raise ValueError(f"CsvDataset: '{files[0]}' is empty")
        names = list(first) if header else [str(i) for i in range(len(first))]
        if select_cols is not None:
            selected = [int(c) for c in select_cols]
            if selected != sorted(set(selected)):
                raise ValueError(f"CsvDataset: select_cols must be increasing column indices, got {list(select_cols)}")
        else:
            excluded = {int(c) for c in exclude_cols or ()}
            selected = [i for i in range(len(names)) if i not in excluded]
        bad = [c for c in selected if not 0 <= c < len(names)]
        if bad:
            raise ValueError(f"CsvDataset: column indices {bad} out of range: '{files[0]}' has {len(names)} columns")
        defaults = list(record_defaults)
        if len(defaults) != len(selected):
            raise ValueError(
                f"CsvDataset: {len(defaults)} record_defaults for {len(selected)} selected columns (one per column)"
            )
        spec = {c: _csv_column(i, d) for i, (c, d) in enumerate(zip(selected, defaults))}
        # With a header, the entries name the selected columns; without one they describe every column in file order.
        columns = [(names[c], *spec[c]) for c in selected] if header else [
            (names[c], *spec.get(c, ("float32", None))) for c in range(len(names))
        ]
        native = _trainkit.csv_dataset(files, columns, bool(header), field_delim, [names[c] for c in selected])
        super().__init__(native, ())


experimental = types.ModuleType("trainkit.data.experimental", "tf.data.experimental's names that trainkit has.")
experimental.CsvDataset = CsvDataset  # type: ignore[attr-defined]
experimental.AUTOTUNE = AUTOTUNE  # type: ignore[attr-defined]
experimental.INFINITE_CARDINALITY = INFINITE_CARDINALITY  # type: ignore[attr-defined]
experimental.UNKNOWN_CARDINALITY = UNKNOWN_CARDINALITY  # type: ignore[attr-defined]
sys.modules[experimental.__name__] = experimental

__all__ = ["AUTOTUNE", "CsvDataset", "Dataset", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "experimental"]
