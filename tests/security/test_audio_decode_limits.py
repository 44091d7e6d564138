"""Issue 9, hole 2 (audio): a few hundred KB of FLAC must not become gigabytes of PCM.

``VLLM_MAX_AUDIO_DECODE_BYTES`` (vLLM 0.33.0: float32 PCM bytes a decode may allocate, default
256 MiB) is checked from the header before anything is allocated, and enforced on the decoded
frames whatever the header said; the decode keeps one copy of the PCM; and the output is charged
to the request's decoded-bytes budget before it is allocated.

Memory is measured with tracemalloc, which sees numpy's allocations (libsndfile's and FFmpeg's
own small buffers are invisible to it, and beside the point).
"""

from __future__ import annotations

import io
import itertools
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf  # type: ignore[import-untyped]

from _audio_samples import (
    Tones,
    encode_pyav,
    encode_silence,
    sine,
    with_declared_flac_frames,
    with_opus_pre_skip,
)
from _memory import traced_peak
from mediaref.exceptions import MediaTooLargeError
from mediaref.media.audio import AudioMediaIO
from mediaref.media.audio import _pyav as _audio_pyav
from mediaref.media.audio import _soundfile as _audio_soundfile
from mediaref.media.audio._caps import AudioLimits
from mediaref.media.decode_budget import MediaDecodedBudget, decode_budget_scope

MiB = 1 << 20
BLOCK = _audio_soundfile._BLOCK_BYTES  # the soundfile backend's scratch block
STEREO = Tones((440.0, 1000.0), (0.5, 0.25))
MONO_TONE = Tones((440.0,), (0.5,))


@pytest.fixture(autouse=True)
def _default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB",
        "VLLM_MAX_AUDIO_DECODE_DURATION_S",
        "VLLM_MAX_AUDIO_DECODE_BYTES",
        "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES",
    ):
        monkeypatch.delenv(name, raising=False)


def flac_bomb() -> bytes:
    """The red team's payload: a FLAC header declaring 300 s of 8 channels at 192 kHz.

    Under the 600-second duration cap, but 1.8 GB of float32 PCM. (The red team's 476 KB file
    holds all 300 s of silence; the header alone is what the caps must judge.)
    """
    return with_declared_flac_frames(encode_silence(192_000, 8, 4096), 300 * 192_000)


# -- the header is judged before anything is allocated ------------------------------------------


def test_flac_bomb_is_refused_when_the_ref_is_built() -> None:
    with pytest.raises(MediaTooLargeError, match=r"VLLM_MAX_AUDIO_DECODE_BYTES.*header declares"):
        AudioMediaIO().load_bytes_ref(flac_bomb())


def test_flac_bomb_is_refused_by_the_decode_before_allocating() -> None:
    peak, outcome = traced_peak(lambda: AudioMediaIO().load_bytes(flac_bomb()))

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert "VLLM_MAX_AUDIO_DECODE_BYTES" in str(outcome)
    assert peak < MiB


def test_byte_cap_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AudioMediaIO().get_max_decode_bytes() == 268_435_456  # vLLM 0.33.0's default
    clip = encode_silence(8000, 2, 8000)  # 64,000 bytes of PCM
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", "63999")
    with pytest.raises(MediaTooLargeError, match="63999-byte decode limit"):
        AudioMediaIO().load_bytes_ref(clip)
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", "64000")
    assert AudioMediaIO().load_bytes_ref(clip).decode()[0].shape == (2, 8000)
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", "0")  # disabled, like the other caps
    assert AudioMediaIO().get_max_decode_bytes() is None


# -- enforced on the decoded frames, whatever the header says -----------------------------------


@pytest.mark.parametrize("declared", [0, 100], ids=["open-ended", "understated"])
def test_decode_stops_at_the_byte_cap_whatever_the_header_declares(
    monkeypatch: pytest.MonkeyPatch, declared: int
) -> None:
    cap = 1_000_000
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", str(cap))
    # 3 MB of PCM behind a header that declares nothing, or 100 frames.
    payload = with_declared_flac_frames(encode_silence(48_000, 8, 96_000), declared)

    peak, outcome = traced_peak(lambda: AudioMediaIO().load_bytes_ref(payload).decode())

    if isinstance(outcome, tuple):  # libsndfile believed the header: it read 100 frames
        assert outcome[0].shape == (8, declared)
    else:
        assert isinstance(outcome, MediaTooLargeError), outcome
        assert "stopped decoding at" in str(outcome)
    assert peak < cap + BLOCK + MiB


