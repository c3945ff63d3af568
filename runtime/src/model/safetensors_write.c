/* The safetensors writer (moe_st_write): checks the tensors, builds the header and writes
 * the file through a bounce buffer of ST_CHUNK_BYTES, converting from F32 on the way
 * (safetensors_int.h lists the files). */
#include "moe_model/safetensors.h"
#include "moe/utf8.h"

#include "model/safetensors_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The writer converts through a bounce buffer of this size. */
#define ST_CHUNK_BYTES 65536

/* ------------------------------------------------------------------------------------ */
/* Writing                                                                                */

/* A growing byte buffer whose appends only record failure, checked once at the end. */
typedef struct st_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} st_buf_t;

static void st_buf_put(st_buf_t *b, const char *s, size_t len)
{
    if (b->failed) {
        return;
    }
    if (len > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < len && cap < SIZE_MAX / 2) {
            cap *= 2;
        }
        char *grown = cap - b->len >= len ? realloc(b->data, cap) : NULL;
        if (grown == NULL) {
            b->failed = true;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, len);
    b->len += len;
}

static void st_buf_str(st_buf_t *b, const char *s)
{
    st_buf_put(b, s, strlen(s));
}

static void st_buf_u64(st_buf_t *b, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof(num), "%" PRIu64, v);
    st_buf_str(b, num);
}

/* A JSON string; names were checked to be valid UTF-8, which passes through. */
static void st_buf_json_string(st_buf_t *b, const char *s)
{
    st_buf_str(b, "\"");
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            st_buf_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            st_buf_put(b, esc, 6);
        } else {
            st_buf_put(b, s, 1);
        }
    }
    st_buf_str(b, "\"");
}

static bool st_valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *end = p + strlen(s);
    while (p < end) {
        uint32_t cp;
        size_t len = moe_utf8_seq(p, end, &cp);
        if (len == 0) {
            return false;
        }
        p += len;
    }
    return true;
}

static const char *st_dtype_name(const moe_st_out_tensor_t *t)
{
    if (t->dtype == MOE_ST_I32) {
        return "I32";
    }
    return t->dtype == MOE_ST_F32 ? "F32" : t->dtype == MOE_ST_BF16 ? "BF16" : "F16";
}

static size_t st_elem_size(const moe_st_out_tensor_t *t)
{
    return t->dtype == MOE_ST_I32 || t->dtype == MOE_ST_F32 ? 4 : 2;
}

/* One output tensor is writable: a name, a float dtype, a sane shape, data if non-empty. */
static moe_status_t st_check_out_tensor(const char *path, const moe_st_out_tensor_t *t, int i,
                                        moe_error_t *err)
{
    uint64_t nelem;
    if (t->name == NULL || !st_valid_utf8(t->name) || strcmp(t->name, "__metadata__") == 0) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: tensor #%d: name is NULL, not "
                             "UTF-8 or the reserved '__metadata__'", path, i);
    }
    if (t->dtype != MOE_ST_I32 && t->dtype != MOE_ST_F32 && t->dtype != MOE_ST_BF16 &&
        t->dtype != MOE_ST_F16) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: tensor '%.200s': dtype %d cannot "
                             "be written (only F32, BF16, F16, I32)", path, t->name, (int)t->dtype);
    }
    if (t->ndim < 0 || t->ndim > MOE_ST_MAX_DIMS ||
        !st_shape_elems(t->ndim, t->shape, &nelem) || nelem > SIZE_MAX / sizeof(float)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: tensor '%.200s': bad shape (ndim "
                             "%d, negative dim or too many elements)", path, t->name, t->ndim);
    }
    if (t->data == NULL && nelem > 0) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: tensor '%.200s': NULL data",
                             path, t->name);
    }
    return MOE_OK;
}

