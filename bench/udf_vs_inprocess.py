"""DuckDB ``SELECT embed_text(body)`` end to end vs in-process ``LLM.embed`` on token ids, with the
chunk-size cases: the CPU suite's paths 1 and 3 (bench/cpu_suite.py) one after the other, for one
token length (``embedtext bench --only cpu`` times them in rotating rounds, every engine resident):

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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


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
        write_json(
            args.json,
            {
                "hardware": hardware,
                "command": "python -m embedtext.bench.udf_vs_inprocess",
                "cases": cases,
                "ratios": ratios,
                "targets": targets,
            },
        )


if __name__ == "__main__":
    main()
