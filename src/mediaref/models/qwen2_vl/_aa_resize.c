/* torch's uint8 antialiased bicubic resize, one separable pass at a time, bit for bit.
 *
 * On x86 with AVX2, `interpolate(uint8, mode="bicubic", antialias=True)` on the CPU runs an
 * integer kernel (Pillow-SIMD's design): per axis, double weights from Keys' cubic (a = -0.5)
 * stretched by the scale when downscaling, normalized to sum 1, then rounded to int16 fixed
 * point with the most fraction bits that keep twice the largest weight under 2^15; each output
 * byte is (2^(p-1) + sum(input * weight)) >> p, saturated to 0..255. It resizes the width first
 * (into a uint8 intermediate) then the height, and skips an axis whose size does not change.
 * The arithmetic is integer, so any order of the sums gives the same bytes: the plain C loops,
 * the AVX2 ones and the AVX-512 ones here (the CPU's best, chosen at run time) give torch's bytes
 * exactly (pinned by tests/test_resize_rows_native.py and the fused path's parity tests on real
 * images). The weights are computed here, in double, with the same expressions in the same
 * order, so they round the same way. Speed (1080p -> 1092x1932, RGBX, one core, with the patch
 * rows): AVX-512 ~3 ms, AVX2 ~4 ms, against ~5.7 ms for torch's kernel then the rows.
 */

#include "_aa_resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AA_HAVE_AVX2_CODE 1
#include <immintrin.h>
#endif

/* Keys' cubic convolution with a = -0.5, written as torch writes it (the same roundings). */
static double
keys_cubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) {
        return ((a + 2) * x - (a + 3)) * x * x + 1;
    }
    if (x < 2.0) {
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    }
    return 0.0;
}

void
aa_axis_free(AxisWeights *axis)
{
    free(axis->start);
    free(axis->size);
    free(axis->weights);
    axis->start = NULL;
    axis->size = NULL;
    axis->weights = NULL;
}

