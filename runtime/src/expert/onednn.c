/* BF16 GEMMs through oneDNN's matmul primitive (onednn.h). */
#include "expert/onednn.h"

#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/mem.h"

/* Row buckets: multiples of 8, so a GEMM computes at most 7 spare rows (oneDNN's BF16
 * kernels on avx512_core_bf16 take 8 rows at a time: 520 rows cost what 528 do, 516 less). */
#define BUCKET_STEP 8

typedef struct onednn_prim {
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst; /* handles set per call */
} onednn_prim_t;

typedef struct onednn_shape {
    int64_t n, k;
    dnnl_data_type_t dst_type; /* up: BF16 (the activation's input), down: F32 */
    dnnl_memory_desc_t packed_md; /* what the matmul prefers for W, from format_tag any */
    size_t packed_bytes;
    onednn_prim_t *prims; /* [num_buckets], created on first use */
} onednn_shape_t;

struct moe_onednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    int64_t max_rows;
    int num_buckets;
    onednn_shape_t shape[MOE_ONEDNN_SHAPES];
};

bool moe_cpu_bf16_native(void)
{
    const char *no = getenv("MOED_CPU_NO_BF16");
    if (no != NULL && strcmp(no, "0") != 0 && no[0] != '\0') {
        return false;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    /* The ISA values are bit sets: avx512_core_bf16 and every AMX one include its bits. */
    return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
           (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

const char *moe_onednn_isa_name(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2: return "avx2";
    default: return "other";
    }
}

const char *moe_cpu_bf16_why(void)
{
    static char why[160];
    const char *no = getenv("MOED_CPU_NO_BF16");
    if (no != NULL && strcmp(no, "0") != 0 && no[0] != '\0') {
        return "MOED_CPU_NO_BF16 is set, so the CPU counts as having no native BF16";
    }
    snprintf(why, sizeof(why), "this CPU has no native BF16 (oneDNN's ISA is %s; BF16 needs "
             "avx512_bf16 or AMX)", moe_onednn_isa_name());
    return why;
}

int64_t moe_onednn_bucket(int64_t m)
{
    return m <= BUCKET_STEP ? BUCKET_STEP : (m + BUCKET_STEP - 1) / BUCKET_STEP * BUCKET_STEP;
}

static int bucket_index(int64_t m)
{
    return (int)(moe_onednn_bucket(m) / BUCKET_STEP) - 1;
}

static moe_status_t dnnl_fail(moe_error_t *err, dnnl_status_t s, const char *what)
{
    return moe_error_set(err, MOE_ERR_BLAS, "oneDNN: %s failed (status %d)", what, (int)s);
}

/* The matmul primitive desc of m rows for shape s, W given by wmd (any, or the packed). */
static dnnl_status_t matmul_pd(const moe_onednn_t *o, const onednn_shape_t *s, int64_t m,
                               const dnnl_memory_desc_t *wmd, dnnl_primitive_desc_t *pd)
{
    dnnl_memory_desc_t src, dst;
    dnnl_matmul_desc_t md;
    dnnl_dims_t sd = {m, s->k}, dd = {m, s->n};
    dnnl_status_t r = dnnl_memory_desc_init_by_tag(&src, 2, sd, dnnl_bf16, dnnl_ab);
    if (r == dnnl_success) {
        r = dnnl_memory_desc_init_by_tag(&dst, 2, dd, s->dst_type, dnnl_ab);
    }
    if (r == dnnl_success) {
        r = dnnl_matmul_desc_init(&md, &src, wmd, NULL, &dst);
    }
    return r == dnnl_success ? dnnl_primitive_desc_create(pd, &md, NULL, o->engine, NULL) : r;
}

/* The layout the matmul of the largest bucket prefers for W (format_tag any). */
static moe_status_t shape_init(moe_onednn_t *o, onednn_shape_t *s, int64_t n, int64_t k,
                               dnnl_data_type_t dst_type, moe_error_t *err)
{
    dnnl_memory_desc_t any;
    dnnl_dims_t wd = {k, n};
    dnnl_primitive_desc_t pd = NULL;
    s->n = n;
    s->k = k;
    s->dst_type = dst_type;
    dnnl_status_t r = dnnl_memory_desc_init_by_tag(&any, 2, wd, dnnl_bf16, dnnl_format_tag_any);
    if (r == dnnl_success) {
        r = matmul_pd(o, s, moe_onednn_bucket(o->max_rows), &any, &pd);
    }
    if (r != dnnl_success) {
        return dnnl_fail(err, r, "creating the BF16 matmul");
    }
    s->packed_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    s->packed_bytes = dnnl_memory_desc_get_size(&s->packed_md);
    dnnl_primitive_desc_destroy(pd);
    s->prims = calloc((size_t)o->num_buckets, sizeof(*s->prims));
    return s->prims != NULL ? MOE_OK
                            : moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate primitives");
}

moe_status_t moe_onednn_create(int64_t hidden, int64_t up_n, int64_t ffn, int64_t max_rows,
                               int threads, moe_onednn_t **out, moe_error_t *err)
{
    moe_onednn_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the oneDNN context");
    }
    omp_set_num_threads(threads > 0 ? threads : 1);
    o->max_rows = max_rows > 0 ? max_rows : 1;
    o->num_buckets = bucket_index(o->max_rows) + 1;
    moe_status_t st = MOE_OK;
    dnnl_status_t r = dnnl_engine_create(&o->engine, dnnl_cpu, 0);
    if (r == dnnl_success) {
        r = dnnl_stream_create(&o->stream, o->engine, dnnl_stream_default_flags);
    }
    if (r != dnnl_success) {
        st = dnnl_fail(err, r, "creating the CPU engine");
    }
    if (st == MOE_OK) {
        st = shape_init(o, &o->shape[MOE_ONEDNN_UP], up_n, hidden, dnnl_bf16, err);
    }
    if (st == MOE_OK) {
        st = shape_init(o, &o->shape[MOE_ONEDNN_DOWN], hidden, ffn, dnnl_f32, err);
    }
    if (st != MOE_OK) {
        moe_onednn_destroy(o);
        return st;
    }
    *out = o;
    return MOE_OK;
}

static void prim_free(onednn_prim_t *p)
{
    dnnl_memory_destroy(p->src);
    dnnl_memory_destroy(p->wei);
    dnnl_memory_destroy(p->dst);
    dnnl_primitive_destroy(p->prim);
}

void moe_onednn_destroy(moe_onednn_t *o)
{
    if (o == NULL) {
        return;
    }
    for (int s = 0; s < MOE_ONEDNN_SHAPES; s++) {
        for (int b = 0; o->shape[s].prims != NULL && b < o->num_buckets; b++) {
            prim_free(&o->shape[s].prims[b]);
        }
        free(o->shape[s].prims);
    }
    dnnl_stream_destroy(o->stream);
    dnnl_engine_destroy(o->engine);
    free(o);
}

size_t moe_onednn_packed_bytes(const moe_onednn_t *o, int which)
{
    return o->shape[which].packed_bytes;
}

bool moe_onednn_packed_blocked(const moe_onednn_t *o, int which)
{
    const onednn_shape_t *s = &o->shape[which];
    dnnl_memory_desc_t blk;
    dnnl_dims_t wd = {s->k, s->n};
    return dnnl_memory_desc_init_by_tag(&blk, 2, wd, dnnl_bf16, dnnl_BA16a64b2a) ==
               dnnl_success &&
           dnnl_memory_desc_equal(&blk, &s->packed_md) != 0;
}

moe_status_t moe_onednn_pack(moe_onednn_t *o, int which, const uint16_t *w, void **packed,
                             moe_error_t *err)
{
    const onednn_shape_t *s = &o->shape[which];
    dnnl_memory_desc_t plain;
    dnnl_dims_t wd = {s->k, s->n};
    dnnl_memory_t from = NULL, to = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t reorder = NULL;
    void *buf = moe_alloc_large(s->packed_bytes); /* huge pages: GEMMs stream it */
    if (buf == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %zu MiB for packed weights",
                             s->packed_bytes >> 20);
    }
    /* W [n, k] row-major is the matmul's weights [k, n] in tag ba. */
    dnnl_status_t r = dnnl_memory_desc_init_by_tag(&plain, 2, wd, dnnl_bf16, dnnl_ba);
    if (r == dnnl_success) {
        r = dnnl_memory_create(&from, &plain, o->engine, (void *)w);
    }
    if (r == dnnl_success) {
        r = dnnl_memory_create(&to, &s->packed_md, o->engine, buf);
    }
    if (r == dnnl_success) {
        r = dnnl_reorder_primitive_desc_create(&pd, &plain, o->engine, &s->packed_md, o->engine,
                                               NULL);
    }
    if (r == dnnl_success) {
        r = dnnl_primitive_create(&reorder, pd);
    }
    if (r == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        r = dnnl_primitive_execute(reorder, o->stream, 2, args);
    }
    if (r == dnnl_success) {
        r = dnnl_stream_wait(o->stream);
    }
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(from);
    dnnl_memory_destroy(to);
    if (r != dnnl_success) {
        free(buf);
        return dnnl_fail(err, r, "reordering the weights");
    }
    *packed = buf;
    return MOE_OK;
}

