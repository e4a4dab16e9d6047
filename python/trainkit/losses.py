"""tk.losses: Keras 3's losses trainkit computes, with Keras' arguments and defaults (model.compile(loss=...)).
A name ("sparse_categorical_crossentropy", "mse", ...) and a keras.losses object work as well."""

from ._objects import make

SparseCategoricalCrossentropy = make(
    "keras.losses", "SparseCategoricalCrossentropy", "Integer class labels against logits or probabilities.",
    [("from_logits", False), ("ignore_class", None)])
CategoricalCrossentropy = make(
    "keras.losses", "CategoricalCrossentropy", "One-hot labels against logits or probabilities.",
    [("from_logits", False), ("label_smoothing", 0.0)])
BinaryCrossentropy = make(
    "keras.losses", "BinaryCrossentropy", "0/1 labels against logits or probabilities.",
    [("from_logits", False), ("label_smoothing", 0.0)])
MeanSquaredError = make("keras.losses", "MeanSquaredError", "mean((y - y_pred)^2).", [])
MeanAbsoluteError = make("keras.losses", "MeanAbsoluteError", "mean(|y - y_pred|).", [])
Huber = make("keras.losses", "Huber", "Quadratic within delta, linear beyond.", [("delta", 1.0)])

__all__ = [
    "SparseCategoricalCrossentropy",
    "CategoricalCrossentropy",
    "BinaryCrossentropy",
    "MeanSquaredError",
    "MeanAbsoluteError",
    "Huber",
]
