"""Every ``__all__`` in ``src/`` is a literal that type checkers can read (read from the AST).

The package ships ``py.typed``: mypy and pyright take a module's exports from a literal
``__all__`` only. A computed one (``sorted(...)``) makes every ``from mediaref import X`` an
error downstream under mypy's implicit re-export rule, so each ``__all__`` is a list of string
literals naming something the module binds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "mediaref"
MODULES = sorted(SRC.rglob("*.py"))


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, including those under ``if TYPE_CHECKING:`` and ``try:``."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)


def _bound_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _dunder_all(tree: ast.Module) -> ast.expr | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return node.value
    return None


def _literal_names(value: ast.expr) -> list[str] | None:
    if not isinstance(value, (ast.List, ast.Tuple)):
        return None
    names = [e.value for e in value.elts if isinstance(e, ast.Constant)]
    return (
        names if all(isinstance(n, str) for n in names) and len(names) == len(value.elts) else None
    )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_dunder_all_is_a_literal_of_bound_names(path: Path) -> None:
    tree = ast.parse(path.read_text())
    value = _dunder_all(tree)
    if value is None:
        return
    names = _literal_names(value)
    assert names is not None, f"__all__ is computed: {ast.unparse(value)}"
    assert len(names) == len(set(names)), f"__all__ repeats a name: {names}"
    unbound = sorted(set(names) - _bound_names(tree))
    assert not unbound, f"__all__ names what the module does not bind: {unbound}"


def test_the_front_door_exports_each_name_it_imports_for_type_checkers() -> None:
    # The root package imports its re-exports lazily (``__getattr__``) and, for type checkers,
    # under ``if TYPE_CHECKING:``. Both lists are the public names: one missing from ``__all__``
    # is "not explicitly exported" to mypy.
    tree = ast.parse((SRC / "__init__.py").read_text())
    checked_imports = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for child in node.body
        if isinstance(child, ast.ImportFrom)
        for alias in child.names
    }
    value = _dunder_all(tree)
    assert value is not None
    assert set(_literal_names(value) or []) == checked_imports
