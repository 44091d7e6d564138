"""pytest plugin for scripts/test_vllm.sh: installs mediaref's vLLM import hook at import time.

Loaded with ``-p _vllm_hook_plugin`` (with ``scripts/`` on ``PYTHONPATH``), pytest imports it
before any conftest file, so the hook is in place before vLLM's ``tests/conftest.py`` imports
``vllm.multimodal``. ``install()`` raises ``RuntimeError`` if vLLM's own multimodal modules were
already imported, which fails the run loudly rather than testing stock vLLM by mistake.
"""

import sys

from mediaref import vllm_hook

vllm_hook.install()


def pytest_terminal_summary(terminalreporter):
    """Says, at the end of the run, which module answered ``vllm.multimodal``."""
    module = sys.modules.get("vllm.multimodal")
    where = getattr(module, "__file__", None) if module else "not imported"
    terminalreporter.write_line(
        f"mediaref vllm_hook installed: {vllm_hook.installed()}; vllm.multimodal is {where}"
    )
