/* Qwen2-VL's patch rows straight from resized channels-last pixels, in one pass.
 *
 * The numpy path (_patch_rows.py, beside this file) makes channel planes of a band of pixels,
 * gathers 14-byte runs of the planes into the rows (~450,000 element copies for a 1080p image),
 * then copies each image patch again into its second temporal slot. Here, a merged-patch row at
 * a time, the block's pixel rows are split into channel rows (~160 KB for 1080p, kept in cache),
 * then each of its patch rows is written whole and in order, a padded slot copied from the cell
 * just written: the pixels are read once and the rows written once, sequentially. A library
 * memcpy per 14-byte run would cost more than the run, so the common patch sizes get copies of
 * constant length, which the compiler inlines: ~2 ms for a 1080p image's rows on one core,
 * against 5.5-7.7 ms for the numpy path. Pure data movement: the bytes are the numpy path's, by
 * construction and by test (tests/test_patch_rows_native.py). The GIL is released for the copy.
 *
 * Layout (as mediaref.models.qwen2_vl._patch_rows.patch_rows documents it): frames are grouped
 * `temporal` at a time, a last short group repeating its last frame; rows run
 * (t, h / merge, w / merge, merge_h, merge_w), each (C, T, P_h, P_w).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_aa_resize.h"

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_CHANNELS 4

/* `count` pixels of `pixel_bytes` bytes split into the first `channels` channel rows. */
static void
split_pixels(const uint8_t *src, Py_ssize_t count, int pixel_bytes, int channels,
             uint8_t *const planes[])
{
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    if (pixel_bytes == 4) {
        /* 16 pixels a step: channel c of each 32-bit pixel is its byte c (little endian). */
        const __m128i low_byte = _mm_set1_epi32(0xFF);
        for (; i + 16 <= count; i += 16) {
            const uint8_t *p = src + 4 * i;
            __m128i v0 = _mm_loadu_si128((const __m128i *)(p + 0));
            __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 16));
            __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 32));
            __m128i v3 = _mm_loadu_si128((const __m128i *)(p + 48));
            for (int c = 0; c < channels; c++) {
                /* Shift counts must be immediates for _mm_srli_epi32: the register form. */
                const __m128i shift = _mm_cvtsi32_si128(8 * c);
                __m128i a0 = _mm_and_si128(_mm_srl_epi32(v0, shift), low_byte);
                __m128i a1 = _mm_and_si128(_mm_srl_epi32(v1, shift), low_byte);
                __m128i a2 = _mm_and_si128(_mm_srl_epi32(v2, shift), low_byte);
                __m128i a3 = _mm_and_si128(_mm_srl_epi32(v3, shift), low_byte);
                /* Values 0..255: neither pack saturates. */
                __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3));
                _mm_storeu_si128((__m128i *)(planes[c] + i), bytes);
            }
        }
    }
#endif
    /* The rest of a row (all of it for 3-byte pixels, or without SSE2), a pixel at a time. */
    for (; i < count; i++) {
        for (int c = 0; c < channels; c++) {
            planes[c][i] = src[(Py_ssize_t)pixel_bytes * i + c];
        }
    }
}

/* One patch row's cells of one frame: for each channel, the patch's P rows of P bytes from
 * the block's channel rows, written to `copies` consecutive slots (a frame that pads the rest
 * of its temporal group is copied to the slots it fills while its cells are in cache). */
#define FILL_CELLS(RUN)                                                                        \
    for (int c = 0; c < channels; c++) {                                                       \
        const uint8_t *source = planes + (Py_ssize_t)c * plane_bytes + x;                      \
        uint8_t *cell = dst + (c * temporal) * area;                                           \
        for (Py_ssize_t patch_y = 0; patch_y < patch; patch_y++) {                             \
            memcpy(cell + patch_y * (RUN), source + (first_y + patch_y) * width, (size_t)(RUN)); \
        }                                                                                      \
        for (Py_ssize_t copy = 1; copy < copies; copy++) {                                     \
            memcpy(cell + copy * area, cell, (size_t)((RUN) * (RUN)));                         \
        }                                                                                      \
    }

