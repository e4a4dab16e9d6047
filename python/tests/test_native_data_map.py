"""tk.data.Dataset.map with a Python function, run inside trainkit's C++ pipeline (python/src/dataset.cpp,
map_python): tf.data's structure and order, with shuffle / batch / prefetch and model.fit, and exceptions."""

import gc
import threading
import time

import numpy as np
import pytest

import trainkit as tk


def data(n=96, features=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return x, y


def model(features=5):
    m = tk.Sequential([tk.Input((features,)), tk.layers.Dense(8, activation="relu"), tk.layers.Dense(2)])
    m.compile(optimizer="adam", loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


class AugmentError(Exception):
    pass


def test_map_keeps_tf_datas_structure():
    x, y = data(n=6)
    pairs = list(tk.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b + 1)))
    assert len(pairs) == 6
    for i, (a, b) in enumerate(pairs):
        np.testing.assert_array_equal(a, x[i] * 2)
        assert a.dtype == np.float32 and b.dtype == np.int64 and b == y[i] + 1
    # One component in: one argument; an array out: an element of one array (iterated as the array itself).
    singles = list(tk.data.Dataset.from_tensor_slices(x).map(lambda a: a.sum()))
    np.testing.assert_allclose(singles, x.sum(axis=1), rtol=1e-6)
    assert singles[0].shape == ()
    # Structure may change: one component to three; float64 results become float32, Python ints int64.
    three = list(tk.data.Dataset.from_tensor_slices(x).map(lambda a: [a.astype(np.float64), 7, a[:2] > 0]))
    assert [c.dtype for c in three[0]] == [np.float32, np.int64, np.bool_]
    assert three[0][1] == 7 and three[0][2].shape == (2,)
    # Per batch: map after batch is one call per batch.
    calls = []
    batches = list(tk.data.Dataset.from_tensor_slices((x, y)).batch(4).map(lambda a, b: (calls.append(1) or a, b)))
    assert len(calls) == 2 and [b[0].shape for b in batches] == [(4, 5), (2, 5)]
    assert "map" in repr(tk.data.Dataset.from_tensor_slices(x).map(np.abs, num_parallel_calls=2))


def test_map_passes_read_only_views_and_keeps_them_valid():
    x, y = data(n=5)
    images = (np.arange(5 * 4) % 256).astype(np.uint8).reshape(5, 4)
    seen = []

    def keep(img, label):
        seen.append(img)
        assert img.dtype == np.uint8  # uint8 stays uint8
        assert not img.flags.writeable  # a view of the dataset's array: trainkit never writes into input data
        return img, label

    ds = tk.data.Dataset.from_tensor_slices((images.copy(), y)).map(keep)
    assert len(list(ds)) == 5
    del ds
    gc.collect()  # the views the function kept hold the arrays the dataset read
    np.testing.assert_array_equal(np.stack(seen), images)

    def write(img, label):
        img[0] = 1
        return img, label

    with pytest.raises(ValueError, match="read-only"):
        list(tk.data.Dataset.from_tensor_slices((images, y)).map(write))
    np.testing.assert_array_equal(images, (np.arange(5 * 4) % 256).astype(np.uint8).reshape(5, 4))


@pytest.mark.parametrize("calls", [2, 4, tk.data.AUTOTUNE])
def test_parallel_calls_keep_the_order_when_deterministic(calls):
    x = np.arange(40, dtype=np.int64)
    threads = set()

    def slow(v):
        threads.add(threading.get_ident())
        time.sleep(0.004 * float((v * 7) % 5))  # later elements often finish first (sleep releases the GIL)
        return v * 10

    got = [int(v) for v in tk.data.Dataset.from_tensor_slices(x).map(slow, num_parallel_calls=calls)]
    assert got == list(range(0, 400, 10))
    unordered = [int(v) for v in tk.data.Dataset.from_tensor_slices(x).map(slow, num_parallel_calls=calls,
                                                                           deterministic=False)]
    assert sorted(unordered) == list(range(0, 400, 10))
    assert threading.get_ident() not in threads  # the calls ran on the pipeline's threads


