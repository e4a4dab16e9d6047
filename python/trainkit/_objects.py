"""Optimizers and losses as Keras configs (the objects a .keras file's compile_config holds), for model.compile.

Each class has Keras' signature; trainkit's C++ compile-config reader (src/io/keras_config.cpp) makes the optimizer
or loss from it, so a name means what it means in Keras. An argument trainkit lacks is a TypeError naming it.
"""

import inspect
from typing import Any, Dict, Sequence, Tuple


class KerasObject:
    """A Keras optimizer / loss / metric: its class name and config."""

    _module = "keras"
    _class_name = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            bound = self.__signature__.bind(*args, **kwargs)  # type: ignore[attr-defined]
        except TypeError as e:
            raise TypeError(f"{self._module.replace('keras', 'tk')}.{self._class_name}: {e}") from None
        bound.apply_defaults()
        for arg, value in bound.arguments.items():
            if isinstance(value, bool) or value is None or isinstance(value, str):
                continue
            if not isinstance(value, (int, float)):
                raise ValueError(f"{self._class_name}: {arg} must be a number, got {value!r}")
        self.config: Dict[str, Any] = {k: v for k, v in bound.arguments.items() if v is not None}

    def get_config(self) -> Dict[str, Any]:
        return dict(self.config)

    def _keras_object(self) -> Dict[str, Any]:
        return {"module": self._module, "class_name": self._class_name, "config": self.get_config(),
                "registered_name": None}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{self._module.replace('keras', 'tk')}.{self._class_name}({args})"


def make(module: str, class_name: str, doc: str, params: Sequence[Tuple[str, Any]]) -> type:
    """A KerasObject subclass with Keras' signature (all arguments keyword-capable, in Keras' order)."""
    sig = inspect.Signature(
        [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d) for a, d in params]
    )
    cls = type(class_name, (KerasObject,), {"_module": module, "_class_name": class_name, "__doc__": doc})
    cls.__signature__ = sig  # type: ignore[attr-defined]
    return cls


def serialize(obj: Any, what: str) -> Any:
    """A name, one of ours, or a Keras object (keras.optimizers.Adam(...), keras.losses.Huber(...)) as config JSON."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, KerasObject):
        return obj._keras_object()
    if type(obj).__module__.startswith("keras"):
        import keras

        return keras.saving.serialize_keras_object(obj)
    raise ValueError(f"compile: {what} must be a name (str) or a tk/keras {what} object, got {obj!r}")
