"""``mediaref-vllm``'s import hook, against a stand-in ``vllm`` package (no vLLM needed).

With the hook, ``vllm.multimodal.X`` is mediaref's module at the mirrored path, the same object
(not a copy), ``vllm.renderers.chat_utils`` is mediaref's, and a module mediaref leaves out is
vLLM's own file. Installed after vLLM's own layer was imported, it refuses. The launcher runs
vLLM's command line with the hook, or without it under ``MEDIAREF_IMPORT_HOOK=0``, and the
processes it starts get the hook whether forked or spawned (with vLLM itself too, when
``MEDIAREF_VLLM_PYTHON`` names a vLLM 0.33.0 interpreter: an engine core's imports). (With vLLM
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
                if sys.argv[1:2] == ["start-child"]:
                    import multiprocessing
                    from vllm import child_probe
                    context = multiprocessing.get_context(sys.argv[2])
                    answers = context.SimpleQueue()
                    child = context.Process(target=child_probe.report, args=(answers,))
                    child.start()
                    print("child:", answers.get())
                    child.join()
            """
        )
    )
    # What an engine core does first: import vLLM's layer (vllm/v1/engine/core.py's imports).
    (root / "child_probe.py").write_text(
        textwrap.dedent(
            """
            def report(answers):
                import vllm.multimodal
                answers.put("vllm's own" if hasattr(vllm.multimodal, "OWN") else "mediaref")
            """
        )
    )
    # The console script pip writes for ``mediaref-vllm``: a spawned child re-runs it first.
    (tmp_path / "mediaref-vllm").write_text(
        "import sys\nfrom mediaref.vllm_hook import main\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    return tmp_path


def _run(tmp: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _python(tmp, ["-c", textwrap.dedent(code)], **env)


def _python(
    tmp: Path, args: list[str], python: str = sys.executable, **env: str
) -> subprocess.CompletedProcess[str]:
    settings = {**os.environ, "PYTHONPATH": str(tmp)}
    settings.pop("MEDIAREF_IMPORT_HOOK_INHERITED", None)  # this test's own process was not launched
    settings.update(env)
    return subprocess.run(
        [python, *args],
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


@pytest.mark.parametrize("start_method", ["spawn", "forkserver", "fork"])
@pytest.mark.parametrize(("setting", "expected"), [("1", "mediaref"), ("0", "vllm's own")])
def test_processes_the_launcher_starts_get_the_hook(
    fake_vllm: Path, start_method: str, setting: str, expected: str
) -> None:
    # A spawned (or forkserver) child is a fresh interpreter: without the hook installed by
    # the launcher script's import, its vllm.multimodal would be vLLM's own.
    script = str(fake_vllm / "mediaref-vllm")
    result = _python(fake_vllm, [script, "start-child", start_method], MEDIAREF_IMPORT_HOOK=setting)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"child: {expected}", result.stdout + result.stderr


_VLLM_PYTHON = os.environ.get("MEDIAREF_VLLM_PYTHON")

_ENGINE_CORE_CHILD = """
import sys

def report(answers):
    import vllm.v1.engine.core  # what vLLM's engine-core process imports first
    answers.put(sys.modules["vllm.multimodal.cache"].__name__)

if __name__ == "__main__":
    import mediaref.vllm_hook as hook
    hook.launch()
    from vllm.utils.system_utils import get_mp_context
    context = get_mp_context()  # VLLM_WORKER_MULTIPROC_METHOD=spawn, as on a GPU host
    answers = context.SimpleQueue()
    child = context.Process(target=report, args=(answers,))
    child.start()
    print("child:", answers.get())
    child.join()
"""


@pytest.mark.skipif(not _VLLM_PYTHON, reason="set MEDIAREF_VLLM_PYTHON to a vLLM 0.33.0 python")
@pytest.mark.parametrize(
    ("setting", "expected"), [("1", "mediaref.cache"), ("0", "vllm.multimodal.cache")]
)
def test_a_spawned_vllm_engine_core_imports_mediarefs_layer(
    tmp_path: Path, setting: str, expected: str
) -> None:
    # vLLM 0.33.0 itself: its multiprocessing context, spawning, and the child importing
    # vllm/v1/engine/core.py (whose top imports vllm.multimodal.cache) as an engine core does.
    # The script imports mediaref.vllm_hook at its top, as the console script does.
    script = tmp_path / "launcher.py"
    script.write_text("import mediaref.vllm_hook\n" + _ENGINE_CORE_CHILD)
    assert _VLLM_PYTHON is not None
    result = _python(
        tmp_path,
        [str(script)],
        python=_VLLM_PYTHON,
        MEDIAREF_IMPORT_HOOK=setting,
        VLLM_WORKER_MULTIPROC_METHOD="spawn",
        VLLM_TARGET_DEVICE="cpu",
        HF_HUB_OFFLINE="1",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == f"child: {expected}", result.stdout
