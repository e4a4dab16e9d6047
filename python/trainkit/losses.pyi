# Type stubs of trainkit.losses (generated from the Keras signatures; test_native_stubs.py checks them; tools/python_stubs.py writes them).
from typing import Any

from ._objects import KerasObject

class SparseCategoricalCrossentropy(KerasObject):
    def __init__(self, from_logits: Any = False, ignore_class: Any = None) -> None: ...

class CategoricalCrossentropy(KerasObject):
    def __init__(self, from_logits: Any = False, label_smoothing: Any = 0.0) -> None: ...

class BinaryCrossentropy(KerasObject):
    def __init__(self, from_logits: Any = False, label_smoothing: Any = 0.0) -> None: ...

class MeanSquaredError(KerasObject):
    def __init__(self) -> None: ...

class MeanAbsoluteError(KerasObject):
    def __init__(self) -> None: ...

class Huber(KerasObject):
    def __init__(self, delta: Any = 1.0) -> None: ...
