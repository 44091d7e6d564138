"""Write tests/data/vllm_0_33_hash_vectors.json: vLLM 0.33.0's multimodal item digests.

Run it where vLLM 0.33.0 is importable (installed ``--no-deps`` next to torch, numpy, Pillow and
blake3), not in mediaref's environment::

    . $VLLM_VENV/bin/activate   # the vLLM venv: docs/performance.md, "The vLLM 0.33.0 side"
    env -u PYTHONPATH python scripts/vllm_hash_vectors.py

Every input is described as data in ``tests/_hash_vectors.py`` and built there by the same
function the test uses, so the two sides hash the very same values; this script only adds vLLM's
``MultiModalHasher.hash_kwargs`` digest of each, under every algorithm. Inputs in ``PARSED`` go
through vLLM's ``MultiModalDataParser`` first, and each item's digest is of what the parser hands
the hasher (``get_item_for_hash``): the parse layer's normalizations (images made upright and RGB)
are part of an item's hash too. The file also records the
library versions that produced it: a pickled fallback (``complex-pickled``) and the pixel layout
of decoded files depend on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "vllm_0_33_hash_vectors.json"
ALGORITHMS = ("blake3", "sha256", "sha512")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "tests"))
    import numpy
    import PIL
    import torch
    import vllm
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.media import MediaWithBytes
    from vllm.multimodal.parse import MultiModalDataParser

    from _hash_vectors import PARSED, build, vectors

    records = []
    for name, described in vectors():
        kwargs = {key: build(desc, MediaWithBytes) for key, desc in described.items()}
        digests = {
            algorithm: MultiModalHasher.hash_kwargs(algorithm, **kwargs) for algorithm in ALGORITHMS
        }
        records.append({"name": name, "kwargs": described, "digests": digests})

    parsed = []
    for name, described in PARSED.items():
        parser = MultiModalDataParser(**described.get("parser", {}))
        modality = described["modality"]
        items = parser.parse_mm_data({modality: build(described["data"], MediaWithBytes)})[modality]
        per_item = [
            {
                algorithm: MultiModalHasher.hash_kwargs(algorithm, **{modality: item})
                for algorithm in ALGORITHMS
            }
            for item in items.get_all_items_for_hash()
        ]
        parsed.append({"name": name, **described, "digests": per_item})

    document = {
        "produced_by": "scripts/vllm_hash_vectors.py",
        "versions": {
            "vllm": vllm.__version__,
            "python": sys.version.split()[0],
            "numpy": numpy.__version__,
            "torch": torch.__version__,
            "pillow": PIL.__version__,
        },
        "vectors": records,
        "parsed": parsed,
    }
    args.out.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    print(f"{len(records)} vectors, {len(parsed)} parsed inputs -> {args.out}")


if __name__ == "__main__":
    main()