int
aa_axis_weights(AxisWeights *axis, ptrdiff_t in_size, ptrdiff_t out_size, int in_quads)
{
    const double scale = (double)in_size / (double)out_size;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    /* At most this many input pixels fall under the filter (torch's own bound). */
    const int bound = (int)ceil(support) * 2 + 1;
    const int taps = in_quads ? (bound + 3) / 4 * 4 : bound;
    double *window = malloc(sizeof(double) * (size_t)bound);
    double *real = malloc(sizeof(double) * (size_t)bound * (size_t)out_size);
    axis->in_size = in_size;
    axis->out_size = out_size;
    axis->taps = taps;
    axis->start = malloc(sizeof(ptrdiff_t) * (size_t)out_size);
    axis->size = malloc(sizeof(int) * (size_t)out_size);
    axis->weights = calloc((size_t)out_size * (size_t)taps, sizeof(int16_t));
    if (window == NULL || real == NULL || axis->start == NULL || axis->size == NULL ||
        axis->weights == NULL) {
        free(window);
        free(real);
        aa_axis_free(axis);
        return -1;
    }
    double largest = 0.0;
    for (ptrdiff_t i = 0; i < out_size; i++) {
        const double center = scale * ((double)i + 0.5);
        ptrdiff_t first = (ptrdiff_t)(center - support + 0.5);
        if (first < 0) {
            first = 0;
        }
        ptrdiff_t stop = (ptrdiff_t)(center + support + 0.5);
        if (stop > in_size) {
            stop = in_size;
        }
        const ptrdiff_t size = stop - first;
        double total = 0.0;
        for (ptrdiff_t j = 0; j < size; j++) {
            window[j] = keys_cubic(((double)(j + first) - center + 0.5) * invscale);
            total += window[j];
        }
        for (ptrdiff_t j = 0; j < size; j++) {
            double w = window[j];
            if (total != 0.0) {
                w /= total;
                if (w > largest) {
                    largest = w;
                }
            }
            real[i * bound + j] = w;
        }
        axis->start[i] = first;
        axis->size[i] = (int)size;
    }
    /* torch's precision: the most fraction bits (below 22) keeping 2 * largest under 2^15. */
    int precision = 0;
    for (; precision < 22; precision++) {
        if ((int)(0.5 + largest * (double)(1 << (precision + 1))) >= (1 << 15)) {
            break;
        }
    }
    axis->precision = precision;
    for (ptrdiff_t i = 0; i < out_size; i++) {
        /* A window reaching past the axis's end moves back inside it (its weights shifted to
         * match, zeros in front), so reads of four taps stay in bounds. */
        ptrdiff_t shift = 0;
        if (in_quads && axis->start[i] + taps > in_size && in_size >= taps) {
            shift = axis->start[i] + taps - in_size;
            axis->start[i] -= shift;
        }
        for (ptrdiff_t j = 0; j < axis->size[i]; j++) {
            const double v = real[i * bound + j] * (double)(1 << precision);
            axis->weights[i * taps + shift + j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
        }
        axis->size[i] += (int)shift; /* the zeros in front count as taps */
    }
    free(window);
    free(real);
    return 0;
}

int
aa_quads_in_bounds(const AxisWeights *axis)
{
    return axis->taps % 4 == 0 && axis->in_size >= axis->taps;
}

static uint8_t
saturate(int32_t value)
{
    return value < 0 ? 0 : value > 255 ? 255 : (uint8_t)value;
}

/* ---- plain C ---------------------------------------------------------------------------- */

/* Output pixel x of `count` rows. */
static void
plain_pixel(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
            int pixel_bytes, const AxisWeights *axis, ptrdiff_t x)
{
    const int32_t bias = 1 << (axis->precision - 1);
    const int16_t *w = axis->weights + x * axis->taps;
    const ptrdiff_t taps = axis->size[x];
    for (ptrdiff_t r = 0; r < count; r++) {
        const uint8_t *p = src_rows[r] + axis->start[x] * pixel_bytes;
        for (int c = 0; c < pixel_bytes; c++) {
            int32_t sum = bias;
            for (ptrdiff_t k = 0; k < taps; k++) {
                sum += (int32_t)p[k * pixel_bytes + c] * w[k];
            }
            dst_rows[r][x * pixel_bytes + c] = saturate(sum >> axis->precision);
        }
    }
}

static void
horizontal_plain(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                 int pixel_bytes, const AxisWeights *axis)
{
    for (ptrdiff_t r = 0; r < count; r++) {
        for (ptrdiff_t x = 0; x < axis->out_size; x++) {
            plain_pixel(src_rows + r, dst_rows + r, 1, pixel_bytes, axis, x);
        }
    }
}

static void
vertical_plain(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
               const AxisWeights *axis, uint8_t *dst, ptrdiff_t from)
{
    const int16_t *w = axis->weights + y * axis->taps;
    const ptrdiff_t taps = axis->size[y];
    const int32_t bias = 1 << (axis->precision - 1);
    for (ptrdiff_t i = from; i < row_bytes; i++) {
        int32_t sum = bias;
        for (ptrdiff_t k = 0; k < taps; k++) {
            sum += (int32_t)rows[k][i] * w[k];
        }
        dst[i] = saturate(sum >> axis->precision);
    }
}

/* ---- vectors ------------------------------------------------------------------------------ */

#ifdef AA_HAVE_AVX2_CODE

/* Two taps' weights as one 32-bit lane, the pair `madd_epi16` multiplies. */
static inline int32_t
weight_pair(const int16_t *w)
{
    int32_t pair;
    memcpy(&pair, w, sizeof(pair));
    return pair;
}

/* The horizontal pass reads four taps of a row as one 16-byte load into a 128-bit lane (one row
 * a lane: 2 rows with AVX2, 4 with AVX-512, all with the same weights), then two shuffles make
 * 16-bit pairs (byte c of tap k, byte c of tap k + 1) for taps 0-1 and 2-3, each multiplied by
 * its weight pair: each byte's four-tap sum in a 32-bit lane after two madds. 4-byte pixels are
 * loaded from the first tap; 3-byte ones from 4 bytes before it, so no load reads past the
 * fourth tap (the windows are inside the row: aa_quads_in_bounds); the windows that start at
 * the row's first two pixels, where that would read before it, take the plain loop. */
#define QUAD_SHUFFLES_RGBX                                                                     \
    0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1,                                   \
    8, -1, 12, -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1
#define QUAD_SHUFFLES_RGB                                                                      \
    4, -1, 7, -1, 5, -1, 8, -1, 6, -1, 9, -1, -1, -1, -1, -1,                                 \
    10, -1, 13, -1, 11, -1, 14, -1, 12, -1, 15, -1, -1, -1, -1, -1

static const int8_t quad_shuffles[2][32] = {{QUAD_SHUFFLES_RGB}, {QUAD_SHUFFLES_RGBX}};

static inline ptrdiff_t
quad_back(int pixel_bytes)
{
    return pixel_bytes == 4 ? 0 : 4;
}

/* Whether outputs [x, x + 4) can all take the vector loads (none reads before the row): the
 * first one's window starts first, as windows never start further left than the one before. */
static inline int
vector_group(const AxisWeights *axis, ptrdiff_t x, ptrdiff_t back, int pixel_bytes)
{
    return axis->start[x] * pixel_bytes >= back;
}

/* One output's sums for the 2 rows in `top` and `bottom` (AVX2: a row a 128-bit lane), shifted:
 * each byte's value in a 32-bit lane, still to be saturated. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
output_avx2(const uint8_t *top, const uint8_t *bottom, ptrdiff_t offset, const int16_t *w,
            int size, int pixel_bytes, __m256i low_pairs, __m256i high_pairs, __m256i bias,
            __m128i shift)
{
    __m256i sum = bias;
    for (int k = 0; k < size; k += 4) {
        const ptrdiff_t at = offset + pixel_bytes * k;
        const __m256i both = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(top + at))),
            _mm_loadu_si128((const __m128i *)(bottom + at)), 1);
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(both, low_pairs),
                                                      _mm256_set1_epi32(weight_pair(w + k))));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(both, high_pairs),
                                                      _mm256_set1_epi32(weight_pair(w + k + 2))));
    }
    return _mm256_sra_epi32(sum, shift);
}

/* Four outputs' pixels, one 16-byte row of them, stored: all 16 bytes of 4-byte pixels, the
 * first 12 of 3-byte ones (compacted by `three_of_four`). */
__attribute__((target("avx2"), always_inline)) static inline void
store_four_avx2(uint8_t *dst, __m128i bytes, int pixel_bytes, __m128i three_of_four)
{
    if (pixel_bytes == 4) {
        _mm_storeu_si128((__m128i *)dst, bytes);
        return;
    }
    bytes = _mm_shuffle_epi8(bytes, three_of_four);
    _mm_storel_epi64((__m128i *)dst, bytes);
    const int32_t last = _mm_cvtsi128_si32(_mm_srli_si128(bytes, 8));
    memcpy(dst + 8, &last, 4);
}

static const int8_t three_of_four_bytes[16] = {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1};

/* Two rows at once, four outputs a step: each output's sums (output_avx2), then the four
 * packed together so that each row's four pixels come out as one run of bytes, stored whole
 * (a pixel per store would cost more than its sums). Outputs past the last whole four, and
 * fours with a window that starts too near the row's start, take the plain loop. */
__attribute__((target("avx2"), always_inline)) static inline void
horizontal_avx2(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                const int pixel_bytes, const AxisWeights *axis)
{
    const int8_t *masks = quad_shuffles[pixel_bytes - 3];
    const __m256i low_pairs = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)masks));
    const __m256i high_pairs =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(masks + 16)));
    const __m128i three_of_four = _mm_loadu_si128((const __m128i *)three_of_four_bytes);
    const ptrdiff_t back = quad_back(pixel_bytes);
    const __m256i bias = _mm256_set1_epi32(1 << (axis->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(axis->precision);
    const ptrdiff_t whole = axis->out_size / 4 * 4;
    for (ptrdiff_t r = 0; r < count; r += 2) {
        /* An odd last row is computed as both rows of a pair (the same bytes, stored twice). */
        const ptrdiff_t rows = r + 1 < count ? 2 : 1;
        const uint8_t *top = src_rows[r], *bottom = src_rows[r + rows - 1];
        for (ptrdiff_t x = 0; x < whole; x += 4) {
            if (!vector_group(axis, x, back, pixel_bytes)) {
                for (ptrdiff_t i = x; i < x + 4; i++) {
                    plain_pixel(src_rows + r, dst_rows + r, rows, pixel_bytes, axis, i);
                }
                continue;
            }
            __m256i sums[4];
            for (int i = 0; i < 4; i++) {
                sums[i] = output_avx2(top, bottom, axis->start[x + i] * pixel_bytes - back,
                                      axis->weights + (x + i) * axis->taps, axis->size[x + i],
                                      pixel_bytes, low_pairs, high_pairs, bias, shift);
            }
            /* Per lane (row): outputs x, x + 1 as 16-bit, then x + 2, x + 3; then bytes. */
            const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(sums[0], sums[1]),
                                                      _mm256_packs_epi32(sums[2], sums[3]));
            store_four_avx2(dst_rows[r + rows - 1] + pixel_bytes * x,
                            _mm256_extracti128_si256(bytes, 1), pixel_bytes, three_of_four);
            store_four_avx2(dst_rows[r] + pixel_bytes * x, _mm256_castsi256_si128(bytes),
                            pixel_bytes, three_of_four);
        }
        for (ptrdiff_t x = whole; x < axis->out_size; x++) {
            plain_pixel(src_rows + r, dst_rows + r, rows, pixel_bytes, axis, x);
        }
    }
}

