"""Instrumented media refs and an inspectable Qwen2-VL processor for the lazy-processing tests.

The refs wrap real encoded images but decode through :class:`InstrumentedDecoder`, which counts
its calls, records the thread it ran on, and can hold the decode at a ``threading.Event`` gate or
a ``threading.Barrier``. Every wait is bounded (:data:`WAIT_S`) so a broken implementation fails
a test instead of hanging it; a gate that times out is recorded, so tests can tell "the test opened
it" from "nobody did".
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from PIL import Image

from _image_samples import encode
from mediaref.cache import MultiModalProcessorOnlyCache
from mediaref.inputs import MultiModalInputs
from mediaref.media.base import MediaRef
from mediaref.media.image import ImageMediaIO
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl import Qwen2VLMultiModalProcessor
from mediaref.processing.context import ModelConfig
from mediaref.processing.inputs import ProcessorInputs
from mediaref.processing.processor import BaseMultiModalProcessor, MultiModalApplyState
from mediaref.registry import MULTIMODAL_REGISTRY

WAIT_S = 10.0
"""The bound on every wait here: generous, and reached only when something is broken."""

IMAGE_PROMPT = "<|vision_start|><|image_pad|><|vision_end|>describe"


def image_prompt(num_images: int) -> str:
    return "<|vision_start|><|image_pad|><|vision_end|>" * num_images + "describe"


@functools.cache
def image_bytes(variant: int, size: int = 56) -> bytes:
    """A small PNG whose bytes (hence key and pixels) differ for every ``variant``."""
    ys, xs = np.mgrid[0:size, 0:size]
    pixels = np.stack(
        [
            (xs * 4 + variant * 53) % 256,
            (ys * 4 + variant * 31) % 256,
            (xs * 7 + ys * 13 + variant) % 256,
        ],
        axis=-1,
    ).astype(np.uint8)
    return encode(Image.fromarray(pixels, "RGB"), "PNG")


CORRUPT_IMAGE = b"this payload is not an image at all"


class InstrumentedDecoder:
    """Decodes ``data`` with the real image decoder, counting calls; optionally held at a gate."""

    def __init__(
        self,
        data: bytes,
        *,
        gate: threading.Event | None = None,
        barrier: threading.Barrier | None = None,
    ) -> None:
        self.data = data
        self.gate = gate
        self.barrier = barrier
        self.calls = 0
        self.thread_names: list[str] = []
        self.gate_timed_out = False
        self.started = threading.Event()
        self.finished = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> Image.Image:
        with self._lock:
            self.calls += 1
            self.thread_names.append(threading.current_thread().name)
        self.started.set()
        try:
            if self.barrier is not None:
                self.barrier.wait()  # BrokenBarrierError after its timeout: decodes were serial
            if self.gate is not None and not self.gate.wait(WAIT_S):
                self.gate_timed_out = True
                raise TimeoutError("the test never opened this decode's gate")
            return ImageMediaIO().load_bytes(self.data)
        finally:
            self.finished.set()


def instrumented_ref(
    data: bytes,
    *,
    gate: threading.Event | None = None,
    barrier: threading.Barrier | None = None,
) -> tuple[MediaRef[Image.Image], InstrumentedDecoder]:
    """A ref keyed and hashed exactly like ``ImageMediaIO().load_bytes_ref(data)``, decoding
    through a spy."""
    decoder = InstrumentedDecoder(data, gate=gate, barrier=barrier)
    like = ImageMediaIO().load_bytes_ref(data)
    ref = MediaRef(data, decoder, like.spec, key=like.key, hash_view=like.hash_view)
    return ref, decoder


def counted_ref(variant: int) -> MediaRef[Image.Image]:
    """An instrumented ref of ``image_bytes(variant)`` when only its output matters."""
    return instrumented_ref(image_bytes(variant))[0]


# -- processors ------------------------------------------------------------------------------


@functools.cache
def model_config() -> ModelConfig:
    return ModelConfig(model=str(builtin_model_path("qwen2_vl")))


@functools.cache
def _shared_processor() -> BaseMultiModalProcessor[Any]:
    """Loaded once per test session: every processor below shares its info (and HF processor)."""
    processor = MULTIMODAL_REGISTRY.create_processor(model_config(), cache=None)
    processor.info.get_hf_processor()
    return processor


def make_processor(
    cls: type[BaseMultiModalProcessor[Any]] = Qwen2VLMultiModalProcessor, *, cached: bool = True
) -> Any:
    """A fresh ``cls`` on the shared HF processor, with its own empty 1 GiB cache if ``cached``."""
    shared = _shared_processor()
    cache = MultiModalProcessorOnlyCache(1) if cached else None
    return cls(shared.info, shared.dummy_inputs, cache=cache)


@dataclass(frozen=True)
class HfCall:
    """What one HF call saw: its image count, its thread, and the latest state's owned refs."""

    num_images: int
    thread_name: str
    owned_payloads: list[bytes]
    released: list[bool]
    torch_threads: int


