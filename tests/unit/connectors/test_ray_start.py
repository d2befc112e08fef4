"""How the indexing job starts Ray: a local instance's workers run this Python, even under `uv run`.

Ray's uv integration (on by default) builds each worker a virtual environment of its own from the
working directory when the driver runs under `uv run`; on a small machine that took minutes. A
stand-in ``ray`` module (already initialized, so nothing starts) records what ``_init_ray`` leaves
in the environment; the real Ray run is tests/integration/test_indexing.py.
"""

from __future__ import annotations

import os
import sys
import types

import pytest

from embedtext.connectors.ray import _init_ray

VAR = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


@pytest.fixture
def stand_in_ray(monkeypatch):
    """A ``ray`` module that says it is initialized (a test double: no cluster starts)."""
    module = types.ModuleType("ray")
    module.is_initialized = lambda: True
    monkeypatch.setitem(sys.modules, "ray", module)
    # A copy of the environment, so that nothing set here reaches the tests after these.
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != VAR})
    return module


def test_a_local_instance_turns_off_rays_uv_environments(stand_in_ray):
    _init_ray(None)
    assert os.environ[VAR] == "0"


def test_the_users_own_setting_wins(stand_in_ray):
    os.environ[VAR] = "1"
    _init_ray(None)
    assert os.environ[VAR] == "1"


def test_a_cluster_joined_by_address_keeps_rays_default(stand_in_ray):
    _init_ray("ray://head:10001")
    assert VAR not in os.environ
