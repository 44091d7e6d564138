#!/usr/bin/env python
"""Write the tiny model directories of ``scripts/vllm_families/`` (see its docstring).

Usage: ``python scripts/make_vllm_family_models.py [--out DIR]`` (default:
``tests/data/vllm_families/``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_families import DATA_DIR, families


def write_family_models(out_dir: Path, only: list[str] | None = None) -> None:
    for name, module in families().items():
        if only and name not in only:
            continue
        directory = out_dir / name
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        for file_name, text in module.files().items():
            (directory / file_name).write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    parser.add_argument("--family", action="append", help="only these families")
    args = parser.parse_args()
    write_family_models(args.out, args.family)
    print(f"wrote {', '.join(args.family or families())} under {args.out}")


if __name__ == "__main__":
    main()
