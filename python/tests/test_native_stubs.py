"""The .pyi stubs of the native API's layers, optimizers and losses say what the classes take (names, defaults)."""

import ast
import inspect
from pathlib import Path

import pytest

import trainkit as tk
from trainkit import layers, losses, optimizers


def stub_signatures(module):
    tree = ast.parse((Path(module.__file__).with_suffix(".pyi")).read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args.args[1:]
                    defaults = [None] * (len(args) - len(item.args.defaults)) + item.args.defaults
                    out[node.name] = [(a.arg, None if d is None else ast.literal_eval(d)) for a, d in zip(args, defaults)]
    return out


def runtime_signature(cls):
    return [
        (p.name, None if p.default is inspect.Parameter.empty else (tuple(p.default) if isinstance(p.default, list)
                                                                   else p.default))
        for p in inspect.signature(cls).parameters.values()
    ]


@pytest.mark.parametrize("module", [layers, optimizers, losses], ids=lambda m: m.__name__)
def test_stubs_match_the_classes(module):
    stubs = stub_signatures(module)
    names = [n for n in module.__all__ if n not in ("Input", "KerasTensor", "Layer", "InputLayer")]
    assert sorted(stubs.keys() - {"KerasTensor", "Layer", "InputLayer"}) == sorted(names)
    for name in names:
        assert stubs[name] == runtime_signature(getattr(module, name)), name


def test_the_package_exports_the_native_api():
    for name in ("Sequential", "Model", "Input", "History", "clear_session", "layers", "models", "data", "losses",
                 "optimizers", "utils"):
        assert name in tk.__all__ and hasattr(tk, name)
