"""mediaref.ops.mm_input_norm: the torch reference against the unfused HF chain, the Triton kernel
against the reference (CPU interpreter in a subprocess, GPU when present), layouts, padding, errors.

``@triton.jit`` picks compiled or interpreted mode when the kernel module is imported, so the
interpreter tests (class ``TestTritonInterpreter``) run in a child pytest started with
``TRITON_INTERPRET=1``; in this process they skip, and ``test_triton_interpreter_suite`` drives them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mediaref.ops import mm_input_norm as mm_input_norm_module
from mediaref.ops.mm_input_norm import (
    INPUT_DTYPES,
    VISUAL_DTYPES,
    FusedMMInputNorm,
    fused_mm_input_norm_torch,
    fused_mm_input_norm_triton,
)

RESCALE = 1 / 255
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HW = (6, 7)

IN_INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"
HAS_TRITON = importlib.util.find_spec("triton") is not None
REPO_ROOT = Path(__file__).resolve().parents[1]


def make_norm() -> FusedMMInputNorm:
    return FusedMMInputNorm(RESCALE, CLIP_MEAN, CLIP_STD)


# name -> (turn a canonical (N, C, H*W) tensor into that layout, channel_dim for it)
LAYOUTS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], int]] = {
    "nchw": (lambda t: t.reshape(t.shape[0], t.shape[1], *HW), 1),
    # Qwen2-VL pixel_values: one row per patch, channel-major within the row.
    "patches": (lambda t: t.reshape(t.shape[0], -1), 1),
    "patches_last_dim": (lambda t: t.reshape(t.shape[0], -1), -1),
    "nhwc": (lambda t: t.reshape(t.shape[0], t.shape[1], *HW).permute(0, 2, 3, 1).contiguous(), -1),
}


def pixels(dtype: torch.dtype, rows: int = 4, seed: int = 0) -> torch.Tensor:
    """Canonical (rows, 3, H*W) pixel-range input in ``dtype``."""
    generator = torch.Generator().manual_seed(seed)
    shape = (rows, 3, HW[0] * HW[1])
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    return (torch.rand(shape, generator=generator) * 255).to(dtype)


def unfused_hf_chain(canonical: torch.Tensor) -> torch.Tensor:
    """What HF image processors do on the CPU: rescale, subtract the mean, divide by the std (fp32)."""
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1)
    return (canonical.to(torch.float32) * RESCALE - mean) / std


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place between two 16-bit float tensors."""

    def ordered(t: torch.Tensor) -> torch.Tensor:
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (ordered(actual) - ordered(expected)).abs()


def assert_matches(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Tolerance per dtype: fp32 1e-6; bf16/fp16 1 ulp (or the fp32 tolerance near zero, where an
    FMA on the GPU may round the fp32 value differently from separate multiply and add)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)
        return
    close = (ulp_distance(actual, expected) <= 1) | ((actual.float() - expected.float()).abs() <= 1e-6)
    assert bool(close.all()), f"max ulp distance {int(ulp_distance(actual, expected).max())}"


# ---------------------------------------------------------------- the module and its coefficients


def test_coefficients_fold_rescale_mean_and_std() -> None:
    norm = make_norm()
    std = torch.tensor(CLIP_STD, dtype=torch.float64)
    mean = torch.tensor(CLIP_MEAN, dtype=torch.float64)
    assert norm.weight.dtype == norm.bias.dtype == torch.float32
    assert torch.equal(norm.weight, (RESCALE / std).float())
    assert torch.equal(norm.bias, (-mean / std).float())
    assert norm.num_channels == 3
    # Derived from config, not learned: a checkpoint never carries (or expects) them.
    assert norm.state_dict() == {}


def test_model_wide_casts_keep_fp32_coefficients() -> None:
    reference = make_norm()
    for cast in (lambda m: m.half(), lambda m: m.to(torch.bfloat16), lambda m: m.double()):
        norm = cast(make_norm())
        assert torch.equal(norm.weight, reference.weight) and torch.equal(norm.bias, reference.bias)
        assert torch.equal(norm(pixels(torch.uint8)), reference(pixels(torch.uint8)))
    moved = make_norm().to("meta")
    assert moved.weight.device.type == "meta" and moved.weight.dtype == torch.float32


