"""Every tk.layers class with non-default Keras arguments: built by trainkit, saved, and loaded by Keras 3, which then
predicts what trainkit predicts. So each class's arguments mean in trainkit what they mean in Keras."""

import numpy as np
import pytest

import trainkit as tk

L = tk.layers
IMAGE, SEQUENCE, VECTOR = (6, 6, 2), (5, 4), (4,)

CASES = [
    (IMAGE, lambda: L.Conv2D(3, (3, 2), strides=(1, 2), padding="same", activation="relu", use_bias=False)),
    (IMAGE, lambda: L.Conv2D(4, 3, dilation_rate=2, groups=2, kernel_initializer="he_normal")),
    (IMAGE, lambda: L.Conv2DTranspose(2, 3, strides=2, padding="same")),
    (IMAGE, lambda: L.DepthwiseConv2D(3, depth_multiplier=2, activation="tanh")),
    (IMAGE, lambda: L.SeparableConv2D(3, 3, padding="same")),
    (IMAGE, lambda: L.MaxPooling2D(pool_size=3, strides=1, padding="same")),
    (IMAGE, lambda: L.AveragePooling2D(pool_size=(2, 3), padding="same")),
    (IMAGE, lambda: L.GlobalAveragePooling2D()),
    (IMAGE, lambda: L.GlobalMaxPooling2D()),
    (IMAGE, lambda: L.ZeroPadding2D(((1, 0), (2, 1)))),
    (IMAGE, lambda: L.UpSampling2D((2, 1))),
    (IMAGE, lambda: L.Cropping2D(((1, 0), (0, 2)))),
    (IMAGE, lambda: L.SpatialDropout2D(0.3)),
    (IMAGE, lambda: L.BatchNormalization(momentum=0.9, epsilon=0.01)),
    (IMAGE, lambda: L.Flatten()),
    (SEQUENCE, lambda: L.Conv1D(3, 2, padding="causal", dilation_rate=2)),
    (SEQUENCE, lambda: L.MaxPooling1D(2, padding="same")),
    (SEQUENCE, lambda: L.AveragePooling1D(3, strides=1)),
    (SEQUENCE, lambda: L.GlobalAveragePooling1D()),
    (SEQUENCE, lambda: L.GlobalMaxPooling1D(keepdims=True)),
    (SEQUENCE, lambda: L.ZeroPadding1D((1, 2))),
    (SEQUENCE, lambda: L.UpSampling1D(3)),
    (SEQUENCE, lambda: L.Cropping1D((1, 2))),
    (SEQUENCE, lambda: L.SpatialDropout1D(0.2)),
    (SEQUENCE, lambda: L.SimpleRNN(3, activation="relu")),
    (SEQUENCE, lambda: L.LSTM(3, return_sequences=True, go_backwards=True)),
    (SEQUENCE, lambda: L.GRU(3, reset_after=False)),
    (SEQUENCE, lambda: L.LayerNormalization(axis=-1, epsilon=0.01, center=False)),
    (SEQUENCE, lambda: L.Permute((2, 1))),
    (SEQUENCE, lambda: L.Masking(0.5)),
    (VECTOR, lambda: L.Dense(3, activation="gelu", bias_initializer="ones")),
    (VECTOR, lambda: L.Activation("softplus")),
    (VECTOR, lambda: L.Dropout(0.5, seed=3)),
    (VECTOR, lambda: L.Reshape((2, 2))),
    (VECTOR, lambda: L.Rescaling(0.5, offset=1.0)),
    (VECTOR, lambda: L.Identity()),
    (VECTOR, lambda: L.RepeatVector(2)),
    (VECTOR, lambda: L.ReLU(max_value=0.5, negative_slope=0.1)),
    (VECTOR, lambda: L.LeakyReLU(negative_slope=0.2)),
    (VECTOR, lambda: L.ELU(alpha=0.5)),
    (VECTOR, lambda: L.Softmax()),
    (VECTOR, lambda: L.Normalization(mean=[0.0, 1.0, 2.0, 3.0], variance=[1.0, 4.0, 9.0, 16.0])),
]


def check_keras_agrees(model, xs, tmp_path):
    import keras

    model.save(tmp_path / "m.keras")
    theirs = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(theirs.predict(xs, verbose=0), model.predict(xs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,make", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_layer_means_what_keras_means(shape, make, tmp_path):
    layer = make()
    model = tk.Sequential([tk.Input(shape), layer])
    x = np.random.default_rng(0).normal(size=(3, *shape)).astype(np.float32)
    check_keras_agrees(model, x, tmp_path)


def test_embedding_on_token_ids(tmp_path):
    model = tk.Sequential([tk.Input((4,), dtype="int32"), L.Embedding(10, 3, mask_zero=False), L.Flatten()])
    check_keras_agrees(model, np.array([[1, 2, 3, 9], [0, 0, 5, 4]], np.int32), tmp_path)


@pytest.mark.parametrize("merge", [L.Add, L.Subtract, L.Multiply, L.Average, L.Maximum, L.Minimum, L.Concatenate])
def test_merge_layers(merge, tmp_path):
    a, b = tk.Input(VECTOR), tk.Input(VECTOR)
    model = tk.Model([a, b], merge()([a, b]))
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(3, 4)).astype(np.float32) for _ in range(2)]
    check_keras_agrees(model, xs, tmp_path)
