"""tk.layers.Normalization.adapt (python/src/preprocessing.cpp -> tk::layers::adapt) against Keras 3's adapt on the
same data (the numpy backend), on arrays and on datasets of batches, and the adapted layer in a model."""

import numpy as np
import pytest

import trainkit as tk


def keras_adapt(axis, data):
    import keras

    layer = keras.layers.Normalization(axis=axis)
    layer.adapt(data)
    return np.asarray(layer.adapt_mean), np.asarray(layer.adapt_variance)


@pytest.mark.parametrize(
    "axis, shape",
    [(-1, (50, 4)), (-1, (12, 3, 5, 2)), ((1, 2), (9, 4, 3)), (1, (20, 3, 6)), (None, (15, 4))],
    ids=["last", "images", "two_axes", "middle", "none"],
)
def test_adapt_of_an_array_and_of_batches_is_keras(axis, shape):
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 4.0 + 3.0).astype(np.float32)
    want_mean, want_var = keras_adapt(axis, x)
    layer = tk.layers.Normalization(axis=axis)
    layer.adapt(x)
    np.testing.assert_allclose(layer._adapted[0], want_mean, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(layer._adapted[1], want_var, atol=1e-5, rtol=1e-5)
    # A dataset of batches (the first component of (x, y) elements), merged batch by batch: Keras' statistics of the
    # whole array. (Keras' own adapt of an iterable of batches needs TensorFlow, even on the numpy backend.)
    y = np.zeros(len(x), np.int64)
    layer = tk.layers.Normalization(axis=axis)
    layer.adapt(tk.data.Dataset.from_tensor_slices((x, y)).batch(7).prefetch(tk.data.AUTOTUNE))
    np.testing.assert_allclose(layer._adapted[0], want_mean, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(layer._adapted[1], want_var, atol=1e-5, rtol=1e-5)


def test_adapt_of_uint8_images_and_a_mapped_dataset():
    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, (30, 4, 4, 3), dtype=np.uint8)
    want_mean, want_var = keras_adapt(-1, images)  # Keras: np.mean / np.var of the uint8 array
    layer = tk.layers.Normalization()
    layer.adapt(images)  # in place: no float copy of the whole array
    np.testing.assert_allclose(layer._adapted[0], want_mean, rtol=1e-5)
    np.testing.assert_allclose(layer._adapted[1], want_var, rtol=1e-5)
    scaled = tk.data.Dataset.from_tensor_slices(images).batch(8).map(lambda b: b / 255.0)
    layer.adapt(scaled)
    np.testing.assert_allclose(layer._adapted[0], want_mean / 255.0, rtol=1e-5)
    np.testing.assert_allclose(layer._adapted[1], want_var / 255.0**2, rtol=1e-5)


def test_an_adapted_layer_normalizes_in_its_model_and_keras_reads_the_file(tmp_path):
    import keras

    rng = np.random.default_rng(2)
    x = (rng.standard_normal((64, 3)) * [1.0, 10.0, 100.0] + [5.0, -2.0, 40.0]).astype(np.float32)
    norm = tk.layers.Normalization()
    norm.adapt(x)  # before the model exists, as in Keras
    model = tk.Sequential([tk.Input((3,)), norm])
    out = model.predict(x)
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=0), 1.0, atol=1e-5)
    mean, variance, count = norm.get_weights()
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-5)
    assert count == 0  # Keras 3 leaves count at 0
    model.save(tmp_path / "n.keras")
    theirs = keras.models.load_model(tmp_path / "n.keras")
    np.testing.assert_allclose(theirs.predict(x, verbose=0), out, atol=1e-5)
    # adapt again once the layer is in a built model: the model's weights change at once.
    norm.adapt(x * 2.0)
    np.testing.assert_allclose(norm.get_weights()[0], 2.0 * x.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(model.predict(x * 2.0), out, atol=1e-4)


def test_adapt_errors_are_clear():
    with pytest.raises(ValueError, match="without a given mean"):
        tk.layers.Normalization(mean=1.0, variance=2.0).adapt(np.zeros((4, 2), np.float32))
    with pytest.raises(TypeError, match="tk.data.Dataset"):
        tk.layers.Normalization().adapt([np.zeros((4, 2), np.float32)])
    with pytest.raises(ValueError, match="empty dataset"):
        tk.layers.Normalization().adapt(tk.data.Dataset.from_tensor_slices(np.zeros((4, 2), np.float32)).take(0))
    norm = tk.layers.Normalization(name="norm")
    norm.adapt(np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="norm"):
        tk.Sequential([tk.Input((5,)), norm])  # adapted to 2 features, used on 5