/* Bucket b's primitive of shape s, created on first use with the packed weights' layout. */
static moe_status_t prim_get(moe_onednn_t *o, onednn_shape_t *s, int64_t m, onednn_prim_t **out,
                             moe_error_t *err)
{
    onednn_prim_t *p = &s->prims[bucket_index(m)];
    if (p->prim != NULL) {
        *out = p;
        return MOE_OK;
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t r = matmul_pd(o, s, moe_onednn_bucket(m), &s->packed_md, &pd);
    if (r == dnnl_success) {
        r = dnnl_primitive_create(&p->prim, pd);
    }
    if (r == dnnl_success) {
        r = dnnl_memory_create(&p->src, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                               o->engine, DNNL_MEMORY_NONE);
    }
    if (r == dnnl_success) {
        r = dnnl_memory_create(&p->wei, &s->packed_md, o->engine, DNNL_MEMORY_NONE);
    }
    if (r == dnnl_success) {
        r = dnnl_memory_create(&p->dst, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0),
                               o->engine, DNNL_MEMORY_NONE);
    }
    dnnl_primitive_desc_destroy(pd);
    if (r != dnnl_success) {
        prim_free(p);
        memset(p, 0, sizeof(*p));
        return dnnl_fail(err, r, "creating a BF16 matmul for the packed weights");
    }
    *out = p;
    return MOE_OK;
}

