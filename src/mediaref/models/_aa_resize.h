/* torch's uint8 antialiased bicubic resize (the CPU kernel torchvision's `resize` reaches), one
 * separable pass at a time, bit for bit: see _aa_resize.c. Used by _patch_rows_native.c to
 * resize a band of rows at a time and write its patch rows while the band is in cache. */

#ifndef MEDIAREF_AA_RESIZE_H
#define MEDIAREF_AA_RESIZE_H

#include <stddef.h>
#include <stdint.h>

/* One axis's integer weights: output i reads input pixels from start[i], weighted by
 * weights[i * taps ...], fixed point with `precision` fraction bits; only its first size[i]
 * weights can be nonzero (the rest of its `taps` are zero). */
typedef struct {
    ptrdiff_t in_size, out_size;
    int taps;
    int precision;
    ptrdiff_t *start;
    int *size;
    int16_t *weights;
} AxisWeights;

/* The weights torch computes for resizing an axis from `in_size` to `out_size`. With `even`,
 * `taps` is rounded up to an even count and every window moved inside [0, in_size) where the
 * axis is long enough (its weights shifted to match), so a pass may read taps in pairs without
 * reading past the axis (`aa_pairs_in_bounds` says whether that holds). 0 on success, -1 when
 * out of memory. */
int aa_axis_weights(AxisWeights *axis, ptrdiff_t in_size, ptrdiff_t out_size, int even);
void aa_axis_free(AxisWeights *axis);
int aa_pairs_in_bounds(const AxisWeights *axis);

/* The horizontal pass over `count` rows: src_rows[r] (axis->in_size pixels of `pixel_bytes`)
 * resized into dst_rows[r] (axis->out_size pixels). `pixel_bytes` 3 or 4; every byte of a
 * pixel is resized on its own, as torch does. */
void aa_horizontal(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                   int pixel_bytes, const AxisWeights *axis);

/* The vertical pass for output row `y`: rows[j] is input row axis->start[y] + j, each
 * `row_bytes` long; the resized row is written to `dst`. */
void aa_vertical(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
                 const AxisWeights *axis, uint8_t *dst);

/* Whether the passes use the CPU's vector instructions (AVX2) in this process; tests turn it
 * off to check the plain C loops give the same bytes. */
int aa_simd_enabled(void);
void aa_set_simd(int enabled);

#endif
