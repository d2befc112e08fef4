"""The cpu suite's three paths resident side by side, timed in rotating rounds.

    uv run --extra cpu embedtext bench --only cpu-rounds --json cpu-rounds.json

The cpu suite (bench/cpu_suite.py) measures its paths one after the other, one engine on the
cores at a time. On this project's hosts that was not like for like: the same engine, model and
rows ran 22% slower per row ten minutes later (bench/RESULTS.md, stop 14). Here every engine
stays up for the whole run and each round times each path once, in an order that rotates and
reverses from round to round (``round_order``), so the host's drift hits every path alike:

  rounds_udf_embed_text_{T}tok        DuckDB ``SELECT sum(embed_text(body)[1])``, embedtext server
  rounds_udf_vllm_http_json_{T}tok    a DuckDB Arrow UDF posting JSON to vLLM's own OpenAI server
  rounds_inprocess_llm_embed_{T}tok   ``vllm.LLM.embed`` on token ids in a child process (the ceiling)

Each case's ``rows_per_s`` is the median of its rounds. Each peer's case carries
``ratio_by_round`` (ours / that path, round by round) and ``ratio_key``; the ratios
``udf_vs_inprocess_rounds`` and ``udf_vs_http_json_rounds`` (50 tokens; ``_512`` at 512) are the
medians of those per-round ratios. Idle engines here do not compete: before each timed run the
others have been idle for ``SETTLE_S`` (vLLM-CPU busy-polls for 1 s after an engine's last step).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SUITE = "cpu-rounds"
HEADLINE_TOKENS = 50
SETTLE_S = 1.5  # longer than vLLM-CPU's 1 s busy-poll after an engine's last step
SERVED_NAME = "tiny"


@dataclass(frozen=True)
class RoundsPath:
    """One path of the comparison: ``measure(tokens, rows, warmup)`` times one scan and returns a case."""

    label: str
    case_prefix: str
    description: str
    measure: Callable[[int, int, bool], dict]
    ratio_key: str | None = None  # ours / this path; None: this path is ours


def round_order(labels: Sequence[str], round_: int) -> list[str]:
    """The order of the paths in a round: rotated every two rounds, reversed in odd rounds, so
    that no path is always first (after an idle spell) or always last.

    >>> [''.join(round_order('AB', r)) for r in range(4)]
    ['AB', 'BA', 'BA', 'AB']
    >>> [''.join(round_order('ABC', r)) for r in range(6)]
    ['ABC', 'CBA', 'BCA', 'ACB', 'CAB', 'BAC']
    """
    shift = (round_ // 2) % len(labels)
    order = list(labels[shift:]) + list(labels[:shift])
    return order if round_ % 2 == 0 else order[::-1]


def run_rounds(paths: Sequence[RoundsPath], work: Sequence[tuple[int, int]], *, rounds: int,
               load: Callable[[int, int], None], progress=print) -> list[dict]:
    """Time every path once per round for each (tokens, rows) of ``work``; ``load`` puts those rows
    where the paths read them. The first round's runs warm up first."""
    from embedtext.bench.measure import make_case

    by_label = {p.label: p for p in paths}
    ours = next(p for p in paths if p.ratio_key is None)
    cases = []
    for tokens, rows in work:
        load(tokens, rows)
        runs: dict[str, list[dict]] = {p.label: [] for p in paths}
        for round_ in range(rounds):
            for label in round_order([p.label for p in paths], round_):
                time.sleep(SETTLE_S)
                runs[label].append(by_label[label].measure(tokens, rows, round_ == 0))
            progress(f"{SUITE}: {tokens} tokens, round {round_ + 1}/{rounds}: "
                     + ", ".join(f"{p.label} {runs[p.label][-1]['rows_per_s']:,.0f}" for p in paths) + " rows/s")
        for path in paths:
            done = runs[path.label]
            extra = {}
            if path.ratio_key:
                per_round = [a["rows_per_s"] / b["rows_per_s"] for a, b in zip(runs[ours.label], done)]
                extra = {"ratio_key": path.ratio_key, "ratio_by_round": [round(x, 3) for x in per_round]}
            cases.append(make_case(
                f"{path.case_prefix}_{tokens}tok", SUITE, rows=rows, seconds=statistics.median(r["seconds"] for r in done),
                tokens_per_row=tokens, path=path.description, rounds=rounds,
                rows_per_s_by_round=[r["rows_per_s"] for r in done],
                cpu_s_per_run=done[len(done) // 2].get("cpu_s_per_run"), **extra))
    return cases


def run_cpu_rounds(model_dir: Path, work: Sequence[tuple[int, int]], *, rounds: int = 5, args: Sequence[str] = (),
                   progress=print) -> list[dict]:
    """Ours, vLLM's HTTP/JSON server and in-process ``LLM.embed``, all resident; ``work``: (tokens, rows)."""
    import duckdb

    import embedtext
    from embedtext.bench.baselines import OpenAIJsonEmbedder, register_udf
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.inprocess import ResidentInProcess
    from embedtext.bench.queries import embed_query_case, load_docs
    from embedtext.bench.servers import embedtext_server, vllm_http_server
    from embedtext.server.models import load_model_spec

    spec = load_model_spec(str(model_dir))
    corpus = BenchCorpus(model_dir)
    eager = "--enforce-eager" in args
    progress(f"{SUITE}: an embedtext server, vLLM's HTTP server and in-process LLM side by side, {rounds} rounds")
    with embedtext_server([f"tiny={model_dir}"], args=list(args)) as server, \
            vllm_http_server(str(model_dir), SERVED_NAME, max_tokens=spec.max_tokens,
                             extra=["--enforce-eager"] if eager else []) as http, \
            ResidentInProcess(str(model_dir), suite=SUITE, eager=eager) as ceiling, \
            duckdb.connect() as con:
        embedtext.register(con, server.target)
        http_embedder = OpenAIJsonEmbedder(http.url, SERVED_NAME)
        register_udf(con, "http_embed", http_embedder, spec.dim)

        def scan(fn: str, pid: int) -> Callable[[int, int, bool], dict]:
            return lambda tokens, rows, warmup: embed_query_case(
                con, "run", SUITE, fn=fn, source="docs", rows=rows, tokens_per_row=tokens, server_pid=pid,
                warmup=warmup)

        paths = [
            RoundsPath("ours", "rounds_udf_embed_text", "DuckDB embed_text -> embedtext gRPC (bytes) -> vLLM",
                       scan("embed_text", server.pid)),
            RoundsPath("http_json", "rounds_udf_vllm_http_json",
                       "DuckDB Arrow UDF -> vLLM OpenAI /v1/embeddings (JSON floats)", scan("http_embed", http.pid),
                       ratio_key="udf_vs_http_json_rounds"),
            RoundsPath("ceiling", "rounds_inprocess_llm_embed", "vllm.LLM.embed(token ids)",
                       lambda tokens, rows, warmup: ceiling.run(tokens, rows, warmup=warmup),
                       ratio_key="udf_vs_inprocess_rounds"),
        ]
        try:
            return run_rounds(paths, work, rounds=rounds, progress=progress,
                              load=lambda tokens, rows: load_docs(con, corpus.texts(rows, tokens)))
        finally:
            http_embedder.close()


def cpu_rounds_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """The median of the per-round ratios (ours / each peer) at each token length.

    >>> case = {"suite": SUITE, "name": "rounds_inprocess_llm_embed_512tok", "tokens_per_row": 512,
    ...         "ratio_key": "udf_vs_inprocess_rounds", "ratio_by_round": [0.9, 1.2, 0.95]}
    >>> cpu_rounds_ratios([case, {**case, "suite": "cpu"}, {**case, "tokens_per_row": 50, "ratio_by_round": [1.3]}])
    {'udf_vs_inprocess_rounds_512': 0.95, 'udf_vs_inprocess_rounds': 1.3}
    """
    ratios = {}
    for case in cases:
        if case["suite"] == SUITE and case.get("ratio_key"):
            tokens = int(case["tokens_per_row"])
            suffix = "" if tokens == HEADLINE_TOKENS else f"_{tokens}"
            ratios[case["ratio_key"] + suffix] = round(statistics.median(case["ratio_by_round"]), 3)
    return ratios
