import pytest

from embedtext.server.models.source import ModelSourceError, load_model_spec


def test_default_model_spec_follows_sentence_transformers_config():
    spec = load_model_spec("default")
    assert (spec.name, spec.dim, spec.max_tokens, spec.pooling, spec.normalize) == (
        "all-MiniLM-L6-v2",
        384,
        256,
        "mean",
        True,
    )
    assert spec.tokenizer_file.is_file()


def test_synthetic_model_is_deterministic(tmp_path):
    from embedtext.server.models.synthetic import write_synthetic_bert

    a = write_synthetic_bert(tmp_path / "a", seed=3, pooling="cls")
    b = write_synthetic_bert(tmp_path / "b", seed=3, pooling="cls")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    spec = load_model_spec(str(a), "arctic-like")
    assert (spec.name, spec.dim, spec.pooling, spec.max_tokens) == ("arctic-like", 128, "cls", 128)


def test_head_dim_16_is_refused(tmp_path):
    from embedtext.server.models.synthetic import write_synthetic_bert

    with pytest.raises(ValueError, match="head_dim"):
        write_synthetic_bert(tmp_path, hidden=64, heads=4)


def test_unresolvable_sources_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError, match="not a directory"):
        load_model_spec("no-such-thing")
    with pytest.raises(ModelSourceError, match="HF_HUB_OFFLINE"):
        load_model_spec("someorg/some-model-that-is-not-cached")
    with pytest.raises(ModelSourceError, match="config.json"):
        load_model_spec(str(tmp_path))


def test_a_spec_survives_the_worker_command_line(tmp_path):
    """--replica-processes hands each worker its ModelSpec as JSON (server/models/source.py)."""
    from embedtext.server.models.source import ModelSpec, spec_from_json, spec_to_json

    spec = ModelSpec(
        name="m",
        path=tmp_path / "m",
        dim=768,
        max_tokens=512,
        pooling="cls",
        normalize=True,
        matryoshka_dimensions=(256, 512),
        aliases=("org/m",),
    )
    assert spec_from_json(spec_to_json(spec)) == spec
