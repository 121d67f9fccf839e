"""Type-check hal as it is installed: ``backends/`` as ``hal.backends``.

setuptools installs ``backends/`` as the package ``hal.backends`` (``[tool.setuptools.package-dir]``).
mypy cannot follow the editable install's import hook there, so a plain ``mypy`` run checks
``backends/`` as a package of its own and sees everything hal imports from ``hal.backends`` as
``Any``: a backend whose signatures drift from what the ops pass goes unseen. This script lays
the installed package out in a temporary folder (links to ``hal/``'s entries, and
``hal/backends`` linked to ``backends/``), runs mypy there with ``[tool.mypy]`` of
pyproject.toml, and prints mypy's report with the paths of this checkout. Exit status: mypy's.

    .venv/bin/python tools/mypy_installed.py      (make lint runs it)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Lay the installed package out, run mypy on it, print its report with this checkout's paths."""
    with tempfile.TemporaryDirectory(prefix="hal-mypy-") as tmp:
        tree = Path(tmp)
        (tree / "hal").mkdir()
        for entry in (ROOT / "hal").iterdir():
            if entry.name != "__pycache__":
                (tree / "hal" / entry.name).symlink_to(entry)
        (tree / "hal" / "backends").symlink_to(ROOT / "backends")
        (tree / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
        cache = ROOT / ".mypy_cache" / "installed"
        res = subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "hal"],
            cwd=tree, capture_output=True, text=True, env={**os.environ, "MYPY_FORCE_COLOR": "0"},
        )
    # hal/backends/x.py is backends/x.py here; every other path is already this checkout's
    report = (res.stdout + res.stderr).replace("hal/backends/", "backends/")
    print(report, end="")
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
