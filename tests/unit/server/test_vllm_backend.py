"""How VllmBackend starts vLLM's engine on a GPU. No GPU here: vLLM's ``AsyncLLM.from_engine_args``
is replaced by a TEST DOUBLE that records the environment the engine would start in. And how an
engine's log line reads the config vLLM built it with."""

import os

import pytest

from embedtext.server.engine.base import EngineSettings
from embedtext.server.engine.vllm_backend import VllmBackend
from embedtext.server.models import load_model_spec


@pytest.mark.parametrize(("device", "method"), [("cuda", "spawn"), ("cpu", None)])
def test_a_gpu_engine_core_is_spawned_not_forked(device, method, tiny_model_dir, monkeypatch):
    """A forked EngineCore cannot use a GPU the server already touched; on a CPU vLLM keeps its default."""
    from vllm.v1.engine.async_llm import AsyncLLM

    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    seen = {}
    monkeypatch.setattr(
        AsyncLLM,
        "from_engine_args",
        lambda args: seen.setdefault("method", os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")),
    )
    monkeypatch.setattr(VllmBackend, "_engine_args", lambda self: None)
    settings = EngineSettings(memory_fraction=0.1, max_batch_tokens=2048, max_num_seqs=8, device=device)
    VllmBackend(load_model_spec(str(tiny_model_dir)), settings)._build()
    assert seen["method"] == method


def test_the_engines_compilation_note_reads_what_vllm_built():
    """On STAND-IN configs (namespaces shaped as vLLM's, current and older): the real ones are read by
    the integration tests (test_compiled_engine.py, test_oldest_vllm.py, test_pacing.py)."""
    from types import SimpleNamespace

    from embedtext.server.engine.vllm_args import compilation_note

    def config(eager, mode):
        return SimpleNamespace(model_config=SimpleNamespace(enforce_eager=eager), compilation_config=mode)

    mode = SimpleNamespace(mode=SimpleNamespace(name="VLLM_COMPILE"))
    assert compilation_note(config(False, mode)) == "the model is compiled (vLLM compilation mode VLLM_COMPILE)"
    eager = config(True, SimpleNamespace(mode=SimpleNamespace(name="NONE")))
    assert compilation_note(eager) == "the model runs eagerly (vLLM compilation mode NONE)"
    assert compilation_note(config(False, SimpleNamespace(level=0))).startswith("the model runs eagerly")  # older vLLM
    assert compilation_note(SimpleNamespace()) == "vLLM's config does not say how it runs the model"
