/* safetensors reader.
 *
 * The header is parsed by jansson (strict: UTF-8, no duplicate keys, no trailing bytes); a
 * weights file comes from outside, so every value jansson gives is checked (type, sign,
 * count) before it is used, and every rejection says which file, which tensor (or which
 * header line and column) and what is wrong. Tensor data is read on demand with pread (or memcpy
 * for an in-memory file) straight into the caller's buffer and converted there, in place,
 * so no tensor is ever held twice (the conversions: safetensors_dtype.c; the writer:
 * safetensors_write.c; safetensors_int.h lists what they share). */
#include "moe_model/safetensors.h"
#include "moe/file.h"

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

#include <jansson.h>

/* Same order of magnitude as the reference implementation's 100 MB; a larger header is
 * almost certainly not a safetensors file and would cost that much memory to parse. */
#define ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024)
/* __metadata__ values may nest; jansson bounds its own recursion (2048 levels), moed keeps
 * the tighter limit it always had. */
#define ST_MAX_DEPTH 32

/* ------------------------------------------------------------------------------------ */
/* The file handle                                                                        */

struct moe_st_file {
    char *name;                /* path or memory name, for messages */
    int fd;                    /* -1 for an in-memory file */
    const unsigned char *mem;  /* the whole in-memory file, or NULL */
    uint64_t file_size;
    uint64_t data_start;       /* 8 + header length */
    uint64_t data_size;
    moe_st_tensor_info_t *tensors; /* in header order */
    int count;
    int cap;
    const moe_st_tensor_info_t **by_name; /* sorted, for find */
    json_t *meta;              /* the __metadata__ object (a reference), or NULL */
};

static moe_status_t st_file_new(const char *name, moe_st_file_t **out, moe_error_t *err)
{
    moe_st_file_t *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", name);
    }
    f->fd = -1;
    f->name = malloc(strlen(name) + 1);
    if (f->name == NULL) {
        free(f);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", name);
    }
    strcpy(f->name, name);
    *out = f;
    return MOE_OK;
}

void moe_st_close(moe_st_file_t *f)
{
    if (f == NULL) {
        return;
    }
    if (f->fd >= 0) {
        close(f->fd); /* read-only: nothing to lose on a failed close */
    }
    for (int i = 0; i < f->count; i++) {
        free((char *)f->tensors[i].name);
    }
    json_decref(f->meta);
    free(f->tensors);
    free(f->by_name);
    free(f->name);
    free(f);
}

int moe_st_count(const moe_st_file_t *f)
{
    return f == NULL ? 0 : f->count;
}

const moe_st_tensor_info_t *moe_st_at(const moe_st_file_t *f, int i)
{
    if (f == NULL || i < 0 || i >= f->count) {
        return NULL;
    }
    return &f->tensors[i];
}

static int st_cmp_name_key(const void *key, const void *elem)
{
    const moe_st_tensor_info_t *t = *(const moe_st_tensor_info_t *const *)elem;
    return strcmp((const char *)key, t->name);
}

const moe_st_tensor_info_t *moe_st_find(const moe_st_file_t *f, const char *name)
{
    if (f == NULL || name == NULL || f->count == 0) {
        return NULL;
    }
    const moe_st_tensor_info_t *const *hit =
        bsearch(name, f->by_name, (size_t)f->count, sizeof(*f->by_name), st_cmp_name_key);
    return hit == NULL ? NULL : *hit;
}

/* " of tensor 'NAME'" or " of the header", for st_src_read's messages (its errors only:
 * a load reads thousands of tensors). */
static const char *st_read_what(const char *tensor, char *buf, size_t n)
{
    if (tensor == NULL) {
        return " of the header";
    }
    snprintf(buf, n, " of tensor '%.200s'", tensor);
    return buf;
}

/* Reads len bytes at absolute offset off, of tensor `tensor` (NULL: the header). A short
 * file here means it changed after it was validated (or the validation is wrong): report,
 * naming the tensor, never read past the end. */
