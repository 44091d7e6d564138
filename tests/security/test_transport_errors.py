"""The transport's error surface: one table, nothing unmapped, nothing revealing.

Pinned here: every exception class the transport can raise maps to a public error (the table and
every subclass of what it lists, plus every class a transport module raises by name); a process
out of descriptors gets a mediaref error, not a raw ``OSError``; a ``video/jpeg`` data: URL with
malformed base64 is a 400 whichever decoder it reaches; messages keep this server's paths and
internal addresses to themselves.
"""

from __future__ import annotations

import ast
import asyncio
import binascii
import errno
import importlib
import inspect
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import pybase64
import pytest
from aiohttp.client_reqrep import ConnectionKey

from _raw_media import RawMediaIO
from mediaref.exceptions import (
    MediaClientError,
    MediaRefError,
    MediaServerError,
    MediaTooLargeError,
)
from mediaref.media._transport import errors
from mediaref.media._transport.errors import (
    TRANSPORT_ERROR_TYPES,
    is_transient,
    map_transport_error,
)
from mediaref.media.connector import MediaConnector

_URL = "http://media.example/a.png"
_TRANSPORT_MODULES = [
    "mediaref.media._transport.addresses",
    "mediaref.media._transport.budget",
    "mediaref.media._transport.connection_slots",
    "mediaref.media._transport.data_url",
    "mediaref.media._transport.disk_cache",
    "mediaref.media._transport.errors",
    "mediaref.media._transport.http_body",
    "mediaref.media._transport.http_client",
    "mediaref.media._transport.http_download",
    "mediaref.media._transport.local_file",
    "mediaref.media._transport.loop_thread",
    "mediaref.media._transport.payload",
    "mediaref.media._transport.request_scope",
    "mediaref.media._transport.url_policy",
    "mediaref.media.connector",
]
# Raised by name in transport modules but never during a fetch: programming or setup errors.
_NOT_FETCH_ERRORS = {
    ("mediaref.media._transport.loop_thread", "RuntimeError"),  # sync fetch on the fetch loop
    ("mediaref.media._transport.budget", "TypeError"),  # a budget built with a bad limit
    ("mediaref.media._transport.request_scope", "ValueError"),  # a scope built with bad limits
    ("mediaref.media._transport.http_download", "AssertionError"),  # unreachable
    ("mediaref.media.connector", "AttributeError"),  # the module's lazy names: no such name
}


def _all_subclasses(root: type[BaseException]) -> set[type[BaseException]]:
    found = {root}
    for sub in root.__subclasses__():
        found |= _all_subclasses(sub)
    return found


# What the transport's code and the libraries it calls can raise, written out here rather than
# read from the table, so that a row dropped from the table fails this test.
_RAISED_BY_THE_TRANSPORT: tuple[type[BaseException], ...] = (
    errors.RefusedError,  # policy
    errors.TooLargeError,  # caps and budget
    errors.HTTPStatusError,
    errors.BadResponseError,
    errors.RequestDeadlineError,  # a request scope's deadline
    asyncio.TimeoutError,  # our deadlines, the slots, aiohttp's ClientTimeout
    aiohttp.ClientError,  # everything aiohttp raises from a request or a body read
    socket.gaierror,  # the proxied-target check resolves by itself
    OSError,  # file: reads, the disk cache, starting the private loop
    binascii.Error,  # base64
    UnicodeError,  # IDNA
    ValueError,  # URL parsing (yarl, urllib, ours)
)


