"""The environment a vLLM-CPU engine starts with: the compile cache that loads back, and the user's word over ours."""

from embedtext.server.host.compile_cache import AOT_COMPILE_VAR
from embedtext.server.host.tuning import host_tuning


def test_cpu_engines_use_the_compile_cache_that_loads(monkeypatch):
    monkeypatch.delenv(AOT_COMPILE_VAR, raising=False)
    tuning = host_tuning("cpu")
    assert tuning.env[AOT_COMPILE_VAR] == "0"
    assert any("compile cache" in message for _, message in tuning.notes)


def test_a_users_setting_stands(monkeypatch):
    monkeypatch.setenv(AOT_COMPILE_VAR, "1")
    assert AOT_COMPILE_VAR not in host_tuning("cpu").env


def test_gpu_and_null_engines_are_left_alone(monkeypatch):
    monkeypatch.delenv(AOT_COMPILE_VAR, raising=False)
    assert host_tuning("cuda").env == {}
    assert host_tuning("cpu", engine="null").env == {}
