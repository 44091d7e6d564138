"""The Quick start's main job runs offline and shows a miss that decodes and a hit that does not."""

from __future__ import annotations

import os
import subprocess
import sys


def test_python_m_mediaref_runs_offline() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mediaref"], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("image      sample.jpg: 66489 bytes, 512x512 RGB")
    assert lines[1].startswith("key        ") and len(lines[1].split()[1]) == 64
    renders = [line for line in lines if line.startswith("render")]
    assert len(renders) == 3
    assert renders[0].endswith("decoded=True")  # the miss decoded its image
    assert all(r.endswith("decoded=False") for r in renders[1:])  # the hits did not
    assert (
        len({r.split("ms", 1)[1].rsplit(",", 1)[0] for r in renders}) == 1
    )  # same output each time