static moe_status_t st_src_read(const moe_st_file_t *f, const char *tensor, uint64_t off,
                                void *dst, size_t len, moe_error_t *err)
{
    char of[256];
    if (off > f->file_size || len > f->file_size - off) {
        return moe_error_set(err, MOE_ERR_TRUNCATED,
                             "%s: %zu bytes%s at offset %" PRIu64 " lie past the end (%" PRIu64
                             " bytes)", f->name, len, st_read_what(tensor, of, sizeof(of)),
                             off, f->file_size);
    }
    if (f->fd < 0) {
        memcpy(dst, f->mem + off, len);
        return MOE_OK;
    }
    unsigned char *p = dst;
    while (len > 0) {
        ssize_t r = pread(f->fd, p, len < ST_IO_MAX ? len : ST_IO_MAX, (off_t)off);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            int e = errno;
            return moe_error_set(err, MOE_ERR_IO, "%s: read%s at offset %" PRIu64 " failed: %s",
                                 f->name, st_read_what(tensor, of, sizeof(of)), off,
                                 strerror(e));
        }
        if (r == 0) {
            return moe_error_set(err, MOE_ERR_TRUNCATED,
                                 "%s: file ends at offset %" PRIu64 " while %zu more bytes%s "
                                 "were expected (was it truncated after opening?)",
                                 f->name, off, len, st_read_what(tensor, of, sizeof(of)));
        }
        p += r;
        off += (uint64_t)r;
        len -= (size_t)r;
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Header JSON (jansson)                                                                  */

/* jansson's own codes say what kind of syntax error it met; the common ones get a phrase
 * that names the safetensors rule, jansson's text (with the token near it) follows. */
static const char *st_json_rule(enum json_error_code code)
{
    switch (code) {
    case json_error_end_of_input_expected:
        return "trailing characters after the header object";
    case json_error_duplicate_key:
        return "a key appears twice in one object";
    case json_error_null_byte_in_key:
    case json_error_null_character:
        return "a string contains a NUL character (\\u0000)";
    case json_error_invalid_utf8:
        return "invalid UTF-8";
    case json_error_numeric_overflow:
        return "number out of range (integers must fit in 63 bits)";
    case json_error_stack_overflow:
        return "JSON nested too deeply";
    default:
        return NULL;
    }
}

/* A failed json_loadb: line and column as jansson counts them, plus the file offset (the
 * header starts at byte 8) so `xxd -s` finds it. */
static moe_status_t st_json_error(const moe_st_file_t *f, const json_error_t *je,
                                  moe_error_t *err)
{
    enum json_error_code code = json_error_code(je);
    const char *rule = st_json_rule(code);
    size_t off = 8 + (je->position > 0 ? (size_t)je->position : 0);
    if (code == json_error_out_of_memory) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory parsing the header",
                             f->name);
    }
    return moe_error_set(err, MOE_ERR_FORMAT, "%s: header line %d col %d (file offset %zu): "
                         "%s%s%s%s", f->name, je->line, je->column, off,
                         rule ? rule : "", rule ? " (" : "", je->text, rule ? ")" : "");
}

/* What a value is, for "found ..." in messages. */
static const char *st_json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a fraction or exponent";
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    default:
        return "null";
    }
}

/* Nesting depth of v, v itself being level `level`; stops descending past `limit`, so the
 * walk is bounded whatever jansson accepted. */
static int st_json_depth(const json_t *v, int level, int limit)
{
    int deepest = level;
    const char *key;
    json_t *child;
    size_t i;

    if (level > limit) {
        return level;
    }
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, child) {
            int d = st_json_depth(child, level + 1, limit);
            if (d > limit) {
                return d;
            }
            deepest = d > deepest ? d : deepest;
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, child) {
            int d = st_json_depth(child, level + 1, limit);
            if (d > limit) {
                return d;
            }
            deepest = d > deepest ? d : deepest;
        }
    }
    return deepest;
}

static moe_status_t st_field_error(const moe_st_file_t *f, const char *tensor,
                                   moe_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static moe_status_t st_field_error(const moe_st_file_t *f, const char *tensor,
                                   moe_error_t *err, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%.200s': %s", f->name, tensor,
                         what);
}

/* ------------------------------------------------------------------------------------ */
/* Header semantics                                                                       */

/* A non-negative JSON integer (jansson has already refused one past INT64_MAX). `field`
 * names it in messages. */
