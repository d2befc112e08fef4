"""DuckDB ``SELECT embed_text(body)`` end to end vs in-process ``LLM.embed`` on token ids.

Two ways:

- ``embedtext bench --only udf-vs-inprocess`` (``run_udf_vs_inprocess_rounds``): both engines
  resident side by side (an embedtext server, and the ceiling's ``LLM`` in a child process), timed
  in alternating rounds (ABBA order), so a host whose speed drifts during the run (measured here:
  the same engine 22% slower per row ten minutes later) hits both paths alike. Cases
  ``rounds_udf_embed_text_{T}tok`` and ``rounds_inprocess_llm_embed_{T}tok`` (medians of the
  rounds); ratios ``udf_vs_inprocess_rounds`` (50 tokens) and ``udf_vs_inprocess_rounds_{T}``,
  the median of the per-round ratios.
- ``python -m embedtext.bench.udf_vs_inprocess``: the CPU suite's paths 1 and 3
  (bench/cpu_suite.py) one after the other plus the chunk-size cases, for one token length:

    uv run --extra cpu python -m embedtext.bench.udf_vs_inprocess --rows 100000

Cases:
  udf_embed_text_{T}tok        SELECT sum(embed_text(body)[1]) FROM docs          (2048-row chunks)
  udf_filtered_chunks_{T}tok   ... WHERE id % 10 = 0 over the same table          (~205-row chunks)
  udf_materialized_{T}tok      the same filter materialized first (TEMP TABLE), then embedded
  inprocess_llm_embed_{T}tok   vllm.LLM.embed on pre-tokenized ids (the ceiling; no server, no DuckDB)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


SUITE = "udf-vs-inprocess"
HEADLINE_TOKENS = 50
SETTLE_S = 1.5  # longer than vLLM-CPU's 1 s busy-poll after an engine's last step


def run_udf_vs_inprocess_rounds(model_dir: Path, work: Sequence[tuple[int, int]], *, rounds: int = 5,
                                args: Sequence[str] = (), progress=print) -> list[dict]:
    """Ours and the ceiling in alternating rounds, both engines resident; ``work``: (tokens, rows)."""
    import duckdb

    import embedtext
    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.inprocess import ResidentInProcess
    from embedtext.bench.measure import make_case
    from embedtext.bench.queries import embed_query_case, load_docs
    from embedtext.bench.servers import embedtext_server

    corpus = BenchCorpus(model_dir)
    cases = []
    progress(f"{SUITE}: an embedtext server and in-process LLM side by side, {rounds} alternating rounds")
    with embedtext_server([f"tiny={model_dir}"], args=list(args)) as server, \
            ResidentInProcess(str(model_dir), suite=SUITE, eager="--enforce-eager" in args) as ceiling, \
            duckdb.connect() as con:
        embedtext.register(con, server.target)

        def ours(tokens, rows, first):
            return embed_query_case(con, "run", SUITE, fn="embed_text", source="docs", rows=rows,
                                    tokens_per_row=tokens, server_pid=server.pid, warmup=first)

        def theirs(tokens, rows, first):
            return ceiling.run(tokens, rows, warmup=first)

        for tokens, rows in work:
            load_docs(con, corpus.texts(rows, tokens))
            runs = {"ours": [], "ceiling": []}
            for round_ in range(rounds):
                order = (("ours", ours), ("ceiling", theirs))
                for label, measure in order if round_ % 2 == 0 else order[::-1]:
                    time.sleep(SETTLE_S)
                    runs[label].append(measure(tokens, rows, round_ == 0))
            per_round = [a["rows_per_s"] / b["rows_per_s"] for a, b in zip(runs["ours"], runs["ceiling"])]
            for label, name, path in (("ours", "rounds_udf_embed_text", "DuckDB embed_text -> embedtext gRPC -> vLLM"),
                                      ("ceiling", "rounds_inprocess_llm_embed", "vllm.LLM.embed(token ids)")):
                done = runs[label]
                cases.append(make_case(
                    f"{name}_{tokens}tok", SUITE, rows=rows, seconds=statistics.median(r["seconds"] for r in done),
                    tokens_per_row=tokens, path=path, rounds=rounds,
                    rows_per_s_by_round=[r["rows_per_s"] for r in done],
                    ratio_by_round=[round(x, 3) for x in per_round],
                    cpu_s_per_run=done[len(done) // 2].get("cpu_s_per_run")))
    return cases


def udf_vs_inprocess_rounds_ratios(cases: Sequence[dict]) -> dict[str, float]:
    """The median of the per-round ratios (ours / ceiling) at each token length.

    >>> case = {"suite": SUITE, "name": "rounds_udf_embed_text_512tok", "tokens_per_row": 512,
    ...         "ratio_by_round": [0.9, 1.2, 0.95]}
    >>> udf_vs_inprocess_rounds_ratios([case, {**case, "suite": "cpu"}])
    {'udf_vs_inprocess_rounds_512': 0.95}
    """
    ratios = {}
    for case in cases:
        if case["suite"] == SUITE and case["name"].startswith("rounds_udf_embed_text_"):
            tokens = int(case["tokens_per_row"])
            suffix = "" if tokens == HEADLINE_TOKENS else f"_{tokens}"
            ratios[f"udf_vs_inprocess_rounds{suffix}"] = round(statistics.median(case["ratio_by_round"]), 3)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=50, help="tokens per row, special tokens included")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.cpu_suite import cpu_ratios, measure_embedtext, measure_inprocess
    from embedtext.bench.hardware import hardware_info, hardware_line
    from embedtext.bench.plan import GeneratedModels, make_plan
    from embedtext.bench.report import check_targets, format_table, write_json
    from embedtext.bench.servers import embedtext_server

    plan = make_plan(quick=False)
    tiny = GeneratedModels(plan.workdir).tiny()
    work = [(args.tokens, args.rows)]
    with embedtext_server([f"tiny={tiny}"]) as server:
        cases = measure_embedtext(server, BenchCorpus(tiny), work, chunk_cases=True)
    cases += measure_inprocess(str(tiny), work)
    ratios = cpu_ratios(cases)
    targets = check_targets(ratios)
    hardware = hardware_info()
    print(f"hardware: {hardware_line(hardware)}\n")
    print(format_table(cases, ratios, targets))
    if args.json:
        write_json(args.json, {"hardware": hardware, "command": "python -m embedtext.bench.udf_vs_inprocess",
                               "cases": cases, "ratios": ratios, "targets": targets})


if __name__ == "__main__":
    main()
