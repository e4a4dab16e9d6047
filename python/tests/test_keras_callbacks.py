"""Keras callbacks in tk.fit(..., callbacks=[...]) and tk.fit(..., backup_dir=...) (trainkit/_callbacks.py).

Keras' numpy backend cannot train, so each callback's effect is checked against a run without it: the same model,
data and batches (shuffle=False) trained for the epochs the callback should have let run, or with the learning rate
it should have set.
"""

import csv
import math

import numpy as np
import pytest

keras = pytest.importorskip("keras")
import trainkit as tk  # noqa: E402
from test_keras_bridge import make_data, make_mlp  # noqa: E402


def fit(model, x, y, **kw):
    kw.setdefault("batch_size", 16)
    kw.setdefault("shuffle", False)
    kw.setdefault("verbose", 0)
    return tk.fit(model, x, y, **kw)


def trained(epochs, **kw):
    """The weights of make_mlp() after `epochs` epochs of fit (no callbacks)."""
    model = make_mlp()
    x, y = make_data()
    fit(model, x, y, epochs=epochs, **kw)
    return model.get_weights()


def assert_weights_equal(a, b):
    assert len(a) == len(b)
    for wa, wb in zip(a, b):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-6)


def test_early_stopping_patience_and_start_from_epoch():
    x, y = make_data()
    # mode="max" on a falling loss: only the first watched epoch improves, so training stops `patience` epochs later.
    stop = keras.callbacks.EarlyStopping(monitor="loss", mode="max", patience=2)
    history = fit(make_mlp(), x, y, epochs=20, callbacks=[stop])
    assert history.epoch == [0, 1, 2] and stop.stopped_epoch == 2
    stop = keras.callbacks.EarlyStopping(monitor="loss", mode="max", patience=2, start_from_epoch=2)
    assert fit(make_mlp(), x, y, epochs=20, callbacks=[stop]).epoch == [0, 1, 2, 3, 4]
    # min_delta larger than any change: no epoch after the first improves.
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=1e9, patience=0)
    assert fit(make_mlp(), x, y, epochs=20, validation_split=0.25, callbacks=[stop]).epoch == [0, 1]


def test_early_stopping_restores_the_best_weights_into_keras_and_trainkit():
    model = make_mlp()
    x, y = make_data()
    stop = keras.callbacks.EarlyStopping(monitor="loss", mode="max", patience=2, restore_best_weights=True)
    history = fit(model, x, y, epochs=20, callbacks=[stop])
    assert history.epoch == [0, 1, 2] and stop.best_epoch == 0
    # The best epoch was the first: the model holds one epoch's weights, not three.
    assert_weights_equal(model.get_weights(), trained(1))
    np.testing.assert_allclose(model.predict(x, verbose=0), tk.predict(model, x), rtol=0, atol=1e-6)


def test_csv_logger_writes_the_history(tmp_path):
    path = tmp_path / "log.csv"
    x, y = make_data()
    history = fit(make_mlp(), x, y, epochs=3, validation_split=0.25, callbacks=[keras.callbacks.CSVLogger(path)])
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    assert set(rows[0]) == {"epoch", "loss", "accuracy", "val_loss", "val_accuracy"}
    for key, values in history.history.items():
        np.testing.assert_allclose([float(r[key]) for r in rows], values, rtol=1e-12)


def test_model_checkpoint_saves_the_trained_keras_model(tmp_path):
    model = make_mlp()
    x, y = make_data()
    pattern = str(tmp_path / "m_{epoch:02d}-{val_loss:.3f}.keras")
    history = fit(model, x, y, epochs=2, validation_split=0.25, callbacks=[keras.callbacks.ModelCheckpoint(pattern)])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"m_{e + 1:02d}-{v:.3f}.keras" for e, v in enumerate(history.history["val_loss"])]
    first = keras.models.load_model(tmp_path / names[0])
    last = keras.models.load_model(tmp_path / names[1])
    assert_weights_equal(first.get_weights(), trained(1, validation_split=0.25))
    assert_weights_equal(last.get_weights(), model.get_weights())
    # With the optimizer's state of that epoch: 3 steps per epoch (72 rows, batch 16: 5 steps).
    assert int(np.asarray(first.optimizer.iterations)) == 5


def test_model_checkpoint_best_weights_only(tmp_path):
    model = make_mlp()
    x, y = make_data()
    path = tmp_path / "best.weights.h5"
    ckpt = keras.callbacks.ModelCheckpoint(path, monitor="loss", mode="max", save_best_only=True, save_weights_only=True)
    fit(model, x, y, epochs=3, callbacks=[ckpt])
    best = make_mlp()
    best.load_weights(path)
    assert_weights_equal(best.get_weights(), trained(1))  # only the first epoch "improved"


class StopAfter(keras.callbacks.Callback):
    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 == self.steps:
            self.model.stop_training = True


def test_model_checkpoint_every_n_steps_saves_that_steps_weights(tmp_path):
    model = make_mlp()
    x, y = make_data()
    ckpt = keras.callbacks.ModelCheckpoint(str(tmp_path / "m_{epoch}.keras"), save_freq=4)
    fit(model, x, y, epochs=1, callbacks=[ckpt])  # 6 steps: saved after the 4th alone
    saved = keras.models.load_model(tmp_path / "m_1.keras")
    four = make_mlp()
    fit(four, x, y, epochs=1, callbacks=[StopAfter(4)])
    assert int(np.asarray(four.optimizer.iterations)) == 4
    assert_weights_equal(saved.get_weights(), four.get_weights())


