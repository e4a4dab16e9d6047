"""tk.datasets: keras.datasets' loaders for the data sets trainkit reads from local files (it downloads nothing).

    (x_train, y_train), (x_test, y_test) = tk.datasets.fashion_mnist.load_data()   # uint8, as Keras returns them
"""

import os
import types
from typing import Optional, Tuple, Union

import numpy as np

from . import _trainkit

Split = Tuple[np.ndarray, np.ndarray]


def _fashion_mnist_load_data(path: Union[str, "os.PathLike[str]", None] = None) -> Tuple[Split, Split]:
    """keras.datasets.fashion_mnist.load_data(): ((x_train, y_train), (x_test, y_test)), images uint8 (N, 28, 28) and
    labels uint8 (N,), read by trainkit's IDX reader (tk::data::load_fashion_mnist) from `path`, a directory holding
    the four IDX files (plain or .gz), or by default $TK_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist
    (Debian's dataset-fashion-mnist). An OSError names a missing file and what to install."""
    return _trainkit.load_fashion_mnist("" if path is None else os.fspath(path))  # type: ignore[no-any-return]


fashion_mnist = types.ModuleType("trainkit.datasets.fashion_mnist", "keras.datasets.fashion_mnist (local files).")
fashion_mnist.load_data = _fashion_mnist_load_data  # type: ignore[attr-defined]

__all__ = ["fashion_mnist"]
