"""``python -m mediaref``: the ``mediaref`` command (``mediaref serve``, ``mediaref render``).

With no arguments it renders the shipped example request offline (``mediaref render``): the
sample photo and a generated clip through the built-in default model, the JSON on stdout and
the timings of a cache miss and a hit on stderr. See :mod:`mediaref.serve.cli`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from mediaref.serve.cli import main as cli_main

    args = list(sys.argv[1:] if argv is None else argv)
    return cli_main(args or ["render"])


if __name__ == "__main__":
    raise SystemExit(main())
