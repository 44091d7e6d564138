"""vLLM 0.33.0 running on mediaref: an import hook that puts mediaref in place of vLLM's layer.

``mediaref-vllm ARGS`` is ``vllm ARGS`` (same arguments, e.g. ``mediaref-vllm launch render
MODEL``) with :func:`install` called first. The hook answers the imports of

- ``vllm.multimodal`` and every module under it with mediaref's module at the mirrored path
  (``vllm.multimodal.inputs`` is :mod:`mediaref.inputs`, ...),
- ``vllm.renderers.chat_utils`` and its modules with :mod:`mediaref.renderers.chat_utils`, and
- the render server's writer of processed items (``...token_in_token_out.mm_serde``) with
  :mod:`mediaref.vllm_mm_serde` (the same bytes; a repeated item is encoded once),
- ``vllm.exceptions`` with :mod:`mediaref.exceptions` (vLLM's classes, mediaref's errors among
  them: vLLM's servers map mediaref's errors by class, its code catches them by name),
- ``vllm.utils.sparse_utils`` with :mod:`mediaref.media.sparse_utils` (one lock around torch's
  process-wide sparse check, for vLLM's prompt-embeds loader and mediaref's loaders alike),

so vLLM's renderers, model files and servers parse chat media into mediaref's lazy refs and run
mediaref's processors, caches and connector. A module mediaref leaves out (the GPU-only
``vllm.multimodal.gpu_ipc_memory``) is vLLM's own file, loaded under its own name. Nothing in
vLLM's install is changed.

It must be installed before anything imports ``vllm.multimodal``: :func:`install` refuses (a
``RuntimeError``) once vLLM's own modules are loaded, rather than leave two copies of a class
in one process. ``MEDIAREF_IMPORT_HOOK=0`` turns the launcher's hook off (plain vLLM). What it
does not cover yet is in ``docs/vllm.md``.

**Processes vLLM starts** (its engine cores, API-server processes) get the hook too. A forked
one inherits it. A spawned one (vLLM spawns once CUDA is initialized, or when
``VLLM_WORKER_MULTIPROC_METHOD=spawn``) starts a fresh interpreter, whose multiprocessing
bootstrap first re-runs the parent's main script (the ``mediaref-vllm`` console script, which
imports this module) and only then unpickles its target (which imports
``vllm/v1/engine/core.py``, and with it ``vllm.multimodal.cache``). :func:`launch` marks the
environment (``MEDIAREF_IMPORT_HOOK_INHERITED=1``), and this module, imported in a process so marked,
installs the hook at once: before vLLM's layer, as vLLM's own ``general_plugins`` could not
(an engine core loads them after importing ``vllm.multimodal.cache``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["ALIASES", "LAUNCHED_ENV", "install", "installed", "launch", "main"]

ALIASES = {
    "vllm.multimodal": "mediaref",
    "vllm.exceptions": "mediaref.exceptions",
    # One lock around torch's process-wide sparse check, for vLLM's prompt-embeds loader too.
    "vllm.utils.sparse_utils": "mediaref.media.sparse_utils",
    "vllm.renderers.chat_utils": "mediaref.renderers.chat_utils",
    "vllm.entrypoints.scale_out.token_in_token_out.mm_serde": "mediaref.vllm_mm_serde",
}
"""vLLM's package -> the mediaref package mirroring it (its modules at the same paths)."""

LAUNCHED_ENV = "MEDIAREF_IMPORT_HOOK_INHERITED"
"""Set to ``1`` by :func:`launch`: the processes it starts install the hook when they import
this module (see the module docstring)."""


def _aliased(name: str) -> tuple[str, str] | None:
    for prefix, target in ALIASES.items():
        if name == prefix or name.startswith(prefix + "."):
            return prefix, target + name[len(prefix) :]
    return None


class _MediarefFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an aliased vLLM module as mediaref's, else as vLLM's own file (see the docstring)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        aliased = _aliased(fullname)
        if aliased is None:
            return None
        try:
            mirrored = importlib.util.find_spec(aliased[1])
        except ModuleNotFoundError:
            mirrored = None
        if mirrored is None:
            return _vllms_own(fullname)
        package = mirrored.submodule_search_locations is not None
        return importlib.util.spec_from_loader(fullname, self, is_package=package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        aliased = _aliased(spec.name)
        assert aliased is not None
        return importlib.import_module(aliased[1])  # the mirrored module itself, not a copy

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is mediaref's, already imported."""


def _vllms_own(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of vLLM's own file for ``fullname`` (a module mediaref does not mirror)."""
    vllm = importlib.util.find_spec("vllm")
    if vllm is None or not vllm.submodule_search_locations:
        return None
    base = os.path.join(next(iter(vllm.submodule_search_locations)), *fullname.split(".")[1:])
    if os.path.isfile(base + ".py"):
        return importlib.util.spec_from_file_location(fullname, base + ".py")
    init = os.path.join(base, "__init__.py")
    if os.path.isfile(init):
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[base]
        )
    return None


def installed() -> bool:
    return any(isinstance(finder, _MediarefFinder) for finder in sys.meta_path)


def _vllms_own_loaded() -> list[str]:
    return sorted(
        name
        for name, module in sys.modules.items()
        if _aliased(name) is not None and not getattr(module, "__name__", "").startswith("mediaref")
    )


def install() -> None:
    """Put mediaref in place of vLLM's multimodal layer for every later import (idempotent)."""
    if installed():
        return
    loaded = _vllms_own_loaded()
    if loaded:
        raise RuntimeError(
            f"vLLM's own {loaded[0]} is already imported: install the mediaref hook "
            "before vLLM's multimodal layer is imported (use mediaref-vllm)"
        )
    sys.meta_path.insert(0, _MediarefFinder())


def _hook_wanted() -> bool:
    return os.environ.get("MEDIAREF_IMPORT_HOOK", "1") != "0"


def launch() -> None:
    """What ``mediaref-vllm`` does before vLLM's command line: install the hook in this process
    and mark the environment so the processes vLLM starts install it too (unless
    ``MEDIAREF_IMPORT_HOOK=0``)."""
    if not _hook_wanted():
        return
    install()
    os.environ[LAUNCHED_ENV] = "1"


def main() -> None:
    """``mediaref-vllm``: vLLM's command line, on mediaref unless ``MEDIAREF_IMPORT_HOOK=0``."""
    launch()
    from vllm.entrypoints.cli.main import main as vllm_main  # type: ignore[import-not-found]

    sys.argv[0] = "vllm"
    vllm_main()


# A process started by a launched one (see the module docstring): this import is its main
# script's, before anything of vLLM's; where vLLM's layer is somehow loaded already, the
# process keeps it rather than fail at import.
if os.environ.get(LAUNCHED_ENV) == "1" and _hook_wanted() and not _vllms_own_loaded():
    install()
