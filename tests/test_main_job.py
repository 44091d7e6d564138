"""The Quick start's main job: ``python -m mediaref`` (``mediaref render``) renders the shipped
example request offline: a cache miss that decodes both items, then a hit that decodes none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediaref.serve.render_once import pretty_json, resolve_relative_file_urls

OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mediaref", *args],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=300,
    )


def test_python_m_mediaref_renders_the_shipped_example_offline() -> None:
    out = run()
    assert out.returncode == 0, out.stderr
    response = json.loads(out.stdout)
    features = response["features"]
    assert set(features["mm_hashes"]) == {"image", "video"}
    assert response["token_ids"] and response["sampling_params"]["max_tokens"] == 128
    assert "image 0: pixel_values uint8 [" in out.stderr  # the fields, named on stderr
    renders = [line for line in out.stderr.splitlines() if line.startswith("render ")]
    assert len(renders) == 2
    assert renders[0].endswith("decoded 2 of 2 items")  # the miss decoded the photo and clip
    assert renders[1].endswith("decoded 0 of 2 items")  # the hit decoded nothing


def test_render_reports_a_failing_request_in_openais_error_shape(tmp_path: Path) -> None:
    request = tmp_path / "bad.json"
    url = {"url": "file:missing.jpg"}
    request.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": url}]}]}
        )
    )
    out = run("render", str(request), "--repeat", "1")
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"]["code"] == 404


def test_bad_options_exit_2_naming_the_option() -> None:
    out = run("render", "--repeat", "0")
    assert out.returncode == 2 and "--repeat" in out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--allowed-local-media-path", "/nonexistent/media"),
        ("serve", "--max-connections", "0"),
        ("serve", "--body-timeout", "-1"),
        ("serve", "--model", "/nonexistent/model"),
        ("render", "missing-request.json"),
    ],
    ids=["local-path", "connections", "body-timeout", "model", "request-file"],
)
def test_bad_settings_exit_2_with_one_line_before_serving(args: tuple[str, ...]) -> None:
    out = run(*args, "--port", "0") if args[0] == "serve" else run(*args)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "listening" not in out.stderr


def test_version_is_the_installed_distributions() -> None:
    from importlib import metadata

    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"mediaref {metadata.version('mediaref')}"


def test_relative_file_urls_resolve_against_the_request(tmp_path: Path) -> None:
    body = {"a": ["file:x.jpg", "file:///abs.jpg", "http://h/file:y"]}
    resolved = resolve_relative_file_urls(body, tmp_path)
    assert resolved["a"][0] == (tmp_path / "x.jpg").resolve().as_uri()
    assert resolved["a"][1:] == body["a"][1:]


@pytest.mark.parametrize("value", [{"a": [1, 2], "b": [{"c": None}]}, [], {}, "s"])
def test_pretty_json_is_json(value: object) -> None:
    assert json.loads(pretty_json(value)) == value


def test_pretty_json_writes_base64_bytes_as_strings() -> None:
    assert json.loads(pretty_json({"kwargs_data": {"image": [b"QUJD", None]}})) == {
        "kwargs_data": {"image": ["QUJD", None]}
    }
