"""Write ``tests/data/vllm_0_33_api.json``: vLLM 0.33.0's public multimodal API, read from its wheel.

The wheel is only read, never installed or imported: its sources are parsed with ``ast``. For each
mirrored module (see ``PATH_MAP``) the manifest records every public module-level name and, for
callables, their parameters (name, kind, whether it has a default); for each public class, its
public methods and properties and its constructor (a dataclass's generated ``__init__`` included).
``tests/test_vllm_api.py`` holds mediaref to it at the mirrored paths.

    python scripts/vllm_api_manifest.py                       # pip download the wheel into a temp dir
    python scripts/vllm_api_manifest.py --wheel vllm-0.33.0-*.whl

What counts as public: a module's ``__all__`` when it has one; otherwise every name the module
defines (``def``, ``class``, assignments, type aliases) that does not start with ``_``, except
``logger``. Names a module merely imports are not among its public names, except through
``__all__`` (or a package ``__init__``'s imports); they are recorded apart, as re-exports.

Re-exports: each module also records, under ``reexports``, the public names it imports at
module level from another mirrored vLLM module (``from vllm.multimodal.video_decoders import X``,
relative imports inside the mirrored packages), with the module each comes from and its name
there. vLLM's own code and tests import such names from the importing module, so mediaref must
have them there too. Skipped: names starting with ``_``, names already among the module's public
names, imports under ``if TYPE_CHECKING:`` or inside functions (not attributes of the module at
run time), ``*`` imports and ``from .x import __all__ as name``, and names from outside the
mirrored prefixes (torch, ``vllm.logger``, ``vllm.config``).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.33.0"
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_0_33_api.json"

# vLLM module prefix -> mediaref module prefix. Longest match wins.
PATH_MAP: dict[str, str] = {
    "vllm.multimodal": "mediaref",
    "vllm.renderers.base": "mediaref.renderers.base",
    "vllm.renderers.chat_utils": "mediaref.renderers.chat_utils",
    "vllm.model_executor.layers.fusion.mm_input_norm": "mediaref.ops.mm_input_norm",
}
# Source directories / files in the wheel that hold the mirrored modules.
_SOURCES = (
    "vllm/multimodal/",
    "vllm/renderers/base.py",
    "vllm/renderers/chat_utils/",
    "vllm/model_executor/layers/fusion/mm_input_norm.py",
)
_NOT_API = frozenset({"logger"})
_CONSTRUCTOR_AND_CALL = ("__init__", "__call__")


def mediaref_module(vllm_module: str) -> str:
    """The mediaref path that mirrors ``vllm_module``."""
    for prefix in sorted(PATH_MAP, key=len, reverse=True):
        if vllm_module == prefix or vllm_module.startswith(prefix + "."):
            return PATH_MAP[prefix] + vllm_module[len(prefix) :]
    raise KeyError(vllm_module)


def _module_name(path: str) -> str:
    name = path[: -len(".py")].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _is_public(name: str) -> bool:
    return not name.startswith("_") and name not in _NOT_API


def _parameters(args: ast.arguments) -> list[dict[str, Any]]:
    """Parameters in order: name, kind (inspect's names), and whether a default is given."""
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params: list[dict[str, Any]] = []
    for i, arg in enumerate(positional):
        kind = "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        params.append({"name": arg.arg, "kind": kind, "default": i >= first_default})
    if args.vararg is not None:
        params.append({"name": args.vararg.arg, "kind": "VAR_POSITIONAL", "default": False})
    # ast keeps one kw_defaults entry per keyword-only argument (None where there is no default).
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append({"name": arg.arg, "kind": "KEYWORD_ONLY", "default": default is not None})
    if args.kwarg is not None:
        params.append({"name": args.kwarg.arg, "kind": "VAR_KEYWORD", "default": False})
    return params


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute):
            names.add(target.attr)
        elif isinstance(target, ast.Name):
            names.add(target.id)
    return names


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> dict[str, Any]:
    decorators = _decorator_names(node)
    if "property" in decorators or "cached_property" in decorators:
        return {"kind": "property"}
    params = _parameters(node.args)
    if method and "staticmethod" not in decorators and params:
        params = params[1:]  # self / cls: bound away by the time anyone calls it
    kind = (
        "classmethod"
        if "classmethod" in decorators
        else "staticmethod"
        if ("staticmethod" in decorators)
        else "method"
        if method
        else "function"
    )
    return {"kind": kind, "async": isinstance(node, ast.AsyncFunctionDef), "parameters": params}