def test_fit_on_a_mapped_pipeline_equals_fit_on_the_mapped_arrays():
    x, y = data()
    scale = np.linspace(0.5, 2.0, x.shape[1]).astype(np.float32)
    a, b, c = model(), model(), model()
    b.set_weights(a.get_weights())
    c.set_weights(a.get_weights())
    a.fit(x * scale + 1.0, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    mapped = tk.data.Dataset.from_tensor_slices((x, y)).map(lambda f, t: (f * scale + 1.0, t), num_parallel_calls=3)
    b.fit(mapped.batch(16).prefetch(tk.data.AUTOTUNE), epochs=2, verbose=0)
    per_batch = tk.data.Dataset.from_tensor_slices((x, y)).batch(16).map(lambda f, t: (f * scale + 1.0, t))
    c.fit(per_batch, epochs=2, verbose=0)
    for wa, wb, wc in zip(a.get_weights(), b.get_weights(), c.get_weights()):
        np.testing.assert_array_equal(wa, wb)
        np.testing.assert_array_equal(wa, wc)
    np.testing.assert_array_equal(b.predict(mapped.batch(32)), a.predict(x * scale + 1.0))
    assert b.evaluate(mapped.batch(32)) == pytest.approx(a.evaluate(x * scale + 1.0, y), rel=1e-6)


def test_a_shuffled_mapped_pipeline_trains_reproducibly():
    x, y = data(seed=3)
    a, b = model(), model()
    b.set_weights(a.get_weights())

    def pipeline():
        return (tk.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=5)
                .map(lambda f, t: (np.tanh(f), t), num_parallel_calls=tk.data.AUTOTUNE).batch(12)
                .prefetch(tk.data.AUTOTUNE))

    ha = a.fit(pipeline(), epochs=2, verbose=0)
    hb = b.fit(pipeline(), epochs=2, verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    assert ha.history["loss"] == hb.history["loss"]


@pytest.mark.parametrize("calls", [None, 2])
def test_an_exception_in_the_function_is_raised_unchanged(calls):
    x, y = data(n=40)

    def bad(f, t):
        if f[0] > 1.0:
            raise AugmentError(f"cannot augment a sample with f[0] = {f[0]:.2f}")
        return f, t

    ds = tk.data.Dataset.from_tensor_slices((x, y)).map(bad, num_parallel_calls=calls)
    with pytest.raises(AugmentError, match="cannot augment a sample with f\\[0\\] = "):
        list(ds)
    with pytest.raises(AugmentError, match="cannot augment"):
        model().fit(ds.batch(8).prefetch(tk.data.AUTOTUNE), epochs=1, verbose=0)
    with pytest.raises(KeyError, match="'missing'"):
        list(tk.data.Dataset.from_tensor_slices(x).map(lambda f: {}["missing"], num_parallel_calls=calls))
    # The dataset still works afterwards (each pass is independent), and so does the process.
    assert len(list(tk.data.Dataset.from_tensor_slices(x).map(lambda f: f, num_parallel_calls=calls))) == 40


def test_map_arguments_and_results_are_checked():
    x, _ = data(n=4)
    ds = tk.data.Dataset.from_tensor_slices(x)
    with pytest.raises(TypeError, match="callable"):
        ds.map(3)
    with pytest.raises(ValueError, match="num_parallel_calls"):
        ds.map(abs, num_parallel_calls=0)
    with pytest.raises(ValueError, match="deterministic"):
        ds.map(abs, deterministic="yes")
    with pytest.raises(TypeError, match="nested tuple at position 1"):
        list(ds.map(lambda f: (f, (f, f))))
    with pytest.raises(TypeError, match="returned NoneType"):
        list(ds.map(lambda f: None))
    with pytest.raises(TypeError, match="dtype <U3"):
        list(ds.map(lambda f: np.array("abc")))
    # Shapes that do not batch are trainkit's error, as tf.data's.
    with pytest.raises(ValueError, match="batch"):
        list(ds.map(lambda f: f[: int(abs(f[0]) * 10) % 3 + 1]).batch(4))


def test_a_function_that_refers_to_its_dataset_is_collected():
    # The pipeline holds no reference to the function (the Python Dataset does), so the cycle is Python's to collect.
    import weakref

    x, _ = data(n=4)
    holder = {}
    ds = tk.data.Dataset.from_tensor_slices(x).map(lambda a: a if holder["ds"] is not None else None)
    holder["ds"] = ds
    assert len(list(ds)) == 4
    ref = weakref.ref(ds)
    del ds, holder
    gc.collect()
    assert ref() is None


def test_a_script_with_a_top_level_map_exits_cleanly(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "s.py"
    script.write_text(
        "import numpy as np, trainkit as tk\n"
        "x = np.ones((8, 2), np.float32)\n"
        "ds = tk.data.Dataset.from_tensor_slices(x).map(lambda a: a * 2, num_parallel_calls=2).batch(4)\n"
        "it = iter(ds)\n"
        "print(next(it)[0, 0])\n"  # a pass left running at exit
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("2.0")
    assert "leaked" not in r.stderr, r.stderr