static void
fill_cells(uint8_t *dst, const uint8_t *planes, Py_ssize_t plane_bytes, int channels,
           Py_ssize_t patch, Py_ssize_t temporal, Py_ssize_t first_y, Py_ssize_t x,
           Py_ssize_t width, Py_ssize_t copies)
{
    const Py_ssize_t area = patch * patch;
    switch (patch) {
    case 14: /* Qwen2-VL, Qwen2.5-VL */
        FILL_CELLS(14);
        break;
    case 16: /* Qwen3-VL */
        FILL_CELLS(16);
        break;
    default:
        FILL_CELLS(patch);
    }
}

/* One merged-patch row ("block") of one frame: its `merge * patch` pixel rows, rows[y] each
 * `width` pixels of `pixel_bytes`, written as the block's patch rows into temporal slot `slot`
 * of `block_out` (and the `copies - 1` slots after it). `planes`: channels x (merge * patch) x
 * width bytes of scratch. */
static void
write_block(const uint8_t *const *rows, Py_ssize_t width, int pixel_bytes, int channels,
            Py_ssize_t patch, Py_ssize_t merge, Py_ssize_t temporal, Py_ssize_t slot,
            Py_ssize_t copies, uint8_t *planes, uint8_t *block_out)
{
    const Py_ssize_t band = merge * patch;
    const Py_ssize_t area = patch * patch;
    const Py_ssize_t row_bytes = channels * temporal * area;
    const Py_ssize_t rows_per_block = (width / band) * merge * merge;
    const Py_ssize_t plane_bytes = band * width;
    uint8_t *channel_rows[MAX_CHANNELS];
    /* The block's pixel rows split into channel rows, in cache while read back. */
    for (Py_ssize_t y = 0; y < band; y++) {
        for (int c = 0; c < channels; c++) {
            channel_rows[c] = planes + c * plane_bytes + y * width;
        }
        split_pixels(rows[y], width, pixel_bytes, channels, channel_rows);
    }
    /* The block's patch rows in order, each written whole before the next. */
    for (Py_ssize_t row = 0; row < rows_per_block; row++) {
        const Py_ssize_t block_w = row / (merge * merge);
        const Py_ssize_t merge_h = (row / merge) % merge, merge_w = row % merge;
        fill_cells(block_out + row * row_bytes + slot * area, planes, plane_bytes, channels,
                   patch, temporal, merge_h * patch, (block_w * merge + merge_w) * patch, width,
                   copies);
    }
}

/* What both entry points share: the pixels, the sizes and the output. */
typedef struct {
    const uint8_t *src;
    Py_ssize_t frames, height, width;
    int pixel_bytes, channels, patch, merge, temporal;
    uint8_t *out;
} Job;

static Py_ssize_t
group_count(const Job *job)
{
    return (job->frames + job->temporal - 1) / job->temporal;
}

/* Bytes of one block's patch rows, for an image `width` pixels wide. */
static Py_ssize_t
block_bytes(const Job *job, Py_ssize_t width)
{
    const Py_ssize_t band = (Py_ssize_t)job->merge * job->patch;
    return (width / band) * job->merge * job->merge * job->channels * job->temporal *
           job->patch * job->patch;
}

/* The frames of a group's `slot`, and how many slots it fills (the last frame of a short
 * group also fills the slots that repeat it); 0 for a slot past the last frame. */
static Py_ssize_t
slot_copies(const Job *job, Py_ssize_t group, Py_ssize_t slot)
{
    const Py_ssize_t real = Py_MIN(job->temporal, job->frames - group * job->temporal);
    if (slot >= real) {
        return 0;
    }
    return slot == real - 1 ? job->temporal - slot : 1;
}

static void
write_rows(const Job *job, uint8_t *planes, const uint8_t **rows)
{
    const Py_ssize_t band = (Py_ssize_t)job->merge * job->patch;
    const Py_ssize_t blocks_h = job->height / band;
    const Py_ssize_t source_row_bytes = job->width * job->pixel_bytes;

    for (Py_ssize_t group = 0; group < group_count(job); group++) {
        for (Py_ssize_t block_h = 0; block_h < blocks_h; block_h++) {
            uint8_t *block = job->out + (group * blocks_h + block_h) * block_bytes(job, job->width);
            for (Py_ssize_t slot = 0; slot < job->temporal; slot++) {
                const Py_ssize_t copies = slot_copies(job, group, slot);
                if (copies == 0) {
                    break;
                }
                const Py_ssize_t frame = group * job->temporal + slot;
                for (Py_ssize_t y = 0; y < band; y++) {
                    rows[y] = job->src + (frame * job->height + block_h * band + y) * source_row_bytes;
                }
                write_block(rows, job->width, job->pixel_bytes, job->channels, job->patch,
                            job->merge, job->temporal, slot, copies, planes, block);
            }
        }
    }
}

