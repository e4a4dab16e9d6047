"""No hidden copy of the data: training a native model on a 47 MB uint8 array (in place, or through
tk.data.Dataset.from_tensor_slices(...).batch(...)) raises the process' peak RSS by less than 10% of the array's size
beyond the planned training step. (prefetch(AUTOTUNE) is left out: its buffer holds as many batches as its RAM budget
lets it, by design.)"""

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    import trainkit as tk

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB

    x = np.random.default_rng(0).integers(0, 256, (60000, 784), dtype=np.uint8)  # 47 MB, touched
    y = (x[:, 0] > 127).astype(np.int64)
    model = tk.Sequential([tk.Input((784,)), tk.layers.Rescaling(1 / 255), tk.layers.Dense(64, activation="relu"),
                           tk.layers.Dense(2)])
    model.compile(optimizer="adam", loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True))
    plan = model.plan(128).total
    model.fit(x[:256], y[:256], batch_size=128, verbose=0)  # programs built, allocator warm
    base = peak()
    if sys.argv[1] == "arrays":
        model.fit(x, y, batch_size=128, epochs=1, verbose=0)
    else:
        model.fit(tk.data.Dataset.from_tensor_slices((x, y)).batch(128), epochs=1, verbose=0)
    print(x.nbytes, plan, peak() - base)
    """
)


@pytest.mark.parametrize("source", ["arrays", "dataset"])
def test_training_on_a_uint8_array_makes_no_copy_of_it(source):
    out = subprocess.run([sys.executable, "-c", CHILD, source], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    nbytes, plan, grew = map(int, out.stdout.split()[-3:])
    assert grew - plan < 0.1 * nbytes, f"peak RSS grew {grew} bytes (plan {plan}) training on {nbytes} bytes"
