# The bridge's tests use real Keras 3 with its numpy backend (CI installs keras, jax and scipy from PyPI; never
# TensorFlow or PyTorch). The backend must be chosen before keras is imported.
import os

os.environ.setdefault("KERAS_BACKEND", "numpy")
