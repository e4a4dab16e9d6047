"""The native API (trainkit/models.py, layers.py): tk.Sequential / tk.Model with Keras' compile, fit, evaluate,
predict, summary and save, checked against NumPy and against Keras loading the saved files."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import trainkit as tk

CLASSES = 3


def blobs(n=900, features=8, seed=0):
    """Three Gaussian clusters with overlap: learnable, not trivially."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(CLASSES, features)).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int64)
    x = (centers[y] + rng.normal(size=(n, features))).astype(np.float32)
    return x, y


def mlp(features=8, name=None):
    model = tk.Sequential(
        [tk.Input((features,)), tk.layers.Dense(32, activation="relu"), tk.layers.Dense(CLASSES)], name=name
    )
    model.compile(
        optimizer=tk.optimizers.Adam(learning_rate=0.01),
        loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def test_a_sequential_mlp_learns_and_its_history_is_keras_shaped():
    tk.utils.set_random_seed(1)
    x, y = blobs()
    model = mlp()
    history = model.fit(x, y, batch_size=32, epochs=5, validation_split=0.2, verbose=0)
    assert isinstance(history, tk.History) and history.model is model
    assert history.epoch == list(range(5))
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(history.history)
    assert all(len(v) == 5 for v in history.history.values())
    loss = history.history["loss"]
    assert loss[-1] < loss[0]
    # Chance is the majority class's share; the model must close at least half the gap to perfect.
    chance = np.bincount(y).max() / len(y)
    assert history.history["val_accuracy"][-1] > chance + (1.0 - chance) / 2


def test_evaluate_equals_its_metrics_recomputed_in_numpy_from_predict():
    tk.utils.set_random_seed(2)
    x, y = blobs(seed=3)
    model = mlp()
    model.fit(x, y, batch_size=64, epochs=2, verbose=0)
    logits = model.predict(x, batch_size=100)
    assert isinstance(logits, np.ndarray) and logits.shape == (len(x), CLASSES) and logits.dtype == np.float32
    loss = -log_softmax(logits.astype(np.float64))[np.arange(len(y)), y].mean()
    accuracy = (logits.argmax(axis=1) == y).mean()
    result = model.evaluate(x, y, batch_size=128)
    assert isinstance(result, list) and len(result) == 2
    assert result[0] == pytest.approx(loss, rel=1e-5)
    assert result[1] == pytest.approx(accuracy, abs=1e-6)
    logs = model.evaluate(x, y, return_dict=True)
    assert list(logs) == ["loss", "accuracy"] and logs["loss"] == pytest.approx(loss, rel=1e-5)
    # A model without metrics: the loss alone, as Keras.
    bare = tk.Sequential([tk.Input((8,)), tk.layers.Dense(1)])
    bare.compile(optimizer="sgd", loss="mse")
    out = bare.predict(x)
    target = np.zeros((len(x), 1), np.float32)
    assert bare.evaluate(x, target) == pytest.approx(float((out.astype(np.float64) ** 2).mean()), rel=1e-5)


def test_summary_is_keras_table_and_layers_hold_their_weights():
    tk.clear_session()
    model = mlp()
    lines = []
    model.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert 'Model: "sequential"' in text and "Layer (type)" in text and "Output Shape" in text
    assert "dense (Dense)" in text and "(None, 32)" in text and "Total params: 387" in text
    assert model.count_params() == 8 * 32 + 32 + 32 * CLASSES + CLASSES
    assert [layer.name for layer in model.layers] == ["dense", "dense_1"]
    kernel, bias = model.get_layer("dense").get_weights()
    assert kernel.shape == (8, 32) and bias.shape == (32,)
    model.layers[1].set_weights([np.ones((32, CLASSES), np.float32), np.zeros(CLASSES, np.float32)])
    x, _ = blobs(n=4)
    hidden = np.maximum(x @ kernel + bias, 0)
    np.testing.assert_allclose(model.predict(x), np.repeat(hidden.sum(axis=1, keepdims=True), CLASSES, 1), rtol=1e-5)


def test_a_sequential_without_input_is_built_on_the_first_data():
    model = tk.Sequential([tk.layers.Dense(4, activation="relu"), tk.layers.Dense(2)])
    assert not model.built
    with pytest.raises(ValueError, match="not built"):
        model.summary()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y = blobs(n=64, features=5)
    model.fit(x, y % 2, epochs=1, verbose=0)
    assert model.built and model.predict(x).shape == (64, 2)
    on_data = tk.Sequential([tk.layers.Dense(2)])
    on_data.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    on_data.fit(tk.data.Dataset.from_tensor_slices((x, y % 2)).batch(16), verbose=0)
    assert on_data.built and on_data.get_weights()[0].shape == (5, 2)


def test_save_then_load_model_predicts_exactly_the_same_and_resumes_training(tmp_path):
    tk.utils.set_random_seed(4)
    x, y = blobs(n=300, seed=5)
    model = mlp()
    model.fit(x, y, epochs=2, verbose=0)
    model.save(tmp_path / "m.keras")
    model.save(tmp_path / "m.weights.h5")
    loaded = tk.models.load_model(tmp_path / "m.keras")
    assert isinstance(loaded, tk.Sequential) and [lr.name for lr in loaded.layers] == [lr.name for lr in model.layers]
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    other = mlp()
    other.load_weights(tmp_path / "m.weights.h5")
    np.testing.assert_array_equal(other.predict(x), model.predict(x))
    # The optimizer state came along: one more epoch on each, in the same order, trains identically.
    model.fit(x, y, epochs=1, shuffle=False, verbose=0)
    loaded.fit(x, y, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_keras_loads_a_native_file_with_the_same_predictions(tmp_path):
    import keras

    tk.utils.set_random_seed(6)
    rng = np.random.default_rng(6)
    x = rng.normal(size=(64, 12, 12, 1)).astype(np.float32)
    y = rng.integers(0, CLASSES, 64)
    model = tk.Sequential(
        [
            tk.Input((12, 12, 1)),
            tk.layers.Conv2D(4, 3, padding="same", activation="relu"),
            tk.layers.BatchNormalization(),
            tk.layers.MaxPooling2D(),
            tk.layers.Flatten(),
            tk.layers.Dropout(0.2),
            tk.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    model.save(tmp_path / "cnn.keras")
    keras_model = keras.models.load_model(tmp_path / "cnn.keras")
    np.testing.assert_allclose(keras_model.predict(x, verbose=0), model.predict(x), atol=1e-6)


def test_functional_model_with_two_branches(tmp_path):
    import keras

    tk.utils.set_random_seed(7)
    inputs = tk.Input((6,))
    a = tk.layers.Dense(8, activation="relu")(inputs)
    b = tk.layers.Dense(8, activation="tanh")(inputs)
    merged = tk.layers.Concatenate()([a, tk.layers.Add()([a, b])])
    outputs = tk.layers.Dense(1)(merged)
    model = tk.Model(inputs, outputs, name="two_branches")
    assert [layer.name for layer in model.layers][0] == inputs._history[0].name
    last = outputs._history[0]  # the user's layer object is the model's, and holds its weights
    assert model.get_layer(last.name) is last and last.get_weights()[0].shape == (16, 1)
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(7).normal(size=(50, 6)).astype(np.float32)
    t = x[:, :1] * 2.0
    history = model.fit(x, t, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    model.save(tmp_path / "f.keras")
    np.testing.assert_allclose(keras.models.load_model(tmp_path / "f.keras").predict(x, verbose=0), model.predict(x),
                               atol=1e-6)
    np.testing.assert_array_equal(tk.models.load_model(tmp_path / "f.keras").predict(x), model.predict(x))


def test_callbacks_see_logs_and_can_stop_training():
    class Recorder:
        def __init__(self):
            self.epochs = []

        def on_epoch_end(self, epoch, logs):
            self.epochs.append((epoch, dict(logs)))
            if epoch == 1:
                self.model.stop_training = True

        def set_model(self, model):
            self.model = model

    x, y = blobs(n=200)
    model = mlp()
    rec = Recorder()
    history = model.fit(x, y, epochs=5, verbose=0, callbacks=[rec])
    assert [e for e, _ in rec.epochs] == [0, 1] and history.epoch == [0, 1]
    assert rec.epochs[0][1]["loss"] == pytest.approx(history.history["loss"][0])


def test_clear_session_resets_automatic_names():
    tk.layers.Dense(1)
    tk.clear_session()
    assert tk.layers.Dense(1).name == "dense" and tk.layers.Dense(1).name == "dense_1"
    assert tk.layers.Conv2D(1, 1).name == "conv2d" and tk.layers.BatchNormalization().name == "batch_normalization"


def test_bad_arguments_raise_the_right_exceptions(tmp_path):
    with pytest.raises(TypeError, match="kernel_regularizer"):
        tk.layers.Dense(4, kernel_regularizer="l2")
    with pytest.raises(TypeError, match="units"):
        tk.layers.Dense()
    with pytest.raises(ValueError, match="units"):
        tk.layers.Dense(0)
    with pytest.raises(ValueError, match="rate"):
        tk.layers.Dropout(1.5)
    with pytest.raises(ValueError, match="padding"):
        tk.layers.Conv2D(4, 3, padding="causal")
    with pytest.raises(TypeError, match="lr"):
        tk.optimizers.Adam(lr=0.1)
    with pytest.raises(ValueError, match="groups"):  # shapes that do not fit: named when the model is built
        tk.Sequential([tk.Input((4, 4, 3)), tk.layers.Conv2D(4, 3, groups=2)])
    with pytest.raises(NotImplementedError, match="axis"):  # valid in Keras, not run by trainkit: named
        tk.Sequential([tk.Input((4, 4, 3)), tk.layers.BatchNormalization(axis=1)])
    model = tk.Sequential([tk.Input((8,)), tk.layers.Dense(2)])
    x, y = blobs(n=16)
    with pytest.raises(ValueError, match="not compiled"):
        model.fit(x, y % 2)
    with pytest.raises(ValueError, match="nosuch"):
        model.compile(optimizer="nosuch", loss="mse")
    with pytest.raises(ValueError, match="nosuch"):
        model.compile(optimizer="adam", loss="nosuch")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="epochs"):
        model.fit(x, y % 2, epochs=0)
    with pytest.raises(ValueError, match="batch_size"):
        model.fit(x, y % 2, batch_size=0)
    with pytest.raises(ValueError):  # x of the wrong shape: trainkit's InvalidArgument
        model.fit(np.zeros((16, 5), np.float32), y % 2, verbose=0)
    with pytest.raises(ValueError, match="dtype"):
        model.predict(np.array(["a", "b"]))
    with pytest.raises(FileNotFoundError):
        tk.models.load_model(tmp_path / "missing.keras")
    with pytest.raises(ValueError, match=".keras"):
        model.save(tmp_path / "m.h5")


def test_an_oversized_fit_raises_out_of_memory_error_and_leaves_the_model_usable():
    # A budget is set before the device is first used: a fresh process. The weights fit; a batch of 8192 does not.
    code = textwrap.dedent(
        """
        import numpy as np, trainkit as tk
        tk.config.set_memory_limit("32MiB")
        model = tk.Sequential([tk.Input((1024,)), tk.layers.Dense(1024), tk.layers.Dense(2)])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        x = np.zeros((8192, 1024), np.float32)
        before = model.get_weights()
        try:
            model.fit(x, np.zeros(8192, np.int64), batch_size=8192, verbose=0)
            print("no error")
        except tk.OutOfMemoryError as e:
            assert isinstance(e, MemoryError)
            assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
            model.fit(x[:8], np.zeros(8, np.int64), batch_size=8, verbose=0)  # a batch that fits still trains
            print("OOM", str(e).splitlines()[0])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "OOM" in out.stdout, out.stdout


def test_keras_callbacks_work_on_the_native_model(tmp_path):
    import keras

    class Snapshot(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.weights = []

        def on_epoch_end(self, epoch, logs=None):
            self.weights.append(self.model.get_weights())

    tk.utils.set_random_seed(8)
    x, y = blobs(n=300, seed=8)
    model = mlp()
    snap = Snapshot()
    # mode="max" on a loss that falls: epoch 0 is the best, epoch 1 does not improve, so training stops there and the
    # weights of epoch 0 come back.
    stop = keras.callbacks.EarlyStopping(monitor="loss", mode="max", patience=0, restore_best_weights=True)
    checkpoint = keras.callbacks.ModelCheckpoint(str(tmp_path / "ck_{epoch}.keras"))
    history = model.fit(x, y, epochs=5, verbose=0, callbacks=[snap, stop, checkpoint,
                                                              keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))])
    assert history.history["loss"][1] < history.history["loss"][0] and history.epoch == [0, 1]
    for now, best in zip(model.get_weights(), snap.weights[0]):
        np.testing.assert_array_equal(now, best)
    np.testing.assert_array_equal(tk.models.load_model(tmp_path / "ck_2.keras").get_weights()[0], snap.weights[1][0])
    assert (tmp_path / "log.csv").read_text().startswith("epoch,accuracy,loss")


def test_functional_model_with_two_inputs_and_its_errors():
    a, b = tk.Input((3,), name="a"), tk.Input((2,), name="b")
    out = tk.layers.Dense(1)(tk.layers.Concatenate()([a, tk.layers.Dense(3)(b)]))
    model = tk.Model([a, b], out)
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(9)
    xa, xb = rng.normal(size=(20, 3)).astype(np.float32), rng.normal(size=(20, 2)).astype(np.float32)
    model.fit([xa, xb], np.zeros((20, 1), np.float32), epochs=1, verbose=0)
    assert model.predict([xa, xb]).shape == (20, 1)
    with pytest.raises(ValueError, match="'b'"):
        tk.Model(a, out)  # out reads b, which is not an input
    with pytest.raises(ValueError, match="tk.Input"):
        tk.Model(a, "not a tensor")
    with pytest.raises(ValueError, match="tk.Input"):
        tk.layers.Dense(1)(np.zeros((2, 3)))


def test_device_and_dtype_policy_are_set_before_the_first_run():
    x, y = blobs(n=64)
    model = mlp()
    with pytest.raises(ValueError, match="tpu"):
        model.set_device("tpu")
    model.set_device("cpu")
    model.set_dtype_policy("mixed_bfloat16")
    lines = []
    model.summary(print_fn=lines.append)
    assert "mixed_bfloat16" in "\n".join(lines)
    history = model.fit(x, y, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    with pytest.raises(ValueError):  # programs exist now: too late, as in C++
        model.set_dtype_policy("float32")
    unbuilt = tk.Sequential([tk.layers.Dense(2)])
    unbuilt.set_dtype_policy("mixed_bfloat16")
    unbuilt.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    unbuilt.fit(x, y % 2, epochs=1, verbose=0)
    lines = []
    unbuilt.summary(print_fn=lines.append)
    assert "mixed_bfloat16" in "\n".join(lines)


def test_keras_optimizer_and_loss_objects_compile_as_ours():
    import keras

    x, y = blobs(n=128, seed=10)
    ours = mlp()
    theirs = tk.Sequential([tk.Input((8,)), tk.layers.Dense(32, activation="relu"), tk.layers.Dense(CLASSES)])
    theirs.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    theirs.set_weights(ours.get_weights())
    ours.fit(x, y, epochs=2, shuffle=False, verbose=0)
    theirs.fit(x, y, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        np.testing.assert_array_equal(a, b)
