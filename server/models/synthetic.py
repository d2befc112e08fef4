"""Generate a BERT embedding model with random weights and a fixed vocabulary, offline.

For tests and benchmarks where no model hub is reachable: the same seed and shape always
give the same weights and the same tokenizer (the vocabulary is built from a fixed word
list, not trained, because WordPiece training is not deterministic). The output is a
sentence-transformers directory (mean pooling + Normalize) that vLLM and
sentence-transformers both load. ``layers=12, hidden=768, heads=12, pooling='cls'`` has
the cost of snowflake-arctic-embed-m-v1.5.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

_WORDS = """
the of and to in a is that for it as was with be by on not he this are or his from at which but have an
they you were her she there one all we their has been will more would if no when so what up out about who
them can into time only some could new than other then now two first may any like these over such our way
cat cats kitten kittens dog dogs puppy animal animals pet pets sleep sleeps sleeping warm sun window mat rug
stock stocks market markets share shares price prices bank banks rate rates interest money fell rose trade
recipe flour salt water bread dough bake cook cooking sugar butter egg eggs milk cup cups pinch oven food
city river mountain sea ocean rain snow weather wind cloud tree forest flower garden road car train plane
music song art film book books read write word words language computer data table query database vector
""".split()


def _vocab() -> list[str]:
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    words = sorted(set(_WORDS) - set(chars))
    return _SPECIAL + chars + [f"##{c}" for c in string.ascii_lowercase + string.digits] + words


def _write_tokenizer(path: Path, vocab: list[str], max_tokens: int) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    ids = {tok: i for i, tok in enumerate(vocab)}
    tokenizer = Tokenizer(models.WordPiece(vocab=ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "BertTokenizerFast",
                "do_lower_case": True,
                "model_max_length": max_tokens,
                "cls_token": "[CLS]",
                "sep_token": "[SEP]",
                "pad_token": "[PAD]",
                "unk_token": "[UNK]",
                "mask_token": "[MASK]",
            },
            indent=1,
        )
    )
    (path / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "cls_token": "[CLS]",
                "sep_token": "[SEP]",
                "pad_token": "[PAD]",
                "unk_token": "[UNK]",
                "mask_token": "[MASK]",
            }
        )
    )


def check_heads(hidden: int, heads: int) -> int:
    """The head dim of a generated model's shape; raises ValueError for one vLLM-CPU cannot run."""
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    if hidden // heads < 32:
        raise ValueError("head_dim (hidden / heads) must be at least 32: vLLM's CPU attention rejects 16")
    return hidden // heads


def write_synthetic_bert(
    path: str | Path,
    *,
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    intermediate: int | None = None,
    max_tokens: int = 128,
    pooling: str = "mean",
    seed: int = 0,
) -> Path:
    """Write a random-weight BERT embedding model to ``path`` and return it."""
    import torch
    from transformers import BertConfig, BertModel

    check_heads(hidden, heads)
    if pooling not in ("mean", "cls"):
        raise ValueError("pooling is 'mean' or 'cls'")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = _vocab()
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate or 4 * hidden,
        max_position_embeddings=max(512, max_tokens),
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = BertModel(config, add_pooling_layer=False)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    _write_tokenizer(out, vocab, max_tokens)
    write_st_layout(out, hidden=hidden, max_tokens=max_tokens, pooling=pooling)
    return out


_POOLING_MODES = {"cls": "cls_token", "mean": "mean_tokens", "lasttoken": "lasttoken"}


def write_st_layout(
    out: Path, *, hidden: int, max_tokens: int, pooling: str, dense: list[tuple[int, int]] = ()
) -> None:
    """sentence-transformers' files beside a model's weights: Transformer, Pooling, a Dense layer per
    (in, out) pair (random weights, no bias, as EmbeddingGemma's), Normalize."""
    import torch
    from safetensors.torch import save_file

    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]

    def module(kind: str, folder: str) -> Path:
        index = len(modules)
        modules.append(
            {"idx": index, "name": str(index), "path": folder, "type": f"sentence_transformers.models.{kind}"}
        )
        (out / folder).mkdir(exist_ok=True)
        return out / folder

    pooling_dir = module("Pooling", "1_Pooling")
    config = {f"pooling_mode_{mode}": mode == _POOLING_MODES[pooling] for mode in _POOLING_MODES.values()}
    config.update(
        word_embedding_dimension=hidden, pooling_mode_max_tokens=False, pooling_mode_mean_sqrt_len_tokens=False
    )
    (pooling_dir / "config.json").write_text(json.dumps(config, indent=1))
    for n_in, n_out in dense:
        folder = module("Dense", f"{len(modules)}_Dense")
        config = {
            "in_features": n_in,
            "out_features": n_out,
            "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity",
        }
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        weight = torch.randn(n_out, n_in) / n_in**0.5
        save_file({"linear.weight": weight.contiguous()}, str(folder / "model.safetensors"))
    module("Normalize", f"{len(modules)}_Normalize")
    (out / "modules.json").write_text(json.dumps(modules, indent=1))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_tokens, "do_lower_case": False}))
