# Type stubs of trainkit.optimizers (generated from the Keras signatures; test_native_stubs.py checks them; tools/python_stubs.py writes them).
from typing import Any

from ._objects import KerasObject

class SGD(KerasObject):
    def __init__(self, learning_rate: Any = 0.01, momentum: Any = 0.0, nesterov: Any = False, weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None) -> None: ...

class Adam(KerasObject):
    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: Any = 1e-07, amsgrad: Any = False, weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None) -> None: ...

class AdamW(KerasObject):
    def __init__(self, learning_rate: Any = 0.001, weight_decay: Any = 0.004, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: Any = 1e-07, amsgrad: Any = False, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None) -> None: ...

class RMSprop(KerasObject):
    def __init__(self, learning_rate: Any = 0.001, rho: Any = 0.9, momentum: Any = 0.0, epsilon: Any = 1e-07, centered: Any = False, weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None) -> None: ...

class Adagrad(KerasObject):
    def __init__(self, learning_rate: Any = 0.001, initial_accumulator_value: Any = 0.1, epsilon: Any = 1e-07, weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None) -> None: ...
