"""embedtext.udf: the DuckDB function ``embed_text(col)`` (Arrow in, ``FLOAT[dim]`` out)."""

from embedtext.udf.registration import Registration, register

__all__ = ["Registration", "register"]