static moe_status_t st_get_uint(const moe_st_file_t *f, const char *tensor, const char *field,
                                const json_t *v, uint64_t *out, moe_error_t *err)
{
    if (json_is_real(v)) {
        return st_field_error(f, tensor, err, "%s: expected an integer, found a fraction or "
                              "exponent", field);
    }
    if (!json_is_integer(v)) {
        return st_field_error(f, tensor, err, "%s: expected a non-negative integer, found %s",
                              field, st_json_kind(v));
    }
    json_int_t x = json_integer_value(v);
    if (x < 0) {
        return st_field_error(f, tensor, err, "%s: expected a non-negative integer, found %"
                              JSON_INTEGER_FORMAT, field, x);
    }
    *out = (uint64_t)x;
    return MOE_OK;
}

static moe_status_t st_get_dtype(const moe_st_file_t *f, moe_st_tensor_info_t *t,
                                 const json_t *v, moe_error_t *err)
{
    if (!json_is_string(v)) {
        return st_field_error(f, t->name, err, "dtype must be a string, found %s",
                              st_json_kind(v));
    }
    const st_dtype_desc_t *d = st_dtype_lookup(json_string_value(v), json_string_length(v));
    if (d == NULL) {
        char known[256] = "";
        for (int i = 0; i < st_ndtypes; i++) {
            strcat(known, i ? ", " : "");
            strcat(known, st_dtypes[i].name);
        }
        return st_field_error(f, t->name, err, "unknown dtype '%.32s' (known: %s)",
                              json_string_value(v), known);
    }
    t->dtype = d->dtype;
    t->dtype_name = d->name;
    return MOE_OK;
}

static moe_status_t st_get_shape(const moe_st_file_t *f, moe_st_tensor_info_t *t,
                                 const json_t *v, moe_error_t *err)
{
    int64_t dims[MOE_ST_MAX_DIMS];
    moe_status_t rc;

    if (!json_is_array(v)) {
        return st_field_error(f, t->name, err, "shape must be an array of integers, found %s",
                              st_json_kind(v));
    }
    size_t ndim = json_array_size(v);
    if (ndim > MOE_ST_MAX_DIMS) {
        return st_field_error(f, t->name, err, "shape has more than %d dimensions",
                              MOE_ST_MAX_DIMS);
    }
    for (size_t i = 0; i < ndim; i++) {
        uint64_t d = 0;
        if ((rc = st_get_uint(f, t->name, "shape", json_array_get(v, i), &d, err)) != MOE_OK) {
            return rc;
        }
        dims[i] = (int64_t)d; /* below INT64_MAX: it was a json_int_t */
    }
    t->ndim = (int)ndim;
    memcpy(t->shape, dims, sizeof(dims[0]) * ndim);
    return MOE_OK;
}

static moe_status_t st_get_offsets(const moe_st_file_t *f, moe_st_tensor_info_t *t,
                                   const json_t *v, moe_error_t *err)
{
    uint64_t o[2];
    moe_status_t rc;
    if (!json_is_array(v)) {
        return st_field_error(f, t->name, err, "data_offsets must be an array [begin, end], "
                              "found %s", st_json_kind(v));
    }
    if (json_array_size(v) != 2) {
        return st_field_error(f, t->name, err, "data_offsets must have exactly 2 integers, "
                              "found %zu values", json_array_size(v));
    }
    for (size_t i = 0; i < 2; i++) {
        rc = st_get_uint(f, t->name, "data_offsets", json_array_get(v, i), &o[i], err);
        if (rc != MOE_OK) {
            return rc;
        }
    }
    t->data_begin = o[0];
    t->data_end = o[1];
    return MOE_OK;
}

/* One tensor entry. Unknown fields are ignored, as the reference reader does; jansson has
 * already refused a field given twice. */
static moe_status_t st_get_tensor(const moe_st_file_t *f, moe_st_tensor_info_t *t,
                                  const json_t *entry, moe_error_t *err)
{
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    moe_status_t rc;
    if (!json_is_object(entry)) {
        return st_field_error(f, t->name, err, "entry must be an object with dtype, shape and "
                              "data_offsets, found %s", st_json_kind(entry));
    }
    for (int i = 0; i < 3; i++) {
        if (json_object_get(entry, fields[i]) == NULL) {
            return st_field_error(f, t->name, err, "entry lacks '%s'", fields[i]);
        }
    }
    if ((rc = st_get_dtype(f, t, json_object_get(entry, "dtype"), err)) != MOE_OK ||
        (rc = st_get_shape(f, t, json_object_get(entry, "shape"), err)) != MOE_OK) {
        return rc;
    }
    return st_get_offsets(f, t, json_object_get(entry, "data_offsets"), err);
}

