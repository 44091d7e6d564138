"""The native pass (patch rows + resize) under AddressSanitizer, on a sweep of sizes.

    python scripts/check_native_asan.py [--quick]

Builds ``models/qwen2_vl/_patch_rows_native.c`` and ``models/qwen2_vl/_aa_resize.c`` with
``-fsanitize=address`` into a temporary directory (gcc and libasan needed), then runs, in a child
process that preloads libasan, every vector level the CPU has and the plain loops over frame
counts 1 and 3, input sides 1 to 61, 3- and 4-byte pixels, three geometries and two block cuts:
any read or write out of bounds aborts with ASan's report. Prints the number of calls checked.
Not a test (a compiler and libasan are not the project's requirements); run it after changing
the C.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["_patch_rows_native.c", "_aa_resize.c"]


def build(directory: Path) -> Path:
    target = directory / f"_patch_rows_native{sysconfig.get_config_var('EXT_SUFFIX')}"
    sources = ROOT / "src" / "mediaref" / "models" / "qwen2_vl"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer",
         f"-I{sysconfig.get_paths()['include']}", *[str(sources / name) for name in SOURCES],
         "-o", str(target)],
        check=True,
    )  # fmt: skip
    return target


def sweep(library: str, quick: bool) -> None:
    """Runs in the child: every call must return without ASan aborting the process."""
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("_patch_rows_native", library)
    assert spec is not None and spec.loader is not None
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    rng = np.random.default_rng(0)
    sides = (1, 2, 13, 61) if quick else (1, 2, 5, 13, 29, 61)
    calls = 0
    for level in range(native.set_simd_level(9), -1, -1):
        native.set_simd_level(level)
        for frames, height, width, pixel_bytes, blocks, geometry in itertools.product(
            (1, 3),
            sides,
            sides,
            (3, 4),
            ((1, 1), (2, 3), (4, 1)),
            ((14, 2, 2), (2, 1, 3), (1, 1, 1)),
        ):
            patch, merge, temporal = geometry
            out_h, out_w = blocks[0] * patch * merge, blocks[1] * patch * merge
            pixels = rng.integers(0, 256, (frames, height, width, pixel_bytes), dtype=np.uint8)
            groups = -(-frames // temporal)
            count = groups * (out_h // (patch * merge))
            rows = groups * (out_h // patch) * (out_w // patch)
            per_block = rows // count
            for first in (0, count // 2):
                # A buffer of exactly the blocks' rows: a write past it is ASan's to catch.
                out = np.empty(
                    ((count - first) * per_block, 3 * temporal * patch * patch), np.uint8
                )
                native.resize_patch_rows(
                    pixels, frames, height, width, pixel_bytes, 3, out_h, out_w,
                    patch, merge, temporal, first, count, out,
                )  # fmt: skip
                calls += 1
    print(f"{calls} calls, every vector level and the plain loops: no out-of-bounds access")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sweep(args.child, args.quick)
        return
    libasan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], check=True, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as directory:
        library = build(Path(directory))
        env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0"}
        command = [sys.executable, __file__, "--child", str(library)]
        subprocess.run(command + (["--quick"] if args.quick else []), check=True, env=env)


if __name__ == "__main__":
    main()