#define AVX512 "avx512f,avx512bw,avx512vl"

/* As output_avx2, for the 4 rows in[0..3], a row a 128-bit lane. */
__attribute__((target(AVX512), always_inline)) static inline __m512i
output_avx512(const uint8_t *const in[4], ptrdiff_t offset, const int16_t *w, int size,
              int pixel_bytes, __m512i low_pairs, __m512i high_pairs, __m512i bias, __m128i shift)
{
    __m512i sum = bias;
    for (int k = 0; k < size; k += 4) {
        const ptrdiff_t at = offset + pixel_bytes * k;
        __m512i four = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(in[0] + at)));
        four = _mm512_inserti32x4(four, _mm_loadu_si128((const __m128i *)(in[1] + at)), 1);
        four = _mm512_inserti32x4(four, _mm_loadu_si128((const __m128i *)(in[2] + at)), 2);
        four = _mm512_inserti32x4(four, _mm_loadu_si128((const __m128i *)(in[3] + at)), 3);
        sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_shuffle_epi8(four, low_pairs),
                                                      _mm512_set1_epi32(weight_pair(w + k))));
        sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_shuffle_epi8(four, high_pairs),
                                                      _mm512_set1_epi32(weight_pair(w + k + 2))));
    }
    return _mm512_sra_epi32(sum, shift);
}