/* Shape, dtype and offsets must agree with each other and with the data section. */
static moe_status_t st_check_tensor(const moe_st_file_t *f, const moe_st_tensor_info_t *t,
                                    moe_error_t *err)
{
    const st_dtype_desc_t *d = st_dtype_of(t);
    char shape[256];
    uint64_t nelem;
    st_format_shape(shape, sizeof(shape), t->ndim, t->shape);
    if (!st_shape_elems(t->ndim, t->shape, &nelem) || nelem > UINT64_MAX / d->bits) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%.200s': shape %s overflows "
                             "64 bits", f->name, t->name, shape);
    }
    if (nelem * d->bits % 8 != 0) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%.200s': shape %s of %s is "
                             "not a whole number of bytes", f->name, t->name, shape, d->name);
    }
    uint64_t need = nelem * d->bits / 8;
    uint64_t b = t->data_begin, e = t->data_end;
    if (e < b) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%.200s': data_offsets [%" PRIu64
                             ", %" PRIu64 "]: end is before begin", f->name, t->name, b, e);
    }
    if (e - b != need) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%.200s': data_offsets [%" PRIu64
                             ", %" PRIu64 "] hold %" PRIu64 " bytes but shape %s of %s needs %"
                             PRIu64, f->name, t->name, b, e, e - b, shape, d->name, need);
    }
    if (e > f->data_size) {
        return moe_error_set(err, MOE_ERR_TRUNCATED, "%s: tensor '%.200s': data_offsets [%"
                             PRIu64 ", %" PRIu64 "] need %" PRIu64 " bytes but the file has %"
                             PRIu64 " bytes of data (truncated?)", f->name, t->name, b, e, e,
                             f->data_size);
    }
    return MOE_OK;
}

/* Appends a zeroed slot that owns `name` (freed here if the table cannot grow). */
static moe_status_t st_table_push(moe_st_file_t *f, char *name, moe_st_tensor_info_t **out,
                                  moe_error_t *err)
{
    if (f->count == f->cap) {
        int cap = f->cap ? f->cap * 2 : 16;
        moe_st_tensor_info_t *grown = NULL;
        if (f->cap < INT_MAX / 4) {
            grown = realloc(f->tensors, sizeof(*grown) * (size_t)cap);
        }
        if (grown == NULL) {
            free(name);
            return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory for %d tensors",
                                 f->name, f->count);
        }
        f->tensors = grown;
        f->cap = cap;
    }
    moe_st_tensor_info_t *t = &f->tensors[f->count++];
    memset(t, 0, sizeof(*t));
    t->name = name;
    *out = t;
    return MOE_OK;
}

/* Copies the name (jansson refused any \u0000 in a key, so it is a whole C string), then
 * reads and checks the entry. */
static moe_status_t st_add_tensor(moe_st_file_t *f, const char *key, const json_t *entry,
                                  moe_error_t *err)
{
    moe_st_tensor_info_t *t = NULL;
    size_t len = strlen(key);
    char *name = malloc(len + 1);
    if (name == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", f->name);
    }
    memcpy(name, key, len + 1);
    moe_status_t rc = st_table_push(f, name, &t, err);
    if (rc != MOE_OK) {
        return rc;
    }
    if ((rc = st_get_tensor(f, t, entry, err)) != MOE_OK) {
        return rc;
    }
    return st_check_tensor(f, t, err);
}

/* The header is one JSON object: tensor entries in file order (jansson keeps insertion
 * order), and an optional __metadata__ object (kept for moe_st_metadata). */
static moe_status_t st_parse_header(moe_st_file_t *f, const unsigned char *hdr, size_t n,
                                    moe_error_t *err)
{
    json_error_t je;
    const char *key;
    json_t *value;
    moe_status_t rc = MOE_OK;

    json_t *root = json_loadb((const char *)hdr, n, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        return st_json_error(f, &je, err);
    }
    if (!json_is_object(root)) {
        rc = moe_error_set(err, MOE_ERR_FORMAT, "%s: the header must be a JSON object, found "
                           "%s", f->name, st_json_kind(root));
        goto put_root;
    }
    /* The header object is level 1, as in the reference reader's limit of the same size. */
    if (st_json_depth(root, 1, ST_MAX_DEPTH) > ST_MAX_DEPTH) {
        rc = moe_error_set(err, MOE_ERR_FORMAT, "%s: header JSON nested more than %d levels "
                           "deep", f->name, ST_MAX_DEPTH);
        goto put_root;
    }
    json_object_foreach(root, key, value) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(value)) {
                rc = moe_error_set(err, MOE_ERR_FORMAT, "%s: '__metadata__' must be an "
                                   "object, found %s", f->name, st_json_kind(value));
            } else {
                json_decref(f->meta);
                f->meta = json_incref(value);
            }
        } else {
            rc = st_add_tensor(f, key, value, err);
        }
        if (rc != MOE_OK) {
            break;
        }
    }

