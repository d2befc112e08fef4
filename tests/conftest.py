"""Fixtures of both tiers: the test session's environment and the generated tiny model. The
integration tier's servers are in tests/integration/conftest.py."""

import os

import pytest
from tiny_model import tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Test servers compute in float32 whatever this CPU's --dtype auto would pick, so their vectors
# equal sentence-transformers' on every machine (test_co_deployed_default_* runs auto itself).
os.environ.setdefault("EMBEDTEXT_DTYPE", "float32")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory)
