/* Routing traces (moe_model/routing_trace.h): the moed-routing/1 reader, its checks, the
 * counts and the writer, on the safetensors reader and writer. */
#include "moe_model/routing_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "moe/file.h"
#include "moe/limits.h"
#include "moe_model/safetensors.h"

/* More decoder layers than any model has; bounds what a header may make moed allocate. */
#define TRACE_MAX_LAYERS 4096

int moe_routing_trace_resolve(const char *path, char *out, size_t out_len)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        return -1;
    }
    int n = S_ISDIR(sb.st_mode) ? moe_path_join(out, out_len, path, MOE_ROUTING_FILE)
                                : snprintf(out, out_len, "%s", path);
    if (n < 0 || (size_t)n >= out_len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

void moe_routing_trace_free(moe_routing_trace_t *tr)
{
    if (tr == NULL) {
        return;
    }
    free(tr->layer_ids);
    free(tr->ids);
    free(tr->weights);
    memset(tr, 0, sizeof(*tr));
}

int moe_routing_trace_layer(const moe_routing_trace_t *tr, int32_t layer_id)
{
    for (int i = 0; i < tr->num_layers; i++) {
        if (tr->layer_ids[i] == layer_id) {
            return i;
        }
    }
    return -1;
}

bool moe_routing_trace_fits_family(const moe_routing_trace_t *tr, const char *family)
{
    return tr->family[0] == '\0' || family == NULL || strcmp(tr->family, family) == 0;
}

/* A metadata value that must be a whole number in [lo, hi]. */
static moe_status_t trace_meta_int(const moe_st_file_t *f, const char *path, const char *key,
                                   bool required, int64_t lo, int64_t hi, int64_t *out,
                                   moe_error_t *err)
{
    const char *v = moe_st_metadata(f, key);
    if (v == NULL) {
        if (!required) {
            *out = 0;
            return MOE_OK;
        }
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: a moed-routing/1 trace needs the "
                             "metadata key '%s' (a string holding a whole number)", path, key);
    }
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || x < lo || x > hi) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: metadata '%s' is '%.64s'; expected a "
                             "whole number in [%" PRId64 ", %" PRId64 "]", path, key, v, lo,
                             hi);
    }
    *out = x;
    return MOE_OK;
}

/* metadata "layers": a JSON list of distinct decoder layer indices. */
static moe_status_t trace_meta_layers(const moe_st_file_t *f, moe_routing_trace_t *tr,
                                      moe_error_t *err)
{
    const char *v = moe_st_metadata(f, "layers");
    if (v == NULL) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: a moed-routing/1 trace needs the "
                             "metadata key 'layers' (a JSON list of layer indices, \"[0, 1]\")",
                             tr->path);
    }
    json_error_t je;
    json_t *list = json_loads(v, JSON_DECODE_ANY, &je);
    moe_status_t st = MOE_OK;
    size_t n = json_is_array(list) ? json_array_size(list) : 0;
    if (n == 0 || n > TRACE_MAX_LAYERS) {
        st = moe_error_set(err, MOE_ERR_FORMAT, "%s: metadata 'layers' is '%.80s'; expected a "
                           "JSON list of 1 to %d layer indices", tr->path, v, TRACE_MAX_LAYERS);
        goto out;
    }
    tr->layer_ids = calloc(n, sizeof(int32_t));
    if (tr->layer_ids == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", tr->path);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
        if (x < 0 || x > 1000000) {
            st = moe_error_set(err, MOE_ERR_FORMAT, "%s: metadata 'layers' entry %zu is not a "
                               "layer index (a whole number >= 0)", tr->path, i);
            goto out;
        }
        for (size_t o = 0; o < i; o++) {
            if (tr->layer_ids[o] == (int32_t)x) {
                st = moe_error_set(err, MOE_ERR_FORMAT, "%s: metadata 'layers' names layer %d "
                                   "twice", tr->path, (int)x);
                goto out;
            }
        }
        tr->layer_ids[i] = (int32_t)x;
    }
    tr->num_layers = (int)n;
out:
    json_decref(list);
    return st;
}

