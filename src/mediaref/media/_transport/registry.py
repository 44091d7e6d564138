"""A name -> class registry, the machinery behind ``MEDIA_CONNECTOR_REGISTRY``.

Plugins register a connector class under a name; ``VLLM_MEDIA_CONNECTOR`` picks which one the
serving path builds (read when :meth:`ClassRegistry.load` is called, never at import).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from mediaref import envs

_C = TypeVar("_C")


class ClassRegistry(Generic[_C]):
    def __init__(self, kind: str, *, default_setting: str) -> None:
        self._kind = kind
        self._default_setting = default_setting  # the envs name that picks the default entry
        self._classes: dict[str, type[_C]] = {}

    def register(self, name: str) -> Callable[[type[_C]], type[_C]]:
        """Class decorator: register the class under ``name``."""

        def decorator(cls: type[_C]) -> type[_C]:
            existing = self._classes.get(name)
            if existing is not None and existing is not cls:
                raise ValueError(
                    f"{self._kind} {name!r} is already registered to {existing.__qualname__}"
                )
            self._classes[name] = cls
            return cls

        return decorator

    def get(self, name: str) -> type[_C]:
        try:
            return self._classes[name]
        except KeyError:
            known = ", ".join(sorted(self._classes)) or "none"
            raise ValueError(f"unknown {self._kind} {name!r}; registered: {known}") from None

    def load(self, name: str | None = None, /, *args: Any, **kwargs: Any) -> _C:
        """Build the class registered as ``name`` (default: the ``default_setting`` variable)."""
        chosen = getattr(envs, self._default_setting) if name is None else name
        return self.get(chosen)(*args, **kwargs)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes


__all__ = ["ClassRegistry"]
