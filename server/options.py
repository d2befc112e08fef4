"""What a caller may ask of its vectors, decoded from a request (decoding) and applied by the runtime."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbedOptions:
    dimensions: int = 0  # 0 = the model's full dimension
    normalize: bool | None = None  # None = the model's default
    truncate: bool = True
