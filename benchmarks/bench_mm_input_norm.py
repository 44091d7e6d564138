"""The device step's bandwidth: mediaref's kernel beside torch's composite and vLLM's kernel shape.

    python benchmarks/bench_mm_input_norm.py [--json PATH] [--csv PATH] [--hbm-gbps 4800]
    python benchmarks/bench_mm_input_norm.py --dry-run     # on a CPU: every path, tiny shapes
    python benchmarks/bench_mm_input_norm.py --cpu         # the CPU path (forward_native) vs HF's chain

Workloads (uint8 in, bf16 out, the CLIP mean/std Qwen2-VL uses), in the layout the model gets:

* ``1img``, ``8img``, ``64img``: Qwen2-VL ``pixel_values`` rows ``(patches, 3 * 2 * 14 * 14)`` of
  1, 8 and 64 images of 1008 x 1008 (~1 MP: 5,184 patch rows each), normalized as vLLM's
  ``forward_cuda`` calls the kernel, ``(N, C, L) = (patches, 3, 392)``;
* ``clip32``: a 32-frame 480p clip (resized to 476 x 840: 16 x 34 x 60 = 32,640 patch rows);
* ``8img_nchw``: the 8 images as ``(8, 3, 1008 * 1008)``, one long segment per channel.

Contenders, each timed by ``triton.testing.do_bench`` (median, L2 flushed before every call):

* ``mediaref``: :func:`~mediaref.ops.mm_input_norm.fused_mm_input_norm_triton` as shipped, and
  ``mediaref_t{tile}_w{warps}`` variants of its tile size and warp count (a sweep, to pick them);
* ``vllm_flat1024``: vLLM 0.33.0's kernel *shape*, written here independently: flat 1,024-element
  tiles, 4 warps, ``channel = (offset // L) % C`` per element, weight and bias gathered per element;
* ``torch_composite``: ``(x.float() * w + b).to(bf16)``, fp32 intermediates in memory;
* ``cast_copy``: ``out.copy_(x)``, the same bytes moved (uint8 read, bf16 written) with no math:
  the ceiling a memory-bound kernel can reach on this device.

Bandwidth is (bytes read + bytes written) / time; ``hbm_fraction`` divides it by the device's
nominal HBM bandwidth (``--hbm-gbps``; known for H200 4,800 GB/s and H100 SXM 3,350 GB/s) and
``copy_fraction`` by ``cast_copy``'s. The issue's target: ``mediaref`` >= 80% of HBM at 8 images
and above on an H200. Also per workload: the host-to-device transfer of the pixels as bf16 (CPU
normalize) and as uint8 (the device path), from pinned memory.

``--cpu`` times what runs where there is no GPU: the module's torch path against HF's unfused
chain ``((x * rescale) - mean) / std`` then ``.to(bf16)``, on ``1img`` and 16 images ``(16, 3,
448 * 448)``, round-robin medians.

``--dry-run`` runs every contender on tiny shapes on the CPU, the Triton kernels in the
interpreter (``TRITON_INTERPRET=1``, set here before any kernel is defined), timed by wall clock:
it proves the script end to end, its figures mean nothing. Without CUDA and without
``--dry-run`` the script fails rather than report CPU numbers as device ones.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

if "--dry-run" in sys.argv:
    # @triton.jit picks interpreted or compiled mode when a kernel is defined.
    os.environ["TRITON_INTERPRET"] = "1"

import torch

from mediaref.ops import _mm_input_norm_apply as apply_module
from mediaref.ops.mm_input_norm import (
    FusedMMInputNorm,
    fused_mm_input_norm_torch,
    fused_mm_input_norm_triton,
)

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
RESCALE = 1 / 255
PATCH_ROW = 3 * 2 * 14 * 14  # C * temporal * patch * patch
IMAGE_PATCHES = 72 * 72  # 1008 x 1008
CLIP_PATCHES = 16 * 34 * 60  # 32 frames of 476 x 840
NOMINAL_HBM_GBPS = {"H200": 4800.0, "H100": 3350.0}
SWEEP = [(2048, 4), (4096, 4), (8192, 8), (8192, 16), (16384, 16)]

# name -> (full shape, dry-run shape); (N, C, L) as the kernel is called.
WORKLOADS: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    "1img": ((IMAGE_PATCHES, 3, PATCH_ROW // 3), (8, 3, PATCH_ROW // 3)),
    "8img": ((8 * IMAGE_PATCHES, 3, PATCH_ROW // 3), (24, 3, PATCH_ROW // 3)),
    "64img": ((64 * IMAGE_PATCHES, 3, PATCH_ROW // 3), (40, 3, PATCH_ROW // 3)),
    "clip32": ((CLIP_PATCHES, 3, PATCH_ROW // 3), (16, 3, PATCH_ROW // 3)),
    "8img_nchw": ((8, 3, 1008 * 1008), (2, 3, 4000)),
}


def flat_kernel() -> Any:
    """vLLM's kernel shape (flat 1,024-element tiles, per-element channel), written here."""
    import triton
    import triton.language as tl

    # Parameters unannotated as in src/mediaref/ops/_mm_input_norm_kernel.py: Triton reads them.
    @triton.jit  # type: ignore[untyped-decorator]  # triton has no stubs
    def flat_norm_kernel(  # type: ignore[no-untyped-def]  # annotations change what Triton compiles
        x_ptr, out_ptr, w_ptr, b_ptr, numel, seg_len, C: tl.constexpr, BLOCK: tl.constexpr
    ):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < numel
        channel = (offsets // seg_len) % C
        x = tl.load(x_ptr + offsets, mask=mask, other=0, eviction_policy="evict_first").to(
            tl.float32
        )
        w = tl.load(w_ptr + channel, mask=mask, other=0)
        b = tl.load(b_ptr + channel, mask=mask, other=0)
        tl.store(out_ptr + offsets, x * w + b, mask=mask, eviction_policy="evict_first")

    def launch(
        x: torch.Tensor, out: torch.Tensor, w: torch.Tensor, b: torch.Tensor
    ) -> torch.Tensor:
        _, c, seg_len = x.shape
        assert x.numel() < 2**31  # int32 offsets, as vLLM asserts
        grid = (triton.cdiv(x.numel(), 1024),)
        flat_norm_kernel[grid](x, out, w, b, x.numel(), seg_len, C=c, BLOCK=1024, num_warps=4)
        return out

    return launch


def mediaref_variant(tile: int, warps: int) -> Callable[..., torch.Tensor]:
    """The shipped launcher with another tile size / warp count (module constants, restored)."""

    def launch(
        x: torch.Tensor, out: torch.Tensor, w: torch.Tensor, b: torch.Tensor
    ) -> torch.Tensor:
        saved = apply_module._TILE_ELEMENTS, apply_module._NUM_WARPS
        apply_module._TILE_ELEMENTS, apply_module._NUM_WARPS = tile, warps  # type: ignore[misc]
        try:
            return fused_mm_input_norm_triton(x, out, w, b)
        finally:
            apply_module._TILE_ELEMENTS, apply_module._NUM_WARPS = saved  # type: ignore[misc]

    return launch


def make_timer(cuda: bool, dry_run: bool) -> Callable[[Callable[[], Any]], float]:
    """Seconds per call: do_bench's median (L2 flushed) on CUDA, wall-clock median on a dry run."""
    if cuda:
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e-3

    def wall(fn: Callable[[], Any]) -> float:
        fn()
        samples = []
        for _ in range(3 if dry_run else 10):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    return wall


def check(name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Before timing: every contender computes the same thing (bf16: 1 ulp, the interpreter
    truncates where torch rounds)."""
    diff = (actual.float() - expected.float()).abs()
    bound = expected.float().abs() * 2**-7 + 1e-6
    if not bool((diff <= bound).all()):
        raise AssertionError(
            f"{name} disagrees with the torch reference: max |diff| {float(diff.max()):.3g}"
        )


def bench_workload(
    name: str,
    shape: tuple[int, int, int],
    device: torch.device,
    timer: Callable[..., float],
    sweep: bool,
) -> list[dict[str, Any]]:
    norm = FusedMMInputNorm(CLIP_MEAN, CLIP_STD, RESCALE).to(device)
    w, b = norm.weight, norm.bias
    generator = torch.Generator().manual_seed(0)
    x_cpu = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    x = x_cpu.to(device)
    out = torch.empty(shape, dtype=torch.bfloat16, device=device)
    expected = fused_mm_input_norm_torch(x, torch.empty_like(out), w, b)
    w3, b3 = w.view(1, 3, 1), b.view(1, 3, 1)

    kernels: dict[str, Callable[..., torch.Tensor]] = {
        "mediaref": fused_mm_input_norm_triton,
        "vllm_flat1024": flat_kernel(),
    }
    if sweep:
        kernels.update(
            {f"mediaref_t{tile}_w{warps}": mediaref_variant(tile, warps) for tile, warps in SWEEP}
        )

    def bound(kernel: Callable[..., torch.Tensor]) -> Callable[[], torch.Tensor]:
        return lambda: kernel(x, out, w, b)

    contenders: dict[str, Callable[[], Any]] = {
        kernel_name: bound(kernel) for kernel_name, kernel in kernels.items()
    }
    contenders["torch_composite"] = lambda: (x.float() * w3 + b3).to(torch.bfloat16)
    contenders["cast_copy"] = lambda: out.copy_(x)
    for kernel_name, kernel in kernels.items():
        out.fill_(0)
        check(kernel_name, kernel(x, out, w, b), expected)
    check("torch_composite", contenders["torch_composite"](), expected)

    moved = x.numel() * (x.element_size() + out.element_size())
    rows = []
    for contender, fn in contenders.items():
        seconds = timer(fn)
        rows.append({"workload": name, "shape": list(shape), "contender": contender, "time_s": seconds,
                     "bytes_moved": moved, "gbps": moved / seconds / 1e9})  # fmt: skip
    if device.type == "cuda":
        pinned_u8 = x_cpu.pin_memory()
        pinned_bf16 = expected.cpu().pin_memory()
        for label, pinned in (
            ("h2d_bf16_cpu_normalized", pinned_bf16),
            ("h2d_uint8_device_path", pinned_u8),
        ):

            def copy_to_device(p: torch.Tensor = pinned) -> torch.Tensor:
                return p.to(device, non_blocking=True)

            seconds = timer(copy_to_device)
            nbytes = pinned.numel() * pinned.element_size()
            rows.append({"workload": name, "shape": list(shape), "contender": label, "time_s": seconds,
                         "bytes_moved": nbytes, "gbps": nbytes / seconds / 1e9})  # fmt: skip
    return rows


def bench_cpu_path(repeat: int = 15) -> None:
    norm = FusedMMInputNorm(CLIP_MEAN, CLIP_STD, RESCALE)
    mean, std = torch.tensor(CLIP_MEAN).view(1, 3, 1), torch.tensor(CLIP_STD).view(1, 3, 1)
    print(f"CPU path, {torch.get_num_threads()} threads, median of {repeat}")
    for name, shape in (("1img", WORKLOADS["1img"][0]), ("16img_448", (16, 3, 448 * 448))):
        x = torch.randint(
            0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
        )
        out = torch.empty(shape, dtype=torch.bfloat16)

        def hf_unfused_chain(x: torch.Tensor = x) -> torch.Tensor:
            return ((x.float() * RESCALE - mean) / std).to(torch.bfloat16)

        def mediaref_torch(x: torch.Tensor = x, out: torch.Tensor = out) -> torch.Tensor:
            return fused_mm_input_norm_torch(x, torch.empty_like(out), norm.weight, norm.bias)

        def mediaref_torch_out(x: torch.Tensor = x, out: torch.Tensor = out) -> torch.Tensor:
            return fused_mm_input_norm_torch(x, out, norm.weight, norm.bias)

        contenders: dict[str, Callable[[], torch.Tensor]] = {
            "hf_unfused_chain": hf_unfused_chain,
            "mediaref_torch": mediaref_torch,
            "mediaref_torch_out": mediaref_torch_out,
        }
        samples: dict[str, list[float]] = {key: [] for key in contenders}
        for _ in range(repeat):
            for key, fn in contenders.items():
                start = time.perf_counter()
                fn()
                samples[key].append(time.perf_counter() - start)
        base = statistics.median(samples["hf_unfused_chain"])
        for key, times in samples.items():
            median = statistics.median(times)
            print(
                f"{name:10s} {key:20s} {median * 1e3:8.2f} ms   x{base / median:5.2f} vs the HF chain"
            )


def add_fractions(rows: list[dict[str, Any]], hbm_gbps: float | None) -> None:
    copy_gbps = {r["workload"]: r["gbps"] for r in rows if r["contender"] == "cast_copy"}
    for row in rows:
        if row["contender"].startswith("h2d"):
            row["hbm_fraction"] = row["copy_fraction"] = None
            continue
        row["hbm_fraction"] = row["gbps"] / hbm_gbps if hbm_gbps else None
        row["copy_fraction"] = row["gbps"] / copy_gbps[row["workload"]]


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'workload':10s} {'contender':26s} {'time':>10s} {'GB/s':>9s} {'HBM':>6s} {'copy':>6s}")
    for r in rows:
        hbm = f"{r['hbm_fraction']:.0%}" if r.get("hbm_fraction") is not None else "-"
        copy = f"{r['copy_fraction']:.0%}" if r.get("copy_fraction") is not None else "-"
        print(
            f"{r['workload']:10s} {r['contender']:26s} {r['time_s'] * 1e6:8.1f}us {r['gbps']:9.1f} {hbm:>6s} {copy:>6s}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on the CPU, kernels interpreted"
    )
    parser.add_argument("--json", default=None, help="write every row and the device facts here")
    parser.add_argument("--csv", default=None, help="write every row here")
    parser.add_argument(
        "--hbm-gbps", type=float, default=None, help="nominal HBM GB/s (default: by device name)"
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the tile/warp variants")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    parser.add_argument(
        "--cpu", action="store_true", help="time the CPU path instead (no GPU needed)"
    )
    args = parser.parse_args()
    if args.cpu:
        bench_cpu_path()
        return 0

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print(
            "error: no CUDA device; this benchmark measures the GPU (use --dry-run on a CPU)",
            file=sys.stderr,
        )
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    device_name = (
        torch.cuda.get_device_name(device) if cuda else "cpu (dry run: figures are meaningless)"
    )
    hbm_gbps = args.hbm_gbps
    if hbm_gbps is None and cuda:
        hbm_gbps = next(
            (gbps for key, gbps in NOMINAL_HBM_GBPS.items() if key in device_name), None
        )
    import triton

    print(f"{device_name}; torch {torch.__version__}, triton {triton.__version__}; nominal HBM "
          f"{hbm_gbps or 'unknown'} GB/s")  # fmt: skip
    timer = make_timer(cuda, args.dry_run)
    rows: list[dict[str, Any]] = []
    for name in args.workloads.split(","):
        full, tiny = WORKLOADS[name]
        rows += bench_workload(
            name, tiny if args.dry_run else full, device, timer, sweep=not args.no_sweep
        )
    add_fractions(rows, hbm_gbps)
    print_rows(rows)
    facts = {"device": device_name, "dry_run": args.dry_run, "nominal_hbm_gbps": hbm_gbps,
             "torch": torch.__version__, "triton": triton.__version__, "rows": rows}  # fmt: skip
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(facts, handle, indent=2)
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({**row, "shape": "x".join(map(str, row["shape"]))} for row in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
