"""mediaref.ops.mm_input_norm: vLLM 0.33.0's API (call shapes, module, params, builder), the torch
reference against the unfused HF chain, the Triton kernel against the reference (CPU interpreter in
a subprocess, GPU when present), mediaref's extensions (padded outputs, layouts), errors.

``@triton.jit`` picks compiled or interpreted mode when the kernel module is imported, so the
interpreter tests (class ``TestTritonInterpreter``) run in a child pytest started with
``TRITON_INTERPRET=1``; in this process they skip, and ``test_triton_interpreter_suite`` drives them.
The interpreter truncates fp32 -> bf16 where torch rounds to nearest, so bf16 results are compared
within 1 ulp; it runs one Python step per program, so the shapes stay a few tiles large.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mediaref.models.builtin import builtin_model_path
from mediaref.ops import _mm_input_norm_apply as apply_module
from mediaref.ops._mm_input_norm_params import _load_norm_params
from mediaref.ops.mm_input_norm import (
    INPUT_DTYPES,
    VISUAL_DTYPES,
    FusedMMInputNorm,
    IdentityInputNorm,
    NormParams,
    build_mm_input_norm,
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
NORM_FUNCTIONS = {"torch": fused_mm_input_norm_torch, "triton": fused_mm_input_norm_triton}


def make_norm() -> FusedMMInputNorm:
    return FusedMMInputNorm(list(CLIP_MEAN), list(CLIP_STD), RESCALE)


def pixels(
    dtype: torch.dtype, shape: tuple[int, ...] = (4, 3, HW[0] * HW[1]), seed: int = 0
) -> torch.Tensor:
    """Pixel-range input in ``dtype``: bytes, or floats in [0, 255)."""
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    return (torch.rand(shape, generator=generator) * 255).to(dtype)


def unfused_hf_chain(ncl: torch.Tensor) -> torch.Tensor:
    """What HF image processors do on the CPU: rescale, subtract the mean, divide by the std (fp32)."""
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1)
    return (ncl.to(torch.float32) * RESCALE - mean) / std


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
    close = (ulp_distance(actual, expected) <= 1) | (
        (actual.float() - expected.float()).abs() <= 1e-6
    )
    assert bool(close.all()), f"max ulp distance {int(ulp_distance(actual, expected).max())}"


def call(
    fn: Callable[..., torch.Tensor], inputs: torch.Tensor, visual_dtype: torch.dtype
) -> torch.Tensor:
    """vLLM's call: a fresh contiguous ``outputs`` of the inputs' shape, weight/bias from the module."""
    norm = make_norm()
    outputs = torch.empty(inputs.shape, dtype=visual_dtype)
    returned = fn(inputs, outputs, norm.weight, norm.bias)
    assert returned is outputs  # "Returns outputs, for chaining"
    return outputs


# ---------------------------------------------------------------- vLLM's names and signatures


def test_signatures_are_vllms() -> None:
    for fn in NORM_FUNCTIONS.values():
        params = list(inspect.signature(fn).parameters.values())
        assert [p.name for p in params[:4]] == ["inputs", "outputs", "weight", "bias"]
        assert all(
            p.kind is p.KEYWORD_ONLY for p in params[4:]
        )  # extensions never shift a vLLM call
    init = list(inspect.signature(FusedMMInputNorm.__init__).parameters)
    assert init == ["self", "image_mean", "image_std", "rescale_factor", "channel"]
    for method in ("forward", "forward_native", "forward_cuda"):
        params = list(inspect.signature(getattr(FusedMMInputNorm, method)).parameters.values())
        assert [p.name for p in params[:3]] == ["self", "pixel_values", "visual_dtype"]
        assert all(p.kind is p.KEYWORD_ONLY for p in params[3:])
    assert NormParams._fields == ("image_mean", "image_std", "rescale_factor")
    assert make_norm().input_dtype == torch.uint8 and IdentityInputNorm().input_dtype is None


# ---------------------------------------------------------------- the module and its coefficients


def test_coefficients_fold_rescale_mean_and_std() -> None:
    norm = make_norm()
    std = torch.tensor(CLIP_STD, dtype=torch.float64)
    mean = torch.tensor(CLIP_MEAN, dtype=torch.float64)
    assert norm.weight.dtype == norm.bias.dtype == torch.float32
    assert torch.equal(norm.weight, (RESCALE / std).float())
    assert torch.equal(norm.bias, (-mean / std).float())
    assert norm.num_channels == norm.channel == 3
    # Derived from config, not learned: a checkpoint never carries (or expects) them.
    assert norm.state_dict() == {}


def test_buffers_follow_the_default_device() -> None:
    with torch.device("meta"):
        norm = make_norm()
    assert norm.weight.device.type == "meta" and norm.weight.dtype == torch.float32


def test_model_wide_casts_keep_fp32_coefficients() -> None:
    reference = make_norm()
    x = pixels(torch.uint8, (4, 3 * 42))
    for cast in (lambda m: m.half(), lambda m: m.to(torch.bfloat16), lambda m: m.double()):
        norm = cast(make_norm())
        assert torch.equal(norm.weight, reference.weight) and torch.equal(norm.bias, reference.bias)
        assert torch.equal(norm(x, torch.bfloat16), reference(x, torch.bfloat16))


def test_folding_matches_hf_formula_for_the_builtin_model() -> None:
    """The built-in Qwen2-VL config's params, folded, give HF's ``(x * rescale - mean) / std`` for
    every byte value, to fp32 rounding."""
    config = SimpleNamespace(model=str(builtin_model_path("qwen2_vl")))
    params = _load_norm_params(config)
    raw = json.loads((builtin_model_path("qwen2_vl") / "preprocessor_config.json").read_text())
    assert params == NormParams(raw["image_mean"], raw["image_std"], raw["rescale_factor"])
    norm = build_mm_input_norm(
        SimpleNamespace(
            **vars(config), multimodal_config=SimpleNamespace(mm_device_do_normalize=True)
        )
    )
    assert isinstance(norm, FusedMMInputNorm)
    every_byte = torch.arange(256, dtype=torch.uint8).repeat(3).reshape(1, 3 * 256)
    mean = torch.tensor(raw["image_mean"]).view(3, 1)
    std = torch.tensor(raw["image_std"]).view(3, 1)
    hf = ((every_byte.view(3, 256).float() * raw["rescale_factor"] - mean) / std).reshape(1, -1)
    torch.testing.assert_close(norm(every_byte, torch.float32), hf, rtol=1e-6, atol=1e-6)


def test_from_image_processor_honours_do_rescale_and_do_normalize() -> None:
    config = dict(rescale_factor=RESCALE, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))
    full = FusedMMInputNorm.from_image_processor(
        SimpleNamespace(**config, do_rescale=True, do_normalize=True)
    )
    assert torch.equal(full.weight, make_norm().weight) and torch.equal(full.bias, make_norm().bias)
    no_rescale = FusedMMInputNorm.from_image_processor(SimpleNamespace(**config, do_rescale=False))
    assert no_rescale.rescale_factor == 1.0
    rescale_only = FusedMMInputNorm.from_image_processor(
        SimpleNamespace(**config, do_normalize=False)
    )
    assert torch.equal(rescale_only.bias, torch.zeros(3))
    assert torch.equal(rescale_only.weight, torch.full((3,), RESCALE, dtype=torch.float32))


@pytest.mark.parametrize(
    ("mean", "std", "rescale", "channel", "match"),
    [
        ((0.5, 0.5), (0.5, 0.5, 0.5), RESCALE, 3, "3 entries"),
        ((0.5,) * 3, (0.5,) * 3, RESCALE, 1, "1 entries"),
        ((0.5,), (0.0,), RESCALE, 1, "zeros"),
        ((0.5,) * 3, (0.5,) * 3, 0.0, 3, "non-zero"),
    ],
)
def test_module_rejects_bad_config(
    mean: tuple[float, ...], std: tuple[float, ...], rescale: float, channel: int, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        FusedMMInputNorm(list(mean), list(std), rescale, channel)


def test_identity_norm_is_a_cast() -> None:
    x = pixels(torch.uint8, (3, 12))
    assert torch.equal(IdentityInputNorm()(x, torch.bfloat16), x.to(torch.bfloat16))
    same = x.float()
    assert IdentityInputNorm()(same, torch.float32) is same  # no copy when nothing changes


# ---------------------------------------------------------------- norm params and the builder


def _model_dir(tmp_path: Path, files: dict[str, dict[str, object]]) -> SimpleNamespace:
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    return SimpleNamespace(model=str(tmp_path))


CLIP = {"image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD)}


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # processor_config.json names the class but holds no norm keys: the image config decides.
        ({"processor_config.json": {"processor_class": "P"}, "preprocessor_config.json": {**CLIP, "processor_class": "P"}},
         NormParams(list(CLIP_MEAN), list(CLIP_STD), RESCALE)),
        # An `image_processor` section of the processor config wins, its flags folded.
        ({"processor_config.json": {"processor_class": "P", "image_processor": {**CLIP, "do_rescale": False}}},
         NormParams(list(CLIP_MEAN), list(CLIP_STD), 1.0)),
        ({"preprocessor_config.json": {**CLIP, "do_normalize": False, "rescale_factor": 0.5}},
         NormParams([0.0] * 3, [1.0] * 3, 0.5)),
        # No mean/std: both flags default off -> the identity.
        ({"preprocessor_config.json": {"processor_class": "P", "size": 3}}, NormParams([0.0] * 3, [1.0] * 3, 1.0)),
        ({"preprocessor_config.json": {"processor_class": "P", "media_proc_cfg": {**CLIP, "rescale_factor": 0.25}}},
         NormParams(list(CLIP_MEAN), list(CLIP_STD), 0.25)),
    ],
)  # fmt: skip
def test_load_norm_params_resolves_like_vllm(
    tmp_path: Path, files: dict[str, dict[str, object]], expected: NormParams
) -> None:
    assert _load_norm_params(_model_dir(tmp_path, files)) == expected


def test_load_norm_params_prefers_a_carried_image_processor_config(tmp_path: Path) -> None:
    config = _model_dir(tmp_path, {"preprocessor_config.json": {**CLIP}})
    config.hf_image_processor_config = {"image_mean": [0.0] * 3, "image_std": [2.0] * 3}
    assert _load_norm_params(config) == NormParams([0.0] * 3, [2.0] * 3, RESCALE)


def test_load_norm_params_rejects_broken_configs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="different lengths"):
        _load_norm_params(
            _model_dir(
                tmp_path, {"preprocessor_config.json": {"image_mean": [0.5], "image_std": [1, 1]}}
            )
        )
    with pytest.raises(ValueError, match="no image_mean"):
        _load_norm_params(
            _model_dir(
                tmp_path, {"preprocessor_config.json": {"do_normalize": True, "image_std": [1]}}
            )
        )


def test_build_mm_input_norm(tmp_path: Path) -> None:
    on = SimpleNamespace(mm_device_do_normalize=True)
    qwen = str(builtin_model_path("qwen2_vl"))
    assert isinstance(
        build_mm_input_norm(SimpleNamespace(model=qwen, multimodal_config=on)), FusedMMInputNorm
    )
    off = SimpleNamespace(
        model=qwen, multimodal_config=SimpleNamespace(mm_device_do_normalize=False)
    )
    assert isinstance(build_mm_input_norm(off), IdentityInputNorm)
    assert isinstance(
        build_mm_input_norm(SimpleNamespace(model=qwen, multimodal_config=None)), IdentityInputNorm
    )
    # Flags on, but numerically the identity: no kernel launch is worth it.
    identity = _model_dir(
        tmp_path,
        {
            "preprocessor_config.json": {
                "image_mean": [0.0] * 3,
                "image_std": [1.0] * 3,
                "do_rescale": False,
            }
        },
    )
    identity.multimodal_config = on
    assert NormParams([0.0] * 3, [1.0] * 3, 1.0).is_identity
    assert isinstance(build_mm_input_norm(identity), IdentityInputNorm)


# ---------------------------------------------------------------- the torch reference (CPU path)


@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
def test_reference_equals_unfused_hf_chain(dtype: torch.dtype) -> None:
    x = pixels(dtype)
    torch.testing.assert_close(
        call(fused_mm_input_norm_torch, x, torch.float32), unfused_hf_chain(x), rtol=1e-6, atol=1e-6
    )


def test_reference_equals_unfused_chain_for_every_byte_value() -> None:
    x = torch.arange(256, dtype=torch.uint8).repeat(3).reshape(1, 3, 256)
    torch.testing.assert_close(
        call(fused_mm_input_norm_torch, x, torch.float32), unfused_hf_chain(x), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("visual_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
def test_low_precision_output_is_the_fp32_result_rounded_once(
    dtype: torch.dtype, visual_dtype: torch.dtype
) -> None:
    x = pixels(dtype)
    in_fp32 = call(fused_mm_input_norm_torch, x, torch.float32)
    # Computing in the 16-bit dtype (or rounding twice) would miss this exact equality.
    assert torch.equal(call(fused_mm_input_norm_torch, x, visual_dtype), in_fp32.to(visual_dtype))


def test_forward_native_is_vllms_formula() -> None:
    """vLLM's forward_native: view the rows as (patches, C, P), x * w + b in fp32, then cast."""
    norm = make_norm()
    x = pixels(torch.uint8, (37, 3 * 2 * 14 * 14))
    expected = (x.reshape(37, 3, -1) * norm.weight.view(1, 3, 1) + norm.bias.view(1, 3, 1)).view(
        37, -1
    )
    assert torch.equal(norm.forward_native(x, torch.bfloat16), expected.to(torch.bfloat16))