static moe_status_t trace_meta(const moe_st_file_t *f, moe_routing_trace_t *tr,
                               moe_error_t *err)
{
    const char *fmt = moe_st_metadata(f, "format");
    if (fmt == NULL || strcmp(fmt, MOE_ROUTING_FORMAT) != 0) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: not a routing trace: its metadata "
                             "'format' is %s%.64s%s, expected '" MOE_ROUTING_FORMAT "' "
                             "(docs/routing.md)", tr->path, fmt ? "'" : "", fmt ? fmt : "absent",
                             fmt ? "'" : "");
    }
    int64_t e = 0, k = 0, tps = 0;
    moe_status_t st = trace_meta_int(f, tr->path, "num_experts", true, 1, MOE_MAX_EXPERTS, &e,
                                     err);
    if (st == MOE_OK) {
        st = trace_meta_int(f, tr->path, "top_k", true, 1, MOE_MAX_EXPERTS, &k, err);
    }
    if (st == MOE_OK) {
        st = trace_meta_int(f, tr->path, "tokens_per_step", false, 0, INT32_MAX, &tps, err);
    }
    if (st != MOE_OK) {
        return st;
    }
    if (k > e) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: metadata top_k %" PRId64 " is more than "
                             "num_experts %" PRId64, tr->path, k, e);
    }
    tr->num_experts = (int)e;
    tr->top_k = (int)k;
    tr->tokens_per_step = tps;
    const char *fam = moe_st_metadata(f, "family"), *src = moe_st_metadata(f, "source");
    const char *w = moe_st_metadata(f, "weights");
    snprintf(tr->family, sizeof(tr->family), "%s", fam ? fam : "");
    snprintf(tr->source, sizeof(tr->source), "%s", src ? src : "");
    tr->uniform_weights = w != NULL && strcmp(w, "uniform") == 0;
    return trace_meta_layers(f, tr, err);
}

/* One tensor of layer L: present, of dtype, shaped [rows, top_k] (rows the first layer's). */
static moe_status_t trace_tensor(const moe_st_file_t *f, moe_routing_trace_t *tr, int32_t L,
                                 const char *what, const char *dtype, moe_error_t *err)
{
    char name[64];
    snprintf(name, sizeof(name), "layers.%d.%s", (int)L, what);
    const moe_st_tensor_info_t *t = moe_st_find(f, name);
    if (t == NULL) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: layer %d is listed in the metadata but "
                             "tensor '%s' is missing", tr->path, (int)L, name);
    }
    if (strcmp(t->dtype_name, dtype) != 0) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%s' has dtype %s; a trace's %s "
                             "are %s", tr->path, name, t->dtype_name, what, dtype);
    }
    if (t->ndim != 2 || t->shape[1] != tr->top_k || t->shape[0] < 1 ||
        (tr->rows > 0 && t->shape[0] != tr->rows)) {
        char shape[64] = "[";
        for (int d = 0; d < t->ndim && d < 4; d++) {
            size_t l = strlen(shape);
            snprintf(shape + l, sizeof(shape) - l, "%s%" PRId64, d ? ", " : "", t->shape[d]);
        }
        strncat(shape, t->ndim > 4 ? ", ...]" : "]", sizeof(shape) - strlen(shape) - 1);
        if (tr->rows > 0) {
            return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%s' has shape %s; expected "
                                 "[%" PRId64 ", %d] (the same tokens in every layer, top_k "
                                 "columns)", tr->path, name, shape, tr->rows, tr->top_k);
        }
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%s' has shape %s; expected "
                             "[tokens >= 1, %d] (top_k columns)", tr->path, name, shape,
                             tr->top_k);
    }
    tr->rows = t->shape[0];
    return MOE_OK;
}

