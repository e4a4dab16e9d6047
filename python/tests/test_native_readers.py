"""The C++ file readers in tk.data (python/src/readers.cpp): Dataset.from_npz and tf.data.experimental.CsvDataset,
on small files written here."""

import numpy as np
import pytest

import trainkit as tk


def test_from_npz_reads_members_in_place_of_np_load(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 3))  # float64: trainkit reads it as float32
    y = rng.integers(0, 3, 10).astype(np.int16)  # int16: int32
    images = rng.integers(0, 256, (10, 2, 2), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=y, images=images)
    np.savez_compressed(tmp_path / "c.npz", x=x, y=y)
    ds = tk.data.Dataset.from_npz(tmp_path / "d.npz", keys=["images", "y"])
    assert len(ds) == 10
    (bi, by), = list(ds.batch(10))
    assert bi.dtype == np.uint8 and by.dtype == np.int32
    np.testing.assert_array_equal(bi, images)
    np.testing.assert_array_equal(by, y)
    (bx, by), = list(tk.data.Dataset.from_npz(tmp_path / "c.npz").batch(10))  # all members, archive order
    np.testing.assert_array_equal(bx, x.astype(np.float32))
    m = tk.Sequential([tk.Input((3,)), tk.layers.Dense(3)])
    m.compile(optimizer="sgd", loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert m.fit(tk.data.Dataset.from_npz(tmp_path / "c.npz").batch(4), epochs=1, verbose=0).epoch == [0]
    with pytest.raises(ValueError, match=r"no member \['z'\].*\['x', 'y', 'images'\]"):
        tk.data.Dataset.from_npz(tmp_path / "d.npz", keys=["z"])
    with pytest.raises(FileNotFoundError):
        tk.data.Dataset.from_npz(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip at all")
    with pytest.raises(tk.FormatError, match="bad.npz"):
        tk.data.Dataset.from_npz(tmp_path / "bad.npz")


def write(path, text):
    path.write_text(text)
    return path


def test_csv_dataset_is_tf_datas(tmp_path):
    f = write(tmp_path / "a.csv", 'pixel0,pixel1,label\n1.5,2,0\n-3,,1\n"4.25",5e1,2\n')
    ds = tk.data.experimental.CsvDataset(f, [np.float32, 0.5, np.int64], header=True)
    rows = list(ds)
    assert [tuple(float(v) for v in r) for r in rows] == [(1.5, 2.0, 0), (-3.0, 0.5, 1), (4.25, 50.0, 2)]
    assert rows[0][0].shape == () and rows[0][0].dtype == np.float32 and rows[0][2].dtype == np.int64
    # select_cols (file order), without a header, several files one after the other; Python ints are int32.
    g = write(tmp_path / "b.csv", "1;10;100\n2;20;200\n")
    h = write(tmp_path / "c.csv", "3;30;300\n")
    ds = tk.data.experimental.CsvDataset([g, h], [0, np.float32], field_delim=";", select_cols=[0, 2])
    got = [(int(a), float(b)) for a, b in ds]
    assert got == [(1, 100.0), (2, 200.0), (3, 300.0)]
    assert next(iter(ds))[0].dtype == np.int32
    excl = tk.data.experimental.CsvDataset(g, [np.float32], field_delim=";", exclude_cols=[0, 1])
    assert [float(v) for v in excl] == [100.0, 200.0]
    # Batched, mapped into (features, label) and trained on.
    pairs = tk.data.experimental.CsvDataset(f, [np.float32, 0.5, np.int64], header=True).batch(2).map(
        lambda a, b, label: (np.stack([a, b], axis=1), label))
    (x0, y0), (x1, y1) = list(pairs)
    np.testing.assert_array_equal(x0, [[1.5, 2.0], [-3.0, 0.5]])
    np.testing.assert_array_equal(y1, [2])
    m = tk.Sequential([tk.Input((2,)), tk.layers.Dense(3)])
    m.compile(optimizer="sgd", loss=tk.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert m.fit(pairs, epochs=2, verbose=0).epoch == [0, 1]


def test_csv_errors_name_the_file_and_what_to_do(tmp_path):
    f = write(tmp_path / "a.csv", "a,b\n1,2\n3,x\n")
    CsvDataset = tk.data.experimental.CsvDataset
    with pytest.raises(tk.FormatError, match=r"a\.csv.*line 3"):
        list(CsvDataset(f, [np.float32, np.float32], header=True))
    with pytest.raises(ValueError, match="2 record_defaults for 1 selected"):
        CsvDataset(f, [np.float32, np.float32], header=True, select_cols=[1])
    with pytest.raises(ValueError, match="out of range"):
        CsvDataset(f, [np.float32], header=True, select_cols=[5])
    with pytest.raises(NotImplementedError, match="string columns"):
        CsvDataset(f, ["", np.float32], header=True)
    with pytest.raises(NotImplementedError, match="compression_type"):
        CsvDataset(f, [np.float32, np.float32], compression_type="GZIP")
    with pytest.raises(FileNotFoundError):
        CsvDataset(tmp_path / "none.csv", [np.float32])
    with pytest.raises(tk.FormatError, match="empty"):
        list(CsvDataset(write(tmp_path / "e.csv", "a,b\n1,\n"), [np.float32, np.float32], header=True))


def write_idx(path, array):
    """An IDX file (the MNIST format): zero, zero, dtype 0x08 (uint8), rank, big-endian int32 dims, the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_load_data_is_keras(tmp_path, monkeypatch):
    import gzip

    rng = np.random.default_rng(4)
    parts = {"train": (rng.integers(0, 256, (5, 28, 28)), rng.integers(0, 10, 5)),
             "t10k": (rng.integers(0, 256, (3, 28, 28)), rng.integers(0, 10, 3))}
    for split, (x, y) in parts.items():
        write_idx(tmp_path / f"{split}-images-idx3-ubyte", x)
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte", y)
    gz = tmp_path / "t10k-labels-idx1-ubyte"
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(gz.read_bytes()))  # .gz is read first
    gz.unlink()
    monkeypatch.setenv("TK_FASHION_MNIST_DIR", str(tmp_path))
    (x_train, y_train), (x_test, y_test) = tk.datasets.fashion_mnist.load_data()
    assert x_train.dtype == np.uint8 and x_train.shape == (5, 28, 28) and y_test.shape == (3,)
    np.testing.assert_array_equal(x_train, parts["train"][0])
    np.testing.assert_array_equal(y_train, parts["train"][1])
    np.testing.assert_array_equal(x_test, parts["t10k"][0])
    np.testing.assert_array_equal(y_test, parts["t10k"][1])
    (a, _), _ = tk.datasets.fashion_mnist.load_data(tmp_path)
    np.testing.assert_array_equal(a, x_train)
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(OSError, match="train-labels-idx1-ubyte"):
        tk.datasets.fashion_mnist.load_data()