def test_reduce_lr_on_plateau_reaches_trainkits_optimizer():
    x, y = make_data()
    model = make_mlp()
    # min_delta larger than any change: every epoch after the first is a plateau, and halves the rate at its end.
    reduce = keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=1e9)
    history = fit(model, x, y, epochs=3, callbacks=[reduce])
    # Keras logs the rate each epoch trained with (before that epoch's reduction).
    np.testing.assert_allclose(history.history["learning_rate"], [1e-2, 1e-2, 5e-3], rtol=1e-6)
    assert float(np.asarray(model.optimizer.learning_rate)) == pytest.approx(2.5e-3, rel=1e-6)
    # The same training by hand: one epoch at each rate (a second tk.fit continues the optimizer's state).
    by_hand = make_mlp()
    for lr in (1e-2, 1e-2, 5e-3):
        by_hand.optimizer.learning_rate = lr
        fit(by_hand, x, y, epochs=1)
    assert_weights_equal(model.get_weights(), by_hand.get_weights())


def test_terminate_on_nan_stops_after_the_first_step():
    model = make_mlp()
    x, y = make_data()
    x[:] = np.nan
    fit(model, x, y, epochs=5, callbacks=[keras.callbacks.TerminateOnNaN()])
    assert int(np.asarray(model.optimizer.iterations)) == 1


def test_a_history_passed_in_is_the_one_returned():
    x, y = make_data()
    mine = keras.callbacks.History()
    assert fit(make_mlp(), x, y, epochs=2, callbacks=[mine]) is mine
    assert mine.epoch == [0, 1] and len(mine.history["loss"]) == 2 and mine.params["steps"] == 6


def test_tensorboard_writes_scalars_as_keras_does(tmp_path):
    x, y = make_data()
    tb = keras.callbacks.TensorBoard(log_dir=tmp_path / "logs")
    fit(make_mlp(), x, y, epochs=2, validation_split=0.25, callbacks=[tb])
    for run in ("train", "validation"):
        files = list((tmp_path / "logs" / run).glob("events.out.tfevents.*"))
        assert len(files) == 1, run
        assert b"epoch_loss" in files[0].read_bytes()
    assert not (tmp_path / "logs" / "train" / "plugins").exists()  # no graph: scalars only


class Recorder(keras.callbacks.Callback):
    """Sees the Keras model at every epoch end and counts the steps; stops training after the second epoch."""

    def __init__(self):
        super().__init__()
        self.weights, self.batches, self.logs = [], 0, []

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append([w.copy() for w in self.model.get_weights()])
        self.logs.append(dict(logs))
        if epoch == 1:
            self.model.stop_training = True


def test_custom_callback_and_lambda_callback():
    model = make_mlp()
    x, y = make_data()
    recorder = Recorder()
    seen = []
    lam = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append((epoch, logs["loss"])),
        on_train_begin=lambda logs: seen.append("begin"),
    )
    history = fit(model, x, y, epochs=10, callbacks=[recorder, lam])
    assert history.epoch == [0, 1], "model.stop_training = True stopped trainkit's fit"
    assert recorder.batches == 2 * 6
    assert recorder.params == {"verbose": 0, "epochs": 10, "steps": 6}
    assert recorder.model is model
    assert seen == ["begin", (0, history.history["loss"][0]), (1, history.history["loss"][1])]
    assert recorder.logs == [{k: v[e] for k, v in history.history.items()} for e in (0, 1)]
    # At each epoch end the Keras model held that epoch's trained weights.
    assert_weights_equal(recorder.weights[0], trained(1))
    assert_weights_equal(recorder.weights[1], model.get_weights())


def test_callback_stopping_mid_epoch():
    model = make_mlp()
    x, y = make_data()
    history = fit(model, x, y, epochs=5, callbacks=[StopAfter(3)])
    assert history.epoch == [0] and int(np.asarray(model.optimizer.iterations)) == 3


def test_callbacks_needing_keras_training_loop_are_a_clear_error(tmp_path):
    x, y = make_data()
    model = make_mlp()
    with pytest.raises(ValueError, match=r"BackupAndRestore.*backup_dir="):
        fit(model, x, y, callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path))])
    with pytest.raises(ValueError, match="SwapEMAWeights"):
        fit(model, x, y, callbacks=[keras.callbacks.SwapEMAWeights()])
    with pytest.raises(ValueError, match="not a keras.callbacks.Callback"):
        fit(model, x, y, callbacks=[print])
    assert int(np.asarray(model.optimizer.iterations)) == 0


class Crash(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            raise RuntimeError("crash at epoch 2")


def test_backup_dir_resumes_a_crashed_fit_to_the_same_weights(tmp_path):
    x, y = make_data()
    backup = tmp_path / "backup"
    uninterrupted = make_mlp()
    fit(uninterrupted, x, y, epochs=4, shuffle=True, seed=7)
    crashed = make_mlp()
    with pytest.raises(RuntimeError, match="crash at epoch 2"):
        fit(crashed, x, y, epochs=4, shuffle=True, seed=7, backup_dir=backup, callbacks=[Crash()])
    assert int(np.asarray(crashed.optimizer.iterations)) == 2 * 6, "the steps that ran were written back"
    assert (backup / "latest.tkstate").is_file()
    # A new process would start from the same initial model: the backup brings it to the end of epoch 2.
    resumed = make_mlp()
    history = fit(resumed, x, y, epochs=4, shuffle=True, seed=7, backup_dir=backup)
    assert history.epoch == [2, 3]
    assert_weights_equal(resumed.get_weights(), uninterrupted.get_weights())
    assert int(np.asarray(resumed.optimizer.iterations)) == 4 * 6
    assert not (backup / "latest.tkstate").exists(), "removed when training ended (keep_backup=False)"
    with pytest.raises(ValueError, match="backup_dir"):
        fit(resumed, x, y, keep_backup=True)
    assert not math.isnan(history.history["loss"][-1])
