"""``mediaref-vllm``'s import hook, against a stand-in ``vllm`` package (no vLLM needed).

With the hook, ``vllm.multimodal.X`` is mediaref's module at the mirrored path, the same object
(not a copy), ``vllm.renderers.chat_utils`` is mediaref's, and a module mediaref leaves out is
vLLM's own file. Installed after vLLM's own layer was imported, it refuses. The launcher runs
vLLM's command line with the hook, or without it under ``MEDIAREF_IMPORT_HOOK=0``. (With vLLM
0.33.0 itself, ``mediaref-vllm launch render`` answered 84 of the parity corpus's 93 requests as
stock vLLM does: ``scripts/vllm_on_mediaref_parity.py``, docs/vllm.md.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_SERDE_PACKAGE = "entrypoints/scale_out/token_in_token_out"


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    root = tmp_path / "vllm"
    packages = ("multimodal", "renderers", "entrypoints", "entrypoints/cli", _SERDE_PACKAGE)
    for package in ("", *packages):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "multimodal" / "__init__.py").write_text("OWN = True\n")
    (root / "multimodal" / "gpu_ipc_memory.py").write_text('MARK = "vllm\'s own"\n')
    (root / _SERDE_PACKAGE / "mm_serde.py").write_text("OWN = True\n")
    (root / "entrypoints" / "cli" / "main.py").write_text(
        textwrap.dedent(
            """
            import sys
            def main():
                import mediaref.vllm_hook as hook
                print("hooked" if hook.installed() else "plain", sys.argv[0], sys.argv[1:])
            """
        )
    )
    return tmp_path


def _run(tmp: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {**os.environ, "PYTHONPATH": str(tmp), **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=settings,
        timeout=120,
    )


def test_vllms_multimodal_modules_are_mediarefs(fake_vllm: Path) -> None:
    result = _run(
        fake_vllm,
        """
        import mediaref.vllm_hook as hook
        hook.install(); hook.install()  # idempotent
        import mediaref, mediaref.inputs, mediaref.renderers.chat_utils
        import vllm.multimodal, vllm.multimodal.inputs, vllm.renderers.chat_utils
        from vllm.multimodal.inputs import MultiModalKwargsItem
        assert vllm.multimodal is mediaref and not hasattr(vllm.multimodal, "OWN")
        assert vllm.multimodal.inputs is mediaref.inputs
        assert MultiModalKwargsItem is mediaref.inputs.MultiModalKwargsItem
        assert vllm.renderers.chat_utils is mediaref.renderers.chat_utils
        import mediaref.vllm_mm_serde
        from vllm.entrypoints.scale_out.token_in_token_out import mm_serde
        assert mm_serde is mediaref.vllm_mm_serde and not hasattr(mm_serde, "OWN")
        import vllm.multimodal.gpu_ipc_memory as own
        assert own.MARK == "vllm's own" and own.__name__ == "vllm.multimodal.gpu_ipc_memory"
        print("ok")
        """,
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_installing_after_vllms_own_layer_refuses(fake_vllm: Path) -> None:
    result = _run(
        fake_vllm,
        """
        import vllm.multimodal
        import mediaref.vllm_hook as hook
        try:
            hook.install()
        except RuntimeError as exc:
            print("refused:", exc)
        """,
    )
    assert "refused: vLLM's own vllm.multimodal is already imported" in result.stdout


@pytest.mark.parametrize(("setting", "expected"), [("1", "hooked"), ("0", "plain")])
def test_the_launcher_runs_vllms_command_line(fake_vllm: Path, setting: str, expected: str) -> None:
    result = _run(
        fake_vllm,
        """
        import sys
        sys.argv = ["mediaref-vllm", "launch", "render", "MODEL"]
        from mediaref.vllm_hook import main
        main()
        """,
        MEDIAREF_IMPORT_HOOK=setting,
    )
    assert result.stdout.strip() == f"{expected} vllm ['launch', 'render', 'MODEL']", result.stderr
