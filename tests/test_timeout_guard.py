"""The suite's hang guard: pytest-timeout comes with the test extra, is loaded, and is set to 120 s.

Without the plugin nothing would fail: pytest only warns about an unknown ``timeout`` ini key and
unknown ``timeout`` marks, and a hung test would then hang CI instead of failing. These tests turn
that broken setup into failures.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pytest_timeout
from packaging.requirements import Requirement

CONFIGURED_TIMEOUT_S = 120.0  # pyproject.toml's [tool.pytest.ini_options] timeout


def test_the_test_extra_installs_pytest_timeout() -> None:
    requirements = [Requirement(line) for line in importlib.metadata.requires("mediaref") or []]
    in_test_extra = [
        req.name
        for req in requirements
        if req.marker is not None and req.marker.evaluate({"extra": "test"})
    ]
    assert "pytest-timeout" in in_test_extra


def test_the_timeout_plugin_is_loaded(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.hasplugin("timeout")


def test_the_configured_timeout_is_in_force(pytestconfig: pytest.Config) -> None:
    assert float(pytestconfig.getini("timeout")) == CONFIGURED_TIMEOUT_S
    # What the plugin applies to every unmarked test: the ini value unless --timeout or
    # PYTEST_TIMEOUT overrides it (run the suite without either for this check).
    assert pytest_timeout.get_env_settings(pytestconfig).timeout == CONFIGURED_TIMEOUT_S


def test_a_hung_test_fails_instead_of_hanging(tmp_path: Path) -> None:
    # A separate pytest run, configured like ours but with a 1 s timeout, over a test that sleeps
    # far longer: the plugin must stop it and report the failure.
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 1\n")
    (tmp_path / "test_hangs.py").write_text(
        textwrap.dedent(
            """
            import time

            def test_hangs():
                time.sleep(600)
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_TIMEOUT")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_hangs.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # the outer guard: this test itself must never hang either
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout
    assert "Timeout" in result.stdout