static int st_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static moe_status_t st_check_out(const char *path, const moe_st_out_tensor_t *ts, int count,
                                 moe_error_t *err)
{
    moe_status_t rc;
    for (int i = 0; i < count; i++) {
        if ((rc = st_check_out_tensor(path, &ts[i], i, err)) != MOE_OK) {
            return rc;
        }
    }
    const char **names = malloc(sizeof(*names) * (count ? (size_t)count : 1));
    if (names == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    for (int i = 0; i < count; i++) {
        names[i] = ts[i].name;
    }
    qsort(names, (size_t)count, sizeof(*names), st_cmp_str);
    rc = MOE_OK;
    for (int i = 1; i < count && rc == MOE_OK; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            rc = moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: tensor name '%.200s' given twice",
                               path, names[i]);
        }
    }
    free(names);
    return rc;
}

/* The JSON header, tensors in the given order with contiguous offsets, padded with spaces
 * so the data starts 8-byte aligned. */
static moe_status_t st_build_header(const char *path, const moe_st_out_tensor_t *ts, int count,
                                    const char *const *meta, int nmeta, st_buf_t *b,
                                    moe_error_t *err)
{
    uint64_t offset = 0;
    st_buf_str(b, "{");
    if (nmeta > 0) {
        st_buf_str(b, "\"__metadata__\":{");
        for (int m = 0; m < nmeta; m++) {
            st_buf_str(b, m ? "," : "");
            st_buf_json_string(b, meta[2 * m]);
            st_buf_str(b, ":");
            st_buf_json_string(b, meta[2 * m + 1]);
        }
        st_buf_str(b, count > 0 ? "}," : "}");
    }
    for (int i = 0; i < count; i++) {
        const moe_st_out_tensor_t *t = &ts[i];
        uint64_t nelem = 0;
        st_shape_elems(t->ndim, t->shape, &nelem);
        uint64_t bytes = nelem * st_elem_size(t);
        st_buf_str(b, i ? "," : "");
        st_buf_json_string(b, t->name);
        st_buf_str(b, ":{\"dtype\":\"");
        st_buf_str(b, st_dtype_name(t));
        st_buf_str(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            st_buf_str(b, d ? "," : "");
            st_buf_u64(b, (uint64_t)t->shape[d]);
        }
        st_buf_str(b, "],\"data_offsets\":[");
        st_buf_u64(b, offset);
        st_buf_str(b, ",");
        st_buf_u64(b, offset + bytes);
        st_buf_str(b, "]}");
        offset += bytes;
    }
    st_buf_str(b, "}");
    while (!b->failed && b->len % 8 != 0) {
        st_buf_str(b, " ");
    }
    if (b->failed) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory for the header", path);
    }
    return MOE_OK;
}

static moe_status_t st_write_all(int fd, const char *name, const void *data, size_t len,
                                 moe_error_t *err)
{
    const unsigned char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len < ST_IO_MAX ? len : ST_IO_MAX);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return moe_error_set(err, MOE_ERR_IO, "%s: write failed: %s", name,
                                 w < 0 ? strerror(errno) : "no progress");
        }
        p += w;
        len -= (size_t)w;
    }
    return MOE_OK;
}


static moe_status_t st_write_tensor(int fd, const char *name, const moe_st_out_tensor_t *t,
                                    unsigned char *chunk, moe_error_t *err)
{
    uint64_t nelem = 0;
    st_shape_elems(t->ndim, t->shape, &nelem);
    size_t esize = st_elem_size(t);
    size_t per_chunk = ST_CHUNK_BYTES / sizeof(float);
    for (size_t i = 0; i < (size_t)nelem; i += per_chunk) {
        size_t m = (size_t)nelem - i < per_chunk ? (size_t)nelem - i : per_chunk;
        if (t->dtype == MOE_ST_I32) {
            for (size_t j = 0; j < m; j++) { /* little endian, whatever the host */
                uint32_t v = (uint32_t)((const int32_t *)t->data)[i + j];
                for (int byte = 0; byte < 4; byte++) {
                    chunk[4 * j + (size_t)byte] = (unsigned char)(v >> (8 * byte));
                }
            }
        } else {
            st_encode(t->dtype, (const float *)t->data + i, m, chunk);
        }
        moe_status_t rc = st_write_all(fd, name, chunk, m * esize, err);
        if (rc != MOE_OK) {
            return rc;
        }
    }
    return MOE_OK;
}

