"""tk.data.Dataset (python/src/dataset.cpp, trainkit/data.py) and model.fit / evaluate / predict on it."""

import numpy as np
import pytest

import trainkit as tk


def data(n=250, features=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x[:, 0] - x[:, 1] > 0).astype(np.int64)
    return x, y


def model(features=6):
    m = tk.Sequential([tk.Input((features,)), tk.layers.Dense(16, activation="relu"), tk.layers.Dense(2)])
    m.compile(optimizer="adam", loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return m


def test_from_tensor_slices_batch_shuffle_iterate():
    x, y = data(n=10)
    ds = tk.data.Dataset.from_tensor_slices((x, y))
    assert len(ds) == 10
    first = next(iter(ds))
    np.testing.assert_array_equal(first[0], x[0])
    assert first[1] == y[0]
    batches = list(ds.batch(4))
    assert [b[0].shape for b in batches] == [(4, 6), (4, 6), (2, 6)]
    assert len(ds.batch(4, drop_remainder=True)) == 2
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x)
    shuffled = np.concatenate([b[1] for b in ds.shuffle(10, seed=3).batch(3)])
    order = [int(np.argwhere((x == row).all(axis=1))[0, 0]) for row in
             np.concatenate([b[0] for b in ds.shuffle(10, seed=3).batch(3)])]
    assert sorted(order) == list(range(10))  # a permutation
    np.testing.assert_array_equal(shuffled, y[order])  # x and y stay paired
    again = [int(np.argwhere((x == row).all(axis=1))[0, 0]) for row in
             np.concatenate([b[0] for b in ds.shuffle(10, seed=3, reshuffle_each_iteration=False).batch(3)])]
    assert sorted(again) == list(range(10))
    assert len(ds.take(3)) == 3 and len(ds.skip(7)) == 3 and len(ds.repeat(2)) == 20
    assert ds.repeat().cardinality() == tk.data.INFINITE_CARDINALITY
    assert "batch(4)" in repr(ds.batch(4)) and "prefetch(AUTOTUNE)" in repr(ds.prefetch(tk.data.AUTOTUNE))


def test_the_arrays_are_kept_alive_by_the_dataset():
    x, y = data(n=8)
    ds = tk.data.Dataset.from_tensor_slices((x.copy(), y.copy())).batch(8)
    del x  # the copies passed in are referenced only by the dataset now
    import gc

    gc.collect()
    (bx, by), = list(ds)
    np.testing.assert_array_equal(bx, data(n=8)[0])


def test_fit_on_a_dataset_equals_fit_on_arrays_in_the_same_order():
    x, y = data()
    a, b, c = model(), model(), model()
    b.set_weights(a.get_weights())
    c.set_weights(a.get_weights())
    ha = a.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    hb = b.fit(tk.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=2, verbose=0)
    hc = c.fit(tk.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(tk.data.AUTOTUNE), epochs=2, verbose=0)
    for wa, wb, wc in zip(a.get_weights(), b.get_weights(), c.get_weights()):
        np.testing.assert_array_equal(wa, wb)
        np.testing.assert_array_equal(wa, wc)
    np.testing.assert_allclose(hb.history["loss"], ha.history["loss"], rtol=1e-6)
    np.testing.assert_allclose(hc.history["loss"], ha.history["loss"], rtol=1e-6)
    ds = tk.data.Dataset.from_tensor_slices((x, y)).batch(50)
    np.testing.assert_array_equal(a.predict(ds), a.predict(x))
    assert a.evaluate(ds, return_dict=True) == pytest.approx(a.evaluate(x, y, return_dict=True), rel=1e-6)


def test_a_seeded_shuffle_trains_reproducibly_and_validation_data_is_reported():
    x, y = data(seed=1)
    vx, vy = data(n=60, seed=2)
    a, b = model(), model()
    b.set_weights(a.get_weights())
    def pipeline():
        # Made afresh for each fit: as in tf.data, each pass over one dataset object draws its next order.
        return tk.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=11).batch(25).prefetch(tk.data.AUTOTUNE)

    ha = a.fit(pipeline(), epochs=3, validation_data=(vx, vy), verbose=0)
    hb = b.fit(pipeline(), epochs=3, validation_data=tk.data.Dataset.from_tensor_slices((vx, vy)).batch(16), verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    assert len(ha.history["val_loss"]) == 3
    np.testing.assert_allclose(ha.history["val_loss"], hb.history["val_loss"], rtol=1e-6)


def test_dataset_arguments_are_checked():
    x, y = data(n=20)
    ds = tk.data.Dataset.from_tensor_slices((x, y))
    m = model()
    with pytest.raises(ValueError, match="positive"):
        ds.batch(0)
    with pytest.raises(ValueError, match="first dimensions"):
        tk.data.Dataset.from_tensor_slices((x, y[:5]))
    with pytest.raises(ValueError, match="y must be None"):
        m.fit(ds.batch(4), y)
    with pytest.raises(ValueError, match="batch_size must be None"):
        m.fit(ds.batch(4), batch_size=4)
    with pytest.raises(ValueError, match="validation_split"):
        m.fit(ds.batch(4), validation_split=0.1)


def test_a_repeated_dataset_trains_steps_per_epoch_batches():
    x, y = data(n=64)
    m = model()
    forever = tk.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    with pytest.raises(ValueError, match="steps_per_epoch"):
        m.fit(forever, epochs=1, verbose=0)
    history = m.fit(forever, epochs=3, steps_per_epoch=6, verbose=0)
    assert history.epoch == [0, 1, 2] and history.params["steps"] == 6
    # steps_per_epoch on arrays: the epoch stops after that many batches (4 of 32 rows here: half the data).
    a, b = model(), model()
    b.set_weights(a.get_weights())
    a.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=4, shuffle=False, verbose=0)
    b.fit(x[:32], y[:32], batch_size=8, epochs=1, shuffle=False, verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        m.fit(x, y, steps_per_epoch=0)
