/* torch's uint8 antialiased bicubic resize, one separable pass at a time, bit for bit.
 *
 * On x86 with AVX2, `interpolate(uint8, mode="bicubic", antialias=True)` on the CPU runs an
 * integer kernel (Pillow-SIMD's design): per axis, double weights from Keys' cubic (a = -0.5)
 * stretched by the scale when downscaling, normalized to sum 1, then rounded to int16 fixed
 * point with the most fraction bits that keep twice the largest weight under 2^15; each output
 * byte is (2^(p-1) + sum(input * weight)) >> p, saturated to 0..255. It resizes the width first
 * (into a uint8 intermediate) then the height, and skips an axis whose size does not change.
 * The arithmetic is integer, so any order of the sums gives the same bytes: the plain C loops
 * and the AVX2 ones here give torch's bytes exactly (pinned by tests/test_patch_rows_native.py
 * and the fused path's parity tests on real images). The weights are computed here, in double,
 * with the same expressions in the same order, so they round the same way.
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
aa_axis_weights(AxisWeights *axis, ptrdiff_t in_size, ptrdiff_t out_size, int even)
{
    const double scale = (double)in_size / (double)out_size;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    /* At most this many input pixels fall under the filter (torch's own bound). */
    const int bound = (int)ceil(support) * 2 + 1;
    int taps = even ? bound + (bound & 1) : bound;
    double *window = malloc(sizeof(double) * (size_t)bound);
    double *real = malloc(sizeof(double) * (size_t)bound * (size_t)out_size);
    ptrdiff_t *sizes = malloc(sizeof(ptrdiff_t) * (size_t)out_size);
    axis->in_size = in_size;
    axis->out_size = out_size;
    axis->taps = taps;
    axis->start = malloc(sizeof(ptrdiff_t) * (size_t)out_size);
    axis->size = malloc(sizeof(int) * (size_t)out_size);
    axis->weights = calloc((size_t)out_size * (size_t)taps, sizeof(int16_t));
    if (window == NULL || real == NULL || sizes == NULL || axis->start == NULL ||
        axis->size == NULL || axis->weights == NULL) {
        free(window);
        free(real);
        free(sizes);
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
        sizes[i] = size;
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
         * match, zeros in front), so paired reads stay in bounds. */
        ptrdiff_t shift = 0;
        if (even && axis->start[i] + taps > in_size && in_size >= taps) {
            shift = axis->start[i] + taps - in_size;
            axis->start[i] -= shift;
        }
        for (ptrdiff_t j = 0; j < sizes[i]; j++) {
            const double v = real[i * bound + j] * (double)(1 << precision);
            axis->weights[i * taps + shift + j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
        }
        axis->size[i] = (int)(shift + sizes[i]);
    }
    free(window);
    free(real);
    free(sizes);
    return 0;
}

int
aa_pairs_in_bounds(const AxisWeights *axis)
{
    return axis->taps % 2 == 0 && axis->in_size >= axis->taps;
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

/* ---- AVX2 --------------------------------------------------------------------------------- */

#ifdef AA_HAVE_AVX2_CODE

/* Two taps' weights as one 32-bit lane, the pair `_mm256_madd_epi16` multiplies. */
static inline int32_t
weight_pair(const int16_t *w)
{
    int32_t pair;
    memcpy(&pair, w, sizeof(pair));
    return pair;
}

/* Two rows at once (one per 128-bit lane), two taps a step: the two taps' pixels are
 * interleaved byte by byte into 16-bit lanes (c of tap k, c of tap k + 1) and multiplied by the
 * weight pair, giving each byte's two-tap sum in a 32-bit lane. A step loads 8 bytes: 4-byte
 * pixels from the first tap's, 3-byte ones from 2 bytes before it, so no load reads past the
 * last tap (the windows are inside the row: aa_pairs_in_bounds); the one window that starts at
 * the row's first pixel, where that would read before it, takes the plain loop. */
__attribute__((target("avx2"), always_inline)) static inline void
horizontal_avx2(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                const int pixel_bytes, const AxisWeights *axis)
{
    const __m256i rgbx = _mm256_setr_epi8(
        0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1,
        0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
    const __m256i rgb = _mm256_setr_epi8(
        2, -1, 5, -1, 3, -1, 6, -1, 4, -1, 7, -1, -1, -1, -1, -1,
        2, -1, 5, -1, 3, -1, 6, -1, 4, -1, 7, -1, -1, -1, -1, -1);
    const __m256i interleave = pixel_bytes == 4 ? rgbx : rgb;
    const ptrdiff_t back = pixel_bytes == 4 ? 0 : 2;
    const __m256i bias = _mm256_set1_epi32(1 << (axis->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(axis->precision);
    const int taps = axis->taps;
    for (ptrdiff_t r = 0; r < count; r += 2) {
        /* An odd last row is computed as both rows of a pair, and stored once. */
        const int pair = r + 1 < count;
        const uint8_t *top = src_rows[r], *bottom = src_rows[pair ? r + 1 : r];
        uint8_t *top_out = dst_rows[r], *bottom_out = dst_rows[pair ? r + 1 : r];
        for (ptrdiff_t x = 0; x < axis->out_size; x++) {
            const ptrdiff_t offset = axis->start[x] * pixel_bytes - back;
            if (offset < 0) {
                plain_pixel(src_rows + r, dst_rows + r, 1 + pair, pixel_bytes, axis, x);
                continue;
            }
            const int16_t *w = axis->weights + x * taps;
            /* Pairs up to the last nonzero weight; an odd size's pair reads one pixel more,
             * still inside the window (`taps` is even and in bounds), weighted 0. */
            const int size = axis->size[x];
            __m256i sum = bias;
            for (int k = 0; k < size; k += 2) {
                const uint8_t *at = top + offset + pixel_bytes * k;
                const __m128i a = _mm_loadl_epi64((const __m128i *)at);
                const __m128i b = _mm_loadl_epi64((const __m128i *)(bottom + (at - top)));
                const __m256i both =
                    _mm256_shuffle_epi8(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1),
                                        interleave);
                sum = _mm256_add_epi32(sum,
                                       _mm256_madd_epi16(both, _mm256_set1_epi32(weight_pair(w + k))));
            }
            sum = _mm256_sra_epi32(sum, shift);
            /* Saturating packs: 32 -> 16 -> 8 bits, lane by lane; each lane's first bytes. */
            const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(sum, sum), sum);
            const int32_t top_pixel = _mm_cvtsi128_si32(_mm256_castsi256_si128(bytes));
            const int32_t bottom_pixel = _mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1));
            memcpy(bottom_out + pixel_bytes * x, &bottom_pixel, (size_t)pixel_bytes);
            memcpy(top_out + pixel_bytes * x, &top_pixel, (size_t)pixel_bytes);
        }
    }
}