put_root:
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Whole-table checks                                                                     */

static int st_cmp_name(const void *a, const void *b)
{
    const moe_st_tensor_info_t *x = *(const moe_st_tensor_info_t *const *)a;
    const moe_st_tensor_info_t *y = *(const moe_st_tensor_info_t *const *)b;
    return strcmp(x->name, y->name);
}

static int st_cmp_offsets(const void *a, const void *b)
{
    const moe_st_tensor_info_t *x = *(const moe_st_tensor_info_t *const *)a;
    const moe_st_tensor_info_t *y = *(const moe_st_tensor_info_t *const *)b;
    if (x->data_begin != y->data_begin) {
        return x->data_begin < y->data_begin ? -1 : 1;
    }
    return x->data_end < y->data_end ? -1 : x->data_end > y->data_end;
}

/* Empty tensors occupy no bytes, so they may share an offset with anything. */
static moe_status_t st_check_overlaps(const moe_st_file_t *f,
                                      const moe_st_tensor_info_t **by_off, moe_error_t *err)
{
    const moe_st_tensor_info_t *reach = NULL; /* the tensor that ends furthest so far */
    qsort(by_off, (size_t)f->count, sizeof(*by_off), st_cmp_offsets);
    for (int i = 0; i < f->count; i++) {
        const moe_st_tensor_info_t *t = by_off[i];
        if (t->data_begin == t->data_end) {
            continue;
        }
        if (reach != NULL && t->data_begin < reach->data_end) {
            return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensors '%.200s' [%" PRIu64 ", %"
                                 PRIu64 "] and '%.200s' [%" PRIu64 ", %" PRIu64 "] overlap",
                                 f->name, reach->name, reach->data_begin, reach->data_end,
                                 t->name, t->data_begin, t->data_end);
        }
        if (reach == NULL || t->data_end > reach->data_end) {
            reach = t;
        }
    }
    return MOE_OK;
}

/* Builds the sorted name index, rejecting duplicate names and overlapping data. */
static moe_status_t st_build_index(moe_st_file_t *f, moe_error_t *err)
{
    size_t n = (size_t)f->count;
    moe_status_t rc = MOE_OK;
    const moe_st_tensor_info_t **by_name = malloc(sizeof(*by_name) * (n ? n : 1));
    const moe_st_tensor_info_t **by_off = malloc(sizeof(*by_off) * (n ? n : 1));
    if (by_name == NULL || by_off == NULL) {
        rc = moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", f->name);
        goto free_arrays;
    }
    for (size_t i = 0; i < n; i++) {
        by_name[i] = by_off[i] = &f->tensors[i];
    }
    qsort(by_name, n, sizeof(*by_name), st_cmp_name);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(by_name[i - 1]->name, by_name[i]->name) == 0) {
            rc = moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%.200s' appears twice in the "
                               "header", f->name, by_name[i]->name);
            goto free_arrays;
        }
    }
    if ((rc = st_check_overlaps(f, by_off, err)) != MOE_OK) {
        goto free_arrays;
    }
    f->by_name = by_name;
    by_name = NULL;

free_arrays:
    free(by_off);
    free(by_name);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Opening                                                                                */

