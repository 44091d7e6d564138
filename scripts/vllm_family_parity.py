"""vLLM 0.33.0's render server with and without mediaref in place, on the tiny family directories.

For each family of ``scripts/vllm_families/`` (or those named with ``--family``), starts stock
``vllm launch render DIR`` and then ``mediaref-vllm launch render DIR`` (vLLM's command line with
mediaref's import hook first), sends both the family's requests and compares the answers field for
field as ``tests/test_render_parity.py`` does (token ids, ``mm_hashes``, placeholders, the
tensors after decoding, statuses). Run it from the repository's venv, pointing at a vLLM 0.33.0
interpreter that has mediaref installed (``pip install -e . --no-deps`` there)::

    python scripts/vllm_family_parity.py --vllm-python VLLM_VENV/bin/python [--family NAME ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]

from _render_corpus import CHAT, summary  # noqa: E402
from test_render_parity import differences  # noqa: E402
from vllm_families import DATA_DIR, families  # noqa: E402
from vllm_render_parity import VllmRender, post  # noqa: E402

# mediaref hashes a clip or an audio item by its key, vLLM by what it decodes (docs/compat.md):
# the one difference between the two that is by design.
DOCUMENTED = re.compile(r"body\.features\.mm_hashes\.(video|audio)\.\d+$")


def answers(python: str, name: str, bodies: list[tuple[str, dict[str, Any]]], on_mediaref: bool):
    server = VllmRender(python, name, DATA_DIR, on_mediaref=on_mediaref)
    try:
        return {case: summary(*post(server.url(CHAT), body)) for case, body in bodies}
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", required=True, help="vLLM 0.33.0's interpreter")
    parser.add_argument("--family", action="append", help="only these families")
    args = parser.parse_args()
    failures = 0
    for name, module in families().items():
        if args.family and name not in args.family:
            continue
        bodies = [(case, {**body, "model": name}) for case, body in module.requests()]
        stock = answers(args.vllm_python, name, bodies, on_mediaref=False)
        ours = answers(args.vllm_python, name, bodies, on_mediaref=True)
        for case, _ in bodies:
            found = differences(ours[case], stock[case])
            status = stock[case].get("status") if isinstance(stock[case], dict) else None
            unexplained = [path for path in found if not DOCUMENTED.match(path)]
            if unexplained:
                verdict = "DIFFERS: " + ", ".join(unexplained[:3])
            elif found:
                verdict = "equal but the clips' and audio's mm_hashes (docs/compat.md)"
            else:
                verdict = "equal"
            print(f"{name} {case} (stock status {status}): {verdict}", flush=True)
            failures += bool(unexplained)
    print(f"{failures} request(s) answered differently")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
