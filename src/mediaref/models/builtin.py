"""The model directories mediaref ships, for running a model family with no download.

Each directory under ``mediaref/models/data/`` loads offline with
``transformers.AutoProcessor.from_pretrained(path)`` and ``AutoConfig.from_pretrained(path)``: a
small byte-level BPE tokenizer carrying the family's special tokens and chat template, the real
checkpoint's image/video/audio processor configs, and a ``config.json`` for a tiny text model.
There are no weights. ``scripts/make_builtin_models.py`` generates them; a test keeps both in sync.

- ``qwen2_vl``: Qwen2-VL-2B-Instruct's processors (images and video).
- ``qwen2_audio``: Qwen2-Audio-7B-Instruct's processor (Whisper features, 128 mel bins).
"""

from __future__ import annotations

import pathlib
from importlib import resources

BUILTIN_MODEL_NAMES: tuple[str, ...] = ("qwen2_vl", "qwen2_audio")


def builtin_model_path(name: str) -> pathlib.Path:
    """The directory of the built-in model ``name`` (one of :data:`BUILTIN_MODEL_NAMES`)."""
    if name not in BUILTIN_MODEL_NAMES:
        known = ", ".join(BUILTIN_MODEL_NAMES)
        raise ValueError(f"unknown built-in model {name!r}; the built-in models are: {known}")
    directory = resources.files("mediaref.models") / "data" / name
    # HF loaders need a real folder. An installed wheel or a source checkout gives one; a zipped
    # install gives a zip path transformers cannot read, so it is refused here rather than there.
    if not isinstance(directory, pathlib.Path) or not directory.is_dir():
        raise FileNotFoundError(
            f"the built-in model {name!r} is not a directory on disk ({directory}); "
            "mediaref must be installed unzipped, with its package data"
        )
    return directory


__all__ = ["BUILTIN_MODEL_NAMES", "builtin_model_path"]
