"""``mediaref serve`` and ``mediaref render`` (the ``mediaref`` console script, ``python -m mediaref``).

``mediaref serve`` runs the render server (:mod:`mediaref.serve.server`); ``mediaref render
[REQUEST.json]`` renders one request offline, exactly as the server would, and prints the
response JSON on stdout and where the time went on stderr. With no REQUEST it renders the shipped
example (``assets/example_request.json``: the sample photo and a generated clip). Each option's
default is the multi-tenant one documented in ``docs/serving.md``.

This module is the entry point: which command runs, and where ``render``'s request comes from.
The parser and the mapping of its arguments to options are :mod:`mediaref.serve._cli_parser`
(re-exported here: :func:`build_parser`, :func:`options_from`), the flag groups it assembles
:mod:`mediaref.serve._cli_flags`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from mediaref.serve._cli_parser import REQUEST_DIRECTORY, build_parser, options_from

EXAMPLE_REQUEST = "example_request.json"


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            options = options_from(args)
            if options.workers > 1:
                from mediaref.serve.workers import run_supervisor

                return run_supervisor(options)
            from mediaref.serve.server import run_server

            return run_server(options)
        return _render_command(args)
    except ValueError as exc:  # a bad option value: ServeOptions says which
        print(f"mediaref {args.command}: {exc}", file=sys.stderr)
        return 2


def _render_command(args: argparse.Namespace) -> int:
    from mediaref.serve.render_once import render_file

    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {args.repeat}")
    with resources.as_file(resources.files("mediaref") / "assets" / EXAMPLE_REQUEST) as example:
        path: Path = (args.request or example).resolve()
        if not path.is_file():
            raise ValueError(f"{args.request}: no such request file")
        local = args.allowed_local_media_path
        if local == REQUEST_DIRECTORY:
            local = str(path.parent)
        options = options_from(args, allowed_local_media_path=local)
        return render_file(path, options, repeat=args.repeat)


def main(argv: Sequence[str] | None = None) -> int:
    return _run(argv)


__all__ = ["EXAMPLE_REQUEST", "build_parser", "main", "options_from"]