def test_pyav_refuses_a_declared_excess_and_stops_an_undeclared_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", "100000")
    payload = encode_pyav(sine(STEREO, 16_000, 2.0), 16_000, "mp4", "aac")  # 256,000 PCM bytes
    with pytest.raises(MediaTooLargeError, match=r"100000-byte decode limit.*header declares"):
        AudioMediaIO().load_bytes(payload)

    # What a stream with no (or a lying) length looks like to the collector: frames that never
    # end. It stops at the first frame past the cap: 12 frames of 1000 fit in 12,500.
    frame = av.AudioFrame.from_ndarray(np.zeros((2, 1000), np.float32), "fltp", "stereo")
    frame.sample_rate = 16_000
    pulled = 0

    def endless() -> Iterator[av.AudioFrame]:
        nonlocal pulled
        for item in itertools.repeat(frame):
            pulled += 1
            yield item

    limits = AudioLimits(max_decode_bytes=100_000)
    with pytest.raises(MediaTooLargeError, match="stopped decoding at 104000 bytes"):
        _audio_pyav.collect_frames(endless(), limits)
    assert pulled == 13


# -- one copy of the PCM ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "allowance"),
    [(None, 1.05), (0, 1.55)],
    ids=["header-count", "open-ended-grows"],
)
def test_soundfile_decode_keeps_one_copy(declared: int | None, allowance: float) -> None:
    payload = encode_silence(48_000, 8, 480_000)  # 10 s, 8 channels: 15.4 MB of PCM
    if declared is not None:
        payload = with_declared_flac_frames(payload, declared)
    output_bytes = 480_000 * 8 * 4

    peak, outcome = traced_peak(lambda: AudioMediaIO().load_bytes(payload))

    samples, rate = outcome
    assert samples.shape == (8, 480_000) and samples.flags.c_contiguous and rate == 48_000.0
    # Blocks plus a concatenation plus a transpose held three copies; now one, plus the block.
    assert peak < allowance * output_bytes + BLOCK + MiB


def test_growth_keeps_every_channel_in_place() -> None:
    # An open-ended header makes the buffer grow (and finally shrink) in place, moving rows.
    ramp = (np.arange(200_000 * 3, dtype=np.float32).reshape(200_000, 3) % 30_000) / 32768
    buffer = io.BytesIO()
    sf.write(buffer, ramp, 16_000, format="FLAC", subtype="PCM_16")
    payload = with_declared_flac_frames(buffer.getvalue(), 0)

    samples, _ = AudioMediaIO().load_bytes(payload)

    np.testing.assert_allclose(samples, ramp.T, atol=1 / 32768)


def test_pyav_decode_keeps_one_copy() -> None:
    payload = encode_pyav(sine(STEREO, 16_000, 30.0), 16_000, "mp4", "aac")
    output_bytes = 2 * 30 * 16_000 * 4

    peak, outcome = traced_peak(lambda: AudioMediaIO().load_bytes(payload))

    samples, _ = outcome
    assert samples.shape[0] == 2 and abs(samples.shape[1] - 480_000) < 2048
    # A list of decoded frames plus their concatenation held two copies.
    assert peak < 1.2 * output_bytes + MiB


# -- the request's budget -----------------------------------------------------------------------


def test_decodes_charge_the_request_budget_before_allocating() -> None:
    clip = encode_silence(48_000, 2, 96_000)  # 768,000 bytes of PCM
    budget = MediaDecodedBudget(limit_bytes=1_000_000)

    with decode_budget_scope(budget):
        AudioMediaIO().load_bytes_ref(clip).decode()
        assert budget.used == 768_000
        peak, outcome = traced_peak(lambda: AudioMediaIO().load_bytes_ref(clip).decode())

    assert isinstance(outcome, MediaTooLargeError), outcome
    assert "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES" in str(outcome)
    assert peak < 256 * 1024


def test_a_pyav_retry_does_not_charge_the_clip_twice() -> None:
    # libsndfile reads an open-ended 8-channel FLAC, then fails to seek its end; PyAV decodes it
    # again. The request pays for one clip.
    payload = with_declared_flac_frames(encode_silence(48_000, 8, 480_000), 0)
    output_bytes = 480_000 * 8 * 4
    budget = MediaDecodedBudget(limit_bytes=10**9)

    with decode_budget_scope(budget):
        samples, _ = AudioMediaIO().load_bytes(payload)

    assert samples.nbytes == output_bytes
    assert output_bytes <= budget.used < 1.6 * output_bytes  # growth slack, not a second clip


def test_an_explicit_decoded_budget_is_charged_as_in_vllm() -> None:
    clip = encode_silence(48_000, 2, 96_000)  # 768,000 bytes of PCM
    budget = MediaDecodedBudget(limit_bytes=1_000_000)
    decoder = AudioMediaIO(decoded_budget=budget)

    decoder.load_bytes(clip)
    assert budget.used == 768_000
    with pytest.raises(MediaTooLargeError):
        decoder.load_bytes_ref(clip).decode()
    with pytest.raises(TypeError, match="MediaDecodedBudget"):
        AudioMediaIO(decoded_budget={"limit": 1})  # e.g. from a request's media_io_kwargs


