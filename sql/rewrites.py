"""Rewrites of DuckDB SQL that save embedding calls; each keeps the query's result.

They work on sqlglot ASTs of DuckDB SQL (parse with ``read="duckdb"`` or get one from
:func:`embedtext.sql.transpile`) and find the embedding calls by function name (``functions``,
default ``{"embed_text"}``): a call ``f(text[, constant args...])``.

* :func:`dedupe_embeds`: ``SELECT f(col) FROM t WHERE p`` embeds each distinct value once, over
  ``SELECT DISTINCT col FROM t WHERE p``, joined back (the UDF dedupes only within a 2048-row
  chunk; this dedupes over the whole table, and the DISTINCT hands the UDF full chunks).
* :func:`materialize_filtered`: ``SELECT f(col) FROM t WHERE p`` reads ``t`` filtered through a
  ``MATERIALIZED`` CTE, so the UDF sees full 2048-row chunks instead of what the filter left.
* :func:`hoist_constant_embeds`: ``f('constant')`` computed once in a ``MATERIALIZED`` CTE.

The single-table rewrites apply to a SELECT over one table (no joins), without GROUP BY, HAVING,
QUALIFY, LIMIT or OFFSET (with a LIMIT the original embeds fewer rows) and not correlated with an
outer query through qualified column names; anything else is left as it is.

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT id, embed_text(category) AS v FROM docs WHERE id > 10", read="duckdb")
>>> dedupe_embeds(tree).sql("duckdb", normalize_functions=False)
'SELECT id, __embedtext_distinct_0.__vector AS v FROM docs LEFT JOIN (SELECT __text, embed_text(__text) AS __vector FROM (SELECT DISTINCT category AS __text FROM docs WHERE id > 10)) AS __embedtext_distinct_0 ON category = __embedtext_distinct_0.__text WHERE id > 10'
"""  # noqa: E501 - doctest lines are compared whole

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlglot import exp

#: The function names embedtext.register gives by default.
DEFAULT_FUNCTIONS = frozenset({"embed_text"})

#: Names this module invents start with it (CTEs, subquery aliases and columns).
PREFIX = "__embedtext_"
TEXT, VECTOR = "__text", "__vector"

Rewrite = Callable[[exp.Expr, Iterable[str]], exp.Expr]

_BLOCKING_CLAUSES = ("joins", "laterals", "group", "having", "qualify", "limit", "offset", "pivots", "connect")


def _is_embed(node: exp.Expr, functions: frozenset[str]) -> bool:
    if not (isinstance(node, exp.Anonymous) and node.name.lower() in functions and node.expressions):
        return False
    # extra arguments (model, dimensions) must be constants for a call to be shared
    return all(_is_constant(arg) for arg in node.expressions[1:])


def _is_constant(node: exp.Expr) -> bool:
    return not any(node.find_all(exp.Column, exp.Query, exp.Placeholder, exp.Parameter, exp.Star))


def _scope(node: exp.Expr) -> exp.Select | None:
    return node.find_ancestor(exp.Select)


def _in_own_cte(node: exp.Expr) -> bool:
    """Inside a CTE or subquery this module made (so a rewrite never applies twice)."""
    ancestor = node.parent
    while ancestor is not None:
        if isinstance(ancestor, (exp.CTE, exp.Subquery)) and ancestor.alias.startswith(PREFIX):
            return True
        ancestor = ancestor.parent
    return False


def _calls(tree: exp.Expr, functions: frozenset[str]) -> list[exp.Anonymous]:
    return [n for n in tree.find_all(exp.Anonymous) if _is_embed(n, functions) and not _in_own_cte(n)]


def _fresh(tree: exp.Expr, stem: str) -> Callable[[], str]:
    root = tree.root()
    taken = {i.name for i in root.find_all(exp.Identifier) if i.name.startswith(PREFIX)}
    state = {"n": 0}

    def next_name() -> str:
        while f"{PREFIX}{stem}_{state['n']}" in taken:
            state["n"] += 1
        name = f"{PREFIX}{stem}_{state['n']}"
        taken.add(name)
        return name

    return next_name


