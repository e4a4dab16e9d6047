"""tk.utils: set_random_seed, as keras.utils.set_random_seed."""

from . import _trainkit


def set_random_seed(seed: int) -> None:
    """Seeds the weight initializers, dropout and shuffles of everything made afterwards."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"set_random_seed: a non-negative integer, got {seed!r}")
    _trainkit.set_random_seed(seed)


__all__ = ["set_random_seed"]