/* ---- resize + patch rows, a block at a time ------------------------------------------ */

/* The state of one resize_patch_rows call: both axes' weights and the buffers a block needs,
 * all small enough to stay in cache (a 1080p image: ~0.6 MB). */
typedef struct {
    AxisWeights across, down; /* the width's weights (horizontal pass), the height's */
    int resize_width, resize_height;
    Py_ssize_t out_height, out_width, out_row_bytes;
    Py_ssize_t span;       /* the most input rows one block's vertical pass reads */
    uint8_t *windows;      /* per temporal slot: `span` horizontally resized rows */
    Py_ssize_t *window_frame, *window_first, *window_stop; /* per slot: what it holds */
    uint8_t *band_pixels;  /* the block's resized rows */
    uint8_t *planes;       /* write_block's scratch */
    const uint8_t **rows;  /* the block's resized rows, as write_block reads them */
    const uint8_t **taps;  /* one output row's input rows, as the vertical pass reads them */
    const uint8_t **src_rows;
    uint8_t **dst_rows;
} Resizer;

/* Input rows the vertical pass reads for output row y: [down.start[y], this). */
static Py_ssize_t
down_stop(const Resizer *rz, Py_ssize_t y)
{
    return rz->down.start[y] + rz->down.size[y];
}

/* Input rows [*first, *stop) the block of `band` output rows from y0 reads (its first row's
 * window starts first: windows never start further up than the one before). */
static void
block_input_rows(const Resizer *rz, Py_ssize_t y0, Py_ssize_t band, Py_ssize_t *first,
                 Py_ssize_t *stop)
{
    *first = rz->down.start[y0];
    *stop = 0;
    for (Py_ssize_t y = y0; y < y0 + band; y++) {
        *stop = Py_MAX(*stop, down_stop(rz, y));
    }
}

static void
resizer_free(Resizer *rz)
{
    aa_axis_free(&rz->across);
    aa_axis_free(&rz->down);
    PyMem_RawFree(rz->windows);
    PyMem_RawFree(rz->window_frame);
    PyMem_RawFree(rz->band_pixels);
    PyMem_RawFree(rz->planes);
    PyMem_RawFree(rz->rows);
}

/* 0, or -1 when out of memory (everything allocated is freed by resizer_free either way). */
static int
resizer_init(Resizer *rz, const Job *job, Py_ssize_t out_height, Py_ssize_t out_width)
{
    const Py_ssize_t band = (Py_ssize_t)job->merge * job->patch;
    memset(rz, 0, sizeof(*rz));
    rz->out_height = out_height;
    rz->out_width = out_width;
    rz->out_row_bytes = out_width * job->pixel_bytes;
    rz->resize_width = out_width != job->width;
    rz->resize_height = out_height != job->height;
    if ((rz->resize_width && aa_axis_weights(&rz->across, job->width, out_width, 1) < 0) ||
        (rz->resize_height && aa_axis_weights(&rz->down, job->height, out_height, 0) < 0)) {
        return -1;
    }
    rz->span = band;
    if (rz->resize_height) {
        for (Py_ssize_t y0 = 0; y0 < out_height; y0 += band) {
            Py_ssize_t first, stop;
            block_input_rows(rz, y0, band, &first, &stop);
            rz->span = Py_MAX(rz->span, stop - first);
        }
    }
    const size_t pointers = (size_t)(band + rz->down.taps + 2 * rz->span);
    rz->rows = PyMem_RawMalloc(pointers * sizeof(void *));
    rz->window_frame = PyMem_RawMalloc(3 * (size_t)job->temporal * sizeof(Py_ssize_t));
    rz->band_pixels = PyMem_RawMalloc((size_t)band * (size_t)rz->out_row_bytes);
    rz->planes = PyMem_RawMalloc((size_t)job->channels * (size_t)band * (size_t)out_width);
    if (rz->resize_width) {
        rz->windows = PyMem_RawMalloc((size_t)job->temporal * (size_t)rz->span *
                                      (size_t)rz->out_row_bytes);
    }
    if (rz->rows == NULL || rz->window_frame == NULL || rz->band_pixels == NULL ||
        rz->planes == NULL || (rz->resize_width && rz->windows == NULL)) {
        return -1;
    }
    rz->taps = rz->rows + band;
    rz->src_rows = rz->taps + rz->down.taps;
    rz->dst_rows = (uint8_t **)(rz->src_rows + rz->span);
    rz->window_first = rz->window_frame + job->temporal;
    rz->window_stop = rz->window_first + job->temporal;
    for (Py_ssize_t slot = 0; slot < job->temporal; slot++) {
        rz->window_frame[slot] = -1; /* holds nothing yet */
    }
    return 0;
}

