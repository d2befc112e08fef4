"""Texts cut into chunks by the model's own tokens (server/tokenization/splitting.py), checked against
the Hugging Face tokenizer's own offsets on the default model's WordPiece and the generated
families' BPE and Unigram tokenizers: every token in a chunk, none over the size, the overlap exact,
the spans giving back the chunks' texts, and cuts at the best boundary of each window."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedtext.server.models.source import load_model_spec
from embedtext.server.tokenization.pool import TokenizerPool
from embedtext.server.tokenization.splitting import split_tokens

PARAGRAPH = (
    "Bread needs flour, water and salt. Knead the dough for ten minutes, then let it rest!\n"
    "Bake it hot: 230 degrees for the first part. Ünïcödé, emoji 🐞 and 日本語 ride along."
)
DOCUMENT = "\n\n".join([PARAGRAPH] * 6) + "\n" + " ".join(["word"] * 300)


@pytest.fixture(scope="module", params=["bert", "modernbert", "qwen3", "xlm-roberta"])
def pool(request, tmp_path_factory):
    if request.param == "bert":
        path = load_model_spec().tokenizer_file  # the default model: WordPiece
    else:
        from embedtext.server.models.families import write_family_model

        path = write_family_model(tmp_path_factory.mktemp(request.param), request.param, layers=1) / "tokenizer.json"
    pool = TokenizerPool(str(path), 128)
    yield pool
    pool.close()


def _token_offsets(pool: TokenizerPool, text: str) -> np.ndarray:
    return np.array(pool._offsets_tokenizer.encode(text, add_special_tokens=False).offsets).reshape(-1, 2)


@pytest.mark.parametrize(("size", "overlap"), [(16, 0), (40, 8), (64, 31), (7, 6), (1, 0)])
def test_chunks_hold_every_token_within_the_size_and_overlap_exactly(pool, size, overlap):
    texts = [DOCUMENT, PARAGRAPH, "x", "", "   ", "one two"]
    chunks = pool.split_sync(texts, size, overlap)
    assert len(chunks.counts) == len(texts)
    first = 0
    for text, count in zip(texts, chunks.counts.tolist()):
        offsets = _token_offsets(pool, text)
        spans = chunks.spans[first : first + count]
        tokens = chunks.tokens[first : first + count]
        first += count
        if len(offsets) == 0:
            assert count == 0
            continue
        # Chunk k holds tokens [a, a + n): the first from 0, each next ``overlap`` before the last's
        # end; its span must run from its first token's start to its last token's end.
        a, ends = 0, []
        for (start, end), n in zip(spans.tolist(), tokens.tolist()):
            assert 0 < n <= size
            assert (offsets[a, 0], offsets[a + n - 1, 1]) == (start, end)
            ends.append(a + n)
            a += n - overlap
        assert ends[-1] == len(offsets)
        assert all(n > overlap for n in tokens.tolist()[:-1])  # each chunk moves the text on


def test_a_chunk_ends_at_the_best_boundary_of_its_window(pool):
    chunks = pool.split_sync([DOCUMENT], 120, 0)
    texts = [DOCUMENT[s:e] for s, e in chunks.spans.tolist()]
    # A paragraph is under 120 tokens of every tokenizer here, and two are over, so the first
    # chunks each end at a paragraph break: before it, or after it where newlines are tokens.
    ends = chunks.spans[:-1, 1].tolist()
    assert all("\n\n" in DOCUMENT[end - 2 : end + 2] for end in ends[:2])
    assert texts[0].startswith("Bread") and texts[0].rstrip().endswith("along.")
    assert texts[1].lstrip().startswith("Bread")


def test_without_any_boundary_a_chunk_is_cut_inside_a_word(pool):
    word = "qzxjvk" * 14  # one word of many tokens (under WordPiece's 100 characters, past which it is [UNK])
    chunks = pool.split_sync([word], 5, 1)
    assert chunks.tokens.max() == 5 and chunks.counts[0] > 1
    assert "".join(word[s:e] for s, e in chunks.spans.tolist()) != word  # overlapping pieces
    assert chunks.spans[0, 0] == 0 and chunks.spans[-1, 1] == len(word)


@settings(max_examples=300, deadline=None)
@given(
    widths=st.lists(st.integers(1, 5), min_size=0, max_size=60),
    gaps=st.lists(st.sampled_from(["", " ", "\n", "\n\n", ". ", "! "]), min_size=60, max_size=60),
    size=st.integers(1, 12),
    data=st.data(),
)
def test_any_tokens_any_gaps(widths, gaps, size, data):
    """Generated tokens and gaps: the chunks' token ranges cover all, keep to the size and the overlap."""
    overlap = data.draw(st.integers(0, size - 1))
    text, starts, ends = "", [], []
    for width, gap in zip(widths, gaps):
        text += gap
        starts.append(len(text))
        text += "w" * width
        ends.append(len(text))
    ranges = split_tokens(text, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), size, overlap)
    n = len(widths)
    if n == 0:
        assert ranges == [(0, 0)]
        return
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(0 < b - a <= size for a, b in ranges)
    assert all(b1 - a2 == overlap for (_, b1), (a2, _) in zip(ranges, ranges[1:]))


def test_sizes_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="need 0 <= overlap < max_tokens"):
        split_tokens("a b", np.array([0, 2]), np.array([1, 3]), 4, 4)
    with pytest.raises(ValueError, match="need 0 <= overlap < max_tokens"):
        split_tokens("a b", np.array([0, 2]), np.array([1, 3]), 0, 0)