def _reachable_exception_types() -> list[type[BaseException]]:
    classes: set[type[BaseException]] = set()
    for root in _RAISED_BY_THE_TRANSPORT:
        classes |= _all_subclasses(root)
    classes = {cls for cls in classes if not issubclass(cls, MediaRefError)}  # public already
    return sorted(classes, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_the_table_lists_every_root() -> None:
    for root in _RAISED_BY_THE_TRANSPORT:
        assert any(issubclass(root, listed) for listed in TRANSPORT_ERROR_TYPES), root


def _bare_instance(cls: type[BaseException]) -> BaseException:
    """An instance whose constructor did not run: the mapping must not depend on it."""
    exc = cls.__new__(cls)
    BaseException.__init__(exc)
    return exc


@pytest.mark.parametrize(
    "exc_type", _reachable_exception_types(), ids=lambda c: f"{c.__module__}.{c.__qualname__}"
)
def test_every_exception_the_transport_can_raise_is_mapped(exc_type: type[BaseException]) -> None:
    exc = _bare_instance(exc_type)
    mapped = map_transport_error(exc, _URL)
    assert isinstance(mapped, MediaRefError), f"{exc_type} is not in the table"
    assert mapped.url == _URL and _URL in str(mapped)  # type: ignore[attr-defined]
    is_transient(exc)  # must not raise either


def _raised_names(module_name: str) -> set[str]:
    module = importlib.import_module(module_name)
    tree = ast.parse(inspect.getsource(module))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(ast.unparse(target))
    return names


@pytest.mark.parametrize("module_name", _TRANSPORT_MODULES)
def test_every_class_a_transport_module_raises_is_in_the_table(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in sorted(_raised_names(module_name)):
        try:
            obj = eval(name, vars(module))  # names from our own source
        except NameError:
            continue  # a local variable: "raise mapped from exc"
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue  # a re-raise of a variable ("raise mapped")
        if (module_name, name) in _NOT_FETCH_ERRORS or issubclass(obj, MediaRefError):
            continue
        assert errors.classify(_bare_instance(obj)) is not None, f"{module_name} raises {name}"


def test_reasons_keep_server_paths_and_origin_noise_out() -> None:
    key = ConnectionKey("media.example", 80, False, True, None, None, None)
    leaky = OSError(errno.EMFILE, "Too many open files", "/srv/secret/python3.11/encodings")
    dns = aiohttp.ClientConnectorDNSError(key, leaky)
    assert "/srv/secret" not in str(map_transport_error(dns, _URL))
    assert "/srv/secret" not in str(map_transport_error(leaky, _URL))
    message = "Got more than 8190 bytes: " + "a" * 9000
    noisy = aiohttp.ClientResponseError(None, (), message=message)  # type: ignore[arg-type]
    assert len(str(map_transport_error(noisy, _URL))) < 400


_EXHAUSTED = textwrap.dedent(
    """
    import os, resource, sys, tempfile
    sys.path.insert(0, {tests!r})
    from _raw_media import RawMediaIO
    from mediaref.exceptions import MediaRefError
    from mediaref.media.connector import MediaConnector

    root = tempfile.mkdtemp()
    with open(os.path.join(root, "a.bin"), "wb") as f:
        f.write(b"media")
    connector = MediaConnector(allowed_local_media_path=root, allow_private_ips=True)
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    hog = []
    try:
        while True:
            hog.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    # The first http fetch of the process must start the private fetch loop (a self-pipe).
    for url in ("http://127.0.0.1:9/a.png", "file://" + root + "/a.bin"):
        try:
            connector.fetch_image(url, RawMediaIO())
        except MediaRefError as exc:
            print(type(exc).__name__, exc.status_code, "out of resources" in str(exc))
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="needs resource limits")
def test_a_process_out_of_descriptors_gets_mediaref_errors(tmp_path: Path) -> None:
    script = _EXHAUSTED.format(tests=str(Path(__file__).parents[1]))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == [
        "MediaServerError 502 True",
        "MediaServerError 502 True",
    ], done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize(
    "url",
    [
        "data:video/jpeg;base64,!!!",
        "data:video/jpeg;base64,AAAA,!!!",
        "data:video/jpeg;base64,AAA",  # bad padding
        "data:video/jpeg;base64,AAAA\u00e9",  # not ASCII
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_malformed_base64_frames_are_a_client_error_for_any_decoder(
    connector: MediaConnector, url: str, mode: str
) -> None:
    # RawMediaIO has no base64-frames form: it decodes the text at once, as an image or audio
    # decoder handed a video/jpeg data: URL does.
    with pytest.raises(MediaClientError) as caught:
        if mode == "sync":
            connector.fetch_image(url, RawMediaIO())
        else:
            asyncio.run(connector.fetch_image_async(url, RawMediaIO()))
    assert isinstance(caught.value, MediaClientError)
    assert caught.value.status_code == 400


class _RawBase64IO(RawMediaIO):
    """A third-party decoder that decodes base64 itself and lets binascii's error out."""

    def load_base64_ref(self, media_type: str, data: str):  # type: ignore[no-untyped-def]
        return self.load_bytes_ref(pybase64.b64decode(data, validate=True))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_connector_maps_a_decoders_raw_base64_error(
    connector: MediaConnector, mode: str
) -> None:
    url = "data:video/jpeg;base64,!!!"
    with pytest.raises(MediaClientError) as caught:
        if mode == "sync":
            connector.fetch_image(url, _RawBase64IO())
        else:
            asyncio.run(connector.fetch_image_async(url, _RawBase64IO()))
    assert type(caught.value) is MediaClientError
    assert "invalid base64 payload" in str(caught.value) and url in str(caught.value)
    assert isinstance(caught.value.__cause__, binascii.Error)


def test_an_oversized_base64_frames_payload_never_reaches_the_decoder(
    connector: MediaConnector,
) -> None:
    io_ = RawMediaIO(max_bytes=100)
    with pytest.raises(MediaTooLargeError):
        connector.fetch_video("data:video/jpeg;base64," + "A" * 1000, io_)
    assert io_.base64_refs == 0


def test_a_decoder_error_other_than_base64_is_not_disguised(connector: MediaConnector) -> None:
    class Failing(RawMediaIO):
        def load_base64_ref(self, media_type: str, data: str):  # type: ignore[no-untyped-def]
            raise RuntimeError("decoder bug")

    with pytest.raises(RuntimeError, match="decoder bug"):
        connector.fetch_video("data:video/jpeg;base64,AAAA", Failing())


@pytest.mark.parametrize("url", ["http://[::ffff:127.0.0.1]@", "http://[::1]@/x"])
def test_urls_that_crash_yarl_are_client_errors(connector: MediaConnector, url: str) -> None:
    # Found by the fuzzer: yarl raises IndexError on these, which escaped unmapped.
    with pytest.raises(MediaClientError, match="invalid URL") as caught:
        connector.fetch_image(url, RawMediaIO())
    assert type(caught.value) is MediaClientError


def test_binascii_errors_map_to_400() -> None:
    mapped = map_transport_error(binascii.Error("Incorrect padding"), "data:image/png;base64,A")
    assert type(mapped) is MediaClientError


def test_server_resource_exhaustion_is_not_blamed_on_the_client() -> None:
    mapped = map_transport_error(OSError(errno.ENFILE, "Too many open files in system"), _URL)
    assert type(mapped) is MediaServerError and "out of resources" in str(mapped)
