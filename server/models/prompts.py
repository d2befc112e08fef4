"""A model's prompts, as sentence-transformers keeps and applies them.

``config_sentence_transformers.json`` names the model's prompts (``{"query": "query: ", ...}``) and the
one ``encode`` uses where its caller names none (``default_prompt_name``). A request names a prompt,
or gives a prompt's text, or neither (the default); the text goes before each of its texts, so that
truncation cuts the text's end and keeps the prompt, as in sentence-transformers.
"""

from __future__ import annotations

from embedtext.protocol.errors import InvalidInputError

MAX_PROMPT_CHARS = 4096  # a prompt is an instruction, not a document: bounded like every request field


def prompt_text(name: str, prompts: dict[str, str], default_name: str, given: str | None, model: str) -> str:
    """What goes before each text: ``given`` where set (``""``: nothing), else the prompt named
    ``name``, else the model's default prompt (``""`` where it has none)."""
    if given is not None:
        if len(given) > MAX_PROMPT_CHARS:
            raise InvalidInputError(f"prompt is {len(given)} characters; at most {MAX_PROMPT_CHARS}")
        return given
    name = name or default_name
    if not name:
        return ""
    if name not in prompts:
        known = ", ".join(repr(n) for n in sorted(prompts)) or "none"
        raise InvalidInputError(f"model {model} has no prompt {name!r}; its prompts: {known}")
    return prompts[name]


def read_prompts(config: dict) -> tuple[dict[str, str], str]:
    """(prompts by name, the default prompt's name or "") from config_sentence_transformers.json."""
    prompts = {str(k): str(v) for k, v in (config.get("prompts") or {}).items()}
    default = str(config.get("default_prompt_name") or "")
    return prompts, default if default in prompts else ""