@pytest.mark.parametrize(
    ("shape", "channel_dim"),
    [((2, 3, *HW), 1), ((2, *HW, 3), -1), ((4, 3 * 42), 1), ((4, 3 * 42), -1)],
    ids=["nchw", "nhwc", "patches", "patches_last_dim"],
)
def test_layout_extensions_match_the_canonical_layout(
    shape: tuple[int, ...], channel_dim: int
) -> None:
    x = pixels(torch.uint8, shape)
    ncl = (
        x.movedim(-1, 1).reshape(shape[0], 3, -1) if shape[-1] == 3 else x.reshape(shape[0], 3, -1)
    )
    ours = make_norm().forward_native(x, torch.float32, channel_dim=channel_dim)
    expected = unfused_hf_chain(ncl)
    expected = (
        expected.reshape(shape[0], 3, *shape[1:-1]).movedim(1, -1)
        if shape[-1] == 3
        else expected.reshape(shape)
    )
    torch.testing.assert_close(ours, expected, rtol=1e-6, atol=1e-6)


def test_cpu_chunks_cover_every_element(monkeypatch: pytest.MonkeyPatch) -> None:
    # A chunk far smaller than the input, so both splits run: along the outer axis (patch rows)
    # and inside a segment longer than a chunk (images), with ragged last chunks.
    monkeypatch.setattr(apply_module, "_CPU_CHUNK_ELEMENTS", 100)
    for x in (pixels(torch.uint8, (37, 3, 8)), pixels(torch.uint8, (3, 3, 143))):
        norm = make_norm()
        whole = x.float() * norm.weight.view(1, 3, 1) + norm.bias.view(1, 3, 1)
        assert torch.equal(call(fused_mm_input_norm_torch, x, torch.float32), whole)


