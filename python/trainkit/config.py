"""tk.config: device memory budgets, as tf.config's (docs/memory.md says what a budget is).

    import trainkit as tk
    tk.config.set_memory_limit("2GiB")              # the cpu's budget; before anything has used the device
    tk.config.set_memory_limit("20GiB", device="cuda:0")
    tk.config.get_memory_info()["peak"]             # bytes

Budgets are set before the device is first used (ValueError afterwards, as TensorFlow's "cannot be modified after
being initialized"); TK_MEMORY_LIMIT / TK_MEMORY_FRACTION / TK_MEMORY_GROWTH in the environment do the same for
every device.
"""

from typing import Any, Dict, Union

from . import _trainkit


def _bytes(limit: Union[int, str], what: str) -> int:
    if isinstance(limit, bool) or not isinstance(limit, (int, str)):
        raise ValueError(f"{what}: bytes (an int) or a size such as '1.5GiB', got {limit!r}")
    n = _trainkit.parse_bytes(limit) if isinstance(limit, str) else limit
    if n <= 0:
        raise ValueError(f"{what}: the limit must be positive, got {limit!r}")
    return n


def set_memory_limit(limit: Union[int, str], device: str = "cpu") -> None:
    """The device's memory budget: bytes, or '512MiB' / '8GiB' (KiB/MiB/GiB: powers of 1024; KB/MB/GB: of 1000)."""
    _trainkit.set_memory_limit(_bytes(limit, "set_memory_limit"), device)


def set_memory_growth(growth: bool, device: str = "cpu") -> None:
    """True: reserve memory on demand; False: the whole budget up front."""
    _trainkit.set_memory_growth(bool(growth), device)


def get_memory_info(device: str = "cpu") -> Dict[str, Any]:
    """current, peak, reserved, limit, total (bytes), allocations, largest_free_block, fragmentation, growth and
    limit_source (where the budget came from)."""
    return _trainkit.get_memory_info(device)


def reset_peak_memory(device: str = "cpu") -> None:
    _trainkit.reset_peak_memory(device)


__all__ = ["get_memory_info", "reset_peak_memory", "set_memory_growth", "set_memory_limit"]