def test_an_item_alone_must_fit_the_request_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", "500000")
    with pytest.raises(MediaTooLargeError, match="VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES"):
        AudioMediaIO().load_bytes(encode_silence(48_000, 2, 96_000))


# -- hostile shapes -----------------------------------------------------------------------------


def test_255_channels_decode_within_a_bounded_block(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = encode_silence(8000, 255, 2000, fmt="WAV")
    samples, _ = AudioMediaIO().load_bytes(payload)
    assert samples.shape == (255, 2000)

    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", str(255 * 4 * 1000))
    with pytest.raises(MediaTooLargeError, match="255 channels"):
        AudioMediaIO().load_bytes(payload)


def test_one_hertz_is_capped_by_duration_and_two_gigahertz_by_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = encode_silence(1, 1, 700, fmt="WAV")  # 700 s at 1 Hz
    with pytest.raises(MediaTooLargeError, match="600-second"):
        AudioMediaIO().load_bytes(slow)
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", "4000")
    fast = encode_silence(2**31 - 1, 1, 1001, fmt="WAV")  # half a microsecond of audio
    with pytest.raises(MediaTooLargeError, match="4000-byte decode limit"):
        AudioMediaIO().load_bytes(fast)


@pytest.mark.parametrize(
    ("offset", "value"),
    [(22, struct.pack("<H", 0)), (24, struct.pack("<I", 0)), (24, struct.pack("<I", 2**32 - 1))],
    ids=["zero-channels", "zero-hertz", "max-hertz"],
)
def test_impossible_wav_headers_fail_as_decode_errors(offset: int, value: bytes) -> None:
    payload = bytearray(encode_silence(8000, 1, 100, fmt="WAV"))
    payload[offset : offset + len(value)] = value

    with pytest.raises(ValueError, match=r"^Failed to decode audio: ") as failure:
        AudioMediaIO().load_bytes_ref(bytes(payload)).decode()
    assert not isinstance(failure.value, MediaTooLargeError)


@pytest.mark.parametrize("pre_skip", [0, 65535])
def test_opus_pre_skip_trims_without_reading_or_allocating_more(pre_skip: int) -> None:
    # OpusHead's pre-skip (at most 65535 samples, 1.4 s at 48 kHz) drops leading samples.
    payload = with_opus_pre_skip(
        encode_pyav(sine(MONO_TONE, 48_000, 1.0), 48_000, "ogg", "libopus"), pre_skip
    )

    samples, rate = AudioMediaIO().load_bytes_ref(payload).decode()

    assert rate == 48_000.0 and samples.ndim == 1
    assert samples.shape[0] <= 48_000 + 312  # never more than the stream holds


def test_sample_rate_change_midway_is_refused_not_stretched() -> None:
    # Two ADTS streams back to back: 16 kHz, then 44.1 kHz. Mixing them would play the second
    # at the wrong speed.
    first = encode_pyav(sine(STEREO, 16_000, 0.5), 16_000, "adts", "aac")
    second = encode_pyav(sine(STEREO, 44_100, 0.5), 44_100, "adts", "aac")

    with pytest.raises(ValueError, match=r"^Failed to decode audio: .*sample rate"):
        AudioMediaIO().load_bytes(first + second)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("payload", ["aac-7.1", "flac-8ch-open-ended"])
def test_eight_channel_audio_decodes_without_crashing_the_process(
    tmp_path: Path, payload: str
) -> None:
    # PyAV 18 walks a planar frame's data pointers to a NULL one; with exactly 8 channels it
    # reads past FFmpeg's 8 and the process dies (SIGSEGV). A 7.1 AAC track is ordinary audio;
    # an open-ended 8-channel FLAC reaches PyAV because libsndfile fails to seek its end. In a
    # subprocess, so that the crash fails this test rather than the whole run.
    if payload == "aac-7.1":
        data = encode_pyav(np.zeros((8, 16_000), np.float32), 16_000, "mp4", "aac")
    else:
        data = with_declared_flac_frames(encode_silence(48_000, 8, 480_000), 0)
    path = tmp_path / "clip.bin"
    path.write_bytes(data)
    script = (
        "import sys; from mediaref.media.audio import AudioMediaIO\n"
        f"samples, rate = AudioMediaIO().load_bytes(open({str(path)!r}, 'rb').read())\n"
        "print(samples.shape[0], rate)\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100, check=False
    )

    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[0] == "8"
