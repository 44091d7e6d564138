"""The tree reads as the flow, and machines hold the line (read from the AST, nothing imported).

- Imports point down the stages (``LAYERS``): a module imports only its own stage or lower ones.
- No two modules import each other, directly or around a loop, counting every import the AST
  holds: those under ``if TYPE_CHECKING:`` and those inside functions too (a cycle hidden in a
  function is still a cycle a reader has to hold in their head).
- No module imports another package's private module (``a.b._c`` only from inside ``a.b``).
- The dependencies ``pyproject.toml`` declares are exactly the third-party packages ``src/``
  imports, plus the documented run-time-only ones.
- Every public path of the module map still imports, and ``mediaref.video`` holds no code.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

# The stages of the flow, lowest first. A module may import modules of its own stage or below.
# (The registry sits above processing, as vLLM's does: it builds a model's processing context,
# info and processor. Model families, above it, register with it.)
LAYERS: list[tuple[str, ...]] = [
    ("mediaref.envs", "mediaref.exceptions"),
    ("mediaref.ops", "mediaref.video_prune"),  # torch and triton only
    (
        "mediaref.image",
        "mediaref.audio",
    ),  # vLLM's image/audio helper modules; the decoders use them
    ("mediaref.media",),
    (
        "mediaref.inputs",
        "mediaref.hasher",
        "mediaref.video",
        "mediaref.video_decoders",
        "mediaref.utils",
    ),
    ("mediaref.parse",),
    ("mediaref.cache",),
    ("mediaref.processing",),
    ("mediaref.registry",),
    ("mediaref.models",),
    ("mediaref.renderers", "mediaref.entrypoints"),
    ("mediaref", "mediaref.__main__", "mediaref.serve"),  # front door, server and CLI
]

# Imported by nothing in src/, needed at run time: transformers' default Qwen2-VL image and
# video processors import torchvision.
RUNTIME_ONLY_DEPENDENCIES = {"torchvision"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    name = ".".join(parts)
    return name.removesuffix(".__init__")


def source_modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(SRC.rglob("*.py")):
        yield module_name(path), path


def runtime_imports(path: Path) -> Iterator[tuple[int, str]]:
    """Absolute imported module names (``from a import b`` gives ``a`` and ``a.b``), outside
    ``if TYPE_CHECKING:`` blocks, with their line numbers."""
    tree = ast.parse(path.read_text())
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best >= 0, f"{module} is in no layer: add it to LAYERS"
    return best


def test_every_module_has_a_layer() -> None:
    for module, _ in source_modules():
        layer_of(module)


def test_no_upward_imports() -> None:
    upward = []
    for module, path in source_modules():
        own = layer_of(module)
        for line, imported in runtime_imports(path):
            if imported.startswith("mediaref.") or imported == "mediaref":
                target = imported
                # "from mediaref import envs" names the envs module, not the package front door.
                if imported.count(".") == 1 and imported.split(".")[1] in ("envs", "exceptions"):
                    target = imported
                elif imported == "mediaref":
                    continue
                if layer_of(target) > own:
                    upward.append(f"{path.relative_to(ROOT)}:{line}: {module} -> {imported}")
    assert not upward, "\n".join(upward)


def imported_modules(module: str, path: Path, modules: set[str]) -> Iterator[str]:
    """The mediaref modules ``module`` imports anywhere in its file (``if TYPE_CHECKING:`` and
    function bodies included). ``from a.b import c`` names the module ``a.b.c`` when there is
    one, else ``a.b``; an import names the module itself, not the packages above it (every
    package ``__init__`` that re-exports its modules would otherwise close a loop)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in modules:  # ``import a.b.C`` where C is not a module
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def _one_loop(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """A shortest import loop through the component's first module, for the failure message."""
    start, inside = members[0], set(members)
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for target in sorted(graph[node] & inside):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return members


def test_no_import_cycles() -> None:
    sources = dict(source_modules())
    # A compiled extension (its ``.pyi`` stub) is a module too; it imports nothing back.
    extensions = {module_name(stub) for stub in SRC.rglob("*.pyi")}
    modules = set(sources) | extensions
    graph = {m: set(imported_modules(m, path, modules)) for m, path in sources.items()}
    graph.update({m: set() for m in extensions - set(sources)})
    cycles = _import_cycles(graph)
    report = [
        f"{len(members)} modules: {', '.join(members)}\n"
        f"  e.g. {' -> '.join(_one_loop(graph, members))}"
        for members in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(report)


def test_the_cycle_check_sees_type_checking_and_function_level_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from pkg import a\n")
    modules = {"pkg", "pkg.a", "pkg.b"}
    graph = {
        "pkg": set(),
        "pkg.a": set(imported_modules("pkg.a", package / "a.py", modules)),
        "pkg.b": set(imported_modules("pkg.b", package / "b.py", modules)),
    }
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert _import_cycles(graph) == [["pkg.a", "pkg.b"]]
    assert _one_loop(graph, ["pkg.a", "pkg.b"]) == ["pkg.a", "pkg.b", "pkg.a"]


def _private_owner(imported: str) -> str | None:
    """The package that owns ``imported``'s first private component, or None if none is private."""
    parts = imported.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def test_no_module_imports_another_packages_private_module() -> None:
    crossing = []
    for module, path in source_modules():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for line, imported in runtime_imports(path):
            owner = _private_owner(imported) if imported.startswith("mediaref") else None
            if owner is not None and not (package == owner or package.startswith(owner + ".")):
                crossing.append(f"{path.relative_to(ROOT)}:{line}: {module} -> {imported}")
    assert not crossing, "\n".join(crossing)


_DEV_EXTRAS = frozenset({"test", "bench"})  # tools for this repository, never imported by src/


def _declared_dependencies() -> set[str]:
    """The install's dependencies and its runtime extras (``mediaref[redis]``)."""
    tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    specs = list(project["dependencies"])
    specs += [spec for name, group in extras.items() if name not in _DEV_EXTRAS for spec in group]
    return {re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower() for spec in specs}


def _imported_distributions() -> dict[str, set[str]]:
    """Distribution -> the src/ modules that import it (third-party imports only)."""
    by_module = importlib.metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for module, path in source_modules():
        for _, imported in runtime_imports(path):
            top = imported.split(".")[0]
            if top == "mediaref" or top in sys.stdlib_module_names or top == "__future__":
                continue
            for distribution in by_module.get(top, [top]):
                found.setdefault(distribution.lower(), set()).add(module)
    return found


def test_declared_dependencies_are_what_src_imports() -> None:
    declared = _declared_dependencies()
    imported = _imported_distributions()
    undeclared = {name: sorted(users) for name, users in imported.items() if name not in declared}
    unused = declared - set(imported) - RUNTIME_ONLY_DEPENDENCIES
    assert not undeclared, f"imported by src/ but not declared: {undeclared}"
    assert not unused, f"declared but imported by nothing in src/: {sorted(unused)}"


def public_modules() -> list[str]:
    """Every module whose path has no underscore part: the public paths users import (the module
    map in docs/architecture.md)."""
    names = (module_name(path) for path in SRC.rglob("*.py"))
    return sorted(n for n in names if not any(part.startswith("_") for part in n.split(".")))


@pytest.mark.parametrize("name", public_modules())
def test_public_paths_import(name: str) -> None:
    importlib.import_module(name)


def test_the_video_alias_holds_no_code() -> None:
    tree = ast.parse((SRC / "mediaref" / "video.py").read_text())
    for node in tree.body:
        assert isinstance(node, (ast.ImportFrom, ast.Assign, ast.Expr)), ast.unparse(node)
        if isinstance(node, ast.Assign):
            assert [ast.unparse(t) for t in node.targets] == ["__all__"]
