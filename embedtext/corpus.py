"""The demo corpus: real English paragraphs from the docstrings of Python's standard library.

Every Python installation carries them, so the demo needs no download. The sources are parsed
with ``ast`` (nothing is imported), and the rows come out in a fixed order: the same Python
version gives the same corpus everywhere. Each row is one prose paragraph of a module, class or
function docstring: id, source (``smtplib.SMTP.sendmail``) and body.

>>> rows = docstring_corpus(50)
>>> len(rows["id"]), len(set(rows["body"]))
(50, 50)
>>> docstring_corpus(500)["body"] == docstring_corpus(500)["body"]
True
"""

from __future__ import annotations

import ast
import os
import re
import sysconfig
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

# Tests, tools and GUI demos: their docstrings describe the library's own internals.
_SKIPPED_FOLDERS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "turtledemo",
    "ensurepip",
    "venv",
    "tkinter",
    "pydoc_data",
    "distutils",
}
_WHITESPACE = re.compile(r"\s+")
# "SMTPHeloError    The server didn't reply": a term and its definition, a table row, not a sentence.
_DEFINITION_LINE = re.compile(r"^\s*\S+\s{2,}\S")
# A paragraph long enough to say something and short enough to stay one idea.
MIN_WORDS, MAX_WORDS = 10, 80


class CorpusUnavailable(RuntimeError):
    """The interpreter ships without its standard library's sources."""


def _prose_paragraphs(docstring: str) -> Iterator[str]:
    for block in re.split(r"\n\s*\n", docstring):
        lines = block.strip().splitlines()
        # Examples, shell sessions, tables and bullet lists are not prose.
        if not lines or any(
            line.lstrip().startswith((">>>", "...", "$", "%", "|", "+-", "==", "- ", "* ")) for line in lines
        ):
            continue
        if any(_DEFINITION_LINE.match(line) for line in lines):
            continue
        text = _WHITESPACE.sub(" ", block).strip()
        if not MIN_WORDS <= len(text.split()) <= MAX_WORDS:
            continue
        if not (text[0].isupper() and text.endswith(".")):
            continue
        if sum(c.isalpha() or c == " " for c in text) < 0.85 * len(text):
            continue
        yield text


def _documented(tree: ast.Module, module: str) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of the module and of every class and function in source order."""
    stack: list[tuple[ast.AST, str]] = [(tree, module)]
    while stack:
        node, name = stack.pop()
        doc = ast.get_docstring(node, clean=True)
        if doc:
            yield name, doc
        children = [
            (child, f"{name}.{child.name}")
            for child in ast.iter_child_nodes(node)
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and not child.name.startswith("_")
        ]
        stack.extend(reversed(children))


def _module_name(root: Path, path: Path) -> str | None:
    parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
    if not parts or any(p.startswith("_") for p in parts) or set(parts[:-1]) & _SKIPPED_FOLDERS:
        return None
    if parts[0] in _SKIPPED_FOLDERS or parts[0] in {"this", "antigravity"}:
        return None
    return ".".join(parts)


def _sources(base: Path) -> list[Path]:
    """The library's ``.py`` files in a fixed order, less the folders whose modules are all skipped."""
    paths = []
    for folder, subfolders, files in os.walk(base):
        # Not walked at all: site-packages alone holds most of the files under the library's folder.
        subfolders[:] = [d for d in subfolders if d not in _SKIPPED_FOLDERS and not d.startswith("_")]
        paths += [Path(folder, name) for name in files if name.endswith(".py")]
    return sorted(paths)


@lru_cache(maxsize=2)
def _paragraphs_by_module(root: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    base = Path(root)
    seen: set[str] = set()
    modules = []
    for path in _sources(base):
        module = _module_name(base, path)
        if module is None:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        rows = []
        for source, doc in _documented(tree, module):
            for paragraph in _prose_paragraphs(doc):
                if paragraph not in seen:
                    seen.add(paragraph)
                    rows.append((source, paragraph))
        if rows:
            modules.append((module, tuple(rows)))
    return tuple(modules)


def docstring_corpus(rows: int | None = None, stdlib: str | None = None) -> dict[str, list]:
    """Up to ``rows`` paragraphs (all when None) as columns (id, source, body).

    Modules take turns, so any prefix covers the whole library rather than its first modules.
    """
    root = stdlib or sysconfig.get_paths()["stdlib"]
    modules = _paragraphs_by_module(root)
    if not modules:
        raise CorpusUnavailable(f"no standard library sources under {root}: the demo corpus is built from them")
    ids, sources, bodies = [], [], []
    depth = 0
    while rows is None or len(ids) < rows:
        layer = [paragraphs[depth] for _, paragraphs in modules if depth < len(paragraphs)]
        if not layer:
            break
        for source, body in layer:
            if rows is not None and len(ids) == rows:
                break
            ids.append(len(ids) + 1)
            sources.append(source)
            bodies.append(body)
        depth += 1
    return {"id": ids, "source": sources, "body": bodies}
