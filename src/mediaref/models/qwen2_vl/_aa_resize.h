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

/* The weights torch computes for resizing an axis from `in_size` to `out_size`. With
 * `in_quads`, `taps` is rounded up to a multiple of 4 and every window moved inside
 * [0, in_size) where the axis is long enough (its weights shifted to match), so a pass may read
 * taps four at a time without reading past the axis (`aa_quads_in_bounds` says whether that
 * holds). 0 on success, -1 when out of memory. */
int aa_axis_weights(AxisWeights *axis, ptrdiff_t in_size, ptrdiff_t out_size, int in_quads);
void aa_axis_free(AxisWeights *axis);
int aa_quads_in_bounds(const AxisWeights *axis);

/* The horizontal pass over `count` rows: src_rows[r] (axis->in_size pixels of `pixel_bytes`)
 * resized into dst_rows[r] (axis->out_size pixels). `pixel_bytes` 3 or 4; every byte of a
 * pixel is resized on its own, as torch does. */
void aa_horizontal(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                   int pixel_bytes, const AxisWeights *axis);

/* The vertical pass for output row `y`: rows[j] is input row axis->start[y] + j, each
 * `row_bytes` long; the resized row is written to `dst`. */
void aa_vertical(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
                 const AxisWeights *axis, uint8_t *dst);

/* The vector instructions the passes use in this process: 0 none (plain C), 1 AVX2, 2 AVX-512
 * (BW). The CPU's best by default; tests lower it to check every level gives the same bytes. */
int aa_simd_level(void);
/* Use at most `level` (the CPU's best where it is lower); returns the level now in use. */
int aa_set_simd_level(int level);

#endif
