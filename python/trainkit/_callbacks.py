"""Keras callbacks in tk.fit(..., callbacks=[...]), called by trainkit's training loop (python/src/callbacks.h).

trainkit trains its own copy of the model; the Keras model object is brought up to date only where a callback can
look at it. The rule (docs/python.md, "Callbacks"):

- Every callback gets Keras' calls in Keras' order (on_train_begin, on_epoch_begin, on_train_batch_begin/end,
  on_epoch_end, on_train_end), set_params({"verbose", "epochs", "steps"}) and set_model(the Keras model), with one
  logs dict per event shared by the callbacks in list order (so History sees what ReduceLROnPlateau adds to it).
  on_test_* and on_predict_* are not called: trainkit validates inside its own loop.
- model.stop_training = True set by any of them stops trainkit's fit (at the step or epoch boundary it was set at).
- model.optimizer.learning_rate holds trainkit's learning rate when a callback is called; a new value assigned to it
  (ReduceLROnPlateau, LearningRateScheduler, a custom callback) is trainkit's from the next step on.
- The weights: callbacks that read logs alone (History, CSVLogger, TerminateOnNaN, ReduceLROnPlateau, ProgbarLogger,
  RemoteMonitor, EarlyStopping without restore_best_weights) never cause a copy. For every other callback
  (ModelCheckpoint, EarlyStopping(restore_best_weights=True), LambdaCallback, a custom subclass) the trained weights
  and the optimizer's variables are written into the Keras model before on_epoch_end and on_train_end (and before
  on_train_batch_end for a ModelCheckpoint with an integer save_freq), and weights such a callback then sets on the
  Keras model (EarlyStopping restoring the best ones) are taken back into trainkit. In batch hooks other callbacks
  see the weights as of the last epoch end.
- keras.callbacks.TensorBoard is replaced by trainkit's writer (Keras' needs TensorFlow): the same folders and
  scalars. BackupAndRestore and SwapEMAWeights need Keras' own training loop: a ValueError naming them.
"""

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from . import _trainkit


def _overrides(cb: Any, base: type, *names: str) -> bool:
    """Whether `cb` does something in one of the hooks `names` (a method of its class, or a LambdaCallback's)."""
    for name in names:
        if name in vars(cb):
            return True
        mine = getattr(type(cb), name, None)
        if mine is not None and mine is not getattr(base, name, None):
            return True
    return False


def keras_weights(model: Any, layout: Sequence[Any]) -> List[np.ndarray]:
    """The Keras model's weights in trainkit's order (bridge.weight_layout(): layers by name)."""
    layers = {layer.name: layer for layer in model.layers}
    out: List[np.ndarray] = []
    for name, _ in layout:
        out.extend(layers[name].get_weights())
    return out


