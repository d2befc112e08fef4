"""Each model family the server runs, against sentence-transformers on the same weights: a generated
model per family (server/models/families.py: XLM-R with a Unigram tokenizer, ModernBERT and a Qwen3
decoder with byte-level BPE, Gemma3 bidirectional with two Dense layers and a byte-fallback BPE), all
four served by one real server on packed steps (the default engine loop), in float32.

BERT with WordPiece is the default model's family (test_minilm_reference.py). The four models share
one server with one engine each: the start-up of an engine per family is what this module costs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from embedtext.server.models.families import FAMILIES

FAMILY_MODELS = [f for f in FAMILIES if f != "bert"]
TEXTS = [
    "A cat sleeps on the warm windowsill.",
    "The kitten is napping in the sun.",
    "Stock markets fell sharply after the interest rate decision.",
    "Ünïcödé text, emoji 🐱🚀 and 日本語 mixed together: naïve café straße.",
    "x",
    "",  # the special tokens alone
    "  spaces   between   words  ",
    "Don't e-mail J.R.R. Tolkien's (1892-1973) publisher at info@example.com; it's late!",
    "the bread recipe needs flour water salt " * 40,  # over the models' 128 tokens: truncated on both sides
]
# A decoder's step stages each row from a block boundary of its KV cache: this many rows take more
# blocks than one forward holds, so a step of them runs as several (server/engine/attention_kinds.py).
MANY_ROWS = 700


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    from embedtext.server.models.families import write_family_model

    root = tmp_path_factory.mktemp("families")
    return {f: write_family_model(root / f, f, layers=3) for f in FAMILY_MODELS}


@pytest.fixture(scope="module")
def family_log(tmp_path_factory):
    return tmp_path_factory.mktemp("logs") / "families.log"


@pytest.fixture(scope="module")
def family_client(family_dirs, family_log):
    import embedtext
    from embedtext.connectors.local_server import LocalServer

    server = LocalServer(
        [f"{f}={d}" for f, d in family_dirs.items()],
        replicas=1,  # an engine per family; eager, as the tiny model's (conftest.py)
        args=["--dtype", "float32", "--set", "interactive_replica=off", "--set", "enforce_eager=on"],
        log_path=family_log,
    )
    with server, embedtext.Client(server.target) as client:
        client.wait_ready(900, every_engine=True)
        yield client


@pytest.fixture(scope="module")
def references(family_dirs):
    from sentence_transformers import SentenceTransformer

    return {f: SentenceTransformer(str(d), device="cpu") for f, d in family_dirs.items()}


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_vectors_from_text_equal_sentence_transformers(family_client, references, family):
    reference = references[family].encode(TEXTS, convert_to_numpy=True)
    got = family_client.embed(TEXTS, model=family)
    assert got.shape == reference.shape
    assert _cosines(got, reference).min() >= 0.99999, _cosines(got, reference)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_vectors_from_token_ids_equal_sentence_transformers(family_client, references, family):
    """The ids sentence-transformers' own tokenizer gives (truncated to the model's max) embed to its vectors."""
    model = references[family]
    ids = [model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"] for t in TEXTS]
    got = family_client.embed_tokens(ids, model=family)
    reference = model.encode(TEXTS, convert_to_numpy=True)
    assert _cosines(got, reference).min() >= 0.99999


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_each_family_runs_packed_steps(family_client, family):
    info = family_client.info(refresh=True).model(family)
    assert info.engine_loop == "packed"
    assert info.dim == 128 and info.max_tokens == 128


def test_every_models_worker_loads_its_code_before_the_first_engine_starts(family_client, family_log):
    """A server of several models spawns each model's first worker at once: a worker's vLLM imports
    (seconds) run while the models before it start their engines, not after them."""
    lines = family_log.read_text().splitlines()
    loads = [i for i, line in enumerate(lines) if "loads the engine's code" in line]
    starts = [i for i, line in enumerate(lines) if re.search(r"starting \S+/0 for model \S+ in a worker process", line)]
    assert len(loads) == len(starts) == len(FAMILY_MODELS), (loads, starts)
    assert max(loads) < min(starts)


def test_the_pooling_each_family_declares(family_client):
    pooling = {f: family_client.info().model(f).pooling for f in FAMILY_MODELS}
    assert pooling == {"xlm-roberta": "cls", "modernbert": "cls", "qwen3": "last", "gemma3": "mean"}


def test_a_decoder_step_larger_than_its_cache_keeps_every_row(family_client, references):
    """Rows in their order and each its own vector, where one step's rows run as several forwards."""
    rng = np.random.default_rng(0)
    words = "cat dog bread market river song table query data vector".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 6)))) + f" {i}" for i in range(MANY_ROWS)]
    got = family_client.embed(texts, model="qwen3")
    reference = references["qwen3"].encode(texts, convert_to_numpy=True, batch_size=128)
    assert _cosines(got, reference).min() >= 0.99999


