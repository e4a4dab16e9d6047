"""/proc/self facts the peer scripts measure memory with (the C++ side: bench/bench_common.h)."""


def status_bytes(key):
    """/proc/self/status's `key` (VmRSS, VmHWM) in bytes; 0 when absent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    """VmHWM back to the current VmRSS: a peak measured after this is the code's that follows."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
