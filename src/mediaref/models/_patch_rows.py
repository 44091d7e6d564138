"""Pixel work of the fused vision path: RGB conversion, the exact resize, patch rows.

Each step reproduces what transformers' default (torchvision) image and video processors do to
the same pixels, bit for bit, with fewer copies:

- :func:`rgb_pixels` is HF's PIL conversion (transparency composited onto white, everything
  else through ``Image.convert("RGB")``), the same Pillow calls, so every mode Pillow reads
  (L, LA, P, RGBA, CMYK, I;16, ...) converts as it does there. An RGB image is used as it is
  (the conversion would copy the same values), and its pixels are read in place, in Pillow's
  own 4-byte RGBX storage (:func:`mediaref.models._rgbx_view.rgbx_view`), not repacked.
- :func:`resize_frames` runs the kernel torchvision's ``resize`` reaches for uint8 bicubic on
  the CPU (``interpolate(..., antialias=True)`` on uint8, integer arithmetic). It is fed the
  decoded ``(H, W, C)`` buffer as a channels-last view, which is the layout that kernel works
  in, so HF's two repacks (to planes, and back inside the kernel) are skipped. The kernel
  computes every channel on its own (it even pads 3 channels to 4 internally), so resizing the
  RGBX storage and keeping the first three planes gives HF's bytes (pinned by the tests) without
  the 3-byte export.
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

from mediaref.models._rgbx_view import rgbx_view

__all__ = ["patch_rows", "resize_frames", "rgb_pixels"]

# ``np.asarray(pil_image)`` is read-only (it wraps the bytes Pillow hands out), and copying it
# to make it writeable would cost a full frame. Torch only reads it here, but warns once per
# process the first time it wraps a read-only array; that one warning is spent here, at import,
# rather than surfacing in a server's log as "undefined behavior".
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    torch.from_numpy(np.frombuffer(b"\0", dtype=np.uint8))


def rgb_pixels(image: Image.Image) -> np.ndarray:
    """``(H, W, C)`` uint8 whose first three channels are ``image`` converted as HF's
    ``convert_to_rgb(image, return_numpy=True)``; ``C`` is 4 (Pillow's padding byte last) where
    the converted image's storage can be read in place, else 3."""
    has_alpha = "A" in image.getbands() or image.info.get("transparency") is not None
    if has_alpha:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        rgb = Image.alpha_composite(white, rgba).convert("RGB")
    elif image.mode == "RGB":
        rgb = image  # convert("RGB") would copy the same values
    else:
        rgb = image.convert("RGB")
    in_place = rgbx_view(rgb)
    return in_place if in_place is not None else np.asarray(rgb)


def resize_frames(
    frames: np.ndarray, height: int, width: int, *, channels: int | None = None
) -> torch.Tensor:
    """``(N, H, W, C)`` uint8 frames resized (bicubic, antialiased) to ``(N, C, height, width)``
    contiguous channel planes, as torchvision resizes uint8 on the CPU; unchanged when the size
    already matches (torchvision returns its input then).

    ``channels``: keep only the first ``channels`` planes (a padding channel is resized with the
    others, the kernel's channels being independent, and dropped; the planes are then a view
    with each plane contiguous, as :func:`patch_rows` needs).
    """
    channels_last = torch.from_numpy(frames).permute(0, 3, 1, 2)
    if channels_last.shape[-2:] == (height, width):
        return channels_last[:, :channels].contiguous()
    resized = torch.nn.functional.interpolate(
        channels_last, size=[height, width], mode="bicubic", align_corners=False, antialias=True
    )
    return resized.contiguous()[:, :channels]


def patch_rows(
    planes: torch.Tensor,
    *,
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``(F, C, H, W)`` uint8 planes as Qwen2-VL's ``(rows, C * T * P * P)`` patch rows.

    Frames are grouped ``temporal_patch_size`` at a time; a last short group repeats its last
    frame (HF pads a video so, and an image is one frame repeated ``T`` times). Rows run
    ``(t, h / merge, w / merge, merge_h, merge_w)``, each ``(C, T, P_h, P_w)``. ``out``: a
    C-contiguous uint8 array of exactly that shape to write them into (a slice of a whole
    video's rows, for frames processed in pieces), returned; None: a new one.
    """
    frames, channels, height, width = planes.shape
    t_size, p_size, m_size = temporal_patch_size, patch_size, merge_size
    grid_t = -(-frames // t_size)
    grid_h, grid_w = height // p_size, width // p_size
    shape = (grid_t * grid_h * grid_w, channels * t_size * p_size * p_size)
    if out is None:
        rows = np.empty(shape, dtype=np.uint8)
    elif out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous uint8 of shape {shape}, got {out.shape}")
    else:
        rows = out
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
