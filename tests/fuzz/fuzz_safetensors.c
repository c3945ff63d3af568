/* libFuzzer target: the safetensors reader (moe_model/safetensors.h, under
 * runtime/src/model/include) on arbitrary bytes, opened from memory.
 *
 * Properties:
 *  - a rejected file returns no handle and a NUL-terminated message naming the file;
 *  - an opened file lists tensors with unique names that moe_st_find returns, shapes of at
 *    most MOE_ST_MAX_DIMS dims and data ranges inside the data section;
 *  - every tensor (up to 1 << 20 elements) is read with moe_st_read_f32: F32/BF16/F16
 *    read (F32 and BF16 bit-exact against the file bytes) unless an element is NaN or
 *    infinite, which is refused with MOE_ERR_WEIGHTS; any other dtype is refused with
 *    MOE_ERR_UNSUPPORTED, never MOE_OK; a wrong count and a missing name are refused. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe_model/safetensors.h"

#define NAME "fuzz.safetensors"
#define MAX_ELEMS ((uint64_t)1 << 20)

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* Element count, or false when it overflows or exceeds MAX_ELEMS. */
static bool elems_of(const moe_st_tensor_info_t *t, uint64_t *out)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        FUZZ_CHECK(t->shape[d] >= 0, "tensor '%.100s' dim %d is %lld", t->name, d,
                   (long long)t->shape[d]);
        if (t->shape[d] != 0 && n > MAX_ELEMS / (uint64_t)t->shape[d]) {
            return false;
        }
        n *= (uint64_t)t->shape[d];
    }
    *out = n;
    return true;
}

static void check_read(moe_st_file_t *f, const moe_st_tensor_info_t *t, const uint8_t *data,
                       uint64_t data_start)
{
    uint64_t n = 0;
    moe_error_t err;
    if (!elems_of(t, &n)) {
        return; /* too big to read here */
    }
    float *dst = malloc((size_t)(n ? n : 1) * sizeof(float));
    FUZZ_CHECK(dst != NULL, "out of memory for %llu floats", (unsigned long long)n);
    memset(&err, 0x5a, sizeof(err));
    moe_status_t st = moe_st_read_f32(f, t->name, dst, (size_t)n, &err);
    bool is_float = t->dtype == MOE_ST_F32 || t->dtype == MOE_ST_BF16 || t->dtype == MOE_ST_F16;
    if (!is_float) {
        FUZZ_CHECK(st != MOE_OK, "tensor '%.100s' of dtype %s read as float", t->name,
                   t->dtype_name);
        FUZZ_CHECK(st == MOE_ERR_UNSUPPORTED, "dtype %s refused with %d, not UNSUPPORTED",
                   t->dtype_name, (int)st);
        fuzz_check_error(&err, st, NAME, 1);
    } else {
        /* The header was validated at open and the bytes are in memory: it must read, unless
         * an element is not finite. */
        const uint8_t *raw = data + data_start + t->data_begin;
        bool special = false;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t u;
            if (t->dtype == MOE_ST_F32) {
                const uint8_t *b = raw + 4 * i;
                u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                    (uint32_t)b[3] << 24;
            } else {
                uint16_t h = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
                u = t->dtype == MOE_ST_BF16 ? (uint32_t)h << 16 : f32_bits(moe_f16_to_f32(h));
            }
            special = special || (u & 0x7F800000u) == 0x7F800000u;
        }
        if (special) {
            FUZZ_CHECK(st == MOE_ERR_WEIGHTS, "tensor '%.100s' with a NaN or inf gave %d",
                       t->name, (int)st);
            fuzz_check_error(&err, st, NAME, 1);
            free(dst);
            return;
        }
        FUZZ_CHECK(st == MOE_OK, "valid %s tensor '%.100s' not read: %s", t->dtype_name,
                   t->name, err.msg);
        for (uint64_t i = 0; i < n; i++) {
            uint32_t want;
            if (t->dtype == MOE_ST_F32) {
                const uint8_t *b = raw + 4 * i;
                want = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                       (uint32_t)b[3] << 24;
            } else if (t->dtype == MOE_ST_BF16) {
                want = (uint32_t)(raw[2 * i] | raw[2 * i + 1] << 8) << 16;
            } else {
                want = f32_bits(moe_f16_to_f32((uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8)));
            }
            FUZZ_CHECK(f32_bits(dst[i]) == want, "tensor '%.100s' element %llu: 0x%08x, file "
                       "says 0x%08x", t->name, (unsigned long long)i, f32_bits(dst[i]), want);
        }
        /* the shaped reader agrees */
        memset(&err, 0x5a, sizeof(err));
        st = moe_st_read_f32_shaped(f, t->name, t->ndim, t->shape, dst, &err);
        FUZZ_CHECK(st == MOE_OK, "read_f32_shaped of '%.100s' failed: %s", t->name, err.msg);
    }
    /* a count that does not match is refused before anything is written */
    memset(&err, 0x5a, sizeof(err));
    st = moe_st_read_f32(f, t->name, dst, (size_t)n + 1, &err);
    FUZZ_CHECK(st == MOE_ERR_WEIGHTS, "count %llu for a %llu-element tensor gave %d",
               (unsigned long long)n + 1, (unsigned long long)n, (int)st);
    fuzz_check_error(&err, st, NAME, 1);
    free(dst);
}

