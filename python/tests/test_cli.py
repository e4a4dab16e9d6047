"""The `trainkit` console script runs the CLI installed inside the package."""

import shutil
import subprocess
import sys
from pathlib import Path


def test_console_script_runs_the_cli():
    script = shutil.which("trainkit", path=str(Path(sys.executable).parent))
    assert script, "pip install did not put the trainkit console script beside python"
    out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "fit" in out.stdout


def test_module_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "trainkit._cli", "devices"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "cpu" in out.stdout


def test_predict_writes_every_output_of_a_keras_model_as_keras_predicts(tmp_path):
    # A two-output model built and saved by Keras itself; `trainkit predict --out .npz` holds one array per output
    # under the output layer's name (Keras' model.output_names), equal to Keras' own predict.
    import keras
    import numpy as np

    keras.utils.set_random_seed(7)
    inp = keras.Input((6,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    cls = keras.layers.Dense(3, activation="softmax", name="class_head")(h)
    box = keras.layers.Dense(4, name="box_head")(h)
    model = keras.Model(inp, [cls, box])
    model.save(tmp_path / "two_heads.keras")
    x = np.random.default_rng(0).uniform(-1, 1, (50, 6)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    script = shutil.which("trainkit", path=str(Path(sys.executable).parent))
    out = subprocess.run(
        [script, "predict", str(tmp_path / "two_heads.keras"), "--data", str(tmp_path / "x.npy"), "--out",
         str(tmp_path / "p.npz"), "-v", "0"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = np.load(tmp_path / "p.npz")
    assert list(got.keys()) == list(model.output_names) == ["class_head", "box_head"]
    ref = model.predict(x, verbose=0)
    for name, want in zip(model.output_names, ref):
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
