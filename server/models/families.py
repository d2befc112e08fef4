"""Generate a random-weight embedding model of each family users deploy, offline, with a tokenizer of
its real kind trained on a fixed local corpus.

=============  ==========================  =================================  ==================
family         transformers model          tokenizer                          pooling, head
=============  ==========================  =================================  ==================
bert           BertModel                   WordPiece (synthetic.py)           mean or cls
xlm-roberta    XLMRobertaModel             SentencePiece Unigram              cls
modernbert     ModernBertModel             byte-level BPE                     cls
qwen3          Qwen3 (a decoder)           byte-level BPE, EOS appended       last token
gemma3         Gemma3TextModel,            BPE with byte fallback             mean, 2 Dense
               bidirectional attention
=============  ==========================  =================================  ==================

Each directory is in sentence-transformers layout (``modules.json``, the Pooling, Dense and Normalize
folders), so vLLM and sentence-transformers load the same weights and the same tokenizer. The
tokenizer is saved once through ``AutoTokenizer``: transformers rebuilds some tokenizer classes'
pipelines from their own code, and after one round trip the file and the class agree, as they do
for a real model. The same family, shape and seed give the same weights and the same tokenizer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from embedtext.server.models.synthetic import _WORDS, check_heads, write_st_layout, write_synthetic_bert

FAMILIES = ("bert", "xlm-roberta", "modernbert", "qwen3", "gemma3")
# Text the tokenizers are trained on: the BERT vocabulary's words, digits, punctuation and a few
# non-ASCII words, so that byte fallback and multi-byte characters occur in every vocabulary.
_EXTRA = "café naïve über straße 東京 日本語 привет мир 🙂 🚀 ünïcödé 2026 3.14 e-mail don't".split()
_VOCAB_SIZE = 1200
# The prompts of the real models of a family, as their config_sentence_transformers.json names them
# (Qwen3-Embedding's and EmbeddingGemma's); no default prompt, as theirs.
PROMPTS = {
    "qwen3": {
        "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
        "document": "",
    },
    "gemma3": {"query": "task: search result | query: ", "document": "title: none | text: "},
}


def _corpus(lines: int = 4000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = _WORDS + _EXTRA
    out = []
    for _ in range(lines):
        n = rng.randint(3, 18)
        text = " ".join(rng.choice(words) for _ in range(n))
        out.append(text[0].upper() + text[1:] + rng.choice([".", "?", "!", ",", ""]))
    return out


def _specials(tokenizer, tokens: list[str]) -> dict[str, int]:
    return {t: tokenizer.token_to_id(t) for t in tokens}


def train_unigram(out: Path, max_tokens: int, corpus: list[str] | None = None, vocab_size: int = _VOCAB_SIZE):
    """XLM-R's kind, made as XLM-R's was: a SentencePiece Unigram model (sentencepiece.bpe.model),
    which transformers converts into tokenizer.json (Metaspace pieces, fairseq's ids: ``<s> <pad>
    </s> <unk>`` first, ``<mask>`` last). ``corpus``: the text to train on (the fixed local one)."""
    import sentencepiece
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus or _corpus()),
        model_prefix=str(out / "sentencepiece.bpe"),
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # the corpus has fewer pieces than that
        num_threads=1,
        minloglevel=2,
    )
    (out / "sentencepiece.bpe.vocab").unlink()
    tokens = dict(bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>", pad_token="<pad>")
    config = {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": max_tokens, **tokens}
    config |= {"unk_token": "<unk>", "mask_token": "<mask>"}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    AutoTokenizer.from_pretrained(str(out)).save_pretrained(str(out))
    return Tokenizer.from_file(str(out / "tokenizer.json"))


def _train_byte_level(specials: list[str], single: str):
    """GPT-2's kind (Qwen, ModernBERT, RoBERTa): BPE over bytes, so no text is unknown."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    named = [t for t in specials if t in single.split()]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=list(_specials(tokenizer, named).items())
    )
    return tokenizer


