"""Name -> class registries for plugins: media connectors and video loader backends.

vLLM's ``ExtensionManager`` (``vllm.utils.registry``) is the model: ``@REGISTRY.register(name)``
on a class, ``REGISTRY.load(name, *args, **kwargs)`` to build one. Every registry here refuses a
name already taken by another class (re-registering the same class is a no-op), so a plugin can
never silently replace a built-in or another plugin; ``unregister`` first to replace one. An
unknown name raises :class:`UnknownExtensionError`, which is both the ``AssertionError`` vLLM
raises ("Extension class <name> not found") and a ``ValueError``, like every other bad setting.
Which entry a deployment uses is read from its setting (``VLLM_MEDIA_CONNECTOR``,
``VLLM_VIDEO_LOADER_BACKEND``) by the caller, when it loads, never at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

_C = TypeVar("_C")
_R = TypeVar("_R", bound=type)


class UnknownExtensionError(ValueError, AssertionError):
    """No class is registered under the name asked for."""


class ExtensionManager(Generic[_C]):
    """Registered classes by name; ``kind`` names what they are in error messages."""

    def __init__(self, kind: str = "extension") -> None:
        self.kind = kind
        self.name2class: dict[str, type[_C]] = {}

    def register(self, name: str) -> Callable[[_R], _R]:
        """Class decorator: register the class under ``name`` (refused if another class has it)."""

        def wrap(cls: _R) -> _R:
            self._check_name_free(name, cls)
            self.name2class[name] = cls
            return cls

        return wrap

    def _check_name_free(self, name: str, cls: type) -> None:
        """Raise unless ``name`` is free or already ``cls``'s; subclasses check this before they
        record anything, so a refused registration changes nothing."""
        existing = self.name2class.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(
                f"{self.kind} {name!r} is already registered to "
                f"{existing.__module__}.{existing.__qualname__}; unregister it first"
            )

    def unregister(self, name: str) -> None:
        """Remove ``name``; an unknown name raises, as in :meth:`get`."""
        self.get(name)
        del self.name2class[name]

    def get(self, name: str) -> type[_C]:
        """The class registered as ``name``."""
        try:
            return self.name2class[name]
        except KeyError:
            known = ", ".join(repr(n) for n in sorted(self.name2class)) or "none"
            raise UnknownExtensionError(
                f"Extension class {name} not found: unknown {self.kind} {name!r}; "
                f"registered: {known}"
            ) from None

    def load(self, cls_name: str, *args: Any, **kwargs: Any) -> _C:
        """An instance of the class registered as ``cls_name``, built with the arguments given."""
        return self.get(cls_name)(*args, **kwargs)

    def names(self) -> list[str]:
        return sorted(self.name2class)

    def __contains__(self, name: object) -> bool:
        return name in self.name2class


__all__ = ["ExtensionManager", "UnknownExtensionError"]
