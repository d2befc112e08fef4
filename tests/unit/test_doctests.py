"""The examples in every module's docstrings run: one walk over the whole package, no hand-kept list."""

import doctest
import importlib
import pkgutil

import pytest

import embedtext

# The parts mapped onto embedtext.* from the top-level folders (pyproject's package-dir).
PARTS = ("protocol", "server", "connectors", "udf", "sql", "bench")


def _modules() -> list[str]:
    names = ["embedtext", *(m.name for m in pkgutil.iter_modules(embedtext.__path__, "embedtext."))]
    for part in PARTS:
        package = importlib.import_module(f"embedtext.{part}")
        names += [package.__name__, *(m.name for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}."))]
    return names


MODULES = _modules()


def test_the_walk_finds_every_part():
    assert {name.split(".")[1] for name in MODULES if name.count(".") >= 1} >= set(PARTS)
    assert "embedtext.server.engine.base" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
