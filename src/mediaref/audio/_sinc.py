"""Band-limited sinc resampling with a Hann window: torchaudio's ``Resample`` default, in numpy.

vLLM's default resampling method is torchaudio's ``transforms.Resample(orig, new)``
(``sinc_interp_hann``, a filter 6 zero crossings wide, cutoff at 99% of the lower Nyquist rate).
torchaudio is not a dependency here, so this is the same filter computed from its definition:

With both rates reduced by their gcd to ``orig`` and ``new``, output sample ``j`` of every block
of ``new`` outputs reads the ``2 * width + orig`` input samples around block ``n`` (input offset
``n * orig - width``) through a kernel row::

    t = (k - width) / orig - j / new            for k in 0 .. 2 * width + orig - 1
    t = clip(t * base, -6, 6)                   base = min(orig, new) * 0.99
    h[j, k] = sinc(t) * cos(t * pi / 12) ** 2 * base / orig

and the input is zero-padded by ``width`` before and ``width + orig`` after. The output has
``ceil(n_in * new / orig)`` samples. The filter is applied as one matrix product per chunk of
blocks (a strided view of the input times the kernel), so memory stays near the output's size
and no torch thread state is touched in the decode workers.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

_ZERO_CROSSINGS = 6
_ROLLOFF = 0.99
# Output blocks per matrix product: bounds the strided view's copy to a few MB.
_BLOCKS_PER_CHUNK = 1 << 14


class SincResampler:
    """torchaudio's ``Resample(orig_sr, target_sr)`` at its defaults: the kernel is built once,
    here, for the gcd-reduced rates; calling it resamples ``audio`` (any shape, time on the last
    axis) to float32."""

    def __init__(self, orig_sr: int, target_sr: int) -> None:
        gcd = math.gcd(orig_sr, target_sr)
        self.orig, self.new = orig_sr // gcd, target_sr // gcd
        base = min(self.orig, self.new) * _ROLLOFF
        self.width = math.ceil(_ZERO_CROSSINGS * self.orig / base)
        taps = np.arange(-self.width, self.width + self.orig, dtype=np.float64) / self.orig
        phases = -np.arange(self.new, dtype=np.float64)[:, None] / self.new
        t = np.clip((phases + taps) * base, -_ZERO_CROSSINGS, _ZERO_CROSSINGS)
        window = np.cos(t * math.pi / _ZERO_CROSSINGS / 2) ** 2
        # np.sinc(x) is sin(pi x) / (pi x), and 1 at 0. Transposed to (2 * width + orig, new)
        # for the product.
        kernel = (np.sinc(t) * window * (base / self.orig)).T
        self.kernel = np.ascontiguousarray(kernel, dtype=np.float32)
        self.kernel.flags.writeable = False  # cached and shared: nobody may change it

    def __call__(self, audio: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
        orig, new, width, kernel = self.orig, self.new, self.width, self.kernel
        signal = np.asarray(audio, dtype=np.float32)
        rows = signal.reshape(-1, signal.shape[-1])
        length = rows.shape[-1]
        out_length = math.ceil(new * length / orig)
        taps = kernel.shape[0]
        padded = np.pad(rows, ((0, 0), (width, width + orig)))
        blocks = (padded.shape[-1] - taps) // orig + 1
        out = np.empty((rows.shape[0], blocks * new), dtype=np.float32)
        row_stride, col_stride = padded.strides
        for start in range(0, blocks, _BLOCKS_PER_CHUNK):
            count = min(_BLOCKS_PER_CHUNK, blocks - start)
            # (rows, count, taps): block b of this chunk reads taps samples from (start + b) * orig.
            windows = as_strided(
                padded[:, start * orig :],
                shape=(rows.shape[0], count, taps),
                strides=(row_stride, orig * col_stride, col_stride),
                writeable=False,
            )
            chunk = windows @ kernel  # (rows, count, new): block-major, phase-minor
            out[:, start * new : (start + count) * new] = chunk.reshape(rows.shape[0], count * new)
        result = out[:, :out_length]
        return result.reshape(*signal.shape[:-1], out_length)


@lru_cache(maxsize=32)
def sinc_resampler(orig_sr: int, target_sr: int) -> SincResampler:
    """The resampler for one pair of whole-hertz rates, built once: as vLLM caches torchaudio's
    (its private ``_get_torchaudio_resampler``, under which name mediaref exports this too)."""
    return SincResampler(orig_sr, target_sr)


__all__ = ["SincResampler", "sinc_resampler"]
