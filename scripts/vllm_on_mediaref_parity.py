"""vLLM 0.33.0's own render server running on mediaref, against stock vLLM's recorded answers.

Starts ``mediaref-vllm launch render`` (vLLM's command line with mediaref in place of
``vllm.multimodal``, :mod:`mediaref.vllm_hook`) on each built-in model directory of the parity
corpus, sends it every request of ``tests/_render_corpus.py`` and compares each answer, as
``tests/test_render_parity.py`` does, with stock vLLM's answer recorded in
``tests/data/vllm_0_33_render_parity.json``. Run it from the repository's venv, pointing at a
vLLM 0.33.0 interpreter that has mediaref installed (``pip install -e . --no-deps`` there)::

    python scripts/vllm_on_mediaref_parity.py --vllm-python VLLM_VENV/bin/python
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]

from _render_corpus import cases, summary  # noqa: E402
from mediaref.models.builtin import builtin_model_path  # noqa: E402
from test_render_parity import DATA, differences, forgive_cpu_rounding  # noqa: E402
from vllm_render_parity import VllmRender, post  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", required=True, help="vLLM 0.33.0's interpreter")
    args = parser.parse_args()
    recorded = json.loads(DATA.read_text())["cases"]
    by_model: dict[str, list] = {}
    for case in cases():
        by_model.setdefault(case.model, []).append(case)
    equal, differing = 0, {}
    for model, model_cases in by_model.items():
        directory = builtin_model_path(model)
        server = VllmRender(args.vllm_python, directory.name, directory.parent, on_mediaref=True)
        try:
            for case in model_cases:
                status, body = post(server.url(case.route), case.body)
                ours, theirs = summary(status, body), recorded[case.name]["vllm"]
                forgive_cpu_rounding(ours, theirs)
                found = differences(ours, theirs)
                if found:
                    differing[case.name] = found[:3]
                else:
                    equal += 1
        finally:
            server.stop()
    print(f"{equal} of {equal + len(differing)} requests answered as stock vLLM 0.33.0 does")
    for name, found in differing.items():
        print(f"  {name}: {', '.join(found)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