/* Input rows [first, stop) of `frame`, resized across: pointers into the frame itself when the
 * width does not change, else rows of the slot's window, which keeps what the previous block
 * of the same frame computed (consecutive blocks share a few rows) and resizes the rest. The
 * returned pointer is row `first`; rows follow every `*stride` bytes. */
static const uint8_t *
across_rows(Resizer *rz, const Job *job, Py_ssize_t frame, Py_ssize_t slot, Py_ssize_t first,
            Py_ssize_t stop, Py_ssize_t *stride)
{
    const Py_ssize_t in_row_bytes = job->width * job->pixel_bytes;
    const uint8_t *frame_pixels = job->src + frame * job->height * in_row_bytes;
    if (!rz->resize_width) {
        *stride = in_row_bytes;
        return frame_pixels + first * in_row_bytes;
    }
    uint8_t *window = rz->windows + slot * rz->span * rz->out_row_bytes;
    Py_ssize_t kept_stop = first; /* rows [first, kept_stop) are in the window already */
    if (rz->window_frame[slot] == frame && rz->window_first[slot] <= first &&
        first < rz->window_stop[slot]) {
        kept_stop = Py_MIN(rz->window_stop[slot], stop);
        memmove(window, window + (first - rz->window_first[slot]) * rz->out_row_bytes,
                (size_t)((kept_stop - first) * rz->out_row_bytes));
    }
    for (Py_ssize_t y = kept_stop; y < stop; y++) {
        rz->src_rows[y - kept_stop] = frame_pixels + y * in_row_bytes;
        rz->dst_rows[y - kept_stop] = window + (y - first) * rz->out_row_bytes;
    }
    aa_horizontal(rz->src_rows, rz->dst_rows, stop - kept_stop, job->pixel_bytes, &rz->across);
    rz->window_frame[slot] = frame;
    rz->window_first[slot] = first;
    rz->window_stop[slot] = stop;
    *stride = rz->out_row_bytes;
    return window;
}

/* Blocks [first, stop) of the resized frames (counted over groups, then block rows), written as
 * their patch rows into job->out, which holds exactly those blocks' rows. */
static void
resize_rows(const Job *job, Resizer *rz, Py_ssize_t first, Py_ssize_t stop)
{
    const Py_ssize_t band = (Py_ssize_t)job->merge * job->patch;
    const Py_ssize_t blocks_h = rz->out_height / band;
    const Py_ssize_t out_block_bytes = block_bytes(job, rz->out_width);
    for (Py_ssize_t unit = first; unit < stop; unit++) {
        const Py_ssize_t group = unit / blocks_h, y0 = (unit % blocks_h) * band;
        uint8_t *block = job->out + (unit - first) * out_block_bytes;
        for (Py_ssize_t slot = 0; slot < job->temporal; slot++) {
            const Py_ssize_t copies = slot_copies(job, group, slot);
            if (copies == 0) {
                break;
            }
            const Py_ssize_t frame = group * job->temporal + slot;
            Py_ssize_t in_first = y0, in_stop = y0 + band, stride;
            if (rz->resize_height) {
                block_input_rows(rz, y0, band, &in_first, &in_stop);
            }
            const uint8_t *across =
                across_rows(rz, job, frame, slot, in_first, in_stop, &stride);
            for (Py_ssize_t y = y0; y < y0 + band; y++) {
                if (!rz->resize_height) {
                    rz->rows[y - y0] = across + (y - in_first) * stride;
                    continue;
                }
                const Py_ssize_t start = rz->down.start[y];
                for (Py_ssize_t k = 0; k < down_stop(rz, y) - start; k++) {
                    rz->taps[k] = across + (start + k - in_first) * stride;
                }
                uint8_t *resized = rz->band_pixels + (y - y0) * rz->out_row_bytes;
                aa_vertical(rz->taps, rz->out_row_bytes, y, &rz->down, resized);
                rz->rows[y - y0] = resized;
            }
            write_block(rz->rows, rz->out_width, job->pixel_bytes, job->channels, job->patch,
                        job->merge, job->temporal, slot, copies, rz->planes, block);
        }
    }
}