static moe_status_t st_read_header_len(moe_st_file_t *f, uint64_t *out_len, moe_error_t *err)
{
    unsigned char len8[8];
    if (f->file_size < 8) {
        return moe_error_set(err, MOE_ERR_TRUNCATED, "%s: file is %" PRIu64 " bytes, shorter "
                             "than the 8-byte header length (not a safetensors file?)",
                             f->name, f->file_size);
    }
    moe_status_t rc = st_src_read(f, NULL, 0, len8, sizeof(len8), err);
    if (rc != MOE_OK) {
        return rc;
    }
    uint64_t n = st_le64(len8);
    if (n > ST_MAX_HEADER && memcmp(len8, "version ", 8) == 0) {
        /* "version https://git-lfs.github.com/spec/v1": a clone without the LFS files */
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: a Git LFS pointer (a text file that "
                             "names the weights), not the weights: fetch them (git lfs pull "
                             "in the clone, or hf download)", f->name);
    }
    if (n > ST_MAX_HEADER) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: header length %" PRIu64 " is over the "
                             "100 MiB limit (not a safetensors file?)", f->name, n);
    }
    if (n > f->file_size - 8) {
        return moe_error_set(err, MOE_ERR_TRUNCATED, "%s: header length %" PRIu64 " but only %"
                             PRIu64 " bytes follow it (truncated?)", f->name, n,
                             f->file_size - 8);
    }
    *out_len = n;
    return MOE_OK;
}

/* Reads, parses and validates the header of f (file_size already set). */
static moe_status_t st_load(moe_st_file_t *f, moe_error_t *err)
{
    uint64_t n = 0;
    moe_status_t rc = st_read_header_len(f, &n, err);
    if (rc != MOE_OK) {
        return rc;
    }
    /* A private, exact-size copy: the parser then cannot run past it unnoticed (and the
     * file path needs a buffer anyway). */
    unsigned char *hdr = malloc(n ? (size_t)n : 1);
    if (hdr == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory for a %" PRIu64
                             "-byte header", f->name, n);
    }
    f->data_start = 8 + n;
    f->data_size = f->file_size - 8 - n;
    rc = st_src_read(f, NULL, 8, hdr, (size_t)n, err);
    if (rc == MOE_OK) {
        rc = st_parse_header(f, hdr, (size_t)n, err);
    }
    free(hdr);
    if (rc == MOE_OK) {
        rc = st_build_index(f, err);
    }
    return rc;
}

