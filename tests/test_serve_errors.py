"""The server's error boundary answers an error, logs it once, then lets go of its frames."""

from __future__ import annotations

import logging

import pytest

from mediaref.exceptions import MediaTimeoutError
from mediaref.serve.errors import error_response_for


def _raised(error: Exception) -> Exception:
    try:
        try:
            raise ConnectionResetError("origin reset")
        except ConnectionResetError:
            raise error  # noqa: B904 - the implicit context is what is tested
    except Exception as caught:
        return caught


def test_a_client_error_is_answered_and_its_tracebacks_released() -> None:
    error = _raised(MediaTimeoutError("the 1 s fetch deadline passed"))
    assert error.__traceback__ is not None and error.__context__ is not None
    status, body = error_response_for(error)
    assert status == 504 and "deadline passed" in body["error"]["message"]
    assert error.__traceback__ is None and error.__context__.__traceback__ is None


def test_a_server_error_is_logged_with_its_traceback_before_the_release(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = _raised(RuntimeError("a bug"))
    with caplog.at_level(logging.ERROR):
        status, _ = error_response_for(error, context="POST /x")
    assert status == 500
    assert "ConnectionResetError: origin reset" in caplog.text  # the chain, as it was raised
    assert error.__traceback__ is None
