"""The generated tiny model, written once per test session (on the tests' path: test folders are
not packages): the ``tiny_model_dir`` fixture's, and the session servers' when they start early."""

from __future__ import annotations

from pathlib import Path

_written: dict[int, Path] = {}


def tiny_model(tmp_path_factory) -> Path:
    """The tiny BERT under ``tmp_path_factory``'s base: 2 layers, deterministic."""
    key = id(tmp_path_factory)
    if key not in _written:
        from embedtext.server.models.synthetic import write_synthetic_bert

        _written[key] = write_synthetic_bert(tmp_path_factory.mktemp("models") / "tiny-bert", seed=0)
    return _written[key]
