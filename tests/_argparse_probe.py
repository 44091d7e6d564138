"""Parse documented command lines with each command's own argparse parser, and run nothing else.

Run as a script by ``tests/test_docs_code.py``, ``python tests/_argparse_probe.py OUT.json``: reads
a JSON list of commands on stdin, each ``{"program": "mediaref" | PATH, "argv": [...]}`` (``PATH``
a ``.py`` file in the repository), and writes to ``OUT.json`` one object per command, in order,
``{"ok": bool, "detail": str}`` (a file, so that what a library prints cannot garble it).

How a command is checked without running it: ``argparse.ArgumentParser.parse_args`` is wrapped so
that it parses as usual (an unknown flag, a bad value or a missing argument ends in argparse's own
error, exit status 2) and then stops the program by raising, before the program does anything
with what it parsed. ``mediaref ARGS`` goes through ``mediaref.__main__.main(ARGS)``; a script
runs as ``__main__`` (``runpy``) with ``sys.argv = [PATH, *ARGS]`` and its own directory first on
``sys.path``, as ``python PATH ARGS`` would, so only its imports and module-level code run before
its parser does. A script with no ``ArgumentParser`` is refused unread: it would run for real.
``--help`` (exit status 0) counts as parsed. All the commands share one process, so torch and
the rest are imported once.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import runpy
import sys
from pathlib import Path
from typing import Any

_real_parse_args = argparse.ArgumentParser.parse_args


class _Parsed(Exception):
    """Raised right after a successful parse: the program stops before acting on it."""


def _parse_then_stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
    _real_parse_args(self, *args, **kwargs)
    raise _Parsed


def _run_mediaref(argv: list[str]) -> None:
    from mediaref.__main__ import main

    main(argv)


def _run_script(path: Path, argv: list[str]) -> None:
    if "ArgumentParser" not in path.read_text():
        raise RuntimeError(f"{path} has no argparse parser: checking it would run it")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def check(program: str, argv: list[str]) -> dict[str, Any]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            if program == "mediaref":
                _run_mediaref(argv)
            else:
                _run_script(Path(program), argv)
    except _Parsed:
        return {"ok": True, "detail": ""}
    except SystemExit as exc:
        if exc.code in (0, None):  # --help, --version
            return {"ok": True, "detail": ""}
        return {"ok": False, "detail": err.getvalue().strip() or f"exit status {exc.code}"}
    except BaseException as exc:  # an import that fails, a script that breaks before parsing
        return {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    return {"ok": False, "detail": "returned without parsing its arguments"}


def main() -> None:
    commands = json.load(sys.stdin)
    argparse.ArgumentParser.parse_args = _parse_then_stop  # type: ignore[method-assign]
    results = [check(command["program"], list(command["argv"])) for command in commands]
    Path(sys.argv[1]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
