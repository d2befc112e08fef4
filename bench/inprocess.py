"""The ceiling: vLLM's ``LLM.embed`` in-process on pre-tokenized ids (no server, no DuckDB).

Runs in its own process (``python -m embedtext.bench.inprocess``) so that its engine is gone
before the next one starts; prints one JSON case per ``--tokens``/``--rows`` pair. The rows are
the same as the other paths' (``BenchCorpus`` is deterministic).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from embedtext.server.allocator import engine_allocator
from embedtext.server.cpu_threads import cpu_engine_env

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


def run_inprocess(model_dir: str, work: list[tuple[int, int]], *, suite: str, dtype: str = "float32",
                  memory_fraction: float = 0.2, max_batch_tokens: int = 16384, max_num_seqs: int = 1024,
                  eager: bool = False, text: bool = False, repeats: int = 1) -> list[dict]:
    """Start the child and return its cases (``work`` is a list of (tokens, rows)); ``text`` adds
    ``inprocess_llm_embed_text_*`` cases (LLM.embed on the texts) after each token-id case."""
    command = [sys.executable, "-m", "embedtext.bench.inprocess", "--model", model_dir, "--suite", suite,
               "--dtype", dtype, "--memory-fraction", str(memory_fraction), "--max-batch-tokens", str(max_batch_tokens),
               "--max-num-seqs", str(max_num_seqs)]
    for tokens, rows in work:
        command += ["--work", f"{tokens}:{rows}"]
    if eager:
        command.append("--enforce-eager")
    if text:
        command.append("--text")
    command += ["--repeats", str(repeats)]
    # The engine settings embedtext's server uses: every core on a small CPU, and the same allocator
    # (in this whole process: if anything, that favours this baseline).
    env = {**os.environ, **cpu_engine_env(), **engine_allocator().env}
    out = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    cases = [json.loads(line[len("CASE "):]) for line in out.stdout.splitlines() if line.startswith("CASE ")]
    if out.returncode != 0 or len(cases) != len(work) * (2 if text else 1):
        raise RuntimeError(f"in-process vLLM run failed (code {out.returncode}):\n{out.stderr[-3000:]}")
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--work", action="append", required=True, help="TOKENS:ROWS")
    parser.add_argument("--suite", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--memory-fraction", type=float, default=0.2)
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--max-num-seqs", type=int, default=1024)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per case (the median is reported)")
    parser.add_argument("--text", action="store_true", help="also time LLM.embed on the texts (vLLM tokenizes)")
    args = parser.parse_args()

    from vllm import LLM
    from vllm.inputs import tokens_input

    from embedtext.bench.corpus import BenchCorpus
    from embedtext.bench.measure import CpuSplit, PeakRss, make_case, median_seconds, timed
    from embedtext.server.models import load_model_spec

    spec = load_model_spec(args.model)
    corpus = BenchCorpus(spec.path)
    llm = LLM(model=str(spec.path), runner="pooling", convert="embed", dtype=args.dtype,
              gpu_memory_utilization=args.memory_fraction, max_model_len=spec.max_tokens,
              max_num_batched_tokens=max(args.max_batch_tokens, spec.max_tokens), max_num_seqs=args.max_num_seqs,
              enable_prefix_caching=False, disable_log_stats=True, enforce_eager=args.enforce_eager)
    for item in args.work:
        tokens, rows = (int(x) for x in item.split(":"))
        prompts = [tokens_input(ids) for ids in corpus.token_ids(corpus.texts(rows, tokens))]
        llm.embed(prompts[: max(1, min(2048, rows // 4))], use_tqdm=False)  # warm-up, as the DuckDB cases do
        with PeakRss({}, {"self": os.getpid()}) as rss, CpuSplit({}, {"inprocess": os.getpid()}) as cpu:
            runs = [timed(lambda: llm.embed(prompts, use_tqdm=False))[0] for _ in range(args.repeats)]
        case = make_case(f"inprocess_llm_embed_{tokens}tok", args.suite, rows=rows, seconds=median_seconds(runs),
                         tokens_per_row=tokens, peak_rss_mb=rss.peaks["self"], path="vllm.LLM.embed(token ids)",
                         runs_s=[round(r, 3) for r in runs],
                         cpu_s_per_run={k: round(v / len(runs), 2) for k, v in cpu.seconds.items()})
        print("CASE " + json.dumps(case), flush=True)
        if args.text:
            # What an in-process user writes: texts in, vLLM tokenizes (the ceiling above skips it).
            texts = corpus.texts(rows, tokens)
            runs = [timed(lambda: llm.embed(texts, use_tqdm=False))[0] for _ in range(args.repeats)]
            case = make_case(f"inprocess_llm_embed_text_{tokens}tok", args.suite, rows=rows, seconds=median_seconds(runs),
                             tokens_per_row=tokens, path="vllm.LLM.embed(texts)", runs_s=[round(r, 3) for r in runs])
            print("CASE " + json.dumps(case), flush=True)


if __name__ == "__main__":
    main()
