"""tk.fit / tk.evaluate / tk.predict / tk.plan on Keras 3 model objects (trainkit/keras_bridge.py)."""

import time

import numpy as np
import pytest

keras = pytest.importorskip("keras")
import trainkit as tk  # noqa: E402


def make_mlp(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((20,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)], name="mlp"
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def make_data(rows=96, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 20)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 1).astype(np.int64)  # 3 classes, learnable
    return x, y


def test_fit_trains_the_keras_model_and_predictions_agree():
    model = make_mlp()
    x, y = make_data()
    before = [w.copy() for w in model.get_weights()]
    history = tk.fit(model, x, y, batch_size=16, epochs=3, validation_split=0.25, verbose=0)
    after = model.get_weights()
    assert all(a.shape == b.shape for a, b in zip(after, before))
    assert any(not np.array_equal(a, b) for a, b in zip(after, before)), "fit left the Keras weights unchanged"
    # The Keras model now predicts (with Keras) exactly what trainkit predicts on the same weights.
    keras_out = model.predict(x, verbose=0)
    tk_out = tk.predict(model, x)
    np.testing.assert_allclose(keras_out, tk_out, rtol=0, atol=1e-6)
    # A keras History: per-epoch logs, the epoch list and the params, as model.fit returns them.
    assert isinstance(history, keras.callbacks.History)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history.epoch == [0, 1, 2]
    assert all(len(v) == 3 for v in history.history.values())
    assert history.params["epochs"] == 3 and history.params["steps"] == 72 // 16 + 1
    assert history.history["loss"][-1] < history.history["loss"][0]
    # The optimizer state came back too: Adam counted every step.
    assert int(np.asarray(model.optimizer.iterations)) == 3 * (72 // 16 + 1)


def test_evaluate_matches_the_loss_computed_from_keras_outputs():
    model = make_mlp()
    x, y = make_data()
    tk.fit(model, x, y, batch_size=32, epochs=2, verbose=0)
    logits = model.predict(x, verbose=0).astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected_loss = -log_softmax[np.arange(len(y)), y].mean()
    expected_acc = (logits.argmax(axis=1) == y).mean()
    loss, acc = tk.evaluate(model, x, y, batch_size=32)
    assert loss == pytest.approx(expected_loss, abs=1e-5)
    assert acc == pytest.approx(expected_acc, abs=1e-6)
    logs = tk.evaluate(model, x, y, return_dict=True)
    assert list(logs) == ["loss", "accuracy"]


def test_saved_keras_file_holds_the_trained_weights(tmp_path):
    model = make_mlp()
    x, y = make_data()
    tk.fit(model, x, y, batch_size=16, epochs=1, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=0, atol=0)


def test_validation_data_and_uint8_inputs():
    model = make_mlp()
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(64, 20), dtype=np.uint8)
    y = (x[:, 0] > 127).astype(np.int32)
    history = tk.fit(model, x, y, batch_size=16, epochs=1, validation_data=(x[:16], y[:16]), verbose=0)
    assert "val_loss" in history.history
    # Pixel values up to 255 give large logits: compared relative to their size.
    np.testing.assert_allclose(model.predict(x.astype(np.float32), verbose=0), tk.predict(model, x), rtol=1e-5, atol=1e-5)


def test_arrays_trainkit_reads_are_passed_without_a_copy():
    from trainkit._arrays import as_array

    u8 = np.zeros((4, 3), dtype=np.uint8)
    assert as_array(u8, "x") is u8  # uint8 stays uint8, in place
    f64 = np.zeros((4, 3))
    assert as_array(f64, "x").dtype == np.float32  # float64 becomes float32, as Keras casts
    strided = np.zeros((4, 6), dtype=np.float32)[:, ::2]
    assert as_array(strided, "x").flags.c_contiguous


def test_unsupported_layer_is_not_implemented_error_naming_layer_and_class():
    model = keras.Sequential([keras.Input((8, 2)), keras.layers.Dense(2), keras.layers.UnitNormalization(name="my_reg")])
    model.compile(optimizer="adam", loss="mse")
    with pytest.raises(NotImplementedError) as err:
        tk.fit(model, np.zeros((4, 8, 2), np.float32), np.zeros((4, 8, 2), np.float32), verbose=0)
    assert "my_reg" in str(err.value) and "UnitNormalization" in str(err.value)
    assert isinstance(err.value, tk.UnsupportedError)


def test_out_of_memory_carries_the_plan_and_leaves_the_model_unchanged():
    model = make_mlp()
    x, y = make_data()
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(tk.OutOfMemoryError) as err:
        tk.fit(model, x, y, batch_size=32, epochs=1, memory_limit="4KiB", verbose=0)
    assert isinstance(err.value, MemoryError)
    plan = tk.plan(model, batch_size=32)
    assert str(plan) in str(err.value), "the message holds the plan report"
    assert err.value.plan.total == plan.total > 4096
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    assert int(np.asarray(model.optimizer.iterations)) == 0
    # The process goes on: the same model trains afterwards.
    tk.fit(model, x, y, batch_size=32, epochs=1, verbose=0)