def test_from_image_processor_honours_do_rescale_and_do_normalize() -> None:
    config = dict(rescale_factor=RESCALE, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))
    full = FusedMMInputNorm.from_image_processor(SimpleNamespace(**config))
    assert torch.equal(full.weight, make_norm().weight) and torch.equal(full.bias, make_norm().bias)

    no_rescale = FusedMMInputNorm.from_image_processor(SimpleNamespace(**config, do_rescale=False))
    assert no_rescale.rescale_factor == 1.0

    rescale_only = FusedMMInputNorm.from_image_processor(SimpleNamespace(**config, do_normalize=False))
    assert torch.equal(rescale_only.bias, torch.zeros(3))
    assert torch.equal(rescale_only.weight, torch.full((3,), RESCALE, dtype=torch.float32))


def test_matches_qwen2_vl_image_processor_on_its_patch_rows() -> None:
    import numpy as np
    from transformers import Qwen2VLImageProcessor

    processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
    image = np.random.default_rng(0).integers(0, 256, (56, 84, 3), dtype=np.uint8)
    raw = processor(images=image, return_tensors="pt", do_rescale=False, do_normalize=False)
    hf = processor(images=image, return_tensors="pt")
    assert raw["pixel_values"].dtype == torch.uint8  # the bytes the fast path ships to the device

    norm = FusedMMInputNorm.from_image_processor(processor)
    ours = norm(raw["pixel_values"], torch.float32)
    torch.testing.assert_close(ours, hf["pixel_values"].float(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("mean", "std", "match"),
    [((0.5, 0.5), (0.5, 0.5, 0.5), "same number"), ((), (), "one entry"), ((0.5,), (0.0,), "zeros")],
)
def test_module_rejects_bad_config(mean: tuple[float, ...], std: tuple[float, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FusedMMInputNorm(RESCALE, mean, std)


# ---------------------------------------------------------------- the torch reference (CPU path)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
def test_reference_equals_unfused_hf_chain(dtype: torch.dtype, layout: str) -> None:
    arrange, channel_dim = LAYOUTS[layout]
    canonical = pixels(dtype)
    result = make_norm()(arrange(canonical), torch.float32, channel_dim=channel_dim)
    torch.testing.assert_close(result, arrange(unfused_hf_chain(canonical)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_reference_equals_unfused_chain_for_every_byte_value(layout: str) -> None:
    arrange, channel_dim = LAYOUTS[layout]
    every_byte = torch.arange(256, dtype=torch.uint8).repeat(2 * 3 * 42 // 256 + 1)[: 2 * 3 * 42]
    canonical = every_byte.reshape(2, 3, 42)
    result = make_norm()(arrange(canonical), torch.float32, channel_dim=channel_dim)
    torch.testing.assert_close(result, arrange(unfused_hf_chain(canonical)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("visual_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
def test_low_precision_output_is_the_fp32_result_rounded_once(
    dtype: torch.dtype, visual_dtype: torch.dtype
) -> None:
    x = pixels(dtype)
    norm = make_norm()
    in_fp32 = norm(x, torch.float32)
    # Computing in the 16-bit dtype (or rounding twice) would miss this exact equality.
    assert torch.equal(norm(x, visual_dtype), in_fp32.to(visual_dtype))


def test_cpu_chunks_cover_every_element(monkeypatch: pytest.MonkeyPatch) -> None:
    # A chunk far smaller than the input, so both splits run: along the outer axis (patch rows)
    # and inside a segment longer than a chunk (images), with ragged last chunks.
    monkeypatch.setattr(mm_input_norm_module, "_CPU_CHUNK_ELEMENTS", 100)
    norm = make_norm()
    for x in (
        torch.randint(0, 256, (37, 3 * 8), dtype=torch.uint8),
        torch.randint(0, 256, (3, 3, 11, 13), dtype=torch.uint8),
    ):
        channels_first = x.reshape(x.shape[0], 3, -1).float()
        whole = channels_first * norm.weight.view(1, 3, 1) + norm.bias.view(1, 3, 1)
        assert torch.equal(norm(x, torch.float32), whole.reshape(x.shape))


def test_does_not_modify_a_float32_input() -> None:
    x = pixels(torch.float32)
    before = x.clone()
    make_norm()(x, torch.float32)
    assert torch.equal(x, before)


def test_non_contiguous_input_is_read_by_its_strides() -> None:
    x = pixels(torch.uint8, rows=8).reshape(8, 3, *HW)
    strided = x[::2].transpose(2, 3)  # every other row, H and W swapped
    assert not strided.is_contiguous()
    norm = make_norm()
    assert torch.equal(norm(strided), norm(strided.contiguous()))


def test_forward_on_cpu_uses_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    norm = make_norm()

    def refuse(*args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("forward_cuda called for a CPU tensor")

    monkeypatch.setattr(norm, "forward_cuda", refuse)
    x = pixels(torch.uint8)
    assert torch.equal(norm(x), norm.forward_native(x))


def test_works_where_triton_is_absent() -> None:
    # A fresh interpreter in which `import triton` fails, as on platforms Triton does not ship for.
    script = """
import sys
sys.modules["triton"] = None
import torch
from mediaref.ops.mm_input_norm import FusedMMInputNorm
norm = FusedMMInputNorm(1 / 255, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
x = torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)
assert torch.equal(norm(x, torch.float32), torch.ones(1, 3, 2, 2))
try:
    norm.forward_cuda(x)
except RuntimeError as exc:
    assert "needs Triton" in str(exc), exc
else:
    raise AssertionError("forward_cuda ran without Triton")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=110, cwd=REPO_ROOT
    )
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------- preallocated output, padding

NORM_FUNCTIONS = {"torch": fused_mm_input_norm_torch, "triton": fused_mm_input_norm_triton}


def test_padded_out_writes_only_the_leading_rows() -> None:
    norm = make_norm()
    buffer = torch.full((10, 3 * 32), -7.0, dtype=torch.bfloat16)
    for rows in (6, 2):  # reuse the buffer for a smaller batch
        x = torch.randint(0, 256, (rows, 3 * 32), dtype=torch.uint8)
        buffer[rows:] = -7.0
        written = norm(x, torch.bfloat16, out=buffer)
        assert written.shape == x.shape and written.data_ptr() == buffer.data_ptr()
        assert torch.equal(buffer[:rows], norm(x, torch.bfloat16))
        assert bool((buffer[rows:] == -7.0).all())


def test_empty_batch_writes_nothing() -> None:
    buffer = torch.full((4, 3, *HW), 5.0)
    written = make_norm()(torch.empty((0, 3, *HW), dtype=torch.uint8), torch.float32, out=buffer)
    assert written.shape == (0, 3, *HW)
    assert bool((buffer == 5.0).all())


def _call_with(fn: Callable[..., torch.Tensor], **overrides: object) -> None:
    norm = make_norm()
    call: dict[str, object] = dict(
        x=torch.zeros((2, 3, *HW), dtype=torch.uint8), weight=norm.weight, bias=norm.bias,
        visual_dtype=torch.bfloat16, out=None, channel_dim=1,
    )
    call.update(overrides)
    x, weight, bias = call.pop("x"), call.pop("weight"), call.pop("bias")
    fn(x, weight, bias, **call)


BAD_CALLS: dict[str, tuple[dict[str, object], type[Exception], str]] = {
    "four_channels": (dict(x=torch.zeros((2, 4, *HW), dtype=torch.uint8)), ValueError, "channel count 3"),
    "six_channels_not_last_dim": (dict(x=torch.zeros((2, 6, *HW), dtype=torch.uint8)), ValueError, "x.shape"),
    "row_not_multiple_of_channels": (dict(x=torch.zeros((2, 100), dtype=torch.uint8)), ValueError, "multiple"),
    "channel_dim_out_of_range": (dict(channel_dim=4), ValueError, "out of range"),
    "zero_dim_x": (dict(x=torch.tensor(3, dtype=torch.uint8)), ValueError, "at least one dimension"),
    "float64_x": (dict(x=torch.zeros((2, 3, *HW), dtype=torch.float64)), TypeError, "not supported"),
    "int32_x": (dict(x=torch.zeros((2, 3, *HW), dtype=torch.int32)), TypeError, "not supported"),
    "not_a_tensor": (dict(x=[[0, 1, 2]]), TypeError, "torch.Tensor"),
    "visual_dtype_int8": (dict(visual_dtype=torch.int8), TypeError, "visual_dtype"),
    "visual_dtype_float64": (dict(visual_dtype=torch.float64), TypeError, "visual_dtype"),
    "out_too_small": (dict(out=torch.empty((1, 3, *HW), dtype=torch.bfloat16)), ValueError, "at least as many rows"),
    "out_wrong_trailing_shape": (dict(out=torch.empty((2, 3, 7, 6), dtype=torch.bfloat16)), ValueError, "match x"),
    "out_wrong_dtype": (dict(out=torch.empty((2, 3, *HW), dtype=torch.float16)), TypeError, "out.dtype"),
    "out_not_contiguous": (
        dict(out=torch.empty((2, 3, 7, 6), dtype=torch.bfloat16).transpose(2, 3)), ValueError, "contiguous"),
    "out_not_a_tensor": (dict(out=[0.0]), TypeError, "out must be"),
    "weight_float64": (dict(weight=torch.ones(3, dtype=torch.float64)), TypeError, "weight must be float32"),
    "weight_2d": (dict(weight=torch.ones(1, 3)), ValueError, "1-D"),
    "bias_length": (dict(bias=torch.zeros(4)), ValueError, "differ in length"),
}  # fmt: skip


@pytest.mark.parametrize("fn_name", sorted(NORM_FUNCTIONS))
@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_inputs_raise_clear_errors(case: str, fn_name: str) -> None:
    overrides, error, match = BAD_CALLS[case]
    with pytest.raises(error, match=match):
        _call_with(NORM_FUNCTIONS[fn_name], **overrides)


@pytest.mark.skipif(not HAS_TRITON or IN_INTERPRETER, reason="needs Triton in compiled mode")
def test_triton_launcher_refuses_cpu_tensors_outside_the_interpreter() -> None:
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        _call_with(fused_mm_input_norm_triton)


# ---------------------------------------------------------------- Triton kernel, CPU interpreter


@pytest.mark.skipif(not HAS_TRITON or IN_INTERPRETER, reason="needs Triton; drives the child run")
def test_triton_interpreter_suite() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", f"{__file__}::TestTritonInterpreter", "-q", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) > 0 and "skipped" not in output, output[-3000:]


INTERPRETER_SHAPES = {
    # (rows, C, segment) -> exercises one segment per tile row, many segments per tile, and a
    # segment longer than a tile (several column blocks, ragged on both axes).
    "patches": (5, 3, 32),
    "image": (2, 3, 42),
    "long_segment": (1, 3, 5000),
}


@pytest.mark.skipif(not IN_INTERPRETER, reason="runs in the TRITON_INTERPRET=1 child (see above)")
class TestTritonInterpreter:
    @pytest.mark.parametrize("visual_dtype", VISUAL_DTYPES, ids=str)
    @pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
    @pytest.mark.parametrize("layout", sorted(LAYOUTS))
    def test_kernel_matches_reference(self, layout: str, dtype: torch.dtype, visual_dtype: torch.dtype) -> None:
        arrange, channel_dim = LAYOUTS[layout]
        x = arrange(pixels(dtype))
        norm = make_norm()
        expected = norm.forward_native(x, visual_dtype, channel_dim=channel_dim)
        actual = norm.forward_cuda(x, visual_dtype, channel_dim=channel_dim)
        if visual_dtype == torch.float16:
            assert torch.equal(actual, expected)  # the interpreter rounds fp16 like torch
        # The interpreter truncates fp32 -> bf16 where torch rounds to nearest: 1 ulp apart.
        assert_matches(actual, expected)

    @pytest.mark.parametrize("shape", sorted(INTERPRETER_SHAPES))
    def test_tile_edges(self, shape: str) -> None:
        rows, channels, segment = INTERPRETER_SHAPES[shape]
        x = torch.randint(0, 256, (rows, channels * segment), dtype=torch.uint8)
        norm = make_norm()
        assert torch.equal(norm.forward_cuda(x, torch.float32), norm.forward_native(x, torch.float32))

    def test_padded_out_writes_only_the_leading_rows(self) -> None:
        norm = make_norm()
        x = torch.randint(0, 256, (3, 3 * 32), dtype=torch.uint8)
        buffer = torch.full((7, 3 * 32), -7.0)
        written = norm.forward_cuda(x, torch.float32, out=buffer)
        assert written.data_ptr() == buffer.data_ptr()
        assert torch.equal(buffer[:3], norm.forward_native(x, torch.float32))
        assert bool((buffer[3:] == -7.0).all())

    def test_non_contiguous_input(self) -> None:
        x = pixels(torch.uint8, rows=6).reshape(6, 3, *HW)[::2].transpose(2, 3)
        norm = make_norm()
        assert torch.equal(norm.forward_cuda(x, torch.float32), norm.forward_native(x, torch.float32))

    def test_empty_batch_launches_nothing(self) -> None:
        buffer = torch.full((2, 3 * 32), 5.0)
        make_norm().forward_cuda(torch.empty((0, 3 * 32), dtype=torch.uint8), torch.float32, out=buffer)
        assert bool((buffer == 5.0).all())


# ---------------------------------------------------------------- Triton kernel on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not HAS_TRITON, reason="needs CUDA and Triton")
class TestCuda:
    @pytest.mark.parametrize("visual_dtype", VISUAL_DTYPES, ids=str)
    @pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
    @pytest.mark.parametrize("layout", sorted(LAYOUTS))
    def test_kernel_matches_reference(self, layout: str, dtype: torch.dtype, visual_dtype: torch.dtype) -> None:
        arrange, channel_dim = LAYOUTS[layout]
        x = arrange(pixels(dtype, rows=64)).cuda()
        norm = make_norm().cuda()
        expected = norm.forward_native(x, visual_dtype, channel_dim=channel_dim)
        assert_matches(norm.forward_cuda(x, visual_dtype, channel_dim=channel_dim), expected)

    @pytest.mark.parametrize("shape", [(4096, 3 * 2 * 14 * 14), (2, 3, 448, 448), (3, 224, 224, 3)])
    def test_realistic_shapes(self, shape: tuple[int, ...]) -> None:
        x = torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda")
        channel_dim = -1 if shape[-1] == 3 else 1
        norm = make_norm().cuda()
        expected = norm.forward_native(x, torch.bfloat16, channel_dim=channel_dim)
        assert_matches(norm.forward_cuda(x, torch.bfloat16, channel_dim=channel_dim), expected)

    def test_forward_dispatches_to_triton(self, monkeypatch: pytest.MonkeyPatch) -> None:
        norm = make_norm().cuda()

        def refuse(*args: object, **kwargs: object) -> torch.Tensor:
            raise AssertionError("forward_native called for a CUDA tensor")

        monkeypatch.setattr(norm, "forward_native", refuse)
        x = torch.randint(0, 256, (16, 3 * 392), dtype=torch.uint8, device="cuda")
        assert_matches(norm(x), fused_mm_input_norm_torch(x, norm.weight, norm.bias))

    def test_padded_out_writes_only_the_leading_rows(self) -> None:
        norm = make_norm().cuda()
        x = torch.randint(0, 256, (300, 3 * 392), dtype=torch.uint8, device="cuda")
        buffer = torch.full((512, 3 * 392), -7.0, dtype=torch.bfloat16, device="cuda")
        norm.forward_cuda(x, out=buffer)
        assert_matches(buffer[:300], norm.forward_native(x))
        assert bool((buffer[300:] == -7.0).all())
