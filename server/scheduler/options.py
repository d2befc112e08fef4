"""What a caller may ask of its vectors, decoded from a request (decoding) and applied by the runtime."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbedOptions:
    dimensions: int = 0  # 0 = the model's full dimension
    normalize: bool | None = None  # None = the model's default
    truncate: bool = True
    interactive: bool | None = None  # None: by the request's size (protocol.INTERACTIVE_MAX_ROWS)
    caller: str = ""  # whose fair share bulk rows count against ("": the servicer names the connection)
    prompt_name: str = ""  # one of the model's prompts ("": its default, if any)
    prompt: str | None = None  # a prompt's own text, in place of any named one ("": none)


@dataclass(frozen=True)
class SplitOptions:
    max_tokens: int = 0  # the most tokens of a chunk's own text (0: as many as the model takes with its framing)
    overlap: int = 0  # tokens each chunk shares with the one before it
    prompt_name: str = ""  # the prompt the chunks will be embedded with: it counts against the model's max tokens
    prompt: str | None = None