def test_auto_batch_size_under_a_memory_limit():
    model = make_mlp()
    x, y = make_data()
    one = tk.plan(model, batch_size=1).total
    history = tk.fit(model, x, y, batch_size="auto", epochs=1, memory_limit=one + 1024, verbose=0)
    assert history.params["steps"] >= 1


def test_invalid_argument_is_value_error():
    model = make_mlp()
    x, y = make_data()
    with pytest.raises(ValueError):
        tk.fit(model, x, y[:-1], verbose=0)  # 96 inputs, 95 targets: tk::InvalidArgument
    with pytest.raises(ValueError):
        tk.fit(model, x, y, batch_size="big", verbose=0)


def test_plan_renders_as_svg():
    plan = tk.plan(make_mlp(), batch_size=64)
    assert plan.batch_size == 64 and plan.total > 0
    assert "<svg" in plan._repr_svg_()
    assert "64" in str(plan)


def test_uncompiled_model_is_a_clear_error_for_fit_but_predicts():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="not compiled"):
        tk.fit(model, np.zeros((4, 4), np.float32), np.zeros((4, 2), np.float32))
    x = np.ones((5, 4), np.float32)
    np.testing.assert_allclose(tk.predict(model, x), model.predict(x, verbose=0), atol=1e-6)


def test_second_fit_continues_the_optimizer_state():
    x, y = make_data()
    # Two tk.fit calls of one epoch each equal one tk.fit of two epochs (no shuffling: the same batches).
    a, b = make_mlp(), make_mlp()
    tk.fit(a, x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    tk.fit(a, x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    tk.fit(b, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert int(np.asarray(a.optimizer.iterations)) == int(np.asarray(b.optimizer.iterations)) == 12
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-6)


def test_a_learning_rate_schedule_is_followed_and_handed_back(tmp_path):
    """Adam(learning_rate=CosineDecay(...)): trainkit follows the schedule from the optimizer's iteration count and
    hands Keras its variables (Keras keeps no learning_rate variable under a schedule). That the steps match Keras'
    own is tests/test_optimizer_rules.cpp's adam_cosine (Keras' numpy backend cannot fit)."""
    import warnings

    x, y = make_data()

    def make(learning_rate):
        model = make_mlp()
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    def cosine():
        return keras.optimizers.schedules.CosineDecay(1e-2, decay_steps=12, alpha=0.1)

    a, b, fixed = make(cosine()), make(cosine()), make(1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "the optimizer's variables were not written back" fails here
        tk.fit(a, x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        tk.fit(a, x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)  # iterations 6..11 of the schedule
        tk.fit(b, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        tk.fit(fixed, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert int(np.asarray(a.optimizer.iterations)) == int(np.asarray(b.optimizer.iterations)) == 12
    assert not any(v.name == "learning_rate" for v in a.optimizer.variables)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-6)
    assert any(np.abs(wa - wf).max() > 1e-4 for wa, wf in zip(a.get_weights(), fixed.get_weights())), \
        "the schedule made no difference: was it followed?"
    # The trained model saves and loads in Keras with its schedule and state.
    path = tmp_path / "cosine.keras"
    a.save(path)
    back = keras.models.load_model(path)
    assert type(back.optimizer._learning_rate).__name__ == "CosineDecay"
    assert int(np.asarray(back.optimizer.iterations)) == 12
    xt = np.ones((3, 20), np.float32)
    np.testing.assert_allclose(tk.predict(back, xt), tk.predict(a, xt), rtol=0, atol=1e-6)


class _SaysWhenFitting:
    """A bridge that sets `started` as its fit (the C++ training loop, GIL released) begins."""

    def __init__(self, bridge, started):
        self._bridge, self._started = bridge, started

    def fit(self, *args, **kwargs):
        self._started.set()
        return self._bridge.fit(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._bridge, name)


def test_ctrl_c_stops_at_a_step_boundary_with_the_trained_weights(monkeypatch):
    import os
    import signal
    import threading

    from trainkit import keras_bridge

    model = make_mlp()
    x, y = make_data()
    before = [w.copy() for w in model.get_weights()]
    # The signal is sent once training runs (0.3 s into the C++ fit): a fixed timer could land in Python code before
    # it, where a library's bare except may swallow it, and the fit would then run to its end (CI saw that once).
    started = threading.Event()
    make_bridge = keras_bridge._bridge
    monkeypatch.setattr(keras_bridge, "_bridge", lambda *a, **k: _SaysWhenFitting(make_bridge(*a, **k), started))

    def interrupt():
        if started.wait(120):
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)

    # A process started in the background by a non-interactive shell inherits SIGINT ignored (as CI may start this
    # one), and Python then installs no handler: give SIGINT Python's own for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sender = threading.Thread(target=interrupt, daemon=True)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            tk.fit(model, x, y, batch_size=16, epochs=100000, verbose=0)  # far longer than 0.3 s
    finally:
        sender.join()
        signal.signal(signal.SIGINT, previous)
    steps = int(np.asarray(model.optimizer.iterations))
    assert steps > 0, "the steps that ran before the interrupt were written back"
    assert any(not np.array_equal(a, b) for a, b in zip(model.get_weights(), before))
    # Consistent: the weights are those of `steps` steps, which Keras and trainkit predict alike.
    np.testing.assert_allclose(model.predict(x, verbose=0), tk.predict(model, x), rtol=0, atol=1e-6)