/* Every listed layer has both tensors; no tensor of an unlisted layer. */
static moe_status_t trace_tensors(const moe_st_file_t *f, moe_routing_trace_t *tr,
                                  moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    for (int i = 0; i < tr->num_layers && st == MOE_OK; i++) {
        st = trace_tensor(f, tr, tr->layer_ids[i], "topk_ids", "I32", err);
        if (st == MOE_OK) {
            st = trace_tensor(f, tr, tr->layer_ids[i], "topk_weights", "F32", err);
        }
    }
    for (int i = 0; i < moe_st_count(f) && st == MOE_OK; i++) {
        const char *name = moe_st_at(f, i)->name;
        int L = -1, used = 0;
        if (sscanf(name, "layers.%d.%n", &L, &used) == 1 && used > 0 &&
            moe_routing_trace_layer(tr, L) < 0) {
            st = moe_error_set(err, MOE_ERR_FORMAT, "%s: tensor '%.200s' belongs to layer %d, "
                               "which the metadata 'layers' does not list", tr->path, name, L);
        }
    }
    return st;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Layer li's two tensors into tr->ids and tr->weights, each row checked. */
static moe_status_t trace_read_layer(moe_st_file_t *f, moe_routing_trace_t *tr, int li,
                                     moe_error_t *err)
{
    int L = tr->layer_ids[li], k = tr->top_k;
    size_t n = (size_t)tr->rows * (size_t)k;
    int32_t *ids = tr->ids + (size_t)li * n;
    float *w = tr->weights + (size_t)li * n;
    char name[2][64];
    snprintf(name[0], sizeof(name[0]), "layers.%d.topk_ids", L);
    snprintf(name[1], sizeof(name[1]), "layers.%d.topk_weights", L);
    moe_status_t st = moe_st_read_raw(f, name[0], ids, n * 4, err);
    if (st == MOE_OK) {
        st = moe_st_read_raw(f, name[1], w, n * 4, err);
    }
    if (st != MOE_OK) {
        return st;
    }
    for (size_t i = 0; i < n; i++) { /* the file is little endian */
        uint32_t a = le32((const unsigned char *)&ids[i]), b = le32((const unsigned char *)&w[i]);
        memcpy(&ids[i], &a, 4);
        memcpy(&w[i], &b, 4);
    }
    for (int64_t r = 0; r < tr->rows; r++) {
        const int32_t *row = ids + (size_t)r * (size_t)k;
        const float *wr = w + (size_t)r * (size_t)k;
        for (int j = 0; j < k; j++) {
            if (row[j] < 0 || row[j] >= tr->num_experts) {
                return moe_error_set(err, MOE_ERR_FORMAT, "%s: '%s' row %" PRId64 " column %d "
                                     "is expert %d; the trace has %d experts (0 to %d)",
                                     tr->path, name[0], r, j, (int)row[j], tr->num_experts,
                                     tr->num_experts - 1);
            }
            for (int o = 0; o < j; o++) {
                if (row[o] == row[j]) {
                    return moe_error_set(err, MOE_ERR_FORMAT, "%s: '%s' row %" PRId64 " names "
                                         "expert %d twice (columns %d and %d): a token picks "
                                         "an expert at most once", tr->path, name[0], r,
                                         (int)row[j], o, j);
                }
            }
            if (!isfinite(wr[j]) || wr[j] < 0.0f) {
                return moe_error_set(err, MOE_ERR_FORMAT, "%s: '%s' row %" PRId64 " column %d "
                                     "is %g; weights are finite and not negative", tr->path,
                                     name[1], r, j, (double)wr[j]);
            }
        }
    }
    return MOE_OK;
}

/* A folder given for a trace but without routing.safetensors: a moed report folder says why
 * its run wrote none (its INCOMPLETE's line for the file), or that it recorded none. */
static moe_status_t trace_folder_without(const char *path, const char *file, moe_error_t *err)
{
    char other[MOE_ROUTING_PATH_MAX + 32], line[512] = ""; /* file: a moe_routing_trace_t path */
    size_t len = strlen(file) - strlen(MOE_ROUTING_FILE); /* "DIR/" */
    snprintf(other, sizeof(other), "%.*sINCOMPLETE", (int)len, file);
    FILE *f = fopen(other, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL &&
           strncmp(line, MOE_ROUTING_FILE ": ", strlen(MOE_ROUTING_FILE) + 2) != 0) {
        line[0] = '\0';
    }
    if (f != NULL) {
        fclose(f);
    }
    line[strcspn(line, "\n")] = '\0';
    if (line[0] != '\0') {
        return moe_error_set(err, MOE_ERR_IO, "%s: no %s: its run did not write it (its "
                             "INCOMPLETE: %.300s)", path, MOE_ROUTING_FILE, line);
    }
    snprintf(other, sizeof(other), "%.*ssummary.json", (int)len, file);
    if (access(other, F_OK) == 0) {
        return moe_error_set(err, MOE_ERR_IO, "%s: no %s: a moed report whose run recorded no "
                             "routing (profiler.record_routing: true records it)", path,
                             MOE_ROUTING_FILE);
    }
    return moe_error_set(err, MOE_ERR_IO, "%s: a folder without %s (a trace is that file, or "
                         "a folder holding it)", path, MOE_ROUTING_FILE);
}

moe_status_t moe_routing_trace_open(const char *path, bool data, moe_routing_trace_t *out,
                                    moe_error_t *err)
{
    memset(out, 0, sizeof(*out));
    if (moe_routing_trace_resolve(path, out->path, sizeof(out->path)) != 0) {
        int e = errno;
        char tried[MOE_PATH_MAX + 64];
        moe_path_tried(path, tried, sizeof(tried));
        return moe_error_set(err, MOE_ERR_IO, "%s: cannot read the routing trace%s: %s", path,
                             tried, strerror(e));
    }
    struct stat sb;
    if (strcmp(out->path, path) != 0 && stat(out->path, &sb) != 0 && errno == ENOENT) {
        return trace_folder_without(path, out->path, err);
    }
    moe_st_file_t *f = NULL;
    moe_status_t st = moe_st_open(out->path, &f, err);
    if (st == MOE_OK) {
        st = trace_meta(f, out, err);
    }
    if (st == MOE_OK) {
        st = trace_tensors(f, out, err);
    }
    if (st == MOE_OK && data) {
        size_t n = (size_t)out->num_layers * (size_t)out->rows * (size_t)out->top_k;
        out->ids = malloc(n * sizeof(int32_t));
        out->weights = malloc(n * sizeof(float));
        if (out->ids == NULL || out->weights == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory for %zu routing "
                               "choices", out->path, n);
        }
        for (int li = 0; li < out->num_layers && st == MOE_OK; li++) {
            st = trace_read_layer(f, out, li, err);
        }
    }
    moe_st_close(f);
    if (st != MOE_OK) {
        moe_routing_trace_free(out);
    }
    return st;
}