/* ---- Python entry points ---------------------------------------------------------------- */

static int
checked_product(Py_ssize_t *result, const Py_ssize_t *factors, int count)
{
    Py_ssize_t value = 1;
    for (int i = 0; i < count; i++) {
        if (factors[i] < 0 || (factors[i] != 0 && value > PY_SSIZE_T_MAX / factors[i])) {
            return 0;
        }
        value *= factors[i];
    }
    *result = value;
    return 1;
}

/* Checks a job's arguments (ValueError, 0 when they do not fit); `height` and `width` are the
 * rows' image size (the resized one for resize_patch_rows). Sets the pixel bytes expected and
 * the output bytes of the whole frames' rows. */
static int
check_job(const char *name, const Job *job, Py_ssize_t height, Py_ssize_t width,
          Py_ssize_t *expected_pixels, Py_ssize_t *rows_bytes)
{
    const Py_ssize_t band = (Py_ssize_t)job->patch * job->merge;
    if (job->frames < 1 || job->height < 1 || job->width < 1 || height < 1 || width < 1 ||
        (job->pixel_bytes != 3 && job->pixel_bytes != 4) || job->channels < 1 ||
        job->channels > job->pixel_bytes || job->patch < 1 || job->merge < 1 ||
        job->temporal < 1) {
        PyErr_Format(PyExc_ValueError, "%s: an argument out of range", name);
        return 0;
    }
    if (height % band != 0 || width % band != 0) {
        PyErr_Format(PyExc_ValueError, "%s: height and width must be multiples of patch * merge",
                     name);
        return 0;
    }
    const Py_ssize_t pixel_factors[] = {job->frames, job->height, job->width, job->pixel_bytes};
    const Py_ssize_t row_factors[] = {group_count(job), height / job->patch, width / job->patch,
                                      job->channels, job->temporal, job->patch, job->patch};
    if (!checked_product(expected_pixels, pixel_factors, 4) ||
        !checked_product(rows_bytes, row_factors, 7)) {
        PyErr_Format(PyExc_ValueError, "%s: sizes overflow", name);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(patch_rows_doc,
             "patch_rows(pixels, frames, height, width, pixel_bytes, channels, patch, merge, "
             "temporal, out)\n--\n\n"
             "Write the patch rows of C-contiguous (frames, height, width, pixel_bytes) uint8 "
             "pixels (their first `channels` channels) into `out`, a writable C-contiguous "
             "buffer of exactly (groups * h * w) * channels * temporal * patch * patch bytes. "
             "ValueError for sizes that do not fit.");

static PyObject *
patch_rows(PyObject *module, PyObject *args)
{
    Py_buffer pixels, out;
    Job job;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnniiiiiw*:patch_rows", &pixels, &job.frames, &job.height,
                          &job.width, &job.pixel_bytes, &job.channels, &job.patch, &job.merge,
                          &job.temporal, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    uint8_t *scratch = NULL;
    const uint8_t **rows = NULL;
    Py_ssize_t expected_pixels, expected_out;
    if (!check_job("patch_rows", &job, job.height, job.width, &expected_pixels, &expected_out)) {
        goto done;
    }
    if (pixels.len != expected_pixels || out.len != expected_out) {
        PyErr_Format(PyExc_ValueError,
                     "patch_rows: expected %zd pixel bytes and %zd output bytes, got %zd and %zd",
                     expected_pixels, expected_out, pixels.len, out.len);
        goto done;
    }
    const size_t band = (size_t)job.merge * (size_t)job.patch;
    scratch = PyMem_RawMalloc((size_t)job.channels * band * (size_t)job.width);
    rows = PyMem_RawMalloc(band * sizeof(*rows));
    if (scratch == NULL || rows == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    job.src = pixels.buf;
    job.out = out.buf;
    Py_BEGIN_ALLOW_THREADS
    write_rows(&job, scratch, rows);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_RawFree(scratch);
    PyMem_RawFree(rows);
    PyBuffer_Release(&pixels);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(resize_patch_rows_doc,
             "resize_patch_rows(pixels, frames, height, width, pixel_bytes, channels, "
             "out_height, out_width, patch, merge, temporal, first, stop, out)\n--\n\n"
             "The patch rows of C-contiguous (frames, height, width, pixel_bytes) uint8 pixels "
             "resized to (out_height, out_width) as torch's uint8 antialiased bicubic resize "
             "does, without the resized frames ever being whole in memory: only blocks [first, "
             "stop) (a block is one merged-patch row of one temporal group, counted group by "
             "group) are written, into `out`, a writable C-contiguous buffer of exactly their "
             "rows' bytes. ValueError for sizes that do not fit.");

static PyObject *
resize_patch_rows(PyObject *module, PyObject *args)
{
    Py_buffer pixels, out;
    Job job;
    Py_ssize_t out_height, out_width, first, stop;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnniinniiinnw*:resize_patch_rows", &pixels, &job.frames,
                          &job.height, &job.width, &job.pixel_bytes, &job.channels, &out_height,
                          &out_width, &job.patch, &job.merge, &job.temporal, &first, &stop,
                          &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    Resizer rz;
    int resizer_ready = 0;
    Py_ssize_t expected_pixels, all_rows_bytes;
    if (!check_job("resize_patch_rows", &job, out_height, out_width, &expected_pixels,
                   &all_rows_bytes)) {
        goto done;
    }
    const Py_ssize_t blocks = group_count(&job) * (out_height / ((Py_ssize_t)job.merge * job.patch));
    if (first < 0 || stop < first || stop > blocks) {
        PyErr_Format(PyExc_ValueError, "resize_patch_rows: blocks [%zd, %zd) not within [0, %zd)",
                     first, stop, blocks);
        goto done;
    }
    const Py_ssize_t expected_out = (stop - first) * (all_rows_bytes / blocks);
    if (pixels.len != expected_pixels || out.len != expected_out) {
        PyErr_Format(PyExc_ValueError,
                     "resize_patch_rows: expected %zd pixel bytes and %zd output bytes, got %zd "
                     "and %zd",
                     expected_pixels, expected_out, pixels.len, out.len);
        goto done;
    }
    job.src = pixels.buf;
    job.out = out.buf;
    resizer_ready = 1;
    if (resizer_init(&rz, &job, out_height, out_width) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    resize_rows(&job, &rz, first, stop);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    if (resizer_ready) {
        resizer_free(&rz);
    }
    PyBuffer_Release(&pixels);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *
simd_level(PyObject *module, PyObject *args)
{
    (void)module;
    (void)args;
    return PyLong_FromLong(aa_simd_level());
}

static PyObject *
set_simd_level(PyObject *module, PyObject *arg)
{
    (void)module;
    const long wanted = PyLong_AsLong(arg);
    if (wanted == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyLong_FromLong(aa_set_simd_level(wanted < 0 ? 0 : wanted > 2 ? 2 : (int)wanted));
}

static PyMethodDef methods[] = {
    {"patch_rows", patch_rows, METH_VARARGS, patch_rows_doc},
    {"resize_patch_rows", resize_patch_rows, METH_VARARGS, resize_patch_rows_doc},
    {"simd_level", simd_level, METH_NOARGS,
     "simd_level()\n--\n\nThe vector instructions the resize uses in this process: 0 none "
     "(plain C), 1 AVX2, 2 AVX-512; the CPU's best unless lowered."},
    {"set_simd_level", set_simd_level, METH_O,
     "set_simd_level(level, /)\n--\n\nUse at most `level` (0, 1, 2) for the resize, the CPU's "
     "best where it is lower; returns the level now in use. Every level gives the same bytes. "
     "For tests."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_patch_rows_native",
    "Qwen2-VL's patch rows from pixels in one pass (resized on the way), the GIL released.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__patch_rows_native(void)
{
    return PyModule_Create(&module_def);
}
