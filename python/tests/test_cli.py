"""The `trainkit` console script runs the CLI installed inside the package."""

import shutil
import subprocess
import sys
from pathlib import Path


def test_console_script_runs_the_cli():
    script = shutil.which("trainkit", path=str(Path(sys.executable).parent))
    assert script, "pip install did not put the trainkit console script beside python"
    out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "fit" in out.stdout


def test_module_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "trainkit._cli", "devices"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "cpu" in out.stdout
