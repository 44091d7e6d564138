"""Record vLLM 0.33.0's render server's answers to the parity corpus, for the default test run.

Starts ``vllm launch render`` on each built-in model directory the corpus uses (on the CPU,
offline, with the corpus's flags), sends it every request of ``tests/_render_corpus.py``, and
writes ``tests/data/vllm_0_33_render_parity.json``: each request's body and the summary of vLLM's
answer. ``tests/test_render_parity.py`` then renders the same bodies with ``mediaref serve`` and
compares, with no vLLM installed. Run it from the repository's venv, pointing at a vLLM 0.33.0
interpreter (a scratch venv; ``docs/performance.md`` says how to make one)::

    python scripts/vllm_render_parity.py --vllm-python VLLM_VENV/bin/python [--only NAME,...]

``--only`` re-records the cases named and keeps every other recorded answer (after a change to
the corpus or to what a summary holds).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

from _render_corpus import SERVER_FLAGS, Case, cases, summary  # noqa: E402
from mediaref.models.builtin import builtin_model_path  # noqa: E402

OUT = ROOT / "tests" / "data" / "vllm_0_33_render_parity.json"


def pack(body: dict[str, Any]) -> str:
    return base64.b64encode(zlib.compress(json.dumps(body).encode(), 9)).decode()


def unpack(packed: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(packed)))
    return loaded


def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class VllmRender:
    """``vllm launch render MODEL`` on a free port, in a process group of its own."""

    def __init__(self, python: str, model: str, cwd: Path, *, on_mediaref: bool = False) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
        # on_mediaref: mediaref-vllm, vLLM's command line with mediaref's import hook first.
        cli = ["-c", "from mediaref.vllm_hook import main; main()"] if on_mediaref else None
        command = [python, *(cli or ["-m", "vllm.entrypoints.cli.main"]), "launch", "render", model]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port), *SERVER_FLAGS],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        for _ in range(300):
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=2):
                    return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(f"vllm launch render {model} exited") from None
                time.sleep(0.5)
        raise RuntimeError("vllm launch render never answered /health")

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.port}{route}"

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(60)


def record(python: str, only: set[str] | None = None) -> dict[str, Any]:
    by_model: dict[str, list[Case]] = {}
    for case in cases():
        if only is None or case.name in only:
            by_model.setdefault(case.model, []).append(case)
    recorded: dict[str, Any] = {}
    for model, model_cases in by_model.items():
        # The directory by its built-in name, from its parent: vLLM's item hashes carry the model
        # argument as given (model_id), and mediaref serve hashes a built-in model by its name.
        directory = builtin_model_path(model)
        server = VllmRender(python, directory.name, cwd=directory.parent)
        try:
            for case in model_cases:
                status, body = post(server.url(case.route), case.body)
                recorded[case.name] = {
                    "model": case.model,
                    "route": case.route,
                    "body": pack(case.body),
                    "vllm": summary(status, body),
                }
                print(f"{case.name}: {status}", file=sys.stderr, flush=True)
        finally:
            server.stop()
    return recorded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", required=True, help="a vLLM 0.33.0 interpreter")
    parser.add_argument("--only", help="comma-separated case names: re-record these, keep the rest")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - {case.name for case in cases()}
    if unknown:
        parser.error(f"no such case: {', '.join(sorted(unknown))}")
    version = subprocess.run(
        [args.vllm_python, "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    document = {
        "about": "vLLM's render server's answers to tests/_render_corpus.py; "
        "scripts/vllm_render_parity.py records them",
        "versions": {"vllm": version},
        "cases": record(args.vllm_python, only),
    }
    if only is not None:  # the other answers as they were recorded, in the corpus's order
        answers = {**json.loads(OUT.read_text())["cases"], **document["cases"]}
        document["cases"] = {c.name: answers[c.name] for c in cases() if c.name in answers}
    OUT.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {len(document['cases'])} answers to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