def _single_table(select: exp.Select) -> exp.Table | None:
    """The one plain table a SELECT reads, when the single-table rewrites may apply to it."""
    source = select.args.get("from_")
    if source is None or any(select.args.get(k) for k in _BLOCKING_CLAUSES):
        return None
    table = source.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    names = {table.alias_or_name.lower(), table.name.lower()}
    where = select.args.get("where")
    if where is not None:
        if any(c.table and c.table.lower() not in names for c in where.find_all(exp.Column)):
            return None  # qualified by another relation: correlated with an outer query
        if any(where.find_all(exp.Query)):
            return None  # a subquery might be correlated: leave it alone
    return table


def _cte_named(select: exp.Select, name: str) -> exp.CTE | None:
    """The CTE that ``name`` refers to from ``select``, if any."""
    node: exp.Expr | None = select
    while node is not None:
        with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
        for cte in with_.expressions if with_ else ():
            if cte.alias.lower() == name.lower():
                return cte
        node = node.parent
    return None


def _local_calls(select: exp.Select, functions: frozenset[str]) -> list[exp.Anonymous]:
    return [
        c
        for c in _calls(select, functions)
        if _scope(c) is select
        and not _is_constant(c.expressions[0])
        and not any(c.expressions[0].find_all(exp.Query, exp.AggFunc, exp.Window))
    ]


def _replace_keeping_name(node: exp.Expr, new: exp.Expr) -> None:
    """Replace ``node``; a bare projection keeps the column name DuckDB gave it (its SQL text)."""
    parent = node.parent
    if isinstance(parent, exp.Select) and node.arg_key == "expressions":
        new = exp.alias_(new, node.sql("duckdb", normalize_functions=False), quoted=True)
    node.replace(new)


def _add_cte(select: exp.Select, name: str, body: exp.Query) -> bool:
    if isinstance(select.parent, exp.SetOperation):
        return False  # DuckDB has no WITH on one branch of a UNION
    cte = exp.CTE(this=body, alias=exp.TableAlias(this=exp.to_identifier(name)), materialized=True)
    existing = select.args.get("with_")
    if existing is None:
        select.set("with_", exp.With(expressions=[cte]))
    else:
        existing.append("expressions", cte)
    return True


def _qualify_stars(select: exp.Select, alias: str) -> None:
    for projection in select.expressions:
        if isinstance(projection, exp.Star):
            projection.replace(exp.Column(this=projection.copy(), table=exp.to_identifier(alias)))


def dedupe_embeds(tree: exp.Expr, functions: Iterable[str] = DEFAULT_FUNCTIONS) -> exp.Expr:
    """Embed each distinct value of a column (or expression) once per query.

    ``SELECT f(x) FROM t WHERE p`` -> ``SELECT d.__vector FROM t LEFT JOIN (SELECT __text,
    f(__text) AS __vector FROM (SELECT DISTINCT x AS __text FROM t WHERE p)) AS d ON x = d.__text
    WHERE p``. NULL texts stay NULL (they match nothing). ``*`` becomes ``t.*``.
    """
    functions = frozenset(f.lower() for f in functions)
    fresh = _fresh(tree, "distinct")
    for select in list(tree.find_all(exp.Select)):
        table = _single_table(select)
        calls = _local_calls(select, functions) if table is not None else []
        if not calls:
            continue
        cte = _cte_named(select, table.name)
        if cte is not None and not cte.args.get("materialized") and _calls(cte.this, functions):
            continue  # reading it twice would embed its rows twice
        alias = table.alias_or_name
        where = select.args.get("where")
        groups: dict[tuple, list[exp.Anonymous]] = {}
        for call in calls:
            key = (call.name.lower(), *(a.sql("duckdb") for a in call.expressions))
            groups.setdefault(key, []).append(call)
        _qualify_stars(select, alias)
        for group in groups.values():
            name = fresh()
            first = group[0]
            text = first.expressions[0]
            distinct = exp.select(exp.alias_(text.copy(), TEXT)).from_(table.copy()).distinct()
            if where is not None:
                distinct = distinct.where(where.this.copy())
            call = exp.Anonymous(
                this=first.this, expressions=[exp.column(TEXT), *(a.copy() for a in first.expressions[1:])]
            )
            body = exp.select(exp.column(TEXT), exp.alias_(call, VECTOR)).from_(distinct.subquery())
            condition = exp.EQ(this=text.copy(), expression=exp.column(TEXT, table=name))
            select.append(
                "joins",
                exp.Join(this=body.subquery(name), on=condition, side="LEFT"),
            )
            for c in group:
                _replace_keeping_name(c, exp.column(VECTOR, table=name))
    return tree


