import asyncio

import pytest

from embedtext.protocol.errors import InvalidInputError
from embedtext.server.models.source import load_model_spec
from embedtext.server.tokenization.pool import TokenizerPool


@pytest.fixture(scope="module")
def pool():
    spec = load_model_spec("default")
    p = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens)
    yield p
    p.close()


def test_truncates_to_model_max_with_special_tokens(pool):
    ids = pool.tokenize_sync(["word " * 1000, "a cat"]).to_lists()
    assert len(ids[0]) == 256 and ids[0][0] == 101 and ids[0][-1] == 102
    assert ids[1] == [101, 1037, 4937, 102]


def test_no_padding_from_the_tokenizer_file(pool):
    # The packaged tokenizer.json pads to 128; the pool must not.
    assert pool.tokenize_sync([""]).to_lists() == [[101, 102]]


def test_truncation_off_names_the_row(pool):
    with pytest.raises(InvalidInputError, match="row 1 has 1002 tokens"):
        pool.tokenize_sync(["ok", "word " * 1000], truncate=False)


def test_async_tokenize_runs_off_loop(pool):
    assert asyncio.run(pool.tokenize(["a cat"])).to_lists() == [[101, 1037, 4937, 102]]


def test_token_id_checks(pool):
    with pytest.raises(InvalidInputError, match="row 0 holds id 999999, outside the vocabulary"):
        pool.check_token_ids([[101, 999999, 102]])
    with pytest.raises(InvalidInputError, match="row 0 is empty"):
        pool.check_token_ids([[]])
    rows = pool.check_token_ids([[1] * 300, [101, 7, 102], [2] * 257])
    assert rows.to_lists() == [[1] * 256, [101, 7, 102], [2] * 256]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([[101, 102], [], [101, 999999, 102]], "row 1 is empty"),
        ([[101, 102], [101, 999999, 102], []], "row 1 holds id 999999, outside"),
        ([[101, 102], [5] * 257 + [999998], [101, 999999]], "row 1 holds id 999998, outside"),
        ([[101, 102], [5] * 257, []], "row 1 has 257 tokens; the model takes at most 256"),
        ([[101, 102], [], [5] * 257], "row 1 is empty"),
    ],
)
def test_token_id_checks_name_the_first_row_refused(pool, rows, message):
    """All rows are checked at once; the message is still the first refused row's, as row by row."""
    with pytest.raises(InvalidInputError, match=message):
        pool.check_token_ids(rows, truncate=False)


def test_the_pools_ids_are_the_tokenizers(pool):
    """Whatever encodes the rows (here nanotoken's WordPiece), the ids are the tokenizer's own."""
    from tokenizers import Tokenizer

    spec = load_model_spec("default")
    reference = Tokenizer.from_file(str(spec.tokenizer_file))
    reference.no_padding()
    reference.enable_truncation(max_length=spec.max_tokens)
    texts = ["a cat", "", "  ", "Ünïcödé façade — naïve café 東京 🚀", "word " * 400, "[CLS] x [SEP]", "e\u0301"]
    assert pool.tokenize_sync(texts).to_lists() == [enc.ids for enc in reference.encode_batch(texts)]


def test_busy_while_a_request_is_being_tokenized(pool):
    """Idle dispatch waits while rows are on their way through the tokenizer (server/scheduler/runtime.py)."""

    async def run():
        assert not pool.busy
        task = asyncio.ensure_future(pool.tokenize(["many words in a row " * 50] * 2000))
        await asyncio.sleep(0)  # the request is handed to the pool
        during = pool.busy
        await task
        return during, pool.busy

    assert asyncio.run(run()) == (True, False)


def test_an_interactive_request_is_not_tokenized_behind_bulk_ones():
    """Bulk requests fill the shared threads; an interactive request is tokenized apart from them
    and comes back while they are still being tokenized."""
    spec = load_model_spec("default")
    pool = TokenizerPool(str(spec.tokenizer_file), spec.max_tokens, threads=1)

    async def run():
        order = []

        async def tokenize(name, texts, interactive):
            await pool.tokenize(texts, interactive=interactive)
            order.append(name)

        bulk = [
            asyncio.ensure_future(tokenize(f"bulk-{i}", ["many words in a row " * 50] * 3000, False)) for i in range(2)
        ]
        await asyncio.sleep(0)  # both bulk requests are handed to the pool first
        await tokenize("interactive", ["which table holds the invoices"], True)
        await asyncio.gather(*bulk)
        return order

    try:
        assert asyncio.run(run())[0] == "interactive"
    finally:
        pool.close()


def test_a_short_interactive_request_is_tokenized_on_the_event_loop_and_a_long_one_in_its_own_thread(pool):
    """A query's few words skip the hand-over to a thread and back; a long interactive request
    would hold the event loop, so it goes to the interactive thread, and bulk to the shared ones."""
    import threading

    from embedtext.server.tokenization.pool import INLINE_TOKENIZE_CHARS

    seen = []
    encode = pool.tokenize_sync

    def recording(texts, truncate=True):
        seen.append(threading.current_thread().name)
        return encode(texts, truncate)

    pool.tokenize_sync = recording
    long_text = "x" * (INLINE_TOKENIZE_CHARS + 1)

    async def run():
        short = await pool.tokenize(["which table holds the invoices"], interactive=True)
        await pool.tokenize([long_text], interactive=True)
        await pool.tokenize(["which table holds the invoices"], interactive=False)
        return short, threading.current_thread().name

    try:
        short, loop_thread = asyncio.run(run())
    finally:
        del pool.tokenize_sync
    assert short.to_lists() == encode(["which table holds the invoices"]).to_lists()
    assert seen[0] == loop_thread
    assert seen[1].startswith("embedtext-tokenizer-interactive")
    assert seen[2].startswith("embedtext-tokenizer") and not seen[2].startswith("embedtext-tokenizer-interactive")