# --- prompts ---------------------------------------------------------------------------------

PROMPTED = ["qwen3", "gemma3"]  # their generated models carry their real models' prompts (families.PROMPTS)


@pytest.mark.parametrize("family", PROMPTED)
def test_info_lists_the_models_prompts(family_client, family):
    from embedtext.server.models.families import PROMPTS

    info = family_client.info(refresh=True).model(family)
    assert info.prompts == PROMPTS[family] and info.default_prompt_name == ""
    assert family_client.info().model("xlm-roberta").prompts == {}


@pytest.mark.parametrize("family", PROMPTED)
@pytest.mark.parametrize("prompt_name", ["query", "document"])
def test_a_named_prompt_gives_sentence_transformers_vectors(family_client, references, family, prompt_name):
    """Truncation included: the long text keeps its prompt and loses its end, as in sentence-transformers."""
    reference = references[family].encode(TEXTS, prompt_name=prompt_name, convert_to_numpy=True)
    got = family_client.embed(TEXTS, model=family, prompt_name=prompt_name)
    assert _cosines(got, reference).min() >= 0.99999
    if references[family].prompts[prompt_name]:  # a prompt that is there changes the vectors
        plain = family_client.embed(TEXTS, model=family)
        assert _cosines(got, plain).max() < 0.9999


def test_a_prompts_own_text_gives_sentence_transformers_vectors(family_client, references):
    prompt = "Represent this sentence for searching relevant passages: "
    reference = references["gemma3"].encode(TEXTS, prompt=prompt, convert_to_numpy=True)
    got = family_client.embed(TEXTS, model="gemma3", prompt=prompt)
    assert _cosines(got, reference).min() >= 0.99999


def test_a_prompt_the_model_lacks_is_a_clear_error_naming_its_prompts(family_client):
    from embedtext.protocol.errors import InvalidInputError

    with pytest.raises(
        InvalidInputError, match=r"model gemma3 has no prompt 'search'; its prompts: 'document', 'query'"
    ):
        family_client.embed(["a"], model="gemma3", prompt_name="search")
    with pytest.raises(InvalidInputError, match="no prompt 'query'; its prompts: none"):
        family_client.embed(["a"], model="xlm-roberta", prompt_name="query")
    with pytest.raises(InvalidInputError, match="a prompt applies to texts"):
        family_client.embed_tokens([[1, 2, 3]], model="gemma3", prompt_name="query")


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_chunks_embed_as_sentence_transformers_with_room_for_the_prompt(family_client, references, family):
    """A long text cut by the family's own tokens, each chunk embedded with the prompt the model gives
    documents (or none): the chunk size leaves the template's and the prompt's tokens room, so no
    chunk is cut, and each chunk's vector is sentence-transformers' for its text."""
    model = references[family]
    prompt_name = "query" if family in ("qwen3", "gemma3") else None  # the longest prompt each has
    prompt = model.prompts.get(prompt_name, "") if prompt_name else ""
    document = "\n\n".join(TEXTS[:4] + TEXTS[6:8]) * 6
    chunks = family_client.embed_chunks([document], model=family, overlap=8, prompt_name=prompt_name)
    framing = len(model.tokenizer("")["input_ids"]) + len(
        model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    )
    assert chunks.max_tokens == 128 - framing and chunks.counts[0] > 2
    assert max(len(model.tokenizer(prompt + text)["input_ids"]) for text in chunks.text) <= 128
    want = model.encode(chunks.text, prompt_name=prompt_name, convert_to_numpy=True)
    assert _cosines(chunks.vectors, want).min() >= 0.99999


