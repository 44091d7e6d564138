"""Rescale + normalize of pixel values: the fused op vs the unfused HF chain, side by side.

HF image processors compute ``(x * rescale - mean) / std`` in fp32 on the CPU, and the model then
casts to its visual dtype. ``mediaref.ops.mm_input_norm`` folds that into ``x * weight[c] + bias[c]``
computed in fp32 and written straight to ``visual_dtype`` (bf16 here). Workloads, uint8 in:

* ``qwen2vl_patches``: Qwen2-VL ``pixel_values`` rows (N, 3*2*14*14) for a ~2 MP image;
* ``images_nchw``: a batch of 16 images (16, 3, 448, 448).

CPU rows: the unfused chain vs :func:`fused_mm_input_norm_torch` (the CPU path), timed round-robin.
On CUDA also (batch repeated ``--gpu-scale`` times so it outgrows L2): the same two on the GPU, the
Triton kernel with its effective bandwidth (bytes read + written per second), and the transfer
each path needs (bf16 after a CPU normalize vs raw uint8).

Run: ``python benchmarks/bench_mm_input_norm.py [--repeat N] [--threads T]``; medians over N
round-robin runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from mediaref.ops.mm_input_norm import FusedMMInputNorm

RESCALE = 1 / 255
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
WORKLOADS = {
    "qwen2vl_patches": (72 * 72, 3 * 2 * 14 * 14),  # 1008 x 1008 image, 5184 patch rows
    "images_nchw": (16, 3, 448, 448),
}


def unfused_chain(x: torch.Tensor, visual_dtype: torch.dtype) -> torch.Tensor:
    """The HF order of operations, channel-major rows as in both workloads."""
    channels_first = x.reshape(x.shape[0], 3, -1)
    mean = torch.tensor(CLIP_MEAN, device=x.device).view(1, 3, 1)
    std = torch.tensor(CLIP_STD, device=x.device).view(1, 3, 1)
    return ((channels_first.float() * RESCALE - mean) / std).to(visual_dtype).reshape(x.shape)


def assert_close_bf16(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Sanity check before timing: both sides compute the same thing (bf16 resolution)."""
    torch.testing.assert_close(actual.float(), expected.float(), rtol=1e-2, atol=1e-2)


def interleaved_medians(
    fns: dict[str, Callable[[], Any]], repeat: int, cuda: bool = False
) -> dict[str, float]:
    """Median seconds per function, timed round-robin so load drifting during the run (other
    processes on a shared machine) affects every contender alike."""
    for fn in fns.values():
        fn()  # warm-up: kernel compile, first-touch allocations
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def bench_cpu(name: str, x: torch.Tensor, norm: FusedMMInputNorm, repeat: int) -> list[str]:
    bf16 = torch.bfloat16
    out = torch.empty(x.shape, dtype=bf16)
    assert_close_bf16(norm(x, bf16), unfused_chain(x, bf16))
    timings = interleaved_medians(
        {
            "unfused": lambda: unfused_chain(x, bf16),
            "fused": lambda: norm(x, bf16),
            "fused_out": lambda: norm(x, bf16, out=out),
        },
        repeat,
    )
    unfused, fused, fused_out = timings["unfused"], timings["fused"], timings["fused_out"]
    return [
        f"{name:16s} cpu  unfused chain        {unfused * 1e3:8.2f} ms",
        f"{name:16s} cpu  fused torch          {fused * 1e3:8.2f} ms   x{unfused / fused:5.2f} vs unfused",
        f"{name:16s} cpu  fused torch, out=    {fused_out * 1e3:8.2f} ms   x{unfused / fused_out:5.2f} vs unfused",
    ]


def bench_cuda(name: str, x_cpu: torch.Tensor, norm: FusedMMInputNorm, scale: int) -> list[str]:
    """Device rows, timed by Triton's CUDA-graph bench (no launch overhead). The batch is repeated
    ``scale`` times so input + output (far) exceed the L2 cache and the bandwidth is HBM's."""
    from triton.testing import do_bench, do_bench_cudagraph

    bf16 = torch.bfloat16
    x_cpu = x_cpu.repeat(scale, *([1] * (x_cpu.ndim - 1)))
    x = x_cpu.cuda()
    norm = norm.cuda()
    out = torch.empty(x.shape, dtype=bf16, device="cuda")
    assert_close_bf16(norm.forward_cuda(x, bf16, out=out), unfused_chain(x, bf16))

    def device_ms(fn: Callable[[], Any]) -> float:
        return float(do_bench_cudagraph(fn, return_mode="median"))

    unfused = device_ms(lambda: unfused_chain(x, bf16))
    native = device_ms(lambda: norm.forward_native(x, bf16, out=out))
    triton = device_ms(lambda: norm.forward_cuda(x, bf16, out=out))
    moved_bytes = x.numel() * (x.element_size() + out.element_size())

    # The transfer each path needs: bf16 after a CPU normalize vs the raw uint8 bytes.
    pinned_u8 = x_cpu.pin_memory()
    pinned_bf16 = unfused_chain(x_cpu, bf16).pin_memory()
    h2d_u8 = float(do_bench(lambda: pinned_u8.to("cuda", non_blocking=True), return_mode="median"))
    h2d_bf16 = float(do_bench(lambda: pinned_bf16.to("cuda", non_blocking=True), return_mode="median"))
    label = f"{name} x{scale}"
    return [
        f"{label:16s} cuda unfused chain        {unfused:8.3f} ms",
        f"{label:16s} cuda torch reference      {native:8.3f} ms   x{unfused / native:5.2f} vs unfused",
        f"{label:16s} cuda triton kernel        {triton:8.3f} ms   x{unfused / triton:5.2f} vs unfused"
        f"   {moved_bytes / (triton * 1e-3) / 1e9:7.1f} GB/s effective",
        f"{label:16s} h2d  bf16 (CPU normalize) {h2d_bf16:8.3f} ms",
        f"{label:16s} h2d  uint8 (fused path)   {h2d_u8:8.3f} ms   x{h2d_bf16 / h2d_u8:5.2f} vs bf16",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--gpu-scale", type=int, default=16, help="batch repeats for the CUDA rows")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    norm = FusedMMInputNorm(RESCALE, CLIP_MEAN, CLIP_STD)
    generator = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, median of {args.repeat}")
    for name, shape in WORKLOADS.items():
        x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
        print(f"{name}: uint8 {tuple(shape)}, {x.numel() / 1e6:.1f} M elements -> bf16")
        lines = bench_cpu(name, x, norm, args.repeat)
        if torch.cuda.is_available():
            lines += bench_cuda(name, x, norm, args.gpu_scale)
        print("\n".join(lines))


if __name__ == "__main__":
    main()