def make_inspecting_processor_class() -> type[Any]:
    """A fresh Qwen2-VL subclass that records its states and HF calls (class-level, per test).

    It overrides only ``apply_phase1`` (to keep the state) and the ``_call_hf_processor`` stage,
    neither of which the two-phase probe looks at, so it keeps the split apply. Class-level
    records survive the renderer building a second, uncached instance with ``type(processor)``.
    Hooks: ``phase1_gate`` holds phase 1 before it starts; ``hf_gate`` holds the HF call;
    ``hf_error`` makes the HF call raise after recording what it saw.
    """

    class InspectingProcessor(Qwen2VLMultiModalProcessor):
        states: ClassVar[list[MultiModalApplyState]] = []
        hf_calls: ClassVar[list[HfCall]] = []
        phase1_started = threading.Event()
        phase1_gate: threading.Event | None = None
        hf_started = threading.Event()
        hf_gate: threading.Event | None = None
        hf_gate_timed_out = False
        hf_error: BaseException | None = None

        def apply_phase1(
            self, inputs: ProcessorInputs, timing_ctx: Any = None, **kwargs: Any
        ) -> MultiModalApplyState:
            cls = type(self)
            cls.phase1_started.set()
            if cls.phase1_gate is not None and not cls.phase1_gate.wait(WAIT_S):
                raise TimeoutError("the test never opened the phase-1 gate")
            state = super().apply_phase1(inputs, timing_ctx, **kwargs)
            cls.states.append(state)
            return state

        def _call_hf_processor(
            self, hf_data: Mapping[str, object], hf_kwargs: Mapping[str, object]
        ) -> Any:
            cls = type(self)
            owned = cls.states[-1].owned_refs if cls.states else []
            cls.hf_calls.append(
                HfCall(
                    num_images=len(hf_data.get("images", ())),  # type: ignore[arg-type]
                    thread_name=threading.current_thread().name,
                    owned_payloads=[ref.data for ref in owned],
                    released=[ref.is_released for ref in owned],
                    torch_threads=torch.get_num_threads(),
                )
            )
            cls.hf_started.set()
            if cls.hf_gate is not None and not cls.hf_gate.wait(WAIT_S):
                cls.hf_gate_timed_out = True
                raise TimeoutError("the test never opened the HF gate")
            if cls.hf_error is not None:
                raise cls.hf_error
            return super()._call_hf_processor(hf_data, hf_kwargs)

    return InspectingProcessor


# -- outputs ---------------------------------------------------------------------------------


def reference_output(datas: list[bytes]) -> MultiModalInputs:
    """The uncached processor's output for these images, decoded eagerly (the oracle)."""
    processor = make_processor(cached=False)
    refs = [ImageMediaIO().load_bytes_ref(data) for data in datas]
    return processor.apply(processor.build_inputs(image_prompt(len(datas)), {"image": refs}))


def assert_same_output(actual: MultiModalInputs, expected: MultiModalInputs) -> None:
    assert actual["prompt_token_ids"] == expected["prompt_token_ids"]
    assert actual["mm_placeholders"] == expected["mm_placeholders"]
    actual_data = actual["mm_kwargs"].get_data()
    expected_data = expected["mm_kwargs"].get_data()
    assert actual_data.keys() == expected_data.keys()
    for name, tensor in expected_data.items():
        assert torch.equal(actual_data[name], tensor), name


def spy(target: Callable[..., Any], calls: list[str], name: str) -> Callable[..., Any]:
    """Wrap a bound method (sync or async) so each call appends ``name`` to ``calls``."""
    if inspect.iscoroutinefunction(target):

        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return await target(*args, **kwargs)

        return async_wrapper

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return target(*args, **kwargs)

    return wrapper