__attribute__((target(AVX512), always_inline)) static inline void
store_four_avx512(uint8_t *dst, __m128i bytes, int pixel_bytes, __m128i three_of_four)
{
    if (pixel_bytes == 4) {
        _mm_storeu_si128((__m128i *)dst, bytes);
    } else {
        _mm_mask_storeu_epi8(dst, 0x0FFF, _mm_shuffle_epi8(bytes, three_of_four));
    }
}

/* As horizontal_avx2, 4 rows at once (a row a 128-bit lane of 512). */
__attribute__((target(AVX512), always_inline)) static inline void
horizontal_avx512(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                  const int pixel_bytes, const AxisWeights *axis)
{
    const int8_t *masks = quad_shuffles[pixel_bytes - 3];
    const __m512i low_pairs = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)masks));
    const __m512i high_pairs =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(masks + 16)));
    const __m128i three_of_four = _mm_loadu_si128((const __m128i *)three_of_four_bytes);
    const ptrdiff_t back = quad_back(pixel_bytes);
    const __m512i bias = _mm512_set1_epi32(1 << (axis->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(axis->precision);
    const ptrdiff_t whole = axis->out_size / 4 * 4;
    for (ptrdiff_t r = 0; r < count; r += 4) {
        /* Fewer than 4 rows left: the last one stands in for the missing (the same bytes). */
        const ptrdiff_t rows = count - r < 4 ? count - r : 4;
        const uint8_t *in[4];
        uint8_t *out[4];
        for (int i = 0; i < 4; i++) {
            in[i] = src_rows[r + (i < rows ? i : rows - 1)];
            out[i] = dst_rows[r + (i < rows ? i : rows - 1)];
        }
        for (ptrdiff_t x = 0; x < whole; x += 4) {
            if (!vector_group(axis, x, back, pixel_bytes)) {
                for (ptrdiff_t i = x; i < x + 4; i++) {
                    plain_pixel(src_rows + r, dst_rows + r, rows, pixel_bytes, axis, i);
                }
                continue;
            }
            __m512i sums[4];
            for (int i = 0; i < 4; i++) {
                sums[i] = output_avx512(in, axis->start[x + i] * pixel_bytes - back,
                                        axis->weights + (x + i) * axis->taps, axis->size[x + i],
                                        pixel_bytes, low_pairs, high_pairs, bias, shift);
            }
            const __m512i bytes = _mm512_packus_epi16(_mm512_packs_epi32(sums[0], sums[1]),
                                                      _mm512_packs_epi32(sums[2], sums[3]));
            store_four_avx512(out[3] + pixel_bytes * x, _mm512_extracti32x4_epi32(bytes, 3),
                              pixel_bytes, three_of_four);
            store_four_avx512(out[2] + pixel_bytes * x, _mm512_extracti32x4_epi32(bytes, 2),
                              pixel_bytes, three_of_four);
            store_four_avx512(out[1] + pixel_bytes * x, _mm512_extracti32x4_epi32(bytes, 1),
                              pixel_bytes, three_of_four);
            store_four_avx512(out[0] + pixel_bytes * x, _mm512_castsi512_si128(bytes),
                              pixel_bytes, three_of_four);
        }
        for (ptrdiff_t x = whole; x < axis->out_size; x++) {
            plain_pixel(src_rows + r, dst_rows + r, rows, pixel_bytes, axis, x);
        }
    }
}

/* The pixel size as a constant in each: the 3- or 4-byte stores inline. */
__attribute__((target("avx2"))) static void
horizontal_avx2_rgb(const uint8_t *const *src, uint8_t *const *dst, ptrdiff_t count,
                    const AxisWeights *axis)
{
    horizontal_avx2(src, dst, count, 3, axis);
}

__attribute__((target("avx2"))) static void
horizontal_avx2_rgbx(const uint8_t *const *src, uint8_t *const *dst, ptrdiff_t count,
                     const AxisWeights *axis)
{
    horizontal_avx2(src, dst, count, 4, axis);
}

__attribute__((target(AVX512))) static void
horizontal_avx512_rgb(const uint8_t *const *src, uint8_t *const *dst, ptrdiff_t count,
                      const AxisWeights *axis)
{
    horizontal_avx512(src, dst, count, 3, axis);
}

__attribute__((target(AVX512))) static void
horizontal_avx512_rgbx(const uint8_t *const *src, uint8_t *const *dst, ptrdiff_t count,
                       const AxisWeights *axis)
{
    horizontal_avx512(src, dst, count, 4, axis);
}

/* The vertical pass: 32 (AVX2) or 64 (AVX-512) bytes of the output row a step, two input rows a
 * step: their bytes interleaved into 16-bit lanes (row k, row k + 1) and multiplied by the
 * weight pair. The unpacks work within 128-bit lanes and the packs undo them in the same lanes,
 * so the bytes come back in order. An odd last row pairs with itself, weighted 0. */
__attribute__((target("avx2"))) static ptrdiff_t
vertical_avx2(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
              const AxisWeights *axis, uint8_t *dst,
              ptrdiff_t from)
{
    const int16_t *w = axis->weights + y * axis->taps;
    const ptrdiff_t taps = axis->size[y];
    const __m256i bias = _mm256_set1_epi32(1 << (axis->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(axis->precision);
    const __m256i zero = _mm256_setzero_si256();
    ptrdiff_t i = from;
    for (; i + 32 <= row_bytes; i += 32) {
        __m256i s0 = bias, s1 = bias, s2 = bias, s3 = bias;
        for (ptrdiff_t k = 0; k < taps; k += 2) {
            const int odd = k + 1 == taps;
            const __m256i a = _mm256_loadu_si256((const __m256i *)(rows[k] + i));
            const __m256i b = odd ? a : _mm256_loadu_si256((const __m256i *)(rows[k + 1] + i));
            const __m256i weights =
                _mm256_set1_epi32(odd ? (int32_t)(uint16_t)w[k] : weight_pair(w + k));
            const __m256i low = _mm256_unpacklo_epi8(a, b), high = _mm256_unpackhi_epi8(a, b);
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_unpacklo_epi8(low, zero), weights));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_unpackhi_epi8(low, zero), weights));
            s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_unpacklo_epi8(high, zero), weights));
            s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_unpackhi_epi8(high, zero), weights));
        }
        s0 = _mm256_sra_epi32(s0, shift);
        s1 = _mm256_sra_epi32(s1, shift);
        s2 = _mm256_sra_epi32(s2, shift);
        s3 = _mm256_sra_epi32(s3, shift);
        const __m256i bytes =
            _mm256_packus_epi16(_mm256_packs_epi32(s0, s1), _mm256_packs_epi32(s2, s3));
        _mm256_storeu_si256((__m256i *)(dst + i), bytes);
    }
    return i;
}