/* The pixel size as a constant in each: the 3- or 4-byte stores inline. */
__attribute__((target("avx2"))) static void
horizontal_avx2_rgb(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                    const AxisWeights *axis)
{
    horizontal_avx2(src_rows, dst_rows, count, 3, axis);
}

__attribute__((target("avx2"))) static void
horizontal_avx2_rgbx(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
                     const AxisWeights *axis)
{
    horizontal_avx2(src_rows, dst_rows, count, 4, axis);
}

/* 32 bytes of the output row a step, two input rows a step: their bytes interleaved into
 * 16-bit lanes (row k, row k + 1) and multiplied by the weight pair. The unpacks work within
 * 128-bit lanes and the packs undo them in the same lanes, so the bytes come back in order. */
__attribute__((target("avx2"))) static void
vertical_avx2(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
              const AxisWeights *axis, uint8_t *dst)
{
    const int16_t *w = axis->weights + y * axis->taps;
    const ptrdiff_t taps = axis->size[y];
    const __m256i bias = _mm256_set1_epi32(1 << (axis->precision - 1));
    const __m128i shift = _mm_cvtsi32_si128(axis->precision);
    const __m256i zero = _mm256_setzero_si256();
    ptrdiff_t i = 0;
    for (; i + 32 <= row_bytes; i += 32) {
        __m256i s0 = bias, s1 = bias, s2 = bias, s3 = bias;
        for (ptrdiff_t k = 0; k < taps; k += 2) {
            /* An odd last tap pairs with itself, weighted 0. */
            const int odd = k + 1 == taps;
            const __m256i a = _mm256_loadu_si256((const __m256i *)(rows[k] + i));
            const __m256i b = odd ? a : _mm256_loadu_si256((const __m256i *)(rows[k + 1] + i));
            const int32_t pair = odd ? (int32_t)(uint16_t)w[k] : weight_pair(w + k);
            const __m256i weights = _mm256_set1_epi32(pair);
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
    vertical_plain(rows, row_bytes, y, axis, dst, i);
}

static int simd = -1; /* -1: not decided yet */

static int
cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

int
aa_simd_enabled(void)
{
    if (simd < 0) {
        simd = cpu_has_avx2();
    }
    return simd;
}

void
aa_set_simd(int enabled)
{
    simd = enabled && cpu_has_avx2();
}

#else

int
aa_simd_enabled(void)
{
    return 0;
}

void
aa_set_simd(int enabled)
{
    (void)enabled;
}

#endif

/* ---- dispatch ----------------------------------------------------------------------------- */

void
aa_horizontal(const uint8_t *const *src_rows, uint8_t *const *dst_rows, ptrdiff_t count,
              int pixel_bytes, const AxisWeights *axis)
{
#ifdef AA_HAVE_AVX2_CODE
    if (aa_pairs_in_bounds(axis) && aa_simd_enabled()) {
        if (pixel_bytes == 4) {
            horizontal_avx2_rgbx(src_rows, dst_rows, count, axis);
        } else {
            horizontal_avx2_rgb(src_rows, dst_rows, count, axis);
        }
        return;
    }
#endif
    horizontal_plain(src_rows, dst_rows, count, pixel_bytes, axis);
}

void
aa_vertical(const uint8_t *const *rows, ptrdiff_t row_bytes, ptrdiff_t y,
            const AxisWeights *axis, uint8_t *dst)
{
#ifdef AA_HAVE_AVX2_CODE
    if (aa_simd_enabled()) {
        vertical_avx2(rows, row_bytes, y, axis, dst);
        return;
    }
#endif
    vertical_plain(rows, row_bytes, y, axis, dst, 0);
}