moe_status_t moe_st_open(const char *path, moe_st_file_t **out, moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    struct stat st;
    moe_status_t rc;

    if (path == NULL || out == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_open: NULL path or out");
    }
    if ((rc = st_file_new(path, &f, err)) != MOE_OK) {
        return rc;
    }
    const char *kind = NULL;
    f->fd = moe_file_open_regular(path, &kind);
    if (f->fd < 0 && kind != NULL) {
        rc = moe_error_set(err, MOE_ERR_IO, "%s: is %s, not a regular file: a .safetensors "
                           "file is expected", path, kind);
        goto close_file;
    }
    if (f->fd < 0) {
        rc = moe_error_set(err, MOE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto close_file;
    }
    if (fstat(f->fd, &st) != 0) {
        rc = moe_error_set(err, MOE_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto close_file;
    }
    f->file_size = (uint64_t)st.st_size;
    if ((rc = st_load(f, err)) != MOE_OK) {
        goto close_file;
    }
    *out = f;
    return MOE_OK;

close_file:
    moe_st_close(f);
    return rc;
}

moe_status_t moe_st_open_memory(const void *buf, size_t len, const char *name,
                                moe_st_file_t **out, moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    moe_status_t rc;

    if (name == NULL) {
        name = "<memory>";
    }
    if ((buf == NULL && len > 0) || out == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: NULL buffer or out", name);
    }
    if ((rc = st_file_new(name, &f, err)) != MOE_OK) {
        return rc;
    }
    f->mem = buf;
    f->file_size = len;
    if ((rc = st_load(f, err)) != MOE_OK) {
        moe_st_close(f);
        return rc;
    }
    *out = f;
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Reading                                                                                */

static size_t st_common_prefix(const char *a, const char *b)
{
    size_t n = 0;
    while (a[n] != '\0' && a[n] == b[n]) {
        n++;
    }
    return n;
}

/* "not found", with up to 3 names that share at least half of the wanted name's prefix:
 * usually a layer index or a projection name that differs. */
static moe_status_t st_not_found(const moe_st_file_t *f, const char *name, moe_error_t *err)
{
    const char *best[3] = {NULL, NULL, NULL};
    size_t best_len[3] = {0, 0, 0};
    size_t min_len = strlen(name) / 2 > 3 ? strlen(name) / 2 : 3;
    for (int i = 0; i < f->count; i++) {
        size_t p = st_common_prefix(name, f->tensors[i].name);
        for (int k = 0; k < 3 && p >= min_len; k++) {
            if (best[k] == NULL || p > best_len[k]) {
                memmove(&best[k + 1], &best[k], sizeof(best[0]) * (size_t)(2 - k));
                memmove(&best_len[k + 1], &best_len[k], sizeof(best_len[0]) * (size_t)(2 - k));
                best[k] = f->tensors[i].name;
                best_len[k] = p;
                break;
            }
        }
    }
    char similar[640] = "";
    size_t len = 0;
    for (int k = 0; k < 3 && best[k] != NULL; k++) {
        st_appendf(similar, sizeof(similar), &len, "%s'%.200s'", k ? ", " : "; similar: ",
                   best[k]);
    }
    return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' not found%s (the file has %d "
                         "tensors)", f->name, name, similar, f->count);
}


/* The refusal of a tensor whose elements [first, first + n), now in dst, hold a NaN or an
 * infinity: names the first one (found again only here, on the failure path). */
static moe_status_t st_nonfinite(const moe_st_file_t *f, const moe_st_tensor_info_t *t,
                                 const float *dst, uint64_t first, size_t n, moe_error_t *err)
{
    size_t i = 0;
    while (i + 1 < n && (st_f32_bits(dst[i]) & 0x7F800000u) != 0x7F800000u) {
        i++;
    }
    uint32_t u = st_f32_bits(dst[i]);
    const char *what = (u & 0x7FFFFFu) != 0 ? "NaN" : (u >> 31) != 0 ? "-inf" : "+inf";
    return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' (%s) holds %s at element %"
                         PRIu64 ": moed refuses weights and inputs that are not finite (a "
                         "damaged file, or one rewritten while it was read?)", f->name, t->name,
                         t->dtype_name, what, first + (uint64_t)i);
}

/* Reads t (already matched against what the caller expects) into dst as F32. On failure
 * dst holds unspecified bytes. Threads may read one handle at once: pread keeps no file
 * position and nothing here writes to the handle. */
static moe_status_t st_read_tensor(moe_st_file_t *f, const moe_st_tensor_info_t *t,
                                   float *dst, moe_error_t *err)
{
    if (t->dtype != MOE_ST_F32 && t->dtype != MOE_ST_BF16 && t->dtype != MOE_ST_F16) {
        return moe_error_set(err, MOE_ERR_UNSUPPORTED, "%s: tensor '%.200s' has dtype %s; "
                             "only F32, BF16 and F16 can be read as float", f->name, t->name,
                             t->dtype_name);
    }
    uint64_t raw = t->data_end - t->data_begin;
    size_t esize = t->dtype == MOE_ST_F32 ? 4 : 2;
    size_t n = (size_t)(raw / esize);
    if (n == 0) {
        return MOE_OK;
    }
    /* Read into the tail of dst, then widen in place: one syscall, no second buffer. */
    unsigned char *tail = (unsigned char *)dst + n * (sizeof(float) - esize);
    moe_status_t rc =
        st_src_read(f, t->name, f->data_start + t->data_begin, tail, (size_t)raw, err);
    if (rc != MOE_OK) {
        return rc;
    }
    return st_decode_in_place(t->dtype, dst, tail, n) ? st_nonfinite(f, t, dst, 0, n, err)
                                                       : MOE_OK;
}

moe_status_t moe_st_read_f32(moe_st_file_t *f, const char *name, float *dst, size_t count,
                             moe_error_t *err)
{
    if (f == NULL || name == NULL || (dst == NULL && count > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_read_f32: NULL argument");
    }
    const moe_st_tensor_info_t *t = moe_st_find(f, name);
    if (t == NULL) {
        return st_not_found(f, name, err);
    }
    uint64_t nelem = 0;
    st_shape_elems(t->ndim, t->shape, &nelem); /* validated at open */
    if (nelem != count) {
        char shape[256];
        st_format_shape(shape, sizeof(shape), t->ndim, t->shape);
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' has %" PRIu64
                             " elements (shape %s) but %zu were expected", f->name, name,
                             nelem, shape, count);
    }
    return st_read_tensor(f, t, dst, err);
}

moe_status_t moe_st_read_f32_range(moe_st_file_t *f, const char *name, uint64_t first,
                                   size_t count, float *dst, moe_error_t *err)
{
    if (f == NULL || name == NULL || (dst == NULL && count > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_read_f32_range: NULL argument");
    }
    const moe_st_tensor_info_t *t = moe_st_find(f, name);
    if (t == NULL) {
        return st_not_found(f, name, err);
    }
    if (t->dtype != MOE_ST_F32 && t->dtype != MOE_ST_BF16 && t->dtype != MOE_ST_F16) {
        return moe_error_set(err, MOE_ERR_UNSUPPORTED, "%s: tensor '%.200s' has dtype %s; "
                             "only F32, BF16 and F16 can be read as float", f->name, t->name,
                             t->dtype_name);
    }
    size_t esize = t->dtype == MOE_ST_F32 ? 4 : 2;
    uint64_t nelem = (t->data_end - t->data_begin) / esize;
    if (first > nelem || count > nelem - first) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' has %" PRIu64
                             " elements; [%" PRIu64 ", +%zu) is past its end", f->name, name,
                             nelem, first, count);
    }
    if (count == 0) {
        return MOE_OK;
    }
    unsigned char *tail = (unsigned char *)dst + count * (sizeof(float) - esize);
    moe_status_t rc = st_src_read(f, t->name, f->data_start + t->data_begin + first * esize,
                                  tail, count * esize, err);
    if (rc == MOE_OK && st_decode_in_place(t->dtype, dst, tail, count)) {
        rc = st_nonfinite(f, t, dst, first, count, err);
    }
    return rc;
}

