"""Package re-exports imported on first use (PEP 562): the one ``__getattr__`` the lazy package
inits share.

``mediaref`` and ``mediaref.media`` re-export names whose home modules pull in heavy libraries
(Pillow, PyAV, soundfile, torch). Each names them in a table (name -> home module) and in a
literal ``__all__`` (type checkers read only a literal; the table is what runs), and takes its
module ``__getattr__`` and ``__dir__`` from :func:`lazy_exports`: a name is imported from its
home on first access and stored in the package, so importing the package stays cheap and later
lookups skip the hook. It lives in ``media``, the lowest package that re-exports lazily, so that
every package above may use it (imports point down).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is
    ``namespace``, re-exporting each name of ``exports`` from the module it maps to."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *namespace.get("__all__", ())])

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