__attribute__((target(AVX512))) static ptrdiff_t
vertical_avx512(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
                const AxisWeights *axis, uint8_t *dst,
                ptrdiff_t from)
{
    const int16_t *w = axis->weights + y * axis->taps;
    const ptrdiff_t taps = axis->size[y];
    const __m512i bias = _mm512_set1_epi32(1 << (axis->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(axis->precision);
    const __m512i zero = _mm512_setzero_si512();
    ptrdiff_t i = from;
    for (; i + 64 <= row_bytes; i += 64) {
        __m512i s0 = bias, s1 = bias, s2 = bias, s3 = bias;
        for (ptrdiff_t k = 0; k < taps; k += 2) {
            const int odd = k + 1 == taps;
            const __m512i a = _mm512_loadu_si512((const void *)(rows[k] + i));
            const __m512i b = odd ? a : _mm512_loadu_si512((const void *)(rows[k + 1] + i));
            const __m512i weights =
                _mm512_set1_epi32(odd ? (int32_t)(uint16_t)w[k] : weight_pair(w + k));
            const __m512i low = _mm512_unpacklo_epi8(a, b), high = _mm512_unpackhi_epi8(a, b);
            s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(_mm512_unpacklo_epi8(low, zero), weights));
            s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(_mm512_unpackhi_epi8(low, zero), weights));
            s2 = _mm512_add_epi32(s2, _mm512_madd_epi16(_mm512_unpacklo_epi8(high, zero), weights));
            s3 = _mm512_add_epi32(s3, _mm512_madd_epi16(_mm512_unpackhi_epi8(high, zero), weights));
        }
        s0 = _mm512_sra_epi32(s0, shift);
        s1 = _mm512_sra_epi32(s1, shift);
        s2 = _mm512_sra_epi32(s2, shift);
        s3 = _mm512_sra_epi32(s3, shift);
        const __m512i bytes =
            _mm512_packus_epi16(_mm512_packs_epi32(s0, s1), _mm512_packs_epi32(s2, s3));
        _mm512_storeu_si512((void *)(dst + i), bytes);
    }
    return i;
}

