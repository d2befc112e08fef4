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


# --- generated models of each family (server/models/families.py) -------------------------------------------

FAMILY_TEXTS = [
    "A cat sleeps on the warm mat.",
    "Ünïcödé text, emoji 🐱🚀 and 日本語: naïve café straße.",
    "",
    "x",
    "  spaces   between   words  ",
    "1234567 numbers 3.14 e-mail don't",
    "word " * 300,  # truncated to the model's 128 tokens
]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    from embedtext.server.models.families import FAMILIES, write_family_model

    root = tmp_path_factory.mktemp("families")
    return {family: write_family_model(root / family, family) for family in FAMILIES if family != "bert"}


def test_each_family_is_served_as_its_files_say(family_dirs):
    specs = {family: load_model_spec(str(path)) for family, path in family_dirs.items()}
    assert {f: (s.dim, s.max_tokens, s.pooling, s.normalize) for f, s in specs.items()} == {
        "xlm-roberta": (128, 128, "cls", True),
        "modernbert": (128, 128, "cls", True),
        "qwen3": (128, 128, "last", True),
        "gemma3": (128, 128, "mean", True),
    }
    # 2 layers x keys and values x 2 KV heads x head dim 32: what a token leaves in a KV cache
    assert specs["qwen3"].kv_values_per_token == 2 * 2 * 2 * 32


def test_a_dense_layer_sets_the_vector_width(tmp_path):
    from embedtext.server.models.synthetic import write_st_layout, write_synthetic_bert

    path = write_synthetic_bert(tmp_path / "m")
    write_st_layout(path, hidden=128, max_tokens=128, pooling="mean", dense=[(128, 256), (256, 64)])
    assert load_model_spec(str(path)).dim == 64


def test_family_models_are_deterministic(tmp_path, family_dirs):
    from embedtext.server.models.families import write_family_model

    again = write_family_model(tmp_path / "gemma3", "gemma3")
    for name in ("model.safetensors", "tokenizer.json", "2_Dense/model.safetensors"):
        assert (again / name).read_bytes() == (family_dirs["gemma3"] / name).read_bytes(), name


@pytest.mark.parametrize("family", ["xlm-roberta", "modernbert", "qwen3", "gemma3"])
def test_the_server_tokenizes_as_sentence_transformers_does(family_dirs, family):
    """The server's tokenizer (tokenizer.json) and the reference's (transformers' class) give the same ids."""
    from transformers import AutoTokenizer

    from embedtext.server.tokenization.pool import TokenizerPool

    path = family_dirs[family]
    pool = TokenizerPool(str(path / "tokenizer.json"), 128)
    try:
        ours = pool.tokenize_sync(FAMILY_TEXTS).to_lists()
    finally:
        pool.close()
    theirs = AutoTokenizer.from_pretrained(str(path))(FAMILY_TEXTS, truncation=True, max_length=128)["input_ids"]
    assert ours == theirs
    assert max(map(len, ours)) == 128


def test_an_unknown_family_is_refused(tmp_path):
    from embedtext.server.models.families import write_family_model

    with pytest.raises(ValueError, match="one of bert"):
        write_family_model(tmp_path, "t5")
    with pytest.raises(ValueError, match="--pooling is for bert"):
        write_family_model(tmp_path, "qwen3", pooling="cls")


def test_prompts_are_read_and_chosen_as_sentence_transformers_does():
    from embedtext.protocol.errors import InvalidInputError
    from embedtext.server.models.prompts import prompt_text, read_prompts

    prompts, default = read_prompts(
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "passage"}
    )
    assert prompts == {"query": "query: ", "passage": "passage: "} and default == "passage"
    assert read_prompts({"prompts": {"q": "x"}, "default_prompt_name": "missing"}) == ({"q": "x"}, "")
    assert prompt_text("query", prompts, default, None, "m") == "query: "
    assert prompt_text("", prompts, default, None, "m") == "passage: "  # the default, where none is named
    assert prompt_text("query", prompts, default, "own: ", "m") == "own: "  # a given text wins
    assert prompt_text("", prompts, default, "", "m") == ""  # "" turns the default off
    assert prompt_text("", {}, "", None, "m") == ""
    with pytest.raises(InvalidInputError, match="model m has no prompt 'doc'; its prompts: 'passage', 'query'"):
        prompt_text("doc", prompts, default, None, "m")
