"""Keras' sample_weight and class_weight (issue 33) through tk.fit / tk.evaluate and the native model, against Keras 3
itself: its evaluate (numpy backend, in this process), its class_weight rule (data_adapter_utils), and its own fit with
class_weight / sample_weight (jax backend, in a subprocess: Keras' numpy backend cannot fit)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

keras = pytest.importorskip("keras")
import trainkit as tk  # noqa: E402


def make_model(seed=0, loss=None, units=3):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(units)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1),
                  loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def make_data(rows=20, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    y = rng.integers(0, 3, size=rows).astype(np.int32)
    w = rng.uniform(0.0, 3.0, size=rows).astype(np.float32)
    return x, y, w


def test_evaluate_with_sample_weight_matches_keras():
    model = make_model()
    x, y, w = make_data()
    want = model.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0, return_dict=True)
    got = tk.evaluate(model, x, y, batch_size=8, sample_weight=w, return_dict=True)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-7)  # compile's metrics: not weighted
    unweighted = tk.evaluate(model, x, y, batch_size=8, return_dict=True)
    assert abs(unweighted["loss"] - got["loss"]) > 1e-3


def test_evaluate_takes_float64_and_column_weights_as_keras():
    model = make_model()
    x, y, w = make_data()
    want = model.evaluate(x, y, sample_weight=w.astype(np.float64)[:, None], verbose=0, return_dict=True)
    got = tk.evaluate(model, x, y, sample_weight=w.astype(np.float64)[:, None], return_dict=True)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)


def test_class_weight_is_keras_per_row_weights():
    """tk.fit(class_weight=...) trains exactly as tk.fit(sample_weight=<Keras' own conversion of it>)."""
    from keras.src.trainers.data_adapters.data_adapter_utils import class_weight_to_sample_weights

    x, y, _ = make_data()
    cw = {0: 1.0, 1: 5.0, 2: 0.5}
    a, b = make_model(), make_model()
    tk.fit(a, x, y, batch_size=8, epochs=2, shuffle=False, class_weight=cw, verbose=0)
    tk.fit(b, x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
           sample_weight=np.asarray(class_weight_to_sample_weights(y, cw), dtype=np.float32))
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)


def test_bad_weights_are_value_errors():
    model = make_model()
    x, y, w = make_data()
    with pytest.raises(ValueError, match="sample_weight has 19 rows but x has 20"):
        tk.fit(model, x, y, sample_weight=w[:19], verbose=0)
    with pytest.raises(ValueError, match="not both"):
        tk.fit(model, x, y, sample_weight=w, class_weight={0: 2.0}, verbose=0)
    with pytest.raises(ValueError, match="class_weight names class 4"):
        tk.fit(model, x, y, class_weight={4: 2.0}, verbose=0)
    with pytest.raises(ValueError, match="class_weight must be a dict"):
        tk.fit(model, x, y, class_weight=[1.0, 2.0], verbose=0)


def test_native_model_weights_as_the_bridge():
    x, y, w = make_data()
    keras_model = make_model()
    native = tk.Sequential([tk.Input((5,)), tk.layers.Dense(8, activation="relu"), tk.layers.Dense(3)])
    native.compile(optimizer=tk.optimizers.SGD(learning_rate=0.1),
                   loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    native.set_weights(keras_model.get_weights())
    want = keras_model.evaluate(x, y, sample_weight=w, verbose=0, return_dict=True)
    got = native.evaluate(x, y, sample_weight=w, return_dict=True)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    xv, yv, wv = make_data(rows=6, seed=2)
    native.fit(x, y, batch_size=8, shuffle=False, sample_weight=w, validation_data=(xv, yv, wv), verbose=0)
    tk.fit(keras_model, x, y, batch_size=8, shuffle=False, sample_weight=w, validation_data=(xv, yv, wv), verbose=0)
    for a, b in zip(native.get_weights(), keras_model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    ds = tk.data.Dataset.from_tensor_slices((x, y, w)).batch(8)
    assert native.evaluate(ds, return_dict=True)["loss"] == pytest.approx(
        native.evaluate(x, y, batch_size=8, sample_weight=w, return_dict=True)["loss"], rel=1e-6)


# Keras' own fit, beside tk.fit on the same model and data, in a process with Keras' jax backend (the numpy backend
# that the other tests use cannot train).
KERAS_FIT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    import trainkit as tk

    def model():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
        m.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        return m

    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 5)).astype(np.float32)
    y = rng.integers(0, 3, size=20).astype(np.int32)
    w = rng.uniform(0.0, 3.0, size=20).astype(np.float32)
    out = {}
    for name, kwargs in (("class_weight", {"class_weight": {0: 1.0, 1: 5.0, 2: 0.5}}), ("sample_weight", {"sample_weight": w})):
        k, t = model(), model()
        hk = k.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, **kwargs)
        ht = tk.fit(t, x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, **kwargs)
        out[name] = {
            "loss": [hk.history["loss"][-1], ht.history["loss"][-1]],
            "max_weight_diff": max(float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 0.1)))
                                   for a, b in zip(k.get_weights(), t.get_weights())),
        }
    print(json.dumps(out))
    """
)


def test_tk_fit_with_class_and_sample_weight_matches_keras_fit():
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    run = subprocess.run([sys.executable, "-c", KERAS_FIT], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for name, r in result.items():
        keras_loss, tk_loss = r["loss"]
        assert tk_loss == pytest.approx(keras_loss, rel=1e-5), name
        assert r["max_weight_diff"] < 1e-5, name
