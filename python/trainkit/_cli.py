"""The `trainkit` console script: runs the trainkit CLI installed inside this package (trainkit/bin/trainkit)."""

import os
import sys
from pathlib import Path


def cli_path() -> Path:
    return Path(__file__).resolve().parent / "bin" / "trainkit"


def main() -> None:
    exe = cli_path()
    if not exe.is_file():
        sys.exit(f"trainkit: the CLI is not installed at {exe} (reinstall the package: pip install .)")
    # The CLI finds its HDF5 helper process beside itself (trainkit/bin/trainkit-hdf5-helper).
    os.execv(str(exe), [str(exe), *sys.argv[1:]])


if __name__ == "__main__":
    main()
