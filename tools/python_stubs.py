# Writes python/trainkit/layers.pyi, optimizers.pyi and losses.pyi from the classes' Keras signatures (run after
# changing a layer, optimizer or loss; python/tests/test_native_stubs.py fails until the stubs match):
#   KERAS_BACKEND=numpy build-py-venv/bin/python tools/python_stubs.py   (with the package installed)
import inspect
from pathlib import Path

import trainkit as tk  # noqa: F401
from trainkit import layers, losses, optimizers

ROOT = Path(__file__).resolve().parents[1]


def fmt(v):
    return repr(tuple(v) if isinstance(v, list) else v)
def sig(cls):
    parts = ["self"]
    for p in inspect.signature(cls).parameters.values():
        parts.append(f"{p.name}: Any" if p.default is inspect.Parameter.empty else f"{p.name}: Any = {fmt(p.default)}")
    return ", ".join(parts)
out = ['# Type stubs of trainkit.layers (generated from the layers\' Keras signatures; test_native_stubs.py checks them; tools/python_stubs.py writes them).',
       'from typing import Any, Dict, List, Optional, Sequence, Tuple', '', 'import numpy as np', '',
       'class KerasTensor:', '    shape: Optional[Tuple[Optional[int], ...]]  # None for a layer\'s output (computed when the model is built)', '    dtype: str', '',
       'class Layer:', '    name: str', '    @property', '    def class_name(self) -> str: ...',
       '    def get_config(self) -> Dict[str, Any]: ...', '    def __call__(self, inputs: Any) -> KerasTensor: ...',
       '    def get_weights(self) -> List[np.ndarray]: ...', '    def set_weights(self, weights: Sequence[Any]) -> None: ...',
       '    @property', '    def weights(self) -> List[np.ndarray]: ...', '',
       'class InputLayer(Layer):', '    shape: Tuple[int, ...]', '    dtype: str', '    output: KerasTensor',
       '    def __init__(self, shape: Any = None, dtype: Optional[str] = None, name: Optional[str] = None) -> None: ...', '',
       'def Input(shape: Any = None, dtype: Optional[str] = None, name: Optional[str] = None) -> KerasTensor: ...', '']
# Methods beyond Layer's that a layer class defines (written by hand: they are not Keras signatures).
EXTRA = {"Normalization": ['    def adapt(self, data: Any) -> None: ...  # an array, or a trainkit.data.Dataset of batches']}
for n in layers.__all__:
    c = getattr(layers, n)
    if n in ("Input", "KerasTensor", "Layer", "InputLayer"): continue
    out += [f'class {n}(Layer):', f'    def __init__({sig(c)}) -> None: ...', *EXTRA.get(n, []), '']
open(ROOT / 'python/trainkit/layers.pyi', 'w').write("\n".join(out))
for mod, name in ((optimizers, "optimizers"), (losses, "losses")):
    out = [f'# Type stubs of trainkit.{name} (generated from the Keras signatures; test_native_stubs.py checks them; tools/python_stubs.py writes them).',
           'from typing import Any', '', 'from ._objects import KerasObject', '']
    for n in mod.__all__:
        out += [f'class {n}(KerasObject):', f'    def __init__({sig(getattr(mod, n))}) -> None: ...', '']
    open(ROOT / f'python/trainkit/{name}.pyi', 'w').write("\n".join(out))