/* A name that shares the tensor's prefix but is absent: exercises the "similar" hints. */
static void check_missing(moe_st_file_t *f, const moe_st_tensor_info_t *t)
{
    size_t len = strlen(t->name);
    char *name = malloc(len + 2);
    FUZZ_CHECK(name != NULL, "out of memory");
    memcpy(name, t->name, len);
    name[len] = '\x7f';
    name[len + 1] = '\0';
    if (moe_st_find(f, name) == NULL) {
        moe_error_t err;
        float one;
        memset(&err, 0x5a, sizeof(err));
        moe_status_t st = moe_st_read_f32(f, name, &one, 1, &err);
        FUZZ_CHECK(st == MOE_ERR_WEIGHTS, "missing tensor gave status %d", (int)st);
        fuzz_check_error(&err, st, NAME, 1);
    }
    free(name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moe_st_file_t *f = NULL;
    moe_error_t err;
    memset(&err, 0x5a, sizeof(err));
    moe_status_t st = moe_st_open_memory(data, size, NAME, &f, &err);
    if (st != MOE_OK) {
        FUZZ_CHECK(f == NULL, "rejected input (status %d) returned a handle", (int)st);
        /* names quoted from the file cannot break the one-line rule (status.c) */
        fuzz_check_error(&err, st, NAME, 1);
        return 0;
    }
    FUZZ_CHECK(f != NULL, "MOE_OK without a handle");
    FUZZ_CHECK(size >= 8, "a %zu-byte file opened", size);
    uint64_t hdr = le64(data);
    FUZZ_CHECK(hdr <= size - 8, "header length %llu past the end", (unsigned long long)hdr);
    uint64_t data_start = 8 + hdr, data_size = size - data_start;

    int count = moe_st_count(f);
    FUZZ_CHECK(count >= 0, "count %d", count);
    FUZZ_CHECK(moe_st_at(f, count) == NULL && moe_st_at(f, -1) == NULL, "moe_st_at out of range");
    for (int i = 0; i < count; i++) {
        const moe_st_tensor_info_t *t = moe_st_at(f, i);
        FUZZ_CHECK(t != NULL && t->name != NULL && t->dtype_name != NULL, "tensor %d", i);
        FUZZ_CHECK(moe_st_find(f, t->name) == t, "find('%.100s') is not tensor %d", t->name, i);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= MOE_ST_MAX_DIMS, "ndim %d", t->ndim);
        FUZZ_CHECK(t->dtype >= MOE_ST_F32 && t->dtype <= MOE_ST_I32, "dtype %d", t->dtype);
        FUZZ_CHECK(t->data_begin <= t->data_end && t->data_end <= data_size,
                   "tensor '%.100s' data [%llu, %llu] outside %llu data bytes", t->name,
                   (unsigned long long)t->data_begin, (unsigned long long)t->data_end,
                   (unsigned long long)data_size);
        FUZZ_CHECK(strcmp(t->name, "__metadata__") != 0, "__metadata__ listed as a tensor");
    }
    for (int i = 0; i < count; i++) {
        const moe_st_tensor_info_t *t = moe_st_at(f, i);
        check_read(f, t, data, data_start);
        if (i < 8) {
            check_missing(f, t);
        }
    }
    moe_st_close(f);
    return 0;
}