moe_status_t moe_st_read_raw(moe_st_file_t *f, const char *name, void *dst, size_t len,
                             moe_error_t *err)
{
    if (f == NULL || name == NULL || (dst == NULL && len > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_read_raw: NULL argument");
    }
    const moe_st_tensor_info_t *t = moe_st_find(f, name);
    if (t == NULL) {
        return st_not_found(f, name, err);
    }
    if (t->data_end - t->data_begin != (uint64_t)len) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' holds %" PRIu64
                             " bytes but %zu were expected", f->name, name,
                             t->data_end - t->data_begin, len);
    }
    return len == 0 ? MOE_OK
                    : st_src_read(f, t->name, f->data_start + t->data_begin, dst, len, err);
}

moe_status_t moe_st_read_raw_range(moe_st_file_t *f, const char *name, uint64_t offset,
                                   void *dst, size_t len, moe_error_t *err)
{
    if (f == NULL || name == NULL || (dst == NULL && len > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_read_raw_range: NULL argument");
    }
    const moe_st_tensor_info_t *t = moe_st_find(f, name);
    if (t == NULL) {
        return st_not_found(f, name, err);
    }
    uint64_t size = t->data_end - t->data_begin;
    if (offset > size || (uint64_t)len > size - offset) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' holds %" PRIu64
                             " bytes; [%" PRIu64 ", +%zu) is past its end", f->name, name, size,
                             offset, len);
    }
    return len == 0 ? MOE_OK
                    : st_src_read(f, t->name, f->data_start + t->data_begin + offset, dst,
                                  len, err);
}

moe_status_t moe_st_read_f32_shaped(moe_st_file_t *f, const char *name, int ndim,
                                    const int64_t *shape, float *dst, moe_error_t *err)
{
    if (f == NULL || name == NULL || ndim < 0 || ndim > MOE_ST_MAX_DIMS ||
        (shape == NULL && ndim > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_read_f32_shaped: bad argument");
    }
    const moe_st_tensor_info_t *t = moe_st_find(f, name);
    if (t == NULL) {
        return st_not_found(f, name, err);
    }
    if (t->ndim != ndim ||
        (ndim > 0 && memcmp(t->shape, shape, sizeof(shape[0]) * (size_t)ndim) != 0)) {
        char have[256], want[256];
        st_format_shape(have, sizeof(have), t->ndim, t->shape);
        st_format_shape(want, sizeof(want), ndim, shape);
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' has shape %s but %s "
                             "was expected", f->name, name, have, want);
    }
    if (dst == NULL && t->data_end > t->data_begin) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_st_read_f32_shaped: NULL dst");
    }
    return st_read_tensor(f, t, dst, err);
}

const char *moe_st_metadata(const moe_st_file_t *f, const char *key)
{
    if (f == NULL || f->meta == NULL || key == NULL) {
        return NULL;
    }
    return json_string_value(json_object_get(f->meta, key)); /* NULL unless a string */
}
