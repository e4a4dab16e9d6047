"""tk.optimizers: Keras 3's optimizers trainkit runs, with Keras' arguments and defaults (model.compile(optimizer=...)).
A name ("adam", "sgd", ...) and a keras.optimizers object work as well."""

from ._objects import make

_common = [("weight_decay", None), ("clipnorm", None), ("clipvalue", None), ("global_clipnorm", None)]

SGD = make("keras.optimizers", "SGD", "Stochastic gradient descent, with momentum and Nesterov.",
           [("learning_rate", 0.01), ("momentum", 0.0), ("nesterov", False), *_common])
Adam = make("keras.optimizers", "Adam", "Adam (Kingma and Ba).",
            [("learning_rate", 0.001), ("beta_1", 0.9), ("beta_2", 0.999), ("epsilon", 1e-07), ("amsgrad", False),
             *_common])
AdamW = make("keras.optimizers", "AdamW", "Adam with decoupled weight decay.",
             [("learning_rate", 0.001), ("weight_decay", 0.004), ("beta_1", 0.9), ("beta_2", 0.999),
              ("epsilon", 1e-07), ("amsgrad", False), ("clipnorm", None), ("clipvalue", None),
              ("global_clipnorm", None)])
RMSprop = make("keras.optimizers", "RMSprop", "RMSprop.",
               [("learning_rate", 0.001), ("rho", 0.9), ("momentum", 0.0), ("epsilon", 1e-07), ("centered", False),
                *_common])
Adagrad = make("keras.optimizers", "Adagrad", "Adagrad.",
               [("learning_rate", 0.001), ("initial_accumulator_value", 0.1), ("epsilon", 1e-07), *_common])

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]