def test_does_not_modify_the_inputs() -> None:
    x = pixels(torch.float32)
    before = x.clone()
    call(fused_mm_input_norm_torch, x, torch.float32)
    assert torch.equal(x, before)


def test_non_contiguous_inputs_are_read_by_their_strides() -> None:
    x = pixels(torch.uint8, (8, 3, 42))[::2].transpose(1, 2).contiguous().transpose(1, 2)
    assert not x.is_contiguous()
    assert torch.equal(
        call(fused_mm_input_norm_torch, x, torch.float32),
        call(fused_mm_input_norm_torch, x.contiguous(), torch.float32),
    )


def test_forward_on_cpu_uses_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    norm = make_norm()

    def refuse(*args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("forward_cuda called for a CPU tensor")

    monkeypatch.setattr(norm, "forward_cuda", refuse)
    x = pixels(torch.uint8, (4, 3 * 42))
    assert torch.equal(norm(x, torch.bfloat16), norm.forward_native(x, torch.bfloat16))
    assert torch.equal(norm.forward_oot(x, torch.bfloat16), norm.forward_native(x, torch.bfloat16))
    assert torch.equal(norm.forward_xpu(x, torch.bfloat16), norm.forward_native(x, torch.bfloat16))
    assert FusedMMInputNorm.enabled()


def test_works_where_triton_is_absent() -> None:
    # A fresh interpreter in which `import triton` fails, as on platforms Triton does not ship for.
    script = """
import sys
sys.modules["triton"] = None
import torch
from mediaref.ops.mm_input_norm import FusedMMInputNorm
norm = FusedMMInputNorm([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 1 / 255)
x = torch.full((1, 3 * 4), 255, dtype=torch.uint8)
assert torch.equal(norm(x, torch.float32), torch.ones(1, 3 * 4))
try:
    norm.forward_cuda(x, torch.float32)
except RuntimeError as exc:
    assert "needs Triton" in str(exc), exc
else:
    raise AssertionError("forward_cuda ran without Triton")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=110, cwd=REPO_ROOT
    )
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------- padded outputs (mediaref extension)


def test_padded_outputs_write_only_the_leading_rows() -> None:
    norm = make_norm()
    buffer = torch.full((10, 3, 32), -7.0, dtype=torch.bfloat16)
    for rows in (6, 2):  # reuse the buffer for a smaller batch
        x = pixels(torch.uint8, (rows, 3, 32), seed=rows)
        buffer[rows:] = -7.0
        assert fused_mm_input_norm_torch(x, buffer, norm.weight, norm.bias) is buffer
        assert torch.equal(buffer[:rows], call(fused_mm_input_norm_torch, x, torch.bfloat16))
        assert bool((buffer[rows:] == -7.0).all())


def test_module_out_returns_the_written_rows() -> None:
    norm = make_norm()
    buffer = torch.full((9, 3 * 32), -7.0)
    x = pixels(torch.uint8, (4, 3 * 32))
    written = norm(x, torch.float32, out=buffer)
    assert written.shape == x.shape and written.data_ptr() == buffer.data_ptr()
    assert torch.equal(written, norm(x, torch.float32)) and bool((buffer[4:] == -7.0).all())
    with pytest.raises(TypeError, match=r"out\.dtype"):
        norm(x, torch.bfloat16, out=buffer)


def test_empty_batch_writes_nothing() -> None:
    buffer = torch.full((4, 3, 42), 5.0)
    norm = make_norm()
    fused_mm_input_norm_torch(
        torch.empty((0, 3, 42), dtype=torch.uint8), buffer, norm.weight, norm.bias
    )
    assert bool((buffer == 5.0).all())


# ---------------------------------------------------------------- errors (both paths alike)


def _call_with(fn: Callable[..., torch.Tensor], **overrides: object) -> None:
    norm = make_norm()
    args: dict[str, object] = dict(
        inputs=torch.zeros((2, 3, 42), dtype=torch.uint8),
        outputs=torch.empty((2, 3, 42), dtype=torch.bfloat16),
        weight=norm.weight, bias=norm.bias,
    )  # fmt: skip
    channel_dim = overrides.pop("channel_dim", 1)
    args.update(overrides)
    fn(args["inputs"], args["outputs"], args["weight"], args["bias"], channel_dim=channel_dim)


BAD_CALLS: dict[str, tuple[dict[str, object], type[Exception], str]] = {
    "four_channels": (dict(inputs=torch.zeros((2, 4, 42), dtype=torch.uint8), outputs=torch.empty((2, 4, 42))), ValueError, "channel count 3"),
    "six_channels_not_last_dim": (dict(inputs=torch.zeros((2, 6, 4, 4), dtype=torch.uint8), outputs=torch.empty((2, 6, 4, 4))), ValueError, "inputs.shape"),
    "row_not_multiple_of_channels": (dict(inputs=torch.zeros((2, 100), dtype=torch.uint8), outputs=torch.empty((2, 100))), ValueError, "multiple"),
    "channel_dim_out_of_range": (dict(channel_dim=4), ValueError, "out of range"),
    "zero_dim_inputs": (dict(inputs=torch.tensor(3, dtype=torch.uint8)), ValueError, "at least one dimension"),
    "float64_inputs": (dict(inputs=torch.zeros((2, 3, 42), dtype=torch.float64)), TypeError, "not supported"),
    "int32_inputs": (dict(inputs=torch.zeros((2, 3, 42), dtype=torch.int32)), TypeError, "not supported"),
    "inputs_not_a_tensor": (dict(inputs=[[0, 1, 2]]), TypeError, "torch.Tensor"),
    "outputs_int8": (dict(outputs=torch.empty((2, 3, 42), dtype=torch.int8)), TypeError, "visual dtype"),
    "outputs_float64": (dict(outputs=torch.empty((2, 3, 42), dtype=torch.float64)), TypeError, "visual dtype"),
    "outputs_too_small": (dict(outputs=torch.empty((1, 3, 42), dtype=torch.bfloat16)), ValueError, "at least as many rows"),
    "outputs_wrong_trailing_shape": (dict(outputs=torch.empty((2, 3, 41), dtype=torch.bfloat16)), ValueError, "must match"),
    "outputs_not_contiguous": (dict(outputs=torch.empty((2, 42, 3), dtype=torch.bfloat16).transpose(1, 2)), ValueError, "contiguous"),
    "outputs_not_a_tensor": (dict(outputs=[0.0]), TypeError, "outputs must be"),
    "weight_float64": (dict(weight=torch.ones(3, dtype=torch.float64)), TypeError, "weight must be float32"),
    "weight_2d": (dict(weight=torch.ones(1, 3)), ValueError, "1-D"),
    "bias_length": (dict(bias=torch.zeros(4)), ValueError, "differ in length"),
}  # fmt: skip


@pytest.mark.parametrize("fn_name", sorted(NORM_FUNCTIONS))
@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_calls_raise_clear_errors(case: str, fn_name: str) -> None:
    overrides, error, match = BAD_CALLS[case]
    with pytest.raises(error, match=match):
        _call_with(NORM_FUNCTIONS[fn_name], **dict(overrides))


@pytest.mark.parametrize(
    ("pixel_values", "visual_dtype", "error", "match"),
    [
        (torch.zeros((2, 3, 42), dtype=torch.uint8), torch.bfloat16, ValueError, "must be 2D"),
        (
            torch.zeros((2, 100), dtype=torch.uint8),
            torch.bfloat16,
            ValueError,
            "not divisible by channel",
        ),
        (torch.zeros((2, 3 * 42), dtype=torch.uint8), torch.int8, TypeError, "visual_dtype"),
        ([[0, 1, 2]], torch.bfloat16, TypeError, "torch.Tensor"),
    ],
)
def test_module_checks_vllms_patch_row_contract(
    pixel_values: torch.Tensor, visual_dtype: torch.dtype, error: type[Exception], match: str
) -> None:
    for method in ("forward_native", "forward_cuda"):
        with pytest.raises(error, match=match):
            getattr(make_norm(), method)(pixel_values, visual_dtype)


@pytest.mark.skipif(not HAS_TRITON or IN_INTERPRETER, reason="needs Triton in compiled mode")
def test_triton_launcher_refuses_cpu_tensors_outside_the_interpreter() -> None:
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        _call_with(fused_mm_input_norm_triton)


def test_segment_alignment_is_the_lowest_set_bit_up_to_16() -> None:
    assert [apply_module.segment_alignment(n) for n in (1, 6, 392, 48, 4096, 1001)] == [
        1,
        2,
        8,
        16,
        16,
        1,
    ]


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


# (N, C, L): N and L that fill no tile, a segment longer than a tile (several column blocks),
# Qwen2-VL's 392-element segments (alignment 8), and L = 1 (every segment one element).
INTERPRETER_SHAPES = [(5, 3, 392), (3, 3, 37), (1, 3, 5003), (2, 3, 48), (7, 3, 1)]


@pytest.mark.skipif(not IN_INTERPRETER, reason="runs in the TRITON_INTERPRET=1 child (see above)")
class TestTritonInterpreter:
    @pytest.mark.parametrize("visual_dtype", VISUAL_DTYPES, ids=str)
    @pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
    def test_vllm_call_matches_reference(
        self, dtype: torch.dtype, visual_dtype: torch.dtype
    ) -> None:
        x = pixels(dtype, (3, 3, 37))
        expected = call(fused_mm_input_norm_torch, x, visual_dtype)
        actual = call(fused_mm_input_norm_triton, x, visual_dtype)
        if visual_dtype == torch.float16:
            assert torch.equal(actual, expected)  # the interpreter rounds fp16 like torch
        assert_matches(actual, expected)

    @pytest.mark.parametrize("shape", INTERPRETER_SHAPES, ids=str)
    def test_tile_edges(self, shape: tuple[int, int, int]) -> None:
        x = pixels(torch.uint8, shape)
        assert torch.equal(
            call(fused_mm_input_norm_triton, x, torch.float32),
            call(fused_mm_input_norm_torch, x, torch.float32),
        )

    def test_padded_outputs_write_only_the_leading_rows(self) -> None:
        norm = make_norm()
        x = pixels(torch.uint8, (3, 3, 37))
        buffer = torch.full((7, 3, 37), -7.0)
        assert fused_mm_input_norm_triton(x, buffer, norm.weight, norm.bias) is buffer
        assert torch.equal(buffer[:3], call(fused_mm_input_norm_torch, x, torch.float32))
        assert bool((buffer[3:] == -7.0).all())

    @pytest.mark.parametrize(
        ("shape", "channel_dim"),
        [((2, 3, 5, 7), 1), ((2, 5, 7, 3), -1), ((3, 3 * 392), 1)],
        ids=str,
    )
    def test_layouts_and_module(self, shape: tuple[int, ...], channel_dim: int) -> None:
        x = pixels(torch.uint8, shape)
        norm = make_norm()
        expected = norm.forward_native(x, torch.bfloat16, channel_dim=channel_dim)
        assert_matches(norm.forward_cuda(x, torch.bfloat16, channel_dim=channel_dim), expected)

    def test_non_contiguous_inputs(self) -> None:
        x = pixels(torch.uint8, (6, 37, 3)).transpose(1, 2)
        assert torch.equal(
            call(fused_mm_input_norm_triton, x, torch.float32),
            call(fused_mm_input_norm_torch, x, torch.float32),
        )

    def test_empty_batch_launches_nothing(self) -> None:
        buffer = torch.full((2, 3, 32), 5.0)
        norm = make_norm()
        fused_mm_input_norm_triton(
            torch.empty((0, 3, 32), dtype=torch.uint8), buffer, norm.weight, norm.bias
        )
        assert bool((buffer == 5.0).all())


# ---------------------------------------------------------------- Triton kernel on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not HAS_TRITON, reason="needs CUDA and Triton")
class TestCuda:
    @pytest.mark.parametrize("visual_dtype", VISUAL_DTYPES, ids=str)
    @pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=str)
    @pytest.mark.parametrize(
        "shape", [(64, 3, 392), (5, 3, 37), (2, 3, 448 * 448 + 1), (7, 3, 1)], ids=str
    )
    def test_vllm_call_matches_reference(
        self, shape: tuple[int, int, int], dtype: torch.dtype, visual_dtype: torch.dtype
    ) -> None:
        x = pixels(dtype, shape).cuda()
        norm = make_norm().cuda()
        expected = torch.empty(shape, dtype=visual_dtype, device="cuda")
        actual = torch.empty(shape, dtype=visual_dtype, device="cuda")
        fused_mm_input_norm_torch(x, expected, norm.weight, norm.bias)
        assert fused_mm_input_norm_triton(x, actual, norm.weight, norm.bias) is actual
        assert_matches(actual, expected)

    @pytest.mark.parametrize(
        ("shape", "channel_dim"),
        [((4096, 3 * 2 * 14 * 14), None), ((2, 3, 448, 448), 1), ((3, 224, 224, 3), -1)],
        ids=str,
    )
    def test_realistic_shapes(self, shape: tuple[int, ...], channel_dim: int | None) -> None:
        x = torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda")
        norm = make_norm().cuda()
        expected = norm.forward_native(x, torch.bfloat16, channel_dim=channel_dim)
        assert_matches(norm.forward_cuda(x, torch.bfloat16, channel_dim=channel_dim), expected)

    def test_forward_dispatches_to_triton(self, monkeypatch: pytest.MonkeyPatch) -> None:
        norm = make_norm().cuda()

        def refuse(*args: object, **kwargs: object) -> torch.Tensor:
            raise AssertionError("forward_native called for a CUDA tensor")

        x = torch.randint(0, 256, (16, 3 * 392), dtype=torch.uint8, device="cuda")
        expected = norm.forward_native(x, torch.bfloat16)
        monkeypatch.setattr(norm, "forward_native", refuse)
        assert_matches(norm(x, torch.bfloat16), expected)

    def test_padded_outputs_write_only_the_leading_rows(self) -> None:
        norm = make_norm().cuda()
        x = torch.randint(0, 256, (300, 3, 392), dtype=torch.uint8, device="cuda")
        buffer = torch.full((512, 3, 392), -7.0, dtype=torch.bfloat16, device="cuda")
        fused_mm_input_norm_triton(x, buffer, norm.weight, norm.bias)
        expected = torch.empty((300, 3, 392), dtype=torch.bfloat16, device="cuda")
        assert_matches(buffer[:300], fused_mm_input_norm_torch(x, expected, norm.weight, norm.bias))
        assert bool((buffer[300:] == -7.0).all())

    def test_more_than_2_to_the_31_output_elements(self) -> None:
        """The tile's 64-bit base offset: rows past element 2**31 of a padded buffer are right."""
        rows = (2**31) // (3 * 392) + 64
        norm = make_norm().cuda()
        x = torch.randint(0, 256, (rows, 3, 392), dtype=torch.uint8, device="cuda")
        out = torch.empty((rows, 3, 392), dtype=torch.bfloat16, device="cuda")
        fused_mm_input_norm_triton(x, out, norm.weight, norm.bias)
        tail = x[-128:]
        expected = torch.empty(tail.shape, dtype=torch.bfloat16, device="cuda")
        assert_matches(
            out[-128:], fused_mm_input_norm_torch(tail, expected, norm.weight, norm.bias)
        )