static moe_status_t st_write_body(int fd, const char *name, const st_buf_t *hdr,
                                  const moe_st_out_tensor_t *ts, int count, moe_error_t *err)
{
    unsigned char len8[8];
    unsigned char *chunk = malloc(ST_CHUNK_BYTES);
    moe_status_t rc;
    if (chunk == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", name);
    }
    st_put_le64(len8, hdr->len);
    rc = st_write_all(fd, name, len8, sizeof(len8), err);
    if (rc == MOE_OK) {
        rc = st_write_all(fd, name, hdr->data, hdr->len, err);
    }
    for (int i = 0; i < count && rc == MOE_OK; i++) {
        rc = st_write_tensor(fd, name, &ts[i], chunk, err);
    }
    /* The rename below must not publish a file whose data is still only in the cache. */
    if (rc == MOE_OK && fsync(fd) != 0) {
        rc = moe_error_set(err, MOE_ERR_IO, "%s: fsync failed: %s", name, strerror(errno));
    }
    free(chunk);
    return rc;
}

moe_status_t moe_st_write(const char *path, const moe_st_out_tensor_t *tensors, int count,
                          moe_error_t *err)
{
    return moe_st_write_meta(path, tensors, count, NULL, 0, err);
}

/* Metadata keys and values are UTF-8 and the keys distinct (and not a tensor's name space:
 * the header's __metadata__ object is separate). */
static moe_status_t st_check_meta(const char *path, const char *const *meta, int nmeta,
                                  moe_error_t *err)
{
    if (nmeta < 0 || (nmeta > 0 && meta == NULL)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: bad metadata", path);
    }
    for (int m = 0; m < nmeta; m++) {
        if (meta[2 * m] == NULL || meta[2 * m + 1] == NULL || !st_valid_utf8(meta[2 * m]) ||
            !st_valid_utf8(meta[2 * m + 1])) {
            return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: metadata #%d: NULL or not "
                                 "UTF-8", path, m);
        }
        for (int o = 0; o < m; o++) {
            if (strcmp(meta[2 * o], meta[2 * m]) == 0) {
                return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: metadata key '%.200s' "
                                     "given twice", path, meta[2 * m]);
            }
        }
    }
    return MOE_OK;
}

moe_status_t moe_st_write_meta(const char *path, const moe_st_out_tensor_t *tensors, int count,
                               const char *const *meta, int nmeta, moe_error_t *err)
{
    st_buf_t hdr = {NULL, 0, 0, false};
    char *tmp = NULL;
    size_t tmp_cap;
    int fd;
    moe_status_t rc;

    if (path == NULL || count < 0 || (tensors == NULL && count > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_write: bad argument");
    }
    if ((rc = st_check_out(path, tensors, count, err)) != MOE_OK ||
        (rc = st_check_meta(path, meta, nmeta, err)) != MOE_OK ||
        (rc = st_build_header(path, tensors, count, meta, nmeta, &hdr, err)) != MOE_OK) {
        goto free_header;
    }
    tmp_cap = strlen(path) + 32;
    if ((tmp = malloc(tmp_cap)) == NULL) {
        rc = moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", path);
        goto free_header;
    }
    snprintf(tmp, tmp_cap, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = moe_error_set(err, MOE_ERR_IO, "%s: cannot create (as %s): %s", path, tmp,
                           strerror(errno));
        goto free_header;
    }
    /* the messages name the file asked for: the temporary name means nothing to a user */
    if ((rc = st_write_body(fd, path, &hdr, tensors, count, err)) != MOE_OK) {
        close(fd);
        goto unlink_tmp;
    }
    if (close(fd) != 0) {
        rc = moe_error_set(err, MOE_ERR_IO, "%s: close failed: %s", path, strerror(errno));
        goto unlink_tmp;
    }
    if (rename(tmp, path) != 0) {
        rc = moe_error_set(err, MOE_ERR_IO, "%s: cannot rename to %s: %s", tmp, path,
                           strerror(errno));
        goto unlink_tmp;
    }
    goto free_header;

unlink_tmp:
    unlink(tmp);
free_header:
    free(tmp);
    free(hdr.data);
    return rc;
}
