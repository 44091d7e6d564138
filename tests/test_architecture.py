"""The tree reads as the flow, and machines hold the line (read from the AST, nothing imported).

- Imports point down the stages (``LAYERS``): a module imports only its own stage or lower ones.
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
# (The registry sits below processing: processing infos register with it, and it builds them
# through their own classmethod, so it never imports processing.)
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
    ("mediaref.registry",),
    ("mediaref.processing",),
    ("mediaref.models",),
    ("mediaref.renderers", "mediaref.entrypoints"),
    ("mediaref", "mediaref.__main__", "mediaref.serve"),  # front door, server and CLI
]

# Imported by nothing in src/, needed at run time: transformers' default Qwen2-VL image and
# video processors import torchvision.
RUNTIME_ONLY_DEPENDENCIES = {"torchvision"}

# Public paths users import (the module map in docs/architecture.md).
PUBLIC_MODULES = [
    "mediaref",
    "mediaref.envs",
    "mediaref.exceptions",
    "mediaref.image",
    "mediaref.audio",
    "mediaref.inputs",
    "mediaref.hasher",
    "mediaref.parse",
    "mediaref.registry",
    "mediaref.utils",
    "mediaref.video",
    "mediaref.video_decoders",
    "mediaref.video_decoders.base",
    "mediaref.video_decoders.opencv",
    "mediaref.video_decoders.torchcodec",
    "mediaref.video_prune.evs",
    "mediaref.video_prune.vidcom2",
    "mediaref.cache",
    "mediaref.cache.factories",
    "mediaref.cache.base",
    "mediaref.cache.lru",
    "mediaref.cache.shm",
    "mediaref.encoder_budget",
    "mediaref.media",
    "mediaref.media.base",
    "mediaref.media.connector",
    "mediaref.media.decode",
    "mediaref.media.decode_budget",
    "mediaref.media.executor",
    "mediaref.media.extensions",
    "mediaref.media.image",
    "mediaref.media.audio",
    "mediaref.media.video",
    "mediaref.media.video.loader_registry",
    "mediaref.processing",
    "mediaref.processing.context",
    "mediaref.processing.dummy_inputs",
    "mediaref.processing.fields",
    "mediaref.processing.inputs",
    "mediaref.processing.processor",
    "mediaref.processing.prompt_updates",
    "mediaref.processing.token_layout",
    "mediaref.processing.torch_threads",
    "mediaref.renderers.base",
    "mediaref.entrypoints.chat_utils",
    "mediaref.ops.mm_input_norm",
    "mediaref.models.builtin",
    "mediaref.models.qwen2_vl_mrope",
    "mediaref.serve",
    "mediaref.serve.app",
    "mediaref.serve.cli",
    "mediaref.serve.errors",
    "mediaref.serve.encoded_cache",
    "mediaref.serve.features",
    "mediaref.serve.json_body",
    "mediaref.serve.metrics",
    "mediaref.serve.options",
    "mediaref.serve.protocol",
    "mediaref.serve.render_once",
    "mediaref.serve.responses",
    "mediaref.serve.server",
    "mediaref.serve.service",
]


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


def _declared_dependencies() -> set[str]:
    tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower() for spec in project["dependencies"]
    }


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


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_paths_import(name: str) -> None:
    importlib.import_module(name)


def test_the_video_alias_holds_no_code() -> None:
    tree = ast.parse((SRC / "mediaref" / "video.py").read_text())
    for node in tree.body:
        assert isinstance(node, (ast.ImportFrom, ast.Assign, ast.Expr)), ast.unparse(node)
        if isinstance(node, ast.Assign):
            assert [ast.unparse(t) for t in node.targets] == ["__all__"]
