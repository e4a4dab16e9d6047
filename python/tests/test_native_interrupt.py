"""Ctrl-C during a native model's fit (model.fit on a tk.data.Dataset): SIGINT sent to another Python process."""

import os
import signal
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import signal, sys
    import numpy as np
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive Python has it (test_interrupt.py)
    import trainkit as tk

    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    model = tk.Sequential([tk.Input((4,)), tk.layers.Dense(8, activation="relu"), tk.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    before = model.get_weights()

    class Ready:
        def on_epoch_end(self, epoch, logs):
            if epoch == 2:
                print("training", flush=True)  # the parent sends SIGINT now

    ds = tk.data.Dataset.from_tensor_slices((x, y)).batch(16).prefetch(tk.data.AUTOTUNE)
    try:
        model.fit(ds, epochs=10**7, verbose=0, callbacks=[Ready()])
    except KeyboardInterrupt:
        changed = any(not np.array_equal(a, b) for a, b in zip(model.get_weights(), before))
        finite = all(np.isfinite(w).all() for w in model.get_weights())
        print(f"interrupted changed={changed} finite={finite} predicts={model.predict(x).shape}", flush=True)
        sys.exit(0)
    sys.exit(3)
    """
)


def test_sigint_stops_a_native_fit_with_the_model_usable(tmp_path):
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err_file:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=err_file, text=True,
                                 env=dict(os.environ))
    try:
        for line in child.stdout:
            if line.strip() == "training":
                child.send_signal(signal.SIGINT)
                break
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, stderr.read_text()
    assert out.strip() == "interrupted changed=True finite=True predicts=(96, 2)", out
