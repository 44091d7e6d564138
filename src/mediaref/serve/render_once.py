"""``mediaref render``: one request file rendered offline, as the server would render it.

The response JSON goes to stdout (the last rendering's; every rendering of one request gives the
same one, request id aside), and one timing line per rendering to stderr::

    render 1: 912.40 ms  fetch 4.12 ms  template 1.90 ms  process 906.38 ms  (decode 52.10 ms, hf 820.77 ms)  decoded 2 of 2 items
    render 2:   3.91 ms  fetch 1.02 ms  template 1.41 ms  process   1.48 ms  (decode 0.00 ms, hf 0.00 ms)  decoded 0 of 2 items

The first is a processor-cache miss (it decodes and runs the HF processor), the rest hits. Then
one line per processed item names its fields' dtypes and shapes (the JSON carries them only inside
its tensors)::

      image 0: pixel_values uint8 [1296, 1176], image_grid_thw int64 [3]

A request that fails prints vLLM's error body on stdout and exits 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote, urlsplit

from mediaref.exceptions import VLLMValidationError
from mediaref.serve.errors import error_response_for
from mediaref.serve.options import ServeOptions
from mediaref.serve.protocol import parse_chat_request, parse_completion_request
from mediaref.serve.service import RenderService, RenderTimings


def pretty_json(value: Any, indent: str = "") -> str:
    """Indented JSON with lists of numbers kept on one line (token ids, shapes)."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        fields = [f"{inner}{json.dumps(k)}: {pretty_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(fields) + "\n" + indent + "}"
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        return (
            "[\n" + ",\n".join(inner + pretty_json(v, inner) for v in value) + "\n" + indent + "]"
        )
    if isinstance(value, list):  # numbers (token ids, shapes): one line
        return "[" + ", ".join(pretty_json(v, inner) for v in value) + "]"
    if isinstance(value, bytes):  # base64 (see mediaref.serve.json_body)
        return '"' + value.decode("ascii") + '"'
    return json.dumps(value)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.2f} ms"


def _media_count(body: Any) -> int:
    count = 0
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += sum(
                1 for p in content if isinstance(p, dict) and p.get("type") not in (None, "text")
            )
    return count


def resolve_relative_file_urls(body: Any, base: Path) -> Any:
    """``file:NAME`` (no leading slash) -> an absolute ``file:`` URL under ``base``."""
    if isinstance(body, dict):
        return {key: resolve_relative_file_urls(value, base) for key, value in body.items()}
    if isinstance(body, list):
        return [resolve_relative_file_urls(value, base) for value in body]
    if isinstance(body, str) and body.startswith("file:") and not body.startswith("file:/"):
        return "file://" + quote(str((base / urlsplit(body).path).resolve()))
    return body


def _described(info: dict[str, Any]) -> str:
    if "shape" in info:
        return f"{info['dtype']} {info['shape']}"
    if "items" in info:
        return "[" + ", ".join(_described(i) for i in info["items"]) + "]"
    return str(info.get("type", "?"))


def field_lines(timings: RenderTimings) -> list[str]:
    """One line per processed item: its fields' dtypes and shapes."""
    return [
        f"  {modality} {index}: "
        + ", ".join(f"{name} {_described(info)}" for name, info in (fields or {}).items())
        for modality, items in timings.fields.items()
        for index, fields in enumerate(items)
    ]


def timing_line(index: int, timings: RenderTimings, items: int) -> str:
    decode = timings.stages.get("decode_media", 0.0)
    hf = timings.stages.get("apply_hf_processor", 0.0)
    return (
        f"render {index}: {_ms(timings.total)}  fetch {_ms(timings.fetch)}  "
        f"template {_ms(timings.template)}  process {_ms(timings.process)}  "
        f"(decode {_ms(decode).strip()}, hf {_ms(hf).strip()})  "
        f"decoded {timings.decoded} of {items} items"
    )


async def render_body(
    service: RenderService, body: Any, *, repeat: int, log: TextIO
) -> dict[str, Any] | list[dict[str, Any]]:
    """Render ``body`` ``repeat`` times; the last response."""
    if not isinstance(body, dict):
        raise VLLMValidationError("the request must be a JSON object")
    result: dict[str, Any] | list[dict[str, Any]] = {}
    timings = RenderTimings()
    for index in range(1, repeat + 1):
        timings = RenderTimings()
        if "messages" in body:
            chat = parse_chat_request(body, service.options)
            result = await service.render_chat(chat, timings)
        else:
            completion = parse_completion_request(body, service.options)
            result = await service.render_completion(completion)
        print(timing_line(index, timings, _media_count(body)), file=log, flush=True)
    for line in field_lines(timings):
        print(line, file=log, flush=True)
    return result


def render_file(
    path: Path,
    options: ServeOptions,
    *,
    repeat: int = 1,
    out: TextIO = sys.stdout,
    log: TextIO = sys.stderr,
) -> int:
    """``mediaref render PATH``: 0 when it rendered, 1 when the request failed."""
    body = resolve_relative_file_urls(json.loads(path.read_text()), path.parent)
    service = RenderService(options)
    try:
        service.warmup()
        result: Any = asyncio.run(render_body(service, body, repeat=repeat, log=log))
        status = 0
    except Exception as exc:
        _, result = error_response_for(exc, context=str(path))
        status = 1
    finally:
        service.close()
    out.write(pretty_json(result) + "\n")
    return status


__all__ = [
    "field_lines",
    "pretty_json",
    "render_body",
    "render_file",
    "resolve_relative_file_urls",
    "timing_line",
]