def test_duckdb_functions_and_search_take_the_query_prompt(family_client, references):
    """embed_text(text, model, dimensions, prompt), embed_text_query (the model's "query" prompt) and
    embed_text_search, whose search text is embedded as a query."""
    import duckdb

    import embedtext

    model = references["gemma3"]
    con = duckdb.connect()
    embedtext.register(con, family_client, model="gemma3")
    con.execute("CREATE TABLE docs AS SELECT * FROM (VALUES (1, ?), (2, ?), (3, ?)) t(id, body)", TEXTS[:3])
    named = con.sql("SELECT embed_text(body, 'gemma3', NULL, 'document') FROM docs ORDER BY id").fetchall()
    documents = model.encode(TEXTS[:3], prompt_name="document", convert_to_numpy=True)
    assert _cosines(np.array([r[0] for r in named]), documents).min() >= 0.99999
    queries = model.encode(TEXTS[:3], prompt_name="query", convert_to_numpy=True)
    got = np.array([r[0] for r in con.sql("SELECT embed_text_query(body) FROM docs ORDER BY id").fetchall()])
    assert _cosines(got, queries).min() >= 0.99999
    con.execute(
        "CREATE TABLE doc_vectors AS SELECT id, embed_text(body, 'gemma3', NULL, 'document')::FLOAT[128] AS v FROM docs"
    )
    hits = con.sql("SELECT id, score FROM embed_text_search('doc_vectors', 'v', 'a sleeping cat', k := 3)").fetchall()
    query = model.encode(["a sleeping cat"], prompt_name="query", convert_to_numpy=True)[0]
    want = {i + 1: float(documents[i] @ query / np.linalg.norm(documents[i]) / np.linalg.norm(query)) for i in range(3)}
    assert [h[0] for h in hits] == sorted(want, key=want.get, reverse=True)
    np.testing.assert_allclose([h[1] for h in hits], sorted(want.values(), reverse=True), atol=1e-4)


def test_an_index_job_embeds_with_its_prompt_and_again_when_it_changes(family_client, references, tmp_path):
    import duckdb

    from embedtext.connectors.jobs import IndexSpec, run_index

    db = str(tmp_path / "docs.duckdb")
    with duckdb.connect(db) as con:
        con.execute("CREATE TABLE docs AS SELECT * FROM (VALUES (1, ?), (2, ?), (3, ?)) t(id, body)", TEXTS[:3])

    def index(prompt_name):
        spec = IndexSpec(
            db,
            "docs",
            key="id",
            text="body",
            target=tuple(family_client.targets),
            model="gemma3",
            prompt_name=prompt_name,
        )
        return run_index(spec, log=lambda _: None)

    def stored():
        with duckdb.connect(db) as con:
            return np.array(
                [r[0] for r in con.execute("SELECT embedding FROM docs_embeddings ORDER BY key").fetchall()]
            )

    model = references["gemma3"]
    assert index("document").embedded == 3
    assert _cosines(stored(), model.encode(TEXTS[:3], prompt_name="document")).min() >= 0.99999
    assert index("document").embedded == 0  # nothing changed
    assert index("query").embedded == 3  # another prompt: every row again
    assert _cosines(stored(), model.encode(TEXTS[:3], prompt_name="query")).min() >= 0.99999
