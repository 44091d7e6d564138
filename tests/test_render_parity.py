"""``mediaref serve`` answers the parity corpus as ``vllm launch render`` does, field for field.

``tests/data/vllm_0_33_render_parity.json`` holds vLLM 0.33.0's answers to every request of
``tests/_render_corpus.py`` (``scripts/vllm_render_parity.py`` recorded them against the built-in
model directories), so this runs without vLLM. Each answer is compared as ``_render_corpus.summary``
reduces it: every field but the random request id, each encoded item field by field (the sha256 of
the field's wire bytes and its tensors' digests), and the status of a refused request. Where mediaref answers
otherwise on purpose, ``DIFFERENCES`` names the field and ``docs/compat.md`` the reason.

A field whose bits depend on the CPU (``_render_corpus.CPU_DEPENDENT_FIELDS``: audio features,
numpy's SIMD ``log10`` and FFT on either side) is bit-equal where the answers were recorded; on
another machine its digests may differ, and it then counts as equal when its profile (means
along the last axis) is within ``PROFILE_TOLERANCE`` of the recorded one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from _render_corpus import summary
from mediaref.serve.app import build_app
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

DATA = Path(__file__).resolve().parent / "data" / "vllm_0_33_render_parity.json"
DOCUMENT = json.loads(DATA.read_text())
CASES: dict[str, dict[str, Any]] = DOCUMENT["cases"]

OPEN: dict[str, str] = {
    "features.mm_hashes": "videos and audio hash by their key: vLLM's digests need a decode",
    "status": "a status that differs from vLLM's",
    "body": "a status that differs from vLLM's",
}
"""The parity not yet reached, by area of the answer (the parity work's open list): a case may
differ from vLLM's answer only in the areas ``KNOWN`` lists for it, and must still differ in each
(a difference fixed must leave the list, so the list shrinks as parity grows)."""

KNOWN: dict[str, set[str]] = json.loads(
    (Path(__file__).resolve().parent / "data" / "render_parity_open.json").read_text()
)


def area(difference: str) -> str:
    """The area of a dotted path: its first two names, list indices and the body left out."""
    names = [n for n in difference.split(" ")[0].split(".") if not n.isdigit()]
    names = names[1:] if names[0] == "body" and len(names) > 1 else names
    return ".".join(names[:2]) if names[0] == "features" else names[0]


def unpack(packed: str) -> dict[str, Any]:
    import base64
    import zlib

    loaded: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(packed)))
    return loaded


@pytest.fixture(scope="module")
def service() -> Iterator[RenderService]:
    options = ServeOptions(
        models=("qwen2_vl", "qwen2_audio"),
        trust_request_mm_kwargs=True,
        trust_request_chat_template=True,
    )
    service = RenderService(options)
    service.warmup()
    yield service
    service.close()


@pytest.fixture
async def client(service: RenderService) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(build_app(service))) as test_client:
        yield test_client


PROFILE_TOLERANCE = 1e-4
"""Of a CPU-dependent field's profile (see the module docstring). Features are log-mel values of
order 1; a CPU's rounding moves a mean by ~1e-7, a wrong sample rate or a clip cut short by far
more than this."""


def forgive_cpu_rounding(ours: Any, theirs: Any) -> None:
    """Where a CPU-dependent field of ``ours`` differs from ``theirs`` only in its bits (its
    profile within ``PROFILE_TOLERANCE``), take the recorded digests as ours (in place)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if "profile" in ours and "profile" in theirs:
            a, b = ours["profile"], theirs["profile"]
            if len(a) == len(b) and all(
                abs(x - y) <= PROFILE_TOLERANCE for x, y in zip(a, b, strict=True)
            ):
                ours.update(theirs)
            return
        for key in ours.keys() & theirs.keys():
            forgive_cpu_rounding(ours[key], theirs[key])
    elif isinstance(ours, list) and isinstance(theirs, list):
        for a, b in zip(ours, theirs, strict=False):
            forgive_cpu_rounding(a, b)


def differences(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Dotted paths where two summaries differ."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        keys = list(dict.fromkeys([*theirs, *ours]))
        found = []
        for key in keys:
            if key not in ours or key not in theirs:
                found.append(f"{path}{key} ({'missing' if key not in ours else 'extra'})")
            else:
                found += differences(ours[key], theirs[key], f"{path}{key}.")
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [
            d
            for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
            for d in differences(a, b, f"{path}{i}.")
        ]
    return [] if ours == theirs else [path.rstrip(".")]


async def our_summary(client: TestClient[Any, Any], case: dict[str, Any]) -> dict[str, Any]:
    """mediaref's answer to a recorded case, summarized as vLLM's was."""
    body = unpack(case["body"])
    if case["model"] != "qwen2_vl":  # one vLLM server a model; here one server for both
        body = {**body, "model": case["model"]}
    response = await client.post(case["route"], json=body)
    ours = summary(response.status, await response.json())
    forgive_cpu_rounding(ours, case["vllm"])
    if "body" in ours and case["model"] != "qwen2_vl":  # the request named the model vLLM did not
        for request in ours["body"] if isinstance(ours["body"], list) else [ours["body"]]:
            request["model"] = None
    return ours


@pytest.mark.parametrize("name", list(CASES))
async def test_mediaref_answers_as_vllm(name: str, client: TestClient[Any, Any]) -> None:
    case = CASES[name]
    found = differences(await our_summary(client, case), case["vllm"])
    areas = {area(d) for d in found}
    assert areas <= set(KNOWN.get(name, ())), sorted(
        d for d in found if area(d) not in KNOWN.get(name, ())
    )
    assert areas == set(KNOWN.get(name, ())), f"fixed: {set(KNOWN[name]) - areas}, remove them"
    assert areas <= set(OPEN)


async def open_areas(client: TestClient[Any, Any]) -> dict[str, list[str]]:
    """What the open list is now: ``python -c`` this to rewrite ``render_parity_open.json``."""
    out = {}
    for name, case in CASES.items():
        found = differences(await our_summary(client, case), case["vllm"])
        out[name] = sorted({area(d) for d in found})
    return out


def test_a_cpu_dependent_field_is_forgiven_its_rounding_and_nothing_more() -> None:
    recorded = {"input_features": {"wire_sha256": "a", "data": ["f", "a"], "profile": [0.5, -1.0]}}

    def ours(*profile: float) -> dict[str, Any]:
        return {
            "input_features": {"wire_sha256": "b", "data": ["f", "b"], "profile": list(profile)}
        }

    rounded = ours(0.5 + 3e-7, -1.0)
    forgive_cpu_rounding(rounded, recorded)
    assert differences(rounded, recorded) == []
    shifted = ours(0.5 + 1e-3, -1.0)  # e.g. another sample rate's features
    forgive_cpu_rounding(shifted, recorded)
    assert differences(shifted, recorded) == [
        "input_features.wire_sha256",
        "input_features.data.1",
        "input_features.profile.0",
    ]