def _train_byte_fallback(specials: list[str]):
    """Gemma's kind (SentencePiece BPE as a tokenizer.json): spaces become ``▁``, and a character
    the vocabulary lacks becomes its UTF-8 bytes, <0x00> to <0xFF>."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokenizer = Tokenizer(models.BPE(byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    trainer = trainers.BpeTrainer(vocab_size=_VOCAB_SIZE, special_tokens=specials + byte_tokens, show_progress=False)
    # Trained word by word, as SentencePiece trains: no piece spans two words ("▁" starts a word's
    # pieces only), though the tokenizer itself runs without a pre-tokenizer, as Gemma's does.
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tokenizer.train_from_iterator([" " + line for line in _corpus()], trainer=trainer)
    tokenizer.pre_tokenizer = None
    ids = _specials(tokenizer, ["<bos>", "<eos>"])
    tokenizer.post_processor = processors.TemplateProcessing(single="<bos> $A <eos>", special_tokens=list(ids.items()))
    return tokenizer


def _save_tokenizer(tokenizer, out: Path, tokenizer_class: str, max_tokens: int, **tokens: str) -> None:
    """tokenizer.json through transformers' own class once (see the module's docstring)."""
    from transformers import AutoTokenizer

    tokenizer.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": tokenizer_class, "model_max_length": max_tokens, **tokens}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    AutoTokenizer.from_pretrained(str(out)).save_pretrained(str(out))


def _save_model(model, out: Path, architectures: list[str] | None = None) -> None:
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    if architectures:
        config = json.loads((out / "config.json").read_text())
        config["architectures"] = architectures
        (out / "config.json").write_text(json.dumps(config, indent=1))


def _shape(tokenizer, *, layers: int, hidden: int, heads: int, max_tokens: int, ffn: int = 2) -> dict:
    """The config fields every family shares: the vocabulary's size and the model's shape."""
    return dict(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn * hidden,
        max_position_embeddings=max(512, max_tokens),
    )


def _xlm_roberta(out: Path, shape: dict, head_dim: int, max_tokens: int) -> tuple[str, list]:
    from transformers import XLMRobertaConfig, XLMRobertaModel

    tokenizer = train_unigram(out, max_tokens)
    config = XLMRobertaConfig(
        **_shape(tokenizer, **shape, ffn=4),
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
    )
    config.max_position_embeddings = max_tokens + 2  # RoBERTa's positions start after the pad id
    config.position_embedding_type = "absolute"  # real XLM-R configs carry it; vLLM's loader reads it
    _save_model(XLMRobertaModel(config, add_pooling_layer=False), out)
    return "cls", []


def _modernbert(out: Path, shape: dict, head_dim: int, max_tokens: int) -> tuple[str, list]:
    from transformers import ModernBertConfig, ModernBertModel

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = _train_byte_level(specials, "[CLS] $A [SEP]")
    ids = _specials(tokenizer, specials)
    config = ModernBertConfig(
        **_shape(tokenizer, **shape),
        # Every other layer attends within a window: shorter than a long row, so the test rows
        # reach past it.
        global_attn_every_n_layers=2,
        local_attention=32,
        pad_token_id=ids["[PAD]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
    )
    _save_model(ModernBertModel(config), out)
    tokens = dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
    _save_tokenizer(tokenizer, out, "PreTrainedTokenizerFast", max_tokens, **tokens)
    return "cls", []


def _qwen3(out: Path, shape: dict, head_dim: int, max_tokens: int) -> tuple[str, list]:
    from transformers import Qwen3Config, Qwen3Model

    tokenizer = _train_byte_level(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "$A <|endoftext|>")
    eos = tokenizer.token_to_id("<|endoftext|>")
    config = Qwen3Config(
        **_shape(tokenizer, **shape),
        num_key_value_heads=max(1, shape["heads"] // 2),
        head_dim=head_dim,
        bos_token_id=eos,
        eos_token_id=eos,
        # No pad id: its embedding row would start as zeros, and the end-of-text token every row
        # ends with (and the only token of an empty text) would then embed to zero.
        pad_token_id=None,
        tie_word_embeddings=True,
    )
    # Qwen3-Embedding's own layout: the decoder's weights without an LM head, named a causal LM.
    _save_model(Qwen3Model(config), out, architectures=["Qwen3ForCausalLM"])
    tokens = dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>", padding_side="left")
    _save_tokenizer(tokenizer, out, "Qwen2Tokenizer", max_tokens, **tokens)
    return "lasttoken", []


def _gemma3(out: Path, shape: dict, head_dim: int, max_tokens: int) -> tuple[str, list]:
    from transformers import Gemma3TextConfig, Gemma3TextModel

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    tokenizer = _train_byte_fallback(specials)
    ids = _specials(tokenizer, specials)
    layers, hidden = shape["layers"], shape["hidden"]
    config = Gemma3TextConfig(
        **_shape(tokenizer, **shape),
        num_key_value_heads=max(1, shape["heads"] // 2),
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        # EmbeddingGemma's pattern, scaled down: windowed layers, then one global layer last.
        sliding_window=16,
        layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        use_bidirectional_attention=True,
        pad_token_id=ids["<pad>"],
        bos_token_id=ids["<bos>"],
        eos_token_id=ids["<eos>"],
    )
    _save_model(Gemma3TextModel(config), out, architectures=["Gemma3TextModel"])
    tokens = dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    _save_tokenizer(tokenizer, out, "GemmaTokenizer", max_tokens, **tokens, add_bos_token=True, add_eos_token=True)
    return "mean", [(hidden, 2 * hidden), (2 * hidden, hidden)]


_WRITERS = {"xlm-roberta": _xlm_roberta, "modernbert": _modernbert, "qwen3": _qwen3, "gemma3": _gemma3}


def write_family_model(
    path: str | Path,
    family: str = "bert",
    *,
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    max_tokens: int = 128,
    pooling: str | None = None,
    seed: int = 0,
) -> Path:
    """Write a random-weight embedding model of ``family`` (one of ``FAMILIES``) to ``path``.

    ``pooling`` is the family's own unless given (BERT only: 'mean' or 'cls').
    """
    import torch

    if family == "bert":
        return write_synthetic_bert(
            path, layers=layers, hidden=hidden, heads=heads, max_tokens=max_tokens, pooling=pooling or "mean", seed=seed
        )
    if family not in FAMILIES:
        raise ValueError(f"no model family {family!r}: one of {', '.join(FAMILIES)}")
    if pooling is not None:
        raise ValueError(f"{family} models pool as their family does; --pooling is for bert")
    head_dim = check_heads(hidden, heads)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    shape = dict(layers=layers, hidden=hidden, heads=heads, max_tokens=max_tokens)
    st_pooling, dense = _WRITERS[family](out, shape, head_dim, max_tokens)
    write_st_layout(out, hidden=hidden, max_tokens=max_tokens, pooling=st_pooling, dense=dense)
    if family in PROMPTS:
        config = {"prompts": PROMPTS[family], "default_prompt_name": None, "similarity_fn_name": "cosine"}
        (out / "config_sentence_transformers.json").write_text(json.dumps(config, indent=1))
    return out