def materialize_filtered(tree: exp.Expr, functions: Iterable[str] = DEFAULT_FUNCTIONS) -> exp.Expr:
    """Read a filtered table through a sorted MATERIALIZED CTE so the embed function gets full chunks.

    ``SELECT f(x) FROM t WHERE p`` -> ``WITH m AS MATERIALIZED (SELECT * FROM t WHERE p ORDER BY
    rowid) SELECT f(x) FROM m AS t``. A materialized CTE alone keeps the short chunks the filter
    produced (tests/integration/test_sql_corpus.py counts the calls); the sort is the
    pipeline breaker that hands them on in 2048-row chunks, and sorting by ``rowid`` keeps the
    table's order. Applies to base tables only (a CTE or view has no ``rowid``: CTE names are
    skipped; a view fails the query with DuckDB's "rowid not found").
    """
    functions = frozenset(f.lower() for f in functions)
    fresh = _fresh(tree, "filtered")
    for select in list(tree.find_all(exp.Select)):
        table = _single_table(select)
        where = select.args.get("where")
        if table is None or where is None or not _local_calls(select, functions):
            continue
        if _cte_named(select, table.name) is not None:
            continue
        name = fresh()
        body = exp.select("*").from_(table.copy()).where(where.this.copy()).order_by("rowid", dialect="duckdb")
        if not _add_cte(select, name, body):
            continue
        select.set("where", None)
        table.replace(
            exp.Table(this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name)))
        )
    return tree


def hoist_constant_embeds(tree: exp.Expr, functions: Iterable[str] = DEFAULT_FUNCTIONS) -> exp.Expr:
    """Compute each embed of constant arguments once, in a MATERIALIZED CTE of the statement.

    ``... f('bread') ...`` -> ``WITH c AS MATERIALIZED (SELECT f('bread') AS __vector)
    ... (SELECT __vector FROM c) ...``. (DuckDB already folds such a call at planning time when
    the function has no side effects, as ``embedtext.register`` declares: bench/results/full-evidence.json.)
    """
    functions = frozenset(f.lower() for f in functions)
    root = tree if isinstance(tree, exp.Query) else tree.find(exp.Query)
    if root is None:
        return tree
    fresh = _fresh(tree, "constant")
    names: dict[str, str] = {}
    for call in _calls(tree, functions):
        text = call.expressions[0]
        if not _is_constant(text) or (isinstance(text, exp.Null)):
            continue
        key = call.sql("duckdb")
        if key not in names:
            names[key] = fresh()
            cte = exp.CTE(
                this=exp.select(exp.alias_(call.copy(), VECTOR)),
                alias=exp.TableAlias(this=exp.to_identifier(names[key])),
                materialized=True,
            )
            existing = root.args.get("with_")
            if existing is None:
                root.set("with_", exp.With(expressions=[cte]))
            else:  # before the statement's own CTEs, which may use it; after earlier constants
                position = sum(1 for c in existing.expressions if c.alias.startswith(f"{PREFIX}constant_"))
                existing.set("expressions", [*existing.expressions[:position], cte, *existing.expressions[position:]])
        _replace_keeping_name(call, exp.select(VECTOR).from_(names[key]).subquery())
    return tree


#: The order :func:`optimize` applies them in: constants first (they are not per-row work),
#: then whole-table dedup, then chunk-filling for what dedup could not take.
DEFAULT_REWRITES: tuple[Rewrite, ...] = (hoist_constant_embeds, dedupe_embeds, materialize_filtered)


def optimize(
    tree: exp.Expr,
    functions: Iterable[str] = DEFAULT_FUNCTIONS,
    rewrites: Iterable[Rewrite] = DEFAULT_REWRITES,
) -> exp.Expr:
    """Apply ``rewrites`` in order.

    >>> import sqlglot
    >>> optimize(sqlglot.parse_one("SELECT embed_text('bread') AS q", read="duckdb")).sql("duckdb", normalize_functions=False)
    "WITH __embedtext_constant_0 AS MATERIALIZED (SELECT embed_text('bread') AS __vector) SELECT (SELECT __vector FROM __embedtext_constant_0) AS q"
    """  # noqa: E501 - doctest lines are compared whole
    for rewrite in rewrites:
        tree = rewrite(tree, functions)
    return tree
