"""vLLM 0.33.0's public multimodal API at mediaref's mirrored paths, machine-checked.

``tests/data/vllm_0_33_api.json`` (written by ``scripts/vllm_api_manifest.py`` from the vLLM wheel,
read with ``ast``, never imported) lists every public name of each mirrored module, every public
method and property of each public class, and their parameters. For each, mediaref must have the
name at the mirrored path (``vllm.multimodal.X`` -> ``mediaref.X``, see docs/architecture.md), of
the same kind, and each callable must accept vLLM's parameters by the same names, positions and
kinds, with a default wherever vLLM has one; mediaref may add keyword-only parameters with
defaults. The names a vLLM module imports from another mirrored module (its re-exports, which
vLLM's own code and tests import from it) must be importable from the mirrored mediaref module too,
as the very object the mirrored source module holds. What differs on purpose is listed, with its reason, in the allow-list table of
docs/compat.md, which this test reads.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "data" / "vllm_0_33_api.json"
COMPAT = ROOT / "docs" / "compat.md"
_ALLOW_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")

P = inspect.Parameter
_POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)


@cache
def manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text())  # type: ignore[no-any-return]


@cache
def allow_list() -> frozenset[str]:
    """Entries of docs/compat.md's allow-list table: ``module``, ``module:Name``,
    ``module:Name.member`` (``*`` for every name of a module)."""
    text = COMPAT.read_text()
    start, end = text.index("<!-- allowlist:start -->"), text.index("<!-- allowlist:end -->")
    entries = set()
    for line in text[start:end].splitlines():
        match = _ALLOW_ROW.match(line)
        if match and match.group(1) != "entry":
            entries.add(match.group(1))
    return frozenset(entries)


def allowed(module: str, name: str | None = None, member: str | None = None) -> bool:
    entries = allow_list()
    keys = {module, f"{module}:*"}
    if name is not None:
        keys.add(f"{module}:{name}")
        if member is not None:
            keys.add(f"{module}:{name}.{member}")
    return bool(keys & entries)


def checks() -> Iterator[tuple[str, str, str | None]]:
    for module, described in manifest()["modules"].items():
        for name, entry in described["names"].items():
            yield module, name, None
            for member in entry.get("members", {}):
                yield module, name, member


def _mediaref_object(module: str, name: str) -> Any:
    target = importlib.import_module(manifest()["modules"][module]["mediaref"])
    return getattr(target, name)


def _parameters(obj: Any, *, bound: bool) -> list[inspect.Parameter]:
    params = list(inspect.signature(obj).parameters.values())
    return params[1:] if bound and params else params


def signature_problems(
    expected: list[dict[str, Any]], actual: list[inspect.Parameter]
) -> list[str]:
    """Why ``actual`` cannot take every call vLLM's ``expected`` parameters take (empty: it can)."""
    problems = []
    by_name = {p.name: p for p in actual}
    has_var_keyword = any(p.kind is P.VAR_KEYWORD for p in actual)
    positional_actual = [p for p in actual if p.kind in _POSITIONAL]
    expected_positional = [
        e for e in expected if e["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    ]
    for index, want in enumerate(expected_positional):
        if index >= len(positional_actual):
            if not any(p.kind is P.VAR_POSITIONAL for p in actual):
                problems.append(f"missing positional parameter {want['name']!r} at {index}")
            continue
        got = positional_actual[index]
        if want["kind"] == "POSITIONAL_OR_KEYWORD" and (
            got.name != want["name"] or got.kind is not P.POSITIONAL_OR_KEYWORD
        ):
            problems.append(
                f"position {index}: vLLM {want['name']!r} ({want['kind']}), mediaref {got.name!r} ({got.kind.name})"
            )
        if want["default"] and got.default is P.empty:
            problems.append(f"{got.name!r} has no default (vLLM's does)")
    keyword_names = {e["name"] for e in expected if e["kind"] == "KEYWORD_ONLY"}
    for extra in positional_actual[len(expected_positional) :]:
        # vLLM's keyword-only parameter taken positionally too is still taken by keyword.
        if extra.default is P.empty and extra.name not in keyword_names:
            problems.append(f"extra required positional parameter {extra.name!r}")
    for want in expected:
        kind = want["kind"]
        if kind == "KEYWORD_ONLY":
            got = by_name.get(want["name"])
            if got is None:
                if not has_var_keyword:
                    problems.append(f"missing keyword parameter {want['name']!r}")
            elif got.kind not in (P.KEYWORD_ONLY, P.POSITIONAL_OR_KEYWORD):
                problems.append(f"{want['name']!r} cannot be passed by keyword")
            elif want["default"] and got.default is P.empty:
                problems.append(f"{want['name']!r} has no default (vLLM's does)")
        elif kind == "VAR_POSITIONAL" and not any(p.kind is P.VAR_POSITIONAL for p in actual):
            problems.append(f"no *{want['name']}")
        elif kind == "VAR_KEYWORD" and not has_var_keyword:
            problems.append(f"no **{want['name']}")
    expected_names = {e["name"] for e in expected}
    for extra in actual:
        if (
            extra.kind is P.KEYWORD_ONLY
            and extra.name not in expected_names
            and extra.default is P.empty
        ):
            problems.append(f"extra required keyword parameter {extra.name!r}")
    return problems


def _check_callable(entry: dict[str, Any], obj: Any, *, bound: bool) -> list[str]:
    if entry.get("async") and not inspect.iscoroutinefunction(obj):
        return ["vLLM's is async, mediaref's is not"]
    try:
        params = _parameters(obj, bound=bound)
    except (TypeError, ValueError):
        return []  # a builtin without a signature: nothing to compare
    return signature_problems(entry["parameters"], params)


def check_name(module: str, name: str) -> list[str]:
    entry = manifest()["modules"][module]["names"][name]
    try:
        obj = _mediaref_object(module, name)
    except ModuleNotFoundError as exc:
        return [f"module missing: {exc.name}"]
    except AttributeError:
        return ["missing"]
    kind = entry["kind"]
    if kind == "class":
        if not inspect.isclass(obj):
            return [f"vLLM's is a class, mediaref's is {type(obj).__name__}"]
        return []
    if kind == "function":
        if not callable(obj):
            return ["vLLM's is a function, mediaref's is not callable"]
        return _check_callable(entry, obj, bound=False)
    return []  # values, type aliases and re-exported imports: present is enough


def check_member(module: str, name: str, member: str) -> list[str]:
    entry = manifest()["modules"][module]["names"][name]["members"][member]
    try:
        cls = _mediaref_object(module, name)
    except (ModuleNotFoundError, AttributeError):
        return ["class missing"]
    if not inspect.isclass(cls):
        return ["not a class"]
    kind = entry["kind"]
    if kind == "attribute":
        fields = getattr(cls, "__dataclass_fields__", {})
        annotated = any(member in getattr(k, "__annotations__", {}) for k in cls.__mro__)
        return [] if (hasattr(cls, member) or member in fields or annotated) else ["missing"]
    try:
        raw = inspect.getattr_static(cls, member)
    except AttributeError:
        return ["missing"]
    if kind == "property":
        return []  # present (getattr_static found it); a property takes no arguments
    if isinstance(raw, staticmethod):
        return _check_callable(entry, raw.__func__, bound=False)
    if isinstance(raw, classmethod):
        return _check_callable(entry, raw.__func__, bound=True)
    if callable(raw):
        return _check_callable(entry, raw, bound=True)
    return [f"not callable ({type(raw).__name__})"]


def _id(check: tuple[str, str, str | None]) -> str:
    module, name, member = check
    return f"{module}:{name}" + (f".{member}" if member else "")


CHECKS = list(checks())


@pytest.mark.parametrize("check", CHECKS, ids=[_id(c) for c in CHECKS])
def test_vllm_name(check: tuple[str, str, str | None]) -> None:
    module, name, member = check
    if allowed(module, name, member):
        pytest.skip("a deliberate difference: docs/compat.md")
    problems = check_name(module, name) if member is None else check_member(module, name, member)
    assert not problems, f"{_id(check)}: {'; '.join(problems)}"


# Re-exports still missing from mediaref modules that hold code (issue 27, item 8): gaps to close
# by re-exporting each name there, not deliberate differences (those are in docs/compat.md).
# Strict xfail: once a name is there its check passes, fails as XPASS, and its entry must go.
# (``processing.inputs:MultiModalUUIDItems`` is there, but a second alias, not parse's.)
PENDING_REEXPORTS: dict[str, tuple[str, ...]] = {
    "vllm.multimodal.processing.inputs": ("MultiModalUUIDItems",),
}


def reexport_checks() -> Iterator[tuple[str, str]]:
    for module, described in manifest()["modules"].items():
        for name in described["reexports"]:
            yield module, name


def check_reexport(module: str, name: str) -> list[str]:
    """``from <mirrored module> import name`` works, and gives what the source module holds."""
    origin = manifest()["modules"][module]["reexports"][name]
    try:
        obj = _mediaref_object(module, name)
    except ModuleNotFoundError as exc:
        return [f"module missing: {exc.name}"]
    except AttributeError:
        return [f"missing (vLLM imports it from {origin['module']})"]
    source = manifest()["modules"].get(origin["module"], {}).get("mediaref")
    try:
        expected = getattr(importlib.import_module(source), origin["name"]) if source else obj
    except (ModuleNotFoundError, AttributeError):
        return []  # the source lacks it (allow-listed there): present here is enough
    if obj is not expected:
        return [f"not the object {source}.{origin['name']} holds"]
    return []


REEXPORTS = list(reexport_checks())
_PENDING = pytest.mark.xfail(strict=True, reason="a re-export still to add (PENDING_REEXPORTS)")


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(c, marks=_PENDING) if c[1] in PENDING_REEXPORTS.get(c[0], ()) else c
        for c in REEXPORTS
    ],
    ids=[f"{m}:{n}" for m, n in REEXPORTS],
)
def test_vllm_reexport(check: tuple[str, str]) -> None:
    module, name = check
    if allowed(module, name):
        pytest.skip("a deliberate difference: docs/compat.md")
    problems = check_reexport(module, name)
    assert not problems, f"{module}:{name} (re-export): {'; '.join(problems)}"


