"""Which DuckDB function answers a Snowflake model name: the model map and its errors.

A Snowflake query names a model and, through the function it calls, a dimension:
``EMBED_TEXT_768('snowflake-arctic-embed-m-v1.5', body)`` wants 768 floats from that model.
A :class:`ModelMap` says which DuckDB function gives them (a function registered with
``embedtext.register(con, name=..., model=..., dimensions=...)``, which returns ``FLOAT[dim]``)
and what its dimension is. Every check runs before any row does: an unmapped model or a
dimension other than the one the Snowflake function promises fails :func:`embedtext.sql.transpile`,
and :meth:`ModelMap.check_registered` compares the map with what a connection really has.

>>> models = ModelMap({"snowflake-arctic-embed-m-v1.5": ("embed_text", 768)})
>>> models.resolve("snowflake-arctic-embed-m-v1.5", required_dim=768)
EmbedFunction(function='embed_text', dim=768, model=None)
>>> models.resolve("e5-base-v2", required_dim=768)
Traceback (most recent call last):
...
embedtext.sql.models.UnmappedModelError: model 'e5-base-v2' is not mapped to a served model (mapped: 'snowflake-arctic-embed-m-v1.5'); add it to the model map, e.g. --map e5-base-v2=embed_text:768
"""  # noqa: E501 - doctest lines are compared whole

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

#: The key that maps every model name not listed explicitly.
ANY_MODEL = "*"


class SqlTranslationError(ValueError):
    """A query that cannot be translated faithfully (raised before any row runs)."""


class UnmappedModelError(SqlTranslationError):
    """The query names a model the map does not serve."""


class DimensionMismatchError(SqlTranslationError):
    """The query wants a dimension the mapped function does not return."""


@dataclass(frozen=True)
class EmbedFunction:
    """A DuckDB function returning ``FLOAT[dim]``.

    Attributes:
        function: its SQL name (``embed_text``, or a typed one such as ``embed_768``).
        dim: the length of the vectors it returns.
        model: the served model to register it for (``register(con, name=function, model=model,
            dimensions=dim)``); None: the server's default model. Not used by the translation.
    """

    function: str
    dim: int
    model: str | None = None

    def __post_init__(self) -> None:
        if not self.function.replace("_", "").isalnum() or self.function[0].isdigit():
            raise ValueError(f"{self.function!r} is not a plain SQL function name")
        if self.dim <= 0:
            raise ValueError(f"dim must be positive, got {self.dim}")

    @classmethod
    def parse(cls, spec: str) -> EmbedFunction:
        """``FUNCTION:DIM[:SERVED_MODEL]``, as the command line takes it.

        >>> EmbedFunction.parse("embed_256:256:arctic")
        EmbedFunction(function='embed_256', dim=256, model='arctic')
        """
        parts = spec.split(":", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ValueError(f"expected FUNCTION:DIM[:SERVED_MODEL], got {spec!r}")
        return cls(parts[0], int(parts[1]), parts[2] if len(parts) == 3 else None)


class ModelMap(Mapping[str, EmbedFunction]):
    """Snowflake model name -> :class:`EmbedFunction`; the key ``"*"`` maps every other name.

    Values may be given as ``EmbedFunction``, ``(function, dim)`` or ``(function, dim, model)``.
    Model names compare case-insensitively (Snowflake's are lowercase by convention).
    """

    def __init__(self, entries: Mapping[str, EmbedFunction | tuple] | None = None) -> None:
        self._entries: dict[str, EmbedFunction] = {}
        for name, value in (entries or {}).items():
            self._entries[name.lower()] = value if isinstance(value, EmbedFunction) else EmbedFunction(*value)

    @classmethod
    def parse(cls, specs: list[str] | tuple[str, ...]) -> ModelMap:
        """From ``NAME=FUNCTION:DIM[:SERVED_MODEL]`` strings (``--map`` on the command line).

        >>> dict(ModelMap.parse(["e5-base-v2=embed_text:128"]))
        {'e5-base-v2': EmbedFunction(function='embed_text', dim=128, model=None)}
        """
        entries = {}
        for spec in specs:
            name, sep, target = spec.partition("=")
            if not sep or not name:
                raise ValueError(f"expected NAME=FUNCTION:DIM[:SERVED_MODEL], got {spec!r}")
            entries[name] = EmbedFunction.parse(target)
        return cls(entries)

    def __getitem__(self, name: str) -> EmbedFunction:
        return self._entries[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ModelMap({self._entries!r})"

    def resolve(self, model: str, required_dim: int | None = None) -> EmbedFunction:
        """The function for ``model``; ``required_dim`` (768 for EMBED_TEXT_768) must match.

        Raises:
            UnmappedModelError: ``model`` is not in the map (and there is no ``"*"`` entry).
            DimensionMismatchError: the mapped function returns another dimension.
        """
        target = self._entries.get(model.lower()) or self._entries.get(ANY_MODEL)
        if target is None:
            known = ", ".join(repr(k) for k in self._entries) or "none"
            raise UnmappedModelError(
                f"model {model!r} is not mapped to a served model (mapped: {known}); add it to the "
                f"model map, e.g. --map {model}=embed_text:{required_dim or 'DIM'}"
            )
        if required_dim is not None and target.dim != required_dim:
            raise DimensionMismatchError(
                f"model {model!r} is mapped to {target.function}() returning FLOAT[{target.dim}], but "
                f"the query asks for {required_dim} dimensions; map it to a function registered "
                f"with dimensions={required_dim} (embedtext.register(con, name=..., dimensions={required_dim}))"
            )
        return target

    def check_registered(self, registered: Mapping[str, int | None]) -> None:
        """Compare the map with the functions a connection has (name -> dim, None: absent).

        Raises:
            UnmappedModelError: a mapped function is not registered.
            DimensionMismatchError: a mapped function returns another dimension.
        """
        for name, target in self._entries.items():
            dim = registered.get(target.function)
            if dim is None:
                raise UnmappedModelError(
                    f"model {name!r} is mapped to {target.function}(), which is not registered on the connection"
                )
            if dim != target.dim:
                raise DimensionMismatchError(
                    f"model {name!r} is mapped to {target.function}() with dim {target.dim}, "
                    f"but the registered function returns FLOAT[{dim}]"
                )
