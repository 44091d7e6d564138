"""How configured and per-request ``mm_processor_kwargs`` combine, and how flat kwargs reach the
HF processor's kwarg scopes — vLLM 0.33's rules, so a request means the same thing on both.

HF processors take one flat namespace plus four scopes (``text_kwargs``, ``images_kwargs``,
``videos_kwargs``, ``audio_kwargs``) that reach one sub-processor each.

* :func:`merge_mm_processor_kwargs`: the flat kwargs merge with the request winning (nested
  mappings merge key by key). Each scope either side names merges on its own, from lowest to
  highest priority: configured flat, configured scoped, request flat, request scoped — the flat
  kwargs contributing only keys that scope already has. An empty or None scope counts as absent;
  a scope that is not a mapping replaces rather than merges.
* :func:`resolve_mm_processor_kwargs`: with the kwargs each scope supports, a flat key goes into
  every scope that supports it (a value already in the scope wins) and leaves the flat namespace;
  a key no scope supports stays flat. Without that knowledge only flat keys that some scope
  already carries are dropped from the flat namespace.
"""

from __future__ import annotations

from collections.abc import Mapping

HF_PROCESSOR_KWARG_SCOPES = ("text_kwargs", "images_kwargs", "videos_kwargs", "audio_kwargs")


def _deep_merge(base: Mapping[str, object], top: Mapping[str, object]) -> dict[str, object]:
    """``base`` updated by ``top``; where both hold a mapping under one key, they merge too."""
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        if isinstance(below, Mapping) and isinstance(value, Mapping):
            out[key] = _deep_merge(below, value)
        else:
            out[key] = value
    return out


def _flat(kwargs: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in kwargs.items() if k not in HF_PROCESSOR_KWARG_SCOPES}


def _present(value: object) -> object:
    """A scope value, or None when it is missing or an empty mapping."""
    if isinstance(value, Mapping) and not value:
        return None
    return value


def merge_mm_processor_kwargs(
    config_kwargs: Mapping[str, object], request_kwargs: Mapping[str, object]
) -> dict[str, object]:
    """The kwargs a request runs with: the configured ones overridden by the request's."""
    config_flat, request_flat = _flat(config_kwargs), _flat(request_kwargs)
    merged = _deep_merge(config_flat, request_flat)
    for scope in HF_PROCESSOR_KWARG_SCOPES:
        configured = _present(config_kwargs.get(scope))
        requested = _present(request_kwargs.get(scope))
        if configured is None and requested is None:
            continue
        if requested is not None and not isinstance(requested, Mapping):
            merged[scope] = requested  # cannot merge into a non-mapping: the request replaces
            continue
        if configured is not None and not isinstance(configured, Mapping):
            if requested is None:
                merged[scope] = configured
                continue
            configured = None
        configured_scope: Mapping[str, object] = configured or {}
        requested_scope: Mapping[str, object] = requested or {}
        keys = configured_scope.keys() | requested_scope.keys()
        layers = (
            {k: v for k, v in config_flat.items() if k in keys},
            configured_scope,
            {k: v for k, v in request_flat.items() if k in keys},
            requested_scope,
        )
        scoped: dict[str, object] = {}
        for layer in layers:
            scoped = _deep_merge(scoped, layer)
        merged[scope] = scoped
    return merged


def resolve_mm_processor_kwargs(
    kwargs: Mapping[str, object],
    supported_mm_processor_kwargs: Mapping[str, set[str]] | None = None,
) -> dict[str, object]:
    """Route flat kwargs into the scopes that support them (see the module docstring)."""
    resolved = dict(kwargs)
    if supported_mm_processor_kwargs is None:
        carried: set[str] = set()
        for scope in HF_PROCESSOR_KWARG_SCOPES:
            scoped = resolved.get(scope)
            if isinstance(scoped, Mapping):
                carried.update(scoped)
        for key in carried - set(HF_PROCESSOR_KWARG_SCOPES):
            resolved.pop(key, None)
        return resolved

    for key, flat_value in _flat(resolved).items():
        targets = [
            scope
            for scope in HF_PROCESSOR_KWARG_SCOPES
            if key in supported_mm_processor_kwargs.get(scope, set())
        ]
        if not targets:
            continue
        for scope in targets:
            existing = resolved.get(scope, {})
            if not isinstance(existing, Mapping):
                raise TypeError(f"`{scope}` must be a mapping")
            scoped = dict(existing)
            if key in scoped:
                below, above = flat_value, scoped[key]
                if isinstance(below, Mapping) and isinstance(above, Mapping):
                    scoped[key] = _deep_merge(below, above)
                # otherwise the scoped value stays: it is the more specific one
            else:
                scoped[key] = dict(flat_value) if isinstance(flat_value, Mapping) else flat_value
            resolved[scope] = scoped
        del resolved[key]
    return resolved


__all__ = ["HF_PROCESSOR_KWARG_SCOPES", "merge_mm_processor_kwargs", "resolve_mm_processor_kwargs"]