def _dataclass_kw_only(node: ast.ClassDef) -> bool:
    """``@dataclass(kw_only=True)``: every field of this class is keyword-only."""
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("dataclass"):
            for keyword in decorator.keywords:
                if keyword.arg == "kw_only" and isinstance(keyword.value, ast.Constant):
                    return bool(keyword.value.value)
    return False


def _dataclass_init(node: ast.ClassDef) -> list[dict[str, Any]]:
    params = []
    kind = "KEYWORD_ONLY" if _dataclass_kw_only(node) else "POSITIONAL_OR_KEYWORD"
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            annotation = ast.unparse(item.annotation)
            if annotation.startswith(("ClassVar", "typing.ClassVar")):
                continue
            if annotation.endswith("KW_ONLY"):  # the sentinel: the fields after it are keyword-only
                kind = "KEYWORD_ONLY"
                continue
            has_default = item.value is not None
            if (
                isinstance(item.value, ast.Call)
                and ast.unparse(item.value.func).endswith("field")
                and not any(k.arg in ("default", "default_factory") for k in item.value.keywords)
            ):
                has_default = False
            if isinstance(item.value, ast.Call) and any(
                k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in item.value.keywords
            ):
                continue
            params.append({"name": item.target.id, "kind": kind, "default": has_default})
    return params


def _class(node: ast.ClassDef) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _is_public(item.name) or item.name in _CONSTRUCTOR_AND_CALL:
                # A later definition (an overload's implementation, a property setter) wins.
                described = _function(item, method=True)
                if item.name in members and members[item.name].get("kind") == "property":
                    continue
                members[item.name] = described
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if _is_public(item.target.id):
                members.setdefault(item.target.id, {"kind": "attribute"})
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name) and _is_public(target.id):
                    members.setdefault(target.id, {"kind": "attribute"})
    bases = [ast.unparse(base) for base in node.bases]
    described: dict[str, Any] = {"kind": "class", "bases": bases, "members": members}
    if "dataclass" in _decorator_names(node):
        described["dataclass_fields"] = _dataclass_init(node)
        if "__init__" not in members:
            members["__init__"] = {
                "kind": "method",
                "async": False,
                "parameters": described["dataclass_fields"],
                "generated": True,
            }
    return described


def _inherit_dataclass_fields(defined: dict[str, dict[str, Any]]) -> None:
    """A generated ``__init__`` takes the base dataclasses' fields first, as ``dataclasses`` does
    (bases defined in the same module; a field a subclass redefines keeps its first place)."""

    def fields_of(name: str, seen: frozenset[str]) -> list[dict[str, Any]]:
        entry = defined.get(name)
        if entry is None or entry.get("kind") != "class" or "dataclass_fields" not in entry:
            return []
        ordered: dict[str, dict[str, Any]] = {}
        for base in reversed(entry["bases"]):
            if base not in seen:
                for field in fields_of(base, seen | {name}):
                    ordered[field["name"]] = field
        for field in entry["dataclass_fields"]:
            ordered[field["name"]] = field
        # As dataclasses orders them: positional fields first, keyword-only ones after.
        fields = list(ordered.values())
        return [f for f in fields if f["kind"] != "KEYWORD_ONLY"] + [
            f for f in fields if f["kind"] == "KEYWORD_ONLY"
        ]

    for name, entry in defined.items():
        init = entry.get("members", {}).get("__init__", {}) if entry.get("kind") == "class" else {}
        if init.get("generated"):
            init["parameters"] = fields_of(name, frozenset())
    for entry in defined.values():
        entry.pop("dataclass_fields", None)


def _literal_all(tree: ast.Module, sibling_all: Any) -> list[str] | None:
    """The module's ``__all__``; ``*name`` entries are another module's ``__all__`` imported as
    ``name`` (``from .types import __all__ as name``), looked up through ``sibling_all``."""
    imported_alls = {
        alias.asname: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name == "__all__" and alias.asname
    }
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert isinstance(node.value, (ast.List, ast.Tuple))
                names: list[str] = []
                for element in node.value.elts:
                    if isinstance(element, ast.Starred) and isinstance(element.value, ast.Name):
                        names.extend(sibling_all(imported_alls[element.value.id]))
                    else:
                        names.append(str(ast.literal_eval(element)))
                return names
    return None


