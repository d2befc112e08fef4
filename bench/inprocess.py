"""The ceiling: vLLM's ``LLM.embed`` in-process (no server, no DuckDB), in a child process that stays
up and times one run per line it reads (``ResidentInProcess``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from embedtext.server.host.tuning import host_tuning

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


def _measure(llm, corpus, tokens: int, rows: int, *, warmup: bool):
    """Time ``LLM.embed`` on the rows' token ids; print the case."""
    from vllm.inputs import tokens_input

    from embedtext.bench.measure import ProcessWatch, make_case, timed

    prompts = [tokens_input(ids) for ids in corpus.token_ids(corpus.texts(rows, tokens))]
    if warmup:
        llm.embed(prompts[: max(1, min(2048, rows // 4))], use_tqdm=False)  # as the DuckDB cases do
    with ProcessWatch({}, {"inprocess": os.getpid()}) as watch:
        seconds = timed(lambda: llm.embed(prompts, use_tqdm=False))[0]
    case = make_case(
        f"inprocess_llm_embed_{tokens}tok",
        "cpu",
        rows=rows,
        seconds=seconds,
        tokens_per_row=tokens,
        peak_rss_mb=watch.peaks["inprocess"],
        path="vllm.LLM.embed(token ids)",
        cpu_s_per_run=watch.cpu_seconds,
    )
    print("CASE " + json.dumps(case), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--enforce-eager", action="store_true")
    args = parser.parse_args()

    from vllm import LLM

    from embedtext.bench.corpus import BenchCorpus
    from embedtext.server.engine.base import EngineSettings
    from embedtext.server.engine.vllm_args import engine_arguments
    from embedtext.server.models.source import load_model_spec

    spec = load_model_spec(args.model)
    corpus = BenchCorpus(spec.path)
    # What the server's engines are built with, at the settings vLLM's HTTP server gets (bench/servers.py).
    sizes = dict(memory_fraction=0.2, max_batch_tokens=16384, max_num_seqs=1024)
    settings = EngineSettings(**sizes, device="auto", dtype="float32", enforce_eager=args.enforce_eager)
    llm = LLM(**engine_arguments(spec, settings))
    # Up: one timed run per 'TOKENS ROWS [warmup]' line read from stdin.
    print("READY", flush=True)
    for line in sys.stdin:
        tokens, rows, *flags = line.split()
        _measure(llm, corpus, int(tokens), int(rows), warmup="warmup" in flags)


class ResidentInProcess:
    """The ceiling's engine kept up in a child process, timed a run at a time. The child starts at
    construction; ``wait_ready`` waits for its engine, so other engines can start meanwhile."""

    def __init__(self, model_dir: str, *, eager: bool = False) -> None:
        command = [sys.executable, "-m", "embedtext.bench.inprocess", "--model", model_dir]
        command += ["--enforce-eager"] if eager else []
        env = {**os.environ, **host_tuning("cpu").env}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._ready = False

    def wait_ready(self) -> None:
        if not self._ready:
            self._expect("READY")
            self._ready = True

    def _expect(self, prefix: str) -> str:
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line
        raise RuntimeError(f"the in-process vLLM child ended (code {self.process.wait()}) before {prefix!r}")

    def run(self, tokens: int, rows: int, *, warmup: bool = False) -> dict:
        """One timed ``LLM.embed`` over the rows' token ids."""
        self.wait_ready()
        self.process.stdin.write(f"{tokens} {rows}{' warmup' if warmup else ''}\n")
        self.process.stdin.flush()
        return json.loads(self._expect("CASE ")[len("CASE ") :])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


if __name__ == "__main__":
    main()