moe_status_t moe_onednn_prepare(moe_onednn_t *o, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    for (int w = 0; w < MOE_ONEDNN_SHAPES && st == MOE_OK; w++) {
        for (int b = 0; b < o->num_buckets && st == MOE_OK; b++) {
            onednn_prim_t *p = NULL;
            st = prim_get(o, &o->shape[w], (int64_t)(b + 1) * BUCKET_STEP, &p, err);
        }
    }
    return st;
}

moe_status_t moe_onednn_gemm(moe_onednn_t *o, int which, int64_t m, const uint16_t *a,
                             const void *packed, void *c, moe_error_t *err)
{
    onednn_shape_t *s = &o->shape[which];
    onednn_prim_t *p = NULL;
    if (m <= 0) {
        return MOE_OK;
    }
    if (m > o->max_rows) {
        return moe_error_set(err, MOE_ERR_INTERNAL, "BF16 GEMM of %lld rows, at most %lld",
                             (long long)m, (long long)o->max_rows);
    }
    moe_status_t st = prim_get(o, s, m, &p, err);
    if (st != MOE_OK) {
        return st;
    }
    dnnl_status_t r = dnnl_memory_set_data_handle(p->src, (void *)a);
    if (r == dnnl_success) {
        r = dnnl_memory_set_data_handle(p->wei, (void *)packed);
    }
    if (r == dnnl_success) {
        r = dnnl_memory_set_data_handle(p->dst, c);
    }
    if (r == dnnl_success) {
        dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei}, {DNNL_ARG_DST, p->dst}};
        r = dnnl_primitive_execute(p->prim, o->stream, 3, args);
    }
    if (r == dnnl_success) {
        r = dnnl_stream_wait(o->stream);
    }
    return r == dnnl_success ? MOE_OK : dnnl_fail(err, r, "a BF16 matmul");
}
