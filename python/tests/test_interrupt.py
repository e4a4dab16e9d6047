"""Ctrl-C during tk.fit, as a user presses it: SIGINT sent to another Python process while it trains."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("keras")

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    # A process started in the background by a non-interactive shell (as CI may start pytest) inherits SIGINT
    # ignored, and Python then installs no handler; an interactive Python has this one.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import keras, trainkit as tk
    from test_keras_bridge import make_data, make_mlp

    model = make_mlp()
    x, y = make_data()
    before = [w.copy() for w in model.get_weights()]

    class Ready(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 2:
                print("training", flush=True)  # the parent sends SIGINT now

    try:
        tk.fit(model, x, y, batch_size=16, epochs=10**7, verbose=0, callbacks=[Ready()], backup_dir=sys.argv[1])
    except KeyboardInterrupt:
        steps = int(np.asarray(model.optimizer.iterations))
        changed = any(not np.array_equal(a, b) for a, b in zip(model.get_weights(), before))
        agree = np.abs(model.predict(x, verbose=0) - tk.predict(model, x)).max() <= 1e-6
        kept = os.path.isfile(os.path.join(sys.argv[1], "latest.tkstate"))
        print(f"interrupted steps={steps} changed={changed} agree={agree} backup={kept}", flush=True)
        sys.exit(0)
    sys.exit(3)
    """
)


def test_sigint_stops_fit_at_a_step_boundary_with_a_consistent_model(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("KERAS_BACKEND", "numpy")
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err_file:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "backup")], stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
    try:
        for line in child.stdout:  # trainkit may print a line of its own first (the device it created)
            if line.strip() == "training":
                child.send_signal(signal.SIGINT)
                break
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, stderr.read_text()
    out = out.strip()
    assert out.startswith("interrupted"), out
    words = dict(w.split("=") for w in out.split()[1:])
    # It trained past the third epoch (6 steps each) and stopped: the Keras model holds the weights of the last
    # finished step, and predicts what trainkit predicts on them.
    assert int(words["steps"]) >= 3 * 6
    assert words["changed"] == "True" and words["agree"] == "True"
    # backup_dir keeps the last epoch's backup (a normal end removes it): the same call resumes from there.
    assert words["backup"] == "True"
