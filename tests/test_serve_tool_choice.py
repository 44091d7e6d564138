"""Tool choices a chat render serves depend on the server's tool flags, as on vLLM's server.

vLLM's chat rendering refuses, without ``--tool-call-parser``, every ``tool_choice`` but
``"none"``, and ``"auto"`` (what ``tools`` without a ``tool_choice`` mean) also without
``--enable-auto-tool-choice``; its Responses rendering does not check. ``mediaref serve`` has the
same two flags and the same answers.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from mediaref.serve.app import CHAT_ROUTE, RESPONSES_ROUTE, build_app
from mediaref.serve.cli import main as cli_main
from mediaref.serve.options import ServeOptions
from mediaref.serve.service import RenderService

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
HI = [{"role": "user", "content": "Hi."}]


async def answers(options: ServeOptions, *bodies: dict[str, Any]) -> list[tuple[int, Any]]:
    service = RenderService(options)
    try:
        async with TestClient(TestServer(build_app(service))) as client:
            out = []
            for body in bodies:
                response = await client.post(CHAT_ROUTE, json=body)
                out.append((response.status, await response.json()))
            return out
    finally:
        service.close()


async def test_the_default_server_renders_only_tool_choice_none() -> None:
    refused = await answers(
        ServeOptions(),
        {"messages": HI, "tools": TOOLS},
        {"messages": HI, "tools": TOOLS, "tool_choice": "auto"},
        {"messages": HI, "tools": TOOLS, "tool_choice": "required"},
        {
            "messages": HI,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "f"}},
        },
        {"messages": HI, "tools": TOOLS, "tool_choice": "none"},
    )
    messages = [body["error"]["message"] if status == 400 else status for status, body in refused]
    auto = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    assert messages == [
        auto,
        auto,
        'tool_choice="required" requires --tool-call-parser to be set',
        'tool_choice=function "f" requires --tool-call-parser to be set',
        200,
    ]


async def test_the_flags_serve_them_as_vllms_do() -> None:
    parser_only, both = (
        ServeOptions(tool_call_parser="hermes"),
        ServeOptions(enable_auto_tool_choice=True, tool_call_parser="hermes"),
    )
    required = {"messages": HI, "tools": TOOLS, "tool_choice": "required"}
    auto = {"messages": HI, "tools": TOOLS}
    assert [status for status, _ in await answers(parser_only, required, auto)] == [200, 200]
    assert [status for status, _ in await answers(both, required, auto)] == [200, 200]


async def test_the_responses_route_does_not_check() -> None:
    service = RenderService(ServeOptions())
    try:
        async with TestClient(TestServer(build_app(service))) as client:
            body = {"input": "Hi.", "tools": [{"type": "function", "name": "f", "parameters": {}}]}
            response = await client.post(RESPONSES_ROUTE, json=body)
            assert response.status == 200, await response.text()
    finally:
        service.close()


def test_auto_tool_choice_needs_a_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="requires --tool-call-parser"):
        ServeOptions(enable_auto_tool_choice=True)
    assert cli_main(["serve", "--enable-auto-tool-choice"]) == 2
    assert "requires --tool-call-parser" in capsys.readouterr().err


def test_auto_tool_choice_needs_a_parser_vllm_registers(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM's validate_api_server_args: the name is checked only with auto tool choice.
    with pytest.raises(ValueError, match="invalid tool call parser: herms"):
        ServeOptions(enable_auto_tool_choice=True, tool_call_parser="herms")
    assert ServeOptions(tool_call_parser="herms").tool_call_parser == "herms"
    argv = ["serve", "--enable-auto-tool-choice", "--tool-call-parser", "no_such_parser"]
    assert cli_main(argv) == 2
    assert "invalid tool call parser: no_such_parser" in capsys.readouterr().err