class KerasCallbacks:
    """The dispatcher trainkit's loop calls (PyCallbacks): each method returns True when training should stop."""

    def __init__(self, keras_model: Any, bridge: "_trainkit.Bridge", callbacks: List[Any], write_back: Any) -> None:
        import keras

        base = keras.callbacks.Callback
        self.model = keras_model
        self.bridge = bridge
        self.callbacks = callbacks
        self._write_back = write_back  # keras_bridge._write_back(model, bridge)
        self._layout = bridge.weight_layout()
        log_only = {
            keras.callbacks.History,
            keras.callbacks.CSVLogger,
            keras.callbacks.TerminateOnNaN,
            keras.callbacks.ReduceLROnPlateau,
            keras.callbacks.ProgbarLogger,
            keras.callbacks.RemoteMonitor,
        }

        def needs_weights(cb: Any) -> bool:
            if type(cb) is keras.callbacks.EarlyStopping:
                return bool(cb.restore_best_weights)
            return type(cb) not in log_only

        self._weights_at_epoch = [needs_weights(cb) for cb in callbacks]
        self._weights_at_batch = [
            type(cb) is keras.callbacks.ModelCheckpoint and cb.save_freq != "epoch" for cb in callbacks
        ]
        self._batch_begin = [_overrides(cb, base, "on_train_batch_begin", "on_batch_begin") for cb in callbacks]
        self._batch_end = [_overrides(cb, base, "on_train_batch_end", "on_batch_end") for cb in callbacks]
        self.batch_begin = any(self._batch_begin)
        self.batch_end = any(self._batch_end)
        self._written: Optional[List[np.ndarray]] = None  # the weights last written into the Keras model
        self._lr: Optional[float] = None  # the learning rate last put into model.optimizer
        self.raised = False  # a callback raised: the trained steps are written back all the same

    # ---------------------------------------------------------------- keeping the Keras model in step
    def _sync_weights(self) -> None:
        self._write_back(self.model, self.bridge)
        self._written = keras_weights(self.model, self._layout)

    def _take_weights_back(self) -> None:
        """Weights a callback set on the Keras model (EarlyStopping's best ones) become trainkit's."""
        if self._written is None:
            return
        now = keras_weights(self.model, self._layout)
        if any(not np.array_equal(a, b) for a, b in zip(now, self._written)):
            self.bridge.set_weights([np.ascontiguousarray(w, dtype=np.float32) for w in now])
        self._written = None

    def _lr_syncable(self) -> bool:
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None or self.bridge.has_learning_rate_schedule:
            return False
        import keras

        return not isinstance(getattr(optimizer, "_learning_rate", None), keras.optimizers.schedules.LearningRateSchedule)

    def _put_lr(self) -> None:
        if self._lr_syncable():
            lr = float(self.bridge.learning_rate)
            self.model.optimizer.learning_rate = lr
            self._lr = float(np.asarray(self.model.optimizer.learning_rate))

    def _take_lr(self) -> None:
        if self._lr is None:
            return
        lr = float(np.asarray(self.model.optimizer.learning_rate))
        if lr != self._lr:
            self.bridge.learning_rate = lr
        self._lr = None

    def _call(self, which: List[bool], weights: List[bool], hook: str, *args: Any) -> bool:
        called = [cb for cb, on in zip(self.callbacks, which) if on]
        if not called:
            return False
        if any(w for w, on in zip(weights, which) if on):
            self._sync_weights()
        self._put_lr()
        try:
            for cb in called:
                getattr(cb, hook)(*args)
        except BaseException:
            self.raised = True
            raise
        self._take_lr()
        self._take_weights_back()
        return bool(getattr(self.model, "stop_training", False))

    # ---------------------------------------------------------------- the hooks trainkit's loop calls
    def on_train_begin(self, params: Dict[str, Any], logs: Dict[str, float]) -> bool:
        self.model.stop_training = False
        for cb in self.callbacks:
            cb.set_model(self.model)
            cb.set_params(dict(params))
        every = [True] * len(self.callbacks)
        return self._call(every, [False] * len(every), "on_train_begin", logs)

    def on_epoch_begin(self, epoch: int, logs: Dict[str, float]) -> bool:
        every = [True] * len(self.callbacks)
        return self._call(every, [False] * len(every), "on_epoch_begin", epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: Dict[str, float]) -> bool:
        return self._call(self._batch_begin, [False] * len(self.callbacks), "on_train_batch_begin", batch, logs)

    def on_train_batch_end(self, batch: int, logs: Dict[str, float]) -> bool:
        return self._call(self._batch_end, self._weights_at_batch, "on_train_batch_end", batch, logs)

    def on_epoch_end(self, epoch: int, logs: Dict[str, float]) -> bool:
        every = [True] * len(self.callbacks)
        return self._call(every, self._weights_at_epoch, "on_epoch_end", epoch, logs)

    def on_train_end(self, logs: Dict[str, float]) -> bool:
        every = [True] * len(self.callbacks)
        return self._call(every, self._weights_at_epoch, "on_train_end", logs)


def split_callbacks(callbacks: Optional[Sequence[Any]], label: str) -> Dict[str, Any]:
    """The Python callbacks, the History to return (a user's, else a new one, last in the list as Keras appends it)
    and the TensorBoard settings for trainkit's writer. ValueError for what tk.fit cannot honour."""
    import keras

    python: List[Any] = []
    history = None
    tensorboard = None
    for cb in list(callbacks or []):
        if isinstance(cb, (keras.callbacks.BackupAndRestore, keras.callbacks.SwapEMAWeights)):
            hint = " use tk.fit(..., backup_dir=...) instead" if isinstance(cb, keras.callbacks.BackupAndRestore) else ""
            raise ValueError(
                f"tk.fit: {label}: keras.callbacks.{type(cb).__name__} needs Keras' own training loop (its "
                f"optimizer and graph), which tk.fit does not run;{hint}"
            )
        if isinstance(cb, keras.callbacks.TensorBoard):
            if tensorboard is not None:
                raise ValueError(f"tk.fit: {label}: one keras.callbacks.TensorBoard at most")
            tensorboard = cb
            continue
        if not isinstance(cb, keras.callbacks.Callback):
            raise ValueError(f"tk.fit: callbacks: {cb!r} is not a keras.callbacks.Callback")
        if isinstance(cb, keras.callbacks.History) and history is None:
            history = cb
        python.append(cb)
    if history is None:
        history = keras.callbacks.History()
        python.append(history)
    return {"python": python, "history": history, "tensorboard": tensorboard}


def tensorboard_args(tb: Any, args: "_trainkit.FitArgs", label: str) -> None:
    """keras.callbacks.TensorBoard's settings onto trainkit's writer; what it cannot write is a ValueError."""
    if tb.embeddings_freq:
        raise ValueError(f"tk.fit: {label}: TensorBoard(embeddings_freq={tb.embeddings_freq}) is not written by trainkit")
    if tb.write_images:
        raise ValueError(f"tk.fit: {label}: TensorBoard(write_images=True) is not written by trainkit")
    update = tb.update_freq
    if update == "epoch":
        update = 0
    elif not isinstance(update, int) or update < 1:
        raise ValueError(f"tk.fit: {label}: TensorBoard(update_freq={update!r}): 'epoch', 'batch' or a positive integer")
    args.tensorboard_dir = str(tb.log_dir)
    args.tensorboard_histogram_freq = int(tb.histogram_freq)
    args.tensorboard_update_freq = int(update)
