"""mediaref's MultiModalHasher reproduces vLLM 0.33.0's digest for every input that is not a ref.

``tests/data/vllm_0_33_hash_vectors.json`` holds vLLM's digests (``scripts/vllm_hash_vectors.py``
computed them with vLLM's own hasher); the inputs are described as data and built by
``tests/_hash_vectors.py`` on both sides. A frontend on mediaref and one on vLLM, in front of one
engine, must agree on item hashes: otherwise every item one of them sends misses the other's cache.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from _hash_vectors import PARSED, build, vectors
from mediaref.hasher import MultiModalHasher
from mediaref.media.base import MediaWithBytes
from mediaref.parse import MultiModalDataParser

DATA = Path(__file__).resolve().parent / "data" / "vllm_0_33_hash_vectors.json"
DOCUMENT = json.loads(DATA.read_text())
RECORDS = {record["name"]: record for record in DOCUMENT["vectors"]}


def test_the_vectors_cover_every_described_input_and_algorithm() -> None:
    # The file was written from these descriptions: a description added since must be hashed
    # by vLLM too (rerun the script), or it would go unchecked.
    assert [name for name, _ in vectors()] == list(RECORDS)
    for name, described in vectors():
        assert RECORDS[name]["kwargs"] == json.loads(json.dumps(described)), name
        assert set(RECORDS[name]["digests"]) == {"blake3", "sha256", "sha512"}
    assert DOCUMENT["versions"]["vllm"] == "0.33.0"


@pytest.mark.parametrize("name", list(RECORDS))
def test_mediaref_digest_equals_vllm_digest(name: str, caplog: pytest.LogCaptureFixture) -> None:
    record: dict[str, Any] = RECORDS[name]
    kwargs = {key: build(desc, MediaWithBytes) for key, desc in record["kwargs"].items()}
    with caplog.at_level(logging.ERROR, logger="mediaref.hasher"):  # pickle fallbacks warn
        for algorithm, digest in record["digests"].items():
            assert MultiModalHasher.hash_kwargs(algorithm, **kwargs) == digest, algorithm


PARSED_RECORDS = {record["name"]: record for record in DOCUMENT["parsed"]}


def test_the_parsed_vectors_cover_every_described_input() -> None:
    assert list(PARSED_RECORDS) == list(PARSED)
    for name, described in PARSED.items():
        record = PARSED_RECORDS[name]
        assert record["data"] == json.loads(json.dumps(described["data"])), name


@pytest.mark.parametrize("name", list(PARSED_RECORDS))
def test_parsed_items_hash_as_vllm_parses_and_hashes_them(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # What reaches the hasher is the parse layer's hash view of each item: images made upright and
    # RGB, videos with or without their metadata as the model needs. A frontend on either library
    # must hash the same request's items alike.
    record: dict[str, Any] = PARSED_RECORDS[name]
    modality = record["modality"]
    parser = MultiModalDataParser(**record.get("parser", {}))
    items = parser.parse_mm_data({modality: build(record["data"], MediaWithBytes)})[modality]
    hash_views = items.get_all_items_for_hash()
    assert len(hash_views) == len(record["digests"])
    with caplog.at_level(logging.ERROR, logger="mediaref.hasher"):
        for view, digests in zip(hash_views, record["digests"], strict=True):
            for algorithm, digest in digests.items():
                assert MultiModalHasher.hash_kwargs(algorithm, **{modality: view}) == digest
