"""Long texts as chunks cut by the model's own tokens: Split requests planned, replies assembled.

The server cuts each text into chunks of at most ``max_tokens`` tokens, ``overlap`` shared with
the chunk before (server/tokenization/splitting.py), and answers each chunk's span. Here the spans
become a :class:`TextChunks` (a row per chunk: which text, its index there, its span and text),
whose texts the client then embeds as any others: a chunk's vector is its text's vector.

>>> chunks = TextChunks.from_spans(["ab cd", ""], np.array([2, 0]), np.array([[0, 2], [3, 5]]), np.array([1, 1]))
>>> chunks.row.tolist(), chunks.index.tolist(), chunks.text
([0, 0], [0, 1], ['ab', 'cd'])
>>> chunks.mean_vectors(np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32), normalize=False).tolist()
[[0.5, 0.5], [nan, nan]]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from embedtext.connectors.requests import set_model_and_prompt, text_slices
from embedtext.protocol import SPLIT_TEXT_BYTES, codec
from embedtext.protocol import embedding_pb2 as pb
from embedtext.protocol.errors import ProtocolError


@dataclass(frozen=True)
class SplitOptions:
    model: str | None = None
    max_tokens: int | None = None  # None: the most the model takes with its special tokens and the prompt
    overlap: int = 0
    prompt_name: str | None = None  # the prompt the chunks are embedded with: its tokens count too
    prompt: str | None = None

    def request(self, texts: pa.StringArray) -> pb.SplitRequest:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.overlap < 0:
            raise ValueError(f"overlap must be 0 or more, got {self.overlap}")
        data, offsets = codec.pack_texts(texts)
        request = pb.SplitRequest(
            packed_texts=pb.PackedTexts(data_utf8=data, offsets_i32le=offsets),
            max_tokens=self.max_tokens or 0,
            overlap_tokens=self.overlap,
        )
        set_model_and_prompt(request, self.model, self.prompt_name, self.prompt)
        return request


@dataclass(frozen=True)
class TextChunks:
    """The chunks of some texts, a row per chunk, text after text.

    Attributes:
        row: the text each chunk is of (its position in the input).
        index: the chunk's place in its text (0, 1, ...).
        start, end: the chunk's span in its text, in characters (Python's str indices; end exclusive).
        tokens: the tokens of the chunk's text (no special tokens, no prompt).
        text: the chunk's text, ``texts[row][start:end]``.
        counts: chunks per input text (0 for an empty or blank one).
        max_tokens: the chunk size the server used.
        vectors: (chunks, dim) float32, one per chunk, once embedded (None before).
    """

    row: np.ndarray
    index: np.ndarray
    start: np.ndarray
    end: np.ndarray
    tokens: np.ndarray
    text: list[str]
    counts: np.ndarray
    max_tokens: int = 0
    vectors: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.text)

    @classmethod
    def from_spans(
        cls, texts: list[str], counts: np.ndarray, spans: np.ndarray, tokens: np.ndarray, max_tokens: int = 0
    ) -> TextChunks:
        counts = np.asarray(counts, dtype=np.int32)
        spans = np.asarray(spans, dtype=np.int32).reshape(-1, 2)
        row = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        firsts = np.repeat(np.cumsum(counts) - counts, counts)
        index = (np.arange(len(row)) - firsts).astype(np.int32)
        start, end = spans[:, 0], spans[:, 1]
        text = [texts[r][s:e] for r, s, e in zip(row.tolist(), start.tolist(), end.tolist())]
        return cls(row, index, start, end, np.asarray(tokens, dtype=np.int32), text, counts, max_tokens)

    def distinct_texts(self) -> tuple[pa.StringArray, np.ndarray]:
        """The chunks' texts, each once, and each chunk's place among them: a text that repeats
        (a repeated row, a document's boilerplate) is embedded once."""
        texts = pa.array(self.text, pa.string())
        distinct = pc.unique(texts)
        return distinct, pc.index_in(texts, value_set=distinct).to_numpy(zero_copy_only=False)

    def with_vectors(self, vectors: np.ndarray) -> TextChunks:
        if len(vectors) != len(self):
            raise ProtocolError(f"{len(self)} chunks, {len(vectors)} vectors")
        return TextChunks(**{**self.__dict__, "vectors": vectors})

    def mean_vectors(self, vectors: np.ndarray | None = None, *, normalize: bool) -> np.ndarray:
        """One vector per input text: the mean of its chunks' vectors, L2-normalized where the model
        normalizes (``normalize``); NaN for a text without chunks."""
        vectors = self.vectors if vectors is None else vectors
        texts, dim = len(self.counts), vectors.shape[1]
        sums = np.zeros((texts, dim), dtype=np.float64)
        np.add.at(sums, self.row, vectors)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / self.counts[:, None]
            if normalize:
                means /= np.linalg.norm(means, axis=1, keepdims=True)
        return means.astype(np.float32)

    def to_arrow(self) -> pa.Table:
        """A table of the chunks: row, chunk_index, start, end, tokens, text (and embedding, once embedded)."""
        columns = {
            "row": pa.array(self.row),
            "chunk_index": pa.array(self.index),
            "start": pa.array(self.start),
            "end": pa.array(self.end),
            "tokens": pa.array(self.tokens),
            "text": pa.array(self.text, pa.string()),
        }
        if self.vectors is not None:
            columns["embedding"] = codec.ndarray_to_arrow(self.vectors)
        return pa.table(columns)


@dataclass(frozen=True)
class SplitBatch:
    """The texts [start, stop) of a split call, and its request."""

    start: int
    stop: int
    request: pb.SplitRequest


@dataclass(frozen=True)
class SplitJob:
    """One ``split`` call, planned: its requests, and how their replies become one TextChunks."""

    texts: list[str]
    batches: list[SplitBatch]
    deadline: float | None
    on_rows = None  # progress is counted as the chunks are embedded

    def assemble(self, replies: list[pb.SplitResponse]) -> TextChunks:
        return assemble_chunks(self.texts, self.batches, replies)


def plan_split_requests(
    texts: pa.StringArray, options: SplitOptions, max_rows: int, max_bytes: int = SPLIT_TEXT_BYTES
) -> list[SplitBatch]:
    """Split requests of at most ``max_rows`` texts and ``max_bytes`` of text each (one text alone may be more).

    embed_chunks cuts every text first, then embeds: embedding each request's chunks while the next
    were cut gained nothing on 2 cores, where both need the CPU (the chunks suite, docs/benchmarks.md)."""
    batches = []
    for start, stop in text_slices(texts, max_rows, max_bytes):
        request = options.request(texts.slice(start, stop - start))
        request.request_id = len(batches)
        batches.append(SplitBatch(start, stop, request))
    return batches


def assemble_chunks(texts: list[str], batches: list[SplitBatch], replies: list[pb.SplitResponse]) -> TextChunks:
    """The replies of ``batches`` (in order) as the chunks of ``texts``."""
    counts, spans, tokens, size = [], [], [], 0
    for batch, reply in zip(batches, replies):
        n = batch.stop - batch.start
        if reply.count != n:
            raise ProtocolError(f"asked to split {n} texts, the server answered {reply.count}")
        part_counts = codec.bytes_to_int32s(reply.chunk_counts_i32le, n)
        chunks = int(part_counts.sum())
        counts.append(part_counts)
        spans.append(codec.bytes_to_int32s(reply.spans_i32le, 2 * chunks))
        tokens.append(codec.bytes_to_int32s(reply.token_counts_i32le, chunks))
        size = reply.max_tokens
    if not batches:
        empty = np.zeros(0, dtype=np.int32)
        return TextChunks.from_spans(texts, empty, empty, empty)
    return TextChunks.from_spans(texts, np.concatenate(counts), np.concatenate(spans), np.concatenate(tokens), size)
