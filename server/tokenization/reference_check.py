"""The load-time check of a fast encoder: its ids against the Hugging Face tokenizer's on texts that
reach every part of a tokenizer. An encoder that differs on any of them is not used, and the pool
keeps the Hugging Face tokenizer for that model."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# Prose, case and digits, punctuation, accents, CJK, emoji, scripts with combining marks, runs of
# spaces, tabs and newlines, control, format and other space characters, a special token's text,
# nothing, one character, and a row longer than any model's max tokens (truncation, specials kept).
CHECK_TEXTS = [
    "A cat sleeps on the warm windowsill.",
    "Don't e-mail J.R.R. Tolkien's (1892-1973) publisher at info@example.com; it's \"late\"!",
    "Ünïcödé façade naïve straße Ελληνικά русский 東京 日本語 中文 한국어 🙂🚀👩‍💻",
    "नमस्ते दुनिया, مَرْحَبًا بِالْعَالَم, Tiếng Việt, e\u0301te\u0301, ｆｕｌｌ ①ﬁ",
    "  leading, \t tabs,\n\nnewlines   and   runs of spaces  ",
    "next\x85line\x0bvtab\u200bzero\u200dwidth\ufeffbom\u2028sep\x00nul\x1besc \u00a0nbsp\u2003em\u3000wide",
    "<s> </s> [CLS] <|endoftext|> <bos> <mask> written as text",
    "",
    "x",
    "3.14159 2026-12-01 0x1F ####",
    "word " * 3000,
]


def agrees(encoder, reference, name: str) -> bool:
    """Whether ``encoder.encode`` (truncating) gives the ids of ``reference`` (the Hugging Face
    tokenizer's truncating batch encode) on ``CHECK_TEXTS``; the log says where not."""
    ours = encoder.encode(CHECK_TEXTS).to_lists()
    theirs = [encoding.ids for encoding in reference(CHECK_TEXTS)]
    if ours == theirs:
        return True
    row = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
    log.info("%s gives other ids than the Hugging Face tokenizer (text %d of its check): not used", name, row)
    return False
