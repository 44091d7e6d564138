"""InputProcessingContext (offline, memoized loads) and get_media_io (decoder resolution)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

from _image_samples import encode

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
import transformers
from PIL import Image

from _video_samples import make_clip
from mediaref.media.audio import AudioMediaIO
from mediaref.media.image import ImageMediaIO
from mediaref.media.video import RawBytesVideoMediaIO, VideoMediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_audio import Qwen2AudioProcessingInfo
from mediaref.models.qwen2_vl import Qwen2VLProcessingInfo
from mediaref.processing.context import BaseProcessingInfo, InputProcessingContext, ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY
from mediaref.video import VIDEO_LOADER_REGISTRY

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
QWEN2_AUDIO = str(builtin_model_path("qwen2_audio"))
ALT_BACKEND = "test_processing_context_constant"
ALT_FRAME_SHAPE = (5, 5, 3)


class ConstantFramesLoader:
    """A second loader backend: black 5x5 frames, so a decode shows which backend ran."""

    decoder_version = "test-constant/1"

    @classmethod
    def load_bytes(
        cls, data: bytes, num_frames: int = -1, fps: float | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        count = num_frames if num_frames > 0 else 1
        metadata = {
            "total_num_frames": count,
            "fps": 1.0,
            "duration": float(count),
            "video_backend": ALT_BACKEND,
            "frames_indices": list(range(count)),
            "do_sample_frames": False,
        }
        return np.zeros((count, *ALT_FRAME_SHAPE), dtype=np.uint8), metadata


@pytest.fixture
def alt_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The second backend, registered for one test and made the process default (env)."""
    VIDEO_LOADER_REGISTRY.register(ALT_BACKEND)(ConstantFramesLoader)
    # Made the env default so that a model's binding is seen to win over the default too.
    monkeypatch.setenv("VLLM_VIDEO_LOADER_BACKEND", ALT_BACKEND)
    try:
        yield ALT_BACKEND
    finally:
        VIDEO_LOADER_REGISTRY.unregister(ALT_BACKEND)


def qwen2_vl_info(**config: Any) -> Qwen2VLProcessingInfo:
    return Qwen2VLProcessingInfo(InputProcessingContext(ModelConfig(model=QWEN2_VL, **config)))


@pytest.fixture(scope="module")
def clip() -> bytes:
    return make_clip("h264", "mp4", num_frames=8, width=32, height=32, fps=8)


def png_bytes() -> bytes:
    return encode(Image.new("RGBA", (8, 8), (200, 10, 10, 128)), "PNG")


# --- InputProcessingContext ----------------------------------------------------------------------


