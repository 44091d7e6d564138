"""The tiny family directories for vLLM on mediaref (``scripts/vllm_families/``): generated, and
loadable offline by transformers, their images placed by each family's own HF processor.

Whether vLLM's render server answers the same on them with and without mediaref in place needs a
vLLM install: ``scripts/vllm_family_parity.py`` (docs/vllm.md).
"""

from __future__ import annotations

import os

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from transformers import AutoConfig, AutoProcessor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from make_vllm_family_models import write_family_models
from vllm_families import DATA_DIR, families

FAMILIES = sorted(families())


def test_the_directories_are_what_the_script_writes(tmp_path: Path) -> None:
    write_family_models(tmp_path)
    assert sorted(p.name for p in DATA_DIR.iterdir() if p.is_dir()) == FAMILIES
    for name in FAMILIES:
        written = sorted(p.name for p in (tmp_path / name).iterdir())
        assert sorted(p.name for p in (DATA_DIR / name).iterdir()) == written, name
        for file_name in written:
            committed = (DATA_DIR / name / file_name).read_bytes()
            assert committed == (tmp_path / name / file_name).read_bytes(), f"{name}/{file_name}"


@pytest.mark.parametrize("name", FAMILIES)
def test_a_family_loads_offline_and_places_an_image(name: str) -> None:
    directory = DATA_DIR / name
    config = AutoConfig.from_pretrained(directory)
    assert config.architectures, "config.json names no architecture for vLLM to find"
    processor = AutoProcessor.from_pretrained(directory)
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}
    ]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    pixels = np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    inputs = processor(text=[prompt], images=[Image.fromarray(pixels)], return_tensors="pt")
    text_only = processor.tokenizer(prompt)["input_ids"]
    # The processor expanded the image's placeholder into the image's tokens.
    assert inputs["input_ids"].shape[-1] > len(text_only)