def _definitions(tree: ast.Module) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = _function(node, method=False)
        elif isinstance(node, ast.ClassDef):
            found[node.name] = _class(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, {"kind": "value"})
        elif type(node).__name__ == "TypeAlias":  # ``type X = ...`` (ast.TypeAlias, 3.12+)
            found.setdefault(node.name.id, {"kind": "value"})  # type: ignore[attr-defined]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                found.setdefault(name, {"kind": "imported"})
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks and version switches
            for inner in node.body + node.orelse:
                found.update(
                    (k, v)
                    for k, v in _definitions(ast.Module([inner], [])).items()
                    if k not in found
                )
    return found


def _is_mirrored(vllm_module: str) -> bool:
    try:
        mediaref_module(vllm_module)
    except KeyError:
        return False
    return True


def _import_source(node: ast.ImportFrom, package: str) -> str:
    """The absolute module an ``ImportFrom`` reads, relative ones resolved from ``package``."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _reexports(body: list[ast.stmt], package: str) -> dict[str, dict[str, str]]:
    """Public names imported at module level from a mirrored vLLM module: name -> the module it
    comes from and its name there (an ``as`` alias differs)."""
    found: dict[str, dict[str, str]] = {}
    for node in body:
        if isinstance(node, ast.ImportFrom):
            source = _import_source(node, package)
            if not _is_mirrored(source):
                continue
            for alias in node.names:
                name = alias.asname or alias.name
                # ``*`` and ``__all__ as name`` are covered by ``__all__``; ``_x as y`` is private.
                if alias.name != "*" and _is_public(alias.name) and _is_public(name):
                    found.setdefault(name, {"module": source, "name": alias.name})
        elif isinstance(node, ast.If):
            type_checking = ast.unparse(node.test).endswith("TYPE_CHECKING")
            branches = node.orelse if type_checking else node.body + node.orelse
            for name, origin in _reexports(branches, package).items():
                found.setdefault(name, origin)
        elif isinstance(node, ast.Try):
            inner = node.body + [s for h in node.handlers for s in h.body] + node.orelse
            for name, origin in _reexports(inner + node.finalbody, package).items():
                found.setdefault(name, origin)
    return found


def _module(source: str, *, package: str, is_package: bool, sibling_all: Any) -> dict[str, Any]:
    tree = ast.parse(source)
    defined = _definitions(tree)
    _inherit_dataclass_fields(defined)
    exported = _literal_all(tree, sibling_all)
    if exported is None:
        exported = [
            name
            for name, described in defined.items()
            if _is_public(name) and (described["kind"] != "imported" or is_package)
        ]
    names = {}
    for name in exported:
        described = defined.get(name, {"kind": "imported"})
        names[name] = described
    reexports = {
        name: origin for name, origin in _reexports(tree.body, package).items() if name not in names
    }
    return {"names": dict(sorted(names.items())), "reexports": dict(sorted(reexports.items()))}


def build_manifest(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as archive:
        sources = {
            _module_name(path): (path, archive.read(path).decode("utf-8"))
            for path in sorted(archive.namelist())
            if path.endswith(".py") and path.startswith(_SOURCES)
        }

    def sibling_all_of(package: str) -> Any:
        def sibling_all(relative: str | None) -> list[str]:
            tree = ast.parse(sources[f"{package}.{relative}"][1])
            found = _literal_all(tree, sibling_all_of(f"{package}.{relative}"))
            return found or []

        return sibling_all

    modules: dict[str, Any] = {}
    for name, (path, source) in sources.items():
        if any(part.startswith("_") for part in name.split(".")):
            continue
        is_package = path.endswith("__init__.py")
        package = name if is_package else name.rsplit(".", 1)[0]
        described = _module(
            source, package=package, is_package=is_package, sibling_all=sibling_all_of(package)
        )
        modules[name] = {"mediaref": mediaref_module(name), **described}
    return {
        "vllm_version": VLLM_VERSION,
        "generated_by": "scripts/vllm_api_manifest.py",
        "path_map": PATH_MAP,
        "modules": modules,
    }


def _download(directory: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"vllm=={VLLM_VERSION}",
            "--no-deps",
            "-d",
            str(directory),
        ],
        check=True,
    )
    (wheel,) = directory.glob(f"vllm-{VLLM_VERSION}-*.whl")
    return wheel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheel", type=Path, help=f"the vllm {VLLM_VERSION} wheel (default: pip download it)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.wheel is not None:
        manifest = build_manifest(args.wheel)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            manifest = build_manifest(_download(Path(scratch)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    names = sum(len(m["names"]) for m in manifest["modules"].values())
    reexports = sum(len(m["reexports"]) for m in manifest["modules"].values())
    print(
        f"{args.out}: {len(manifest['modules'])} modules, {names} public names, "
        f"{reexports} re-exports"
    )


if __name__ == "__main__":
    main()
