"""The committed generated code must equal what scripts/gen_proto.py produces now."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def test_generated_code_is_fresh(tmp_path):
    pytest.importorskip("grpc_tools")
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(tmp_path)
    for name in gen.OUTPUTS:
        committed = (ROOT / "protocol" / name).read_text()
        fresh = (tmp_path / name).read_text()
        assert committed == fresh, f"protocol/{name} is stale: run `uv run python scripts/gen_proto.py`"
