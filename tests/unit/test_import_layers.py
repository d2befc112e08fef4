"""Imports point one way (STYLE.md), checked by import-linter's contracts in pyproject.toml.

The package's parts live in top-level folders mapped onto ``embedtext.*``; import-linter walks
one directory tree, so the test lays the package out as the wheel does, then lints it.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = {
    "protocol": "protocol",
    "server": "server",
    "connectors": "connectors",
    "udf": "udf",
    "sql": "sql",
    "bench": "bench",
}


def test_import_contracts_hold(tmp_path):
    pkg = tmp_path / "embedtext"
    ignore = shutil.ignore_patterns("__pycache__", "results", "gpu")  # bench's results and shell scripts
    shutil.copytree(ROOT / "embedtext", pkg, ignore=ignore)
    for name, folder in PARTS.items():
        shutil.copytree(ROOT / folder, pkg / name, ignore=ignore)
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower() or "0 broken" in result.stdout