def test_manifest_records_reexports() -> None:
    """The manifest holds vLLM's re-exports: ``vllm.multimodal.video`` imports the codec names
    from ``video_decoders`` (vLLM's tests import them from ``video``), aliases keep their own
    name, and names imported only for type checking are not re-exports."""
    video = manifest()["modules"]["vllm.multimodal.video"]["reexports"]
    assert video["VideoSourceMetadata"] == {
        "module": "vllm.multimodal.video_decoders",
        "name": "VideoSourceMetadata",
    }
    assert {"PYNVVIDEOCODEC_VIDEO_BACKEND", "decode_video"} <= set(video)
    renderers = manifest()["modules"]["vllm.renderers.base"]["reexports"]
    assert renderers["mm_registry"] == {"module": "vllm.multimodal", "name": "MULTIMODAL_REGISTRY"}
    assert (
        "ResolvedPromptUpdate"
        not in manifest()["modules"]["vllm.multimodal.cache.base"]["reexports"]
    )


def test_pending_reexports_are_in_the_manifest_and_not_allow_listed() -> None:
    for module, names in PENDING_REEXPORTS.items():
        for name in names:
            assert name in manifest()["modules"][module]["reexports"], f"{module}:{name}"
            assert not allowed(module, name), f"{module}:{name} is allow-listed and pending"


def test_allow_list_names_only_what_the_manifest_has() -> None:
    known = set()
    for module, described in manifest()["modules"].items():
        known.update({module, f"{module}:*"})
        for name, entry in described["names"].items():
            known.add(f"{module}:{name}")
            known.update(f"{module}:{name}.{member}" for member in entry.get("members", {}))
        known.update(f"{module}:{name}" for name in described["reexports"])
    assert not sorted(allow_list() - known)


def test_compat_states_the_figure() -> None:
    """docs/compat.md states the figure this test computes: names present / total."""
    total = present = 0
    for module, name, member in CHECKS:
        if member is not None:
            continue
        total += 1
        present += not check_name(module, name)
    print(f"vLLM 0.33.0 public names present at mediaref's mirrored paths: {present} of {total}")
    stated = re.search(r"\*\*(\d+) of (\d+)\*\* public names", COMPAT.read_text())
    assert stated is not None, "docs/compat.md must state 'N of M public names'"
    assert (int(stated.group(1)), int(stated.group(2))) == (present, total)
