"""README.md's "From Python" examples run as written (both Python blocks, in order, in a scratch folder)."""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_examples_run(tmp_path):
    text = README.read_text()
    section = text[text.index("## From Python") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 2, "README's From Python section lost its examples"
    script = tmp_path / "readme_example.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ, KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "numpy"))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "m.keras").is_file() and (tmp_path / "native.keras").is_file()