class FromPretrainedSpy:
    """Replaces ``Auto*.from_pretrained`` in one test: records each load, then runs the real one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, auto_cls: Any) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []
        self._lock = threading.Lock()
        real = auto_cls.from_pretrained

        def from_pretrained(path: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls.append((path, kwargs))
            return real(path, **kwargs)

        monkeypatch.setattr(auto_cls, "from_pretrained", from_pretrained)


def test_processor_and_config_load_offline_from_the_model_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    processor_spy = FromPretrainedSpy(monkeypatch, transformers.AutoProcessor)
    config_spy = FromPretrainedSpy(monkeypatch, transformers.AutoConfig)
    ctx = InputProcessingContext(
        ModelConfig(model=QWEN2_VL, mm_processor_kwargs={"min_pixels": 12544})
    )

    processor = ctx.get_hf_processor()
    config = ctx.get_hf_config()

    assert type(processor).__name__ == "Qwen2VLProcessor"
    assert type(config).__name__ == "Qwen2VLConfig"
    [(path, kwargs)] = processor_spy.calls
    assert str(path) == QWEN2_VL
    assert kwargs["local_files_only"] is True
    assert kwargs["trust_remote_code"] is False
    assert kwargs["min_pixels"] == 12544  # the model config's processor kwargs reach the load
    # Ours and the config load AutoProcessor makes internally: every one of them stays local.
    assert config_spy.calls
    assert all(str(p) == QWEN2_VL and kw["local_files_only"] is True for p, kw in config_spy.calls)
    assert ctx.get_tokenizer() is processor.tokenizer


def test_loads_are_memoized_per_distinct_kwargs(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = FromPretrainedSpy(monkeypatch, transformers.AutoProcessor)
    ctx = InputProcessingContext(
        ModelConfig(model=QWEN2_VL, mm_processor_kwargs={"min_pixels": 12544})
    )

    default = ctx.get_hf_processor()
    assert ctx.get_hf_processor() is default
    # Spelling out the configured value is the same set of kwargs, hence the same processor.
    assert ctx.get_hf_processor(min_pixels=12544) is default
    assert len(spy.calls) == 1

    other = ctx.get_hf_processor(min_pixels=3136)
    assert other is not default
    assert ctx.get_hf_processor(min_pixels=3136) is other
    assert len(spy.calls) == 2
    assert (
        other.image_processor.size["shortest_edge"] != default.image_processor.size["shortest_edge"]
    )


def test_config_load_is_memoized(monkeypatch: pytest.MonkeyPatch) -> None:
    # A context that loads no processor, so AutoProcessor's own config loads are not counted.
    config_spy = FromPretrainedSpy(monkeypatch, transformers.AutoConfig)
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_VL))
    assert ctx.get_hf_config() is ctx.get_hf_config()
    assert len(config_spy.calls) == 1


def test_concurrent_first_loads_build_the_processor_once(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = FromPretrainedSpy(monkeypatch, transformers.AutoProcessor)
    ctx = InputProcessingContext(ModelConfig(model=QWEN2_AUDIO))
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def load() -> None:
        barrier.wait(timeout=30)
        results.append(ctx.get_hf_processor())

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 4
    assert all(result is results[0] for result in results)
    assert len(spy.calls) == 1


def test_a_missing_local_processor_fails_instead_of_reaching_a_hub(tmp_path: Any) -> None:
    ctx = InputProcessingContext(ModelConfig(model=str(tmp_path / "absent")))
    with pytest.raises(OSError):
        ctx.get_hf_processor()


# --- get_media_io: which decoder, with which settings ---------------------------------------------


def test_image_decoder_takes_config_settings_then_request_overrides() -> None:
    info = qwen2_vl_info(media_io_kwargs={"image": {"image_mode": "L"}})

    from_config = info.get_media_io("image")
    assert type(from_config) is ImageMediaIO
    assert from_config.image_mode == "L"

    overridden = info.get_media_io("image", {"image_mode": "RGBA"})
    assert overridden.image_mode == "RGBA"
    assert info.get_media_io("image", {}).image_mode == "L"


def test_audio_decoder_takes_config_settings_then_request_overrides() -> None:
    info = Qwen2AudioProcessingInfo(
        InputProcessingContext(
            ModelConfig(model=QWEN2_AUDIO, media_io_kwargs={"audio": {"max_duration_s": 10}})
        )
    )
    assert type(info.get_media_io("audio")) is AudioMediaIO
    assert info.get_media_io("audio").max_duration_s == 10
    assert info.get_media_io("audio", {"max_duration_s": 2.5}).max_duration_s == 2.5


def test_video_decoder_settings_merge_and_its_frame_decoder_uses_the_image_config() -> None:
    info = qwen2_vl_info(media_io_kwargs={"video": {"num_frames": 4}, "image": {"image_mode": "L"}})

    from_config = info.get_media_io("video")
    assert type(from_config) is VideoMediaIO
    assert from_config.num_frames == 4
    assert from_config.image_io.image_mode == "L"
    assert info.get_media_io("video", {"num_frames": 6}).num_frames == 6


def test_video_backend_bound_to_the_hf_video_processor_wins_over_the_env_default(
    alt_backend: str,
) -> None:
    info = qwen2_vl_info()
    assert type(info.get_hf_processor().video_processor).__name__ == "Qwen2VLVideoProcessor"
    # vLLM's binding: the loader registered for that class samples at 2 fps, as HF's would.
    assert info.get_default_video_backend() == "qwen2_vl"
    assert info.get_media_io("video").video_backend == "qwen2_vl"

    # A model with no video processor binds nothing: the env default applies.
    audio_info = Qwen2AudioProcessingInfo(InputProcessingContext(ModelConfig(model=QWEN2_AUDIO)))
    assert audio_info.get_default_video_backend() is None
    assert audio_info.get_media_io("video").video_backend == alt_backend


def test_an_explicit_video_backend_wins_over_the_binding(alt_backend: str, clip: bytes) -> None:
    from_request = qwen2_vl_info().get_media_io(
        "video", {"video_backend": alt_backend, "num_frames": 3}
    )
    assert from_request.video_backend == alt_backend
    frames, metadata = from_request.load_bytes_ref(clip).decode()
    assert frames.shape == (3, *ALT_FRAME_SHAPE)  # the second backend really decoded it
    assert metadata["video_backend"] == alt_backend

    from_config = qwen2_vl_info(media_io_kwargs={"video": {"video_backend": alt_backend}})
    assert from_config.get_media_io("video").video_backend == alt_backend
    # The request beats the model config, here back to the bound backend.
    assert from_config.get_media_io("video", {"video_backend": "pyav"}).video_backend == "pyav"


def test_video_keys_follow_the_decode_settings(alt_backend: str, clip: bytes) -> None:
    # pyav samples num_frames uniformly (the bound qwen2_vl loader ignores num_frames, as vLLM's).
    info = qwen2_vl_info(media_io_kwargs={"video": {"num_frames": 4, "video_backend": "pyav"}})

    def key(**request: Any) -> bytes:
        return info.get_media_io("video", request or None).load_bytes_ref(clip).key

    assert key() == key(num_frames=4)  # same settings from another source: one cache entry
    assert (
        key()
        == qwen2_vl_info(media_io_kwargs={"video": {"num_frames": 4, "video_backend": "pyav"}})
        .get_media_io("video")
        .load_bytes_ref(clip)
        .key
    )
    assert key(num_frames=2) != key()
    assert key(video_backend=alt_backend) != key()
    assert key(num_frames=2, video_backend=alt_backend) != key(video_backend=alt_backend)

    frames, _ = info.get_media_io("video", {"num_frames": 2}).load_bytes_ref(clip).decode()
    assert frames.shape[0] == 2


def test_image_keys_follow_the_decode_settings() -> None:
    info = qwen2_vl_info()
    payload = png_bytes()
    rgb = info.get_media_io("image").load_bytes_ref(payload)
    assert rgb.key == qwen2_vl_info().get_media_io("image").load_bytes_ref(payload).key
    grey = info.get_media_io("image", {"image_mode": "L"}).load_bytes_ref(payload)
    assert grey.key != rgb.key
    assert grey.decode().mode == "L"


def test_raw_bytes_family_declares_its_video_decoder(clip: bytes) -> None:
    processor = MULTIMODAL_REGISTRY.create_processor(
        ModelConfig(model=QWEN2_VL, family="qwen2_vl_raw_video")
    )
    info = processor.info

    raw_io = info.get_media_io("video", {"num_frames": 4})
    assert type(raw_io) is RawBytesVideoMediaIO
    ref = raw_io.load_bytes_ref(clip)
    assert ref.decode() == clip  # the processor gets the container itself
    assert ref.spec.settings["video_decode"] == "raw_bytes"
    # The choice is in the key: never the same cache entry as a frame decode of the same bytes.
    assert ref.key != qwen2_vl_info().get_media_io("video").load_bytes_ref(clip).key
    assert type(info.get_media_io("image")) is ImageMediaIO


@pytest.mark.parametrize("modality", ["text", "images", ""])
def test_unknown_modality_has_no_decoder(modality: str) -> None:
    with pytest.raises(ValueError, match="no decoder for modality"):
        qwen2_vl_info().get_media_io(modality)


def test_base_info_requires_a_model_to_declare_its_limits() -> None:
    info = BaseProcessingInfo(InputProcessingContext(ModelConfig(model=QWEN2_VL)))
    with pytest.raises(NotImplementedError):
        info.get_supported_mm_limits()
    # The binding follows the directory's HF video processor, not the family's info class.
    assert info.get_default_video_backend() == "qwen2_vl"
