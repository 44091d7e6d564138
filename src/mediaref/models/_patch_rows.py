"""Pixel work of the fused vision path: RGB conversion, the exact resize, patch rows.

Each step reproduces what transformers' default (torchvision) image and video processors do to
the same pixels, bit for bit, with fewer copies:

- :func:`rgb_array` is HF's PIL conversion (transparency composited onto white, everything
  else through ``Image.convert("RGB")``), the same Pillow calls, so every mode Pillow reads
  (L, LA, P, RGBA, CMYK, I;16, ...) converts as it does there.
- :func:`resize_frames` runs the kernel torchvision's ``resize`` reaches for uint8 bicubic on
  the CPU (``interpolate(..., antialias=True)`` on uint8, integer arithmetic). It is fed the
  decoded ``(H, W, C)`` buffer as a channels-last view, which is the layout that kernel works
  in, so HF's two repacks (to planes, and back inside the kernel) are skipped.
- :func:`patch_rows` writes the resized frames straight into the final
  ``(grid_t * grid_h * grid_w, C * T * P * P)`` row order in one strided copy of P-byte runs
  (a numpy ``V{P}`` view: one element per patch row segment), where HF makes a 9-D uint8 copy.

Torch's kernel and numpy's copy release the GIL, so items run in parallel on the media pool;
nothing here depends on the thread that runs it, so the bytes are the same whatever the pool.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from PIL import Image

__all__ = ["patch_rows", "resize_frames", "rgb_array"]

# ``np.asarray(pil_image)`` is read-only (it wraps the bytes Pillow hands out), and copying it
# to make it writeable would cost a full frame. Torch only reads it here, but warns once per
# process the first time it wraps a read-only array; that one warning is spent here, at import,
# rather than surfacing in a server's log as "undefined behavior".
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    torch.from_numpy(np.frombuffer(b"\0", dtype=np.uint8))


def rgb_array(image: Image.Image) -> np.ndarray:
    """``(H, W, 3)`` uint8, converted as HF's ``convert_to_rgb(image, return_numpy=True)``."""
    has_alpha = "A" in image.getbands() or image.info.get("transparency") is not None
    if has_alpha:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        rgb = Image.alpha_composite(white, rgba).convert("RGB")
    else:
        rgb = image.convert("RGB")
    return np.asarray(rgb)


def resize_frames(frames: np.ndarray, height: int, width: int) -> torch.Tensor:
    """``(N, H, W, C)`` uint8 frames resized (bicubic, antialiased) to ``(N, C, height, width)``
    contiguous channel planes, as torchvision resizes uint8 on the CPU; unchanged when the size
    already matches (torchvision returns its input then)."""
    channels_last = torch.from_numpy(frames).permute(0, 3, 1, 2)
    if channels_last.shape[-2:] == (height, width):
        return channels_last.contiguous()
    resized = torch.nn.functional.interpolate(
        channels_last, size=[height, width], mode="bicubic", align_corners=False, antialias=True
    )
    return resized.contiguous()


def patch_rows(
    planes: torch.Tensor, *, patch_size: int, merge_size: int, temporal_patch_size: int
) -> np.ndarray:
    """``(F, C, H, W)`` uint8 planes as Qwen2-VL's ``(rows, C * T * P * P)`` patch rows.

    Frames are grouped ``temporal_patch_size`` at a time; a last short group repeats its last
    frame (HF pads a video so, and an image is one frame repeated ``T`` times). Rows run
    ``(t, h / merge, w / merge, merge_h, merge_w)``, each ``(C, T, P_h, P_w)``.
    """
    frames, channels, height, width = planes.shape
    t_size, p_size, m_size = temporal_patch_size, patch_size, merge_size
    grid_t = -(-frames // t_size)
    grid_h, grid_w = height // p_size, width // p_size
    rows = np.empty((grid_t * grid_h * grid_w, channels * t_size * p_size * p_size), dtype=np.uint8)
    # One element per P-byte run: a patch row of one channel is contiguous in both layouts.
    run = np.dtype(f"V{p_size}")
    source = (
        planes.numpy()
        .view(run)
        .reshape(frames, channels, grid_h // m_size, m_size, p_size, grid_w // m_size, m_size)
    )
    target = rows.view(run).reshape(
        grid_t, grid_h // m_size, grid_w // m_size, m_size, m_size, channels, t_size, p_size
    )
    # The same rows as whole (P x P) patches, to repeat a slot with long copies.
    patches = torch.from_numpy(rows).view(grid_t, -1, channels, t_size, p_size * p_size)
    for group in range(grid_t):
        for slot in range(t_size):
            frame = group * t_size + slot
            if frame >= frames:
                # A padded slot repeats the last frame, already in the previous slot.
                patches[group, :, :, slot].copy_(patches[group, :, :, slot - 1])
                continue
            # (C, h/m, m_h, P_h, w/m, m_w) -> (h/m, w/m, m_h, m_w, C, P_h)
            target[group, :, :, :, :, :, slot] = source[frame].transpose(1, 4, 2, 5, 0, 3)
    return rows
