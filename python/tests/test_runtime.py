"""tk.devices() and tk.config (python/src/runtime.cpp, trainkit/config.py)."""

import subprocess
import sys
import textwrap

import pytest

import trainkit as tk


def test_devices_lists_the_cpu_first():
    devices = tk.devices()
    cpu = devices[0]
    assert cpu.name == "cpu:0" and cpu.device_type == "CPU" and cpu.index == 0
    assert cpu.total > 0 and cpu.description
    assert "cpu:0" in repr(cpu)
    assert all(d.device_type == "GPU" and d.name.startswith("cuda:") for d in devices[1:])


def test_memory_info_of_a_used_device_and_budgets_only_before_first_use():
    tk.config.reset_peak_memory()
    info = tk.config.get_memory_info()
    assert {"current", "peak", "reserved", "limit", "total", "limit_source"} <= set(info)
    assert 0 <= info["peak"] <= info["limit"] <= info["total"]
    with pytest.raises(ValueError, match="cuda, cuda:N"):
        tk.config.get_memory_info("tpu")
    with pytest.raises(ValueError):
        tk.config.set_memory_limit("a lot")
    with pytest.raises(ValueError):
        tk.config.set_memory_limit(0)


def test_set_memory_limit_in_a_fresh_process():
    # Other tests may have used the cpu in this process (a budget is refused then): a fresh one sets it.
    code = textwrap.dedent(
        """
        import trainkit as tk
        tk.config.set_memory_limit("64MiB")
        print(tk.config.get_memory_info("cpu")["limit"])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(64 << 20)
