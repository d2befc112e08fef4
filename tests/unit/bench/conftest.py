"""The GPU scripts under bench/gpu/ are files run by path, not modules of the package: tests load them so."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def gpu_script():
    """``gpu_script("summarize")``: bench/gpu/summarize.py as a module."""

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"gpu_{name}", ROOT / f"bench/gpu/{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