static int cpu_level = -1; /* -1: not asked yet */
static int level = -1;

static int
best_level(void)
{
    if (cpu_level < 0) {
        __builtin_cpu_init();
        /* libgcc's and clang's checks include the OS saving the registers' state (XCR0). */
        cpu_level = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl")
                        ? 2
                    : __builtin_cpu_supports("avx2")                                         ? 1
                                                                                             : 0;
    }
    return cpu_level;
}

int
aa_simd_level(void)
{
    if (level < 0) {
        level = best_level();
    }
    return level;
}

int
aa_set_simd_level(int wanted)
{
    const int best = best_level();
    level = wanted < 0 ? 0 : wanted > best ? best : wanted;
    return level;
}

#else

int
aa_simd_level(void)
{
    return 0;
}

int
aa_set_simd_level(int wanted)
{
    (void)wanted;
    return 0;
}

#endif

/* ---- dispatch ----------------------------------------------------------------------------- */

void
aa_horizontal(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
              int pixel_bytes, const AxisWeights *axis)
{
#ifdef AA_HAVE_AVX2_CODE
    const int simd = aa_quads_in_bounds(axis) ? aa_simd_level() : 0;
    if (simd == 2) {
        (pixel_bytes == 4 ? horizontal_avx512_rgbx : horizontal_avx512_rgb)(src_rows, dst_rows,
                                                                            count, axis);
        return;
    }
    if (simd == 1) {
        (pixel_bytes == 4 ? horizontal_avx2_rgbx : horizontal_avx2_rgb)(src_rows, dst_rows, count,
                                                                        axis);
        return;
    }
#endif
    horizontal_plain(src_rows, dst_rows, count, pixel_bytes, axis);
}

void
aa_vertical(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
            const AxisWeights *axis, uint8_t *dst)
{
    ptrdiff_t done = 0;
#ifdef AA_HAVE_AVX2_CODE
    const int simd = aa_simd_level();
    if (simd == 2) {
        done = vertical_avx512(rows, row_bytes, y, axis, dst, done);
    }
    if (simd >= 1) { /* the rest of the row 32 bytes a step (all of it at level 1) */
        done = vertical_avx2(rows, row_bytes, y, axis, dst, done);
    }
#endif
    vertical_plain(rows, row_bytes, y, axis, dst, done);
}
