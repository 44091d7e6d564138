"""Tiny offline model directories of families vLLM 0.33.0 processes and mediaref does not itself.

They are test data for vLLM on mediaref (``mediaref-vllm``, :mod:`mediaref.vllm_hook`): vLLM's own
model files build these families' processors on mediaref's base classes, connector and caches,
and ``scripts/vllm_family_parity.py`` checks that ``vllm launch render`` answers the same with and
without mediaref in place. ``scripts/make_vllm_family_models.py`` writes them under
``tests/data/vllm_families/``; ``tests/test_vllm_families.py`` regenerates them byte for byte and
loads each with transformers, offline.

One module a family, found by :func:`families`. Each defines:

- ``NAME``: the directory's name;
- ``files() -> dict[str, str]``: every file of the directory (name: text), the same bytes on every
  run: ``config.json`` naming the architecture vLLM registers, with a tiny text model (never
  instantiated: there are no weights); the real checkpoint's processor configs (image/video
  processor values as the checkpoint has them) and chat template; a small byte-level BPE tokenizer
  carrying the family's special tokens (:func:`tokenizer_files`);
- ``requests() -> list[tuple[str, dict]]``: named chat-render bodies (``messages`` with the
  family's media) the parity script sends to both servers.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPTS = Path(__file__).resolve().parent.parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from make_builtin_models import TRAINING_CORPUS, _tokenizer_json, learn_bpe  # noqa: E402

TINY_TEXT_DIMS: dict[str, int] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
"""The tiny text model every family's ``config.json`` describes (never instantiated)."""

DATA_DIR = SCRIPTS.parent / "tests" / "data" / "vllm_families"


def families() -> dict[str, ModuleType]:
    """Every family module of this package, by its ``NAME``."""
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[module.NAME] = module
    return found


def dump(document: Any) -> str:
    """A JSON file's text: indented, keys sorted, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def tokenizer_files(
    specials: tuple[str, ...], tokenizer_config: dict[str, Any]
) -> tuple[dict[str, str], dict[str, int]]:
    """``tokenizer.json`` and ``tokenizer_config.json`` for a byte-level BPE learned from the
    built-in models' corpus, ``specials`` appended as special tokens; and every special token's
    id (for ``config.json``'s token ids)."""
    vocab, merges = learn_bpe(TRAINING_CORPUS)
    ids = {token: len(vocab) + offset for offset, token in enumerate(specials)}
    files = {
        "tokenizer.json": dump(_tokenizer_json(vocab, merges, specials)),
        "tokenizer_config.json": dump(tokenizer_config),
    }
    return files, ids


def jpeg_part(seed: int, size: tuple[int, int]) -> dict[str, Any]:
    """An ``image_url`` content part: a JPEG of random pixels, ``size`` (width, height), as a
    ``data:`` URL; the same bytes for the same arguments."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    url = "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def clip_part(seed: int, frames: int, fps: int, size: tuple[int, int]) -> dict[str, Any]:
    """A ``video_url`` content part: the parity corpus's H.264 MP4 of random frames, ``size``
    (width, height), as a ``data:`` URL; the same frames for the same arguments."""
    tests = str(SCRIPTS.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from _render_corpus import _clip, video

    return video(_clip(seed, frames, fps, size))


def image_requests() -> list[tuple[str, dict[str, Any]]]:
    """The requests every image family is checked with: one image, two of other sizes, text only."""

    def chat(*parts: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": list(parts)}]}

    text = {"type": "text", "text": "Describe the picture."}
    return [
        ("one-image", chat(jpeg_part(1, (640, 480)), text)),
        ("two-images", chat(jpeg_part(2, (320, 512)), jpeg_part(3, (1024, 200)), text)),
        ("text-only", chat(text)),
    ]


__all__ = [
    "DATA_DIR",
    "TINY_TEXT_DIMS",
    "clip_part",
    "dump",
    "families",
    "image_requests",
    "jpeg_part",
    "tokenizer_files",
]