void moe_routing_trace_counts(const moe_routing_trace_t *tr, int li, int64_t first, int64_t n,
                              int64_t *counts)
{
    memset(counts, 0, sizeof(int64_t) * (size_t)tr->num_experts);
    for (int64_t i = 0; i < n; i++) {
        const int32_t *row = moe_routing_trace_ids(tr, li, (first + i) % tr->rows);
        for (int j = 0; j < tr->top_k; j++) {
            counts[row[j]]++;
        }
    }
}

uint64_t moe_routing_trace_bytes(int num_layers, int64_t rows, int top_k)
{
    /* the data, and a header of ~150 bytes per tensor plus the metadata */
    return (uint64_t)num_layers * ((uint64_t)rows * (uint64_t)top_k * 8u + 300u) + 1024u;
}

moe_status_t moe_routing_trace_write(const char *path, const moe_routing_out_t *t,
                                     moe_error_t *err)
{
    int n = t->num_layers;
    moe_st_out_tensor_t *ts = calloc((size_t)(2 * (n > 0 ? n : 1)), sizeof(*ts));
    char (*names)[64] = calloc((size_t)(2 * (n > 0 ? n : 1)), sizeof(*names));
    size_t layers_cap = (size_t)n * 12 + 4;
    char *layers = malloc(layers_cap);
    moe_status_t st = MOE_OK;
    if (ts == NULL || names == NULL || layers == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", path);
        goto out;
    }
    size_t len = 0;
    layers[len++] = '[';
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(layers + len, layers_cap - len, "%s%d", i ? ", " : "",
                                (int)t->layer_ids[i]);
        for (int which = 0; which < 2; which++) {
            moe_st_out_tensor_t *o = &ts[2 * i + which];
            snprintf(names[2 * i + which], sizeof(names[0]), "layers.%d.%s", (int)t->layer_ids[i],
                     which == 0 ? "topk_ids" : "topk_weights");
            o->name = names[2 * i + which];
            o->dtype = which == 0 ? MOE_ST_I32 : MOE_ST_F32;
            o->ndim = 2;
            o->shape[0] = t->rows;
            o->shape[1] = t->top_k;
            o->data = which == 0 ? (const void *)t->ids[i] : (const void *)t->weights[i];
        }
    }
    snprintf(layers + len, layers_cap - len, "]");
    char e[24], k[24], tps[24];
    snprintf(e, sizeof(e), "%d", t->num_experts);
    snprintf(k, sizeof(k), "%d", t->top_k);
    snprintf(tps, sizeof(tps), "%" PRId64, t->tokens_per_step);
    const char *meta[] = {"format", MOE_ROUTING_FORMAT, "num_experts", e, "top_k", k,
                          "tokens_per_step", tps, "layers", layers,
                          "family", t->family ? t->family : "",
                          "source", t->source ? t->source : "",
                          "weights", t->uniform_weights ? "uniform" : "router"};
    st = moe_st_write_meta(path, ts, 2 * n, meta, (int)(sizeof(meta) / sizeof(meta[0]) / 2),
                           err);
out:
    free(ts);
    free(names);
    free(layers);
    return st;
}
