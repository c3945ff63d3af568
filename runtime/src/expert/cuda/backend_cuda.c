/* The GPU expert back-end (expert/backend.h; runtime.device: cuda): a layer's arithmetic on
 * one GPU through moe_cuda.h, under the pipeline of layer/moe_layer.c. Part of the CUDA
 * plug-in (libmoed_cuda.so).
 *
 * Memory: expert weights live on the device in model.dtype; the gate (F32), the routed
 * tokens x, the permuted rows and every exchange buffer are device memory. With BF16 rows
 * on the wire (runtime.wire_dtype) the exchanged rows have BF16 twins (wsend, wrecv, wback,
 * wret): a kernel narrows the permuted and computed rows into them and widens what arrives,
 * so the experts and the merge keep reading F32. A device
 * transport (nccl) reads and writes the device rows directly and orders itself after the
 * compute stream with events (`after`); a host transport (mpi, ucx) is fed through the
 * context's host buffers: chunk c's pieces are copied in when they arrive and out when
 * they are computed.
 *
 * Time: kernels run asynchronously, so the host clocks around an expert call only say when
 * it was queued. Each call is bracketed by CUDA events; finish() turns them into the host
 * timeline through an anchor event recorded on an idle stream at a known host time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "expert/backend.h"
#include "expert/cuda/backend_cuda.h"
#include "expert/cuda/moe_cuda.h"

typedef struct cuda_layer {
    moe_cuda_t *cu;
    bool host_rows;            /* the transport moves host memory: stage through the io buffers */
    void *pinned;              /* host_rows: the io's row buffers, page-locked (NULL: pageable) */
    int num_layers;
    float **gate;              /* [L] device [E, H] on routing ranks */
    float *bias;               /* [E] or NULL */
    moe_cuda_expert_t *experts; /* [L * num_local] */
    float *logits, *topk_w;    /* [T, E], [T, k] */
    int32_t *topk_idx;         /* [T, k] */
    int32_t *send_token;       /* [T * k] */
    int32_t *slot_pos;         /* [T * k] */
    float *send, *ret;         /* [T * k, H] */
    float *recv, *back;        /* [max_recv, H] */
    float *exp_in, *exp_out;   /* [T, H] an expert's rows gathered from several sources */
    bool wire_bf16;            /* rows on the wire are BF16: the w* twins below exist */
    int64_t wire_ld;           /* BF16 elements per wire row */
    void *wsend, *wret;        /* [T * k] wire rows */
    void *wrecv, *wback;       /* [max_recv] wire rows */
    void *scratch;
    moe_cuda_event_t *permuted, *anchor;
    moe_cuda_event_t **chunk_done; /* [chunks] */
    moe_cuda_event_t **call_ev;    /* [2 * chunks * num_local]: begin, end of each call */
    int num_call_ev;
    int64_t anchor_ns;
} cuda_layer_t;

static cuda_layer_t *impl_of(moe_expert_backend_t *be)
{
    return be->impl;
}

/* ---- the hooks ---------------------------------------------------------------------- */

static moe_status_t gpu_gate(moe_expert_backend_t *be, int layer, const float *x, int64_t tokens,
                             moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    const moe_config_t *cfg = be->io->cfg;
    int k = (int)cfg->top_k;
    moe_status_t st = moe_cuda_gate(g->cu, x, tokens, cfg->hidden_dim, g->gate[layer],
                                    (int)cfg->num_experts, k, cfg->normalize_topk, g->bias,
                                    g->logits, g->topk_idx, g->topk_w, err);
    if (st == MOE_OK) { /* the plan is built on the host */
        st = moe_cuda_copy(g->cu, be->io->topk_idx, g->topk_idx,
                           sizeof(int32_t) * (size_t)(tokens * k), MOE_CUDA_COPY_D2H,
                           MOE_CUDA_STREAM_COMPUTE, err);
    }
    return st == MOE_OK ? moe_cuda_sync(g->cu, MOE_CUDA_STREAM_COMPUTE, err) : st;
}

/* Copy wire rows [row, row + n) between a host and a device buffer on the compute stream. */
static moe_status_t copy_wire(moe_expert_backend_t *be, void *dst, const void *src, int64_t row,
                              int64_t n, moe_cuda_copy_kind_t kind, moe_error_t *err)
{
    int64_t b = be->io->wire_row_bytes;
    if (n <= 0) {
        return MOE_OK;
    }
    return moe_cuda_copy(impl_of(be)->cu, (char *)dst + row * b, (const char *)src + row * b,
                         (size_t)(n * b), kind, MOE_CUDA_STREAM_COMPUTE, err);
}

/* BF16 wire rows [row, row + n) of w <-> F32 rows of f (to_wire: narrow f into w). */
static moe_status_t wire_convert(moe_expert_backend_t *be, bool to_wire, void *w, float *f,
                                 int64_t row, int64_t n, moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    int64_t H = be->io->cfg->hidden_dim;
    char *wr = (char *)w + row * be->io->wire_row_bytes;
    if (to_wire) {
        return moe_cuda_rows_to_bf16(g->cu, wr, g->wire_ld, f + row * H, n, H, err);
    }
    return moe_cuda_rows_from_bf16(g->cu, f + row * H, wr, g->wire_ld, n, H, err);
}

/* The anchor for event times: the stream is idle, so the event completes at once. */
static moe_status_t set_anchor(cuda_layer_t *g, moe_error_t *err)
{
    moe_status_t st = moe_cuda_sync(g->cu, MOE_CUDA_STREAM_COMPUTE, err);
    if (st == MOE_OK) {
        st = moe_cuda_event_record(g->cu, g->anchor, MOE_CUDA_STREAM_COMPUTE, err);
    }
    g->anchor_ns = moe_now_ns();
    return st;
}

static moe_status_t gpu_permute(moe_expert_backend_t *be, const float *x, const void **after,
                                moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    const moe_expert_io_t *p = be->io;
    size_t pairs = (size_t)(p->tokens * be->io->cfg->top_k);
    *after = NULL;
    g->num_call_ev = 0;
    moe_status_t st = set_anchor(g, err);
    if (st == MOE_OK && p->num_send > 0) {
        st = moe_cuda_copy(g->cu, g->send_token, p->send_token,
                           sizeof(int32_t) * (size_t)p->num_send, MOE_CUDA_COPY_H2D,
                           MOE_CUDA_STREAM_COMPUTE, err);
    }
    if (st == MOE_OK && pairs > 0) { /* for the merge */
        st = moe_cuda_copy(g->cu, g->slot_pos, p->slot_pos, sizeof(int32_t) * pairs,
                           MOE_CUDA_COPY_H2D, MOE_CUDA_STREAM_COMPUTE, err);
    }
    if (st == MOE_OK && p->num_send > 0) {
        st = moe_cuda_gather_rows(g->cu, g->send, x, g->send_token, p->num_send,
                                  be->io->cfg->hidden_dim, err);
    }
    if (st == MOE_OK && g->wire_bf16) {
        st = wire_convert(be, true, g->wsend, g->send, 0, p->num_send, err);
    }
    if (st == MOE_OK && g->host_rows) {
        st = copy_wire(be, be->io->send_buf, g->wire_bf16 ? g->wsend : (void *)g->send, 0,
                       p->num_send, MOE_CUDA_COPY_D2H, err);
        return st == MOE_OK ? moe_cuda_sync(g->cu, MOE_CUDA_STREAM_COMPUTE, err) : st;
    }
    if (st == MOE_OK) {
        st = moe_cuda_event_record(g->cu, g->permuted, MOE_CUDA_STREAM_COMPUTE, err);
        *after = g->permuted;
    }
    return st;
}

/* Host transport: chunk c's pieces from every source into the device rows; BF16 wire rows
 * are widened into the F32 rows the experts read. */
static moe_status_t gpu_arrived(moe_expert_backend_t *be, int c, moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    int W = be->io->world_size;
    moe_status_t st = MOE_OK;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        int64_t row = be->io->chunk_recv_displs[c * W + s], n = be->io->chunk_recv_rows[c * W + s];
        if (g->host_rows) {
            st = copy_wire(be, g->wire_bf16 ? g->wrecv : (void *)g->recv, be->io->recv_buf, row, n,
                           MOE_CUDA_COPY_H2D, err);
        }
        if (st == MOE_OK && g->wire_bf16) {
            st = wire_convert(be, false, g->wrecv, g->recv, row, n, err);
        }
    }
    return st;
}

/* Queue rows n[s] at from[s] of every source through expert le: in place when they come
 * from one source, else gathered into exp_in and scattered back. */
static moe_status_t gpu_ffn(moe_expert_backend_t *be, const moe_cuda_expert_t *w,
                            const int64_t *from, const int64_t *n, int64_t total,
                            moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    const moe_config_t *cfg = be->io->cfg;
    int64_t H = cfg->hidden_dim;
    int W = be->io->world_size, only = moe_expert_only_source(n, be->io->world_size);
    if (only >= 0) {
        return moe_cuda_expert_forward(g->cu, w, be->io->weights->value, cfg->activation, H, cfg->ffn_dim,
                                       total, g->recv + from[only] * H, g->back + from[only] * H,
                                       g->scratch, err);
    }
    moe_status_t st = MOE_OK;
    int64_t r = 0;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        st = moe_cuda_copy(g->cu, g->exp_in + r * H, g->recv + from[s] * H,
                           sizeof(float) * (size_t)(n[s] * H), MOE_CUDA_COPY_D2D,
                           MOE_CUDA_STREAM_COMPUTE, err);
        r += n[s];
    }
    if (st == MOE_OK) {
        st = moe_cuda_expert_forward(g->cu, w, be->io->weights->value, cfg->activation, H, cfg->ffn_dim,
                                     total, g->exp_in, g->exp_out, g->scratch, err);
    }
    r = 0;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        st = moe_cuda_copy(g->cu, g->back + from[s] * H, g->exp_out + r * H,
                           sizeof(float) * (size_t)(n[s] * H), MOE_CUDA_COPY_D2D,
                           MOE_CUDA_STREAM_COMPUTE, err);
        r += n[s];
    }
    return st;
}

static moe_status_t gpu_expert(moe_expert_backend_t *be, int layer, int le, int call,
                               const int64_t *from, const int64_t *n, int64_t total,
                               moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    const moe_cuda_expert_t *w = &g->experts[layer * be->io->num_local + le];
    moe_status_t st =
        moe_cuda_event_record(g->cu, g->call_ev[2 * call], MOE_CUDA_STREAM_COMPUTE, err);
    if (st == MOE_OK) {
        st = gpu_ffn(be, w, from, n, total, err);
    }
    if (st == MOE_OK) {
        st = moe_cuda_event_record(g->cu, g->call_ev[2 * call + 1], MOE_CUDA_STREAM_COMPUTE, err);
    }
    g->num_call_ev = st == MOE_OK ? 2 * (call + 1) : g->num_call_ev;
    return st;
}

static moe_status_t gpu_computed(moe_expert_backend_t *be, int c, const void **after,
                                 moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    int W = be->io->world_size;
    moe_status_t st = MOE_OK;
    *after = NULL;
    for (int s = 0; s < W && st == MOE_OK && g->wire_bf16; s++) {
        st = wire_convert(be, true, g->wback, g->back, be->io->chunk_recv_displs[c * W + s],
                          be->io->chunk_recv_rows[c * W + s], err);
    }
    if (st == MOE_OK && !g->host_rows) {
        st = moe_cuda_event_record(g->cu, g->chunk_done[c], MOE_CUDA_STREAM_COMPUTE, err);
        *after = g->chunk_done[c];
        return st;
    }
    for (int s = 0; s < W && st == MOE_OK; s++) {
        st = copy_wire(be, be->io->back_buf, g->wire_bf16 ? g->wback : (void *)g->back,
                       be->io->chunk_recv_displs[c * W + s], be->io->chunk_recv_rows[c * W + s],
                       MOE_CUDA_COPY_D2H, err);
    }
    if (st == MOE_OK) {
        st = moe_cuda_event_record(g->cu, g->chunk_done[c], MOE_CUDA_STREAM_COMPUTE, err);
    }
    /* Until the GPU is done, keep the host transport's exchanges in flight moving (MPI
     * and UCX progress only when called). */
    int64_t since = moe_now_ns();
    bool done = false;
    while (st == MOE_OK && !done) {
        st = moe_cuda_event_query(g->chunk_done[c], &done, err);
        if (st == MOE_OK && !done) {
            st = be->io->progress(be->io->progress_arg, "the GPU computing a chunk", since,
                                  err);
        }
    }
    return st;
}

static moe_status_t gpu_merge(moe_expert_backend_t *be, float *x, int64_t tokens, moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    moe_status_t st = MOE_OK;
    if (g->host_rows) {
        st = copy_wire(be, g->wire_bf16 ? g->wret : (void *)g->ret, be->io->ret_buf, 0,
                       be->io->num_send, MOE_CUDA_COPY_H2D, err);
    }
    if (st == MOE_OK && g->wire_bf16) {
        st = wire_convert(be, false, g->wret, g->ret, 0, be->io->num_send, err);
    }
    if (st == MOE_OK && tokens > 0) {
        st = moe_cuda_merge(g->cu, x, tokens, be->io->cfg->hidden_dim, (int)be->io->cfg->top_k,
                            g->slot_pos, g->topk_w, g->ret, err);
    }
    return st;
}

/* Wait for the device, then put the calls on the host timeline by their events. */
static moe_status_t gpu_finish(moe_expert_backend_t *be, moe_prof_call_t *calls, int num_calls,
                               int64_t *expert_ns, moe_error_t *err)
{
    cuda_layer_t *g = impl_of(be);
    moe_status_t st = moe_cuda_sync(g->cu, MOE_CUDA_STREAM_COMPUTE, err);
    if (st == MOE_OK) {
        memset(expert_ns, 0, sizeof(int64_t) * (size_t)be->io->num_local);
    }
    for (int i = 0; i < num_calls && 2 * i + 1 < g->num_call_ev && st == MOE_OK; i++) {
        int64_t b = 0, e = 0;
        st = moe_cuda_event_elapsed_ns(g->anchor, g->call_ev[2 * i], &b, err);
        if (st == MOE_OK) {
            st = moe_cuda_event_elapsed_ns(g->anchor, g->call_ev[2 * i + 1], &e, err);
        }
        calls[i].begin_ns = g->anchor_ns + b;
        calls[i].end_ns = g->anchor_ns + e;
        expert_ns[calls[i].local] += e - b;
    }
    return st;
}

/* ---- set-up and teardown -------------------------------------------------------------- */

static void gpu_destroy(moe_expert_backend_t *be)
{
    cuda_layer_t *g = impl_of(be);
    if (g == NULL) {
        return;
    }
    int nl = be->io->num_local, N = be->io->chunks;
    /* a stop or an error may have left copies queued into or out of the pinned host
     * buffers: both streams drained first (a sticky error returns at once), then unpinned
     * and freed */
    moe_error_t ignored;
    moe_error_clear(&ignored);
    if (g->cu != NULL) {
        (void)moe_cuda_sync(g->cu, MOE_CUDA_STREAM_COMPUTE, &ignored);
        (void)moe_cuda_sync(g->cu, MOE_CUDA_STREAM_COMM, &ignored);
    }
    moe_cuda_host_unpin(g->pinned);
    for (int l = 0; g->gate != NULL && l < g->num_layers; l++) {
        moe_cuda_free(g->cu, g->gate[l]);
    }
    for (int i = 0; g->experts != NULL && i < g->num_layers * nl; i++) {
        moe_cuda_free(g->cu, g->experts[i].w13);
        moe_cuda_free(g->cu, g->experts[i].w2);
    }
    void *bufs[] = {g->bias, g->logits, g->topk_w, g->topk_idx, g->send_token, g->slot_pos,
                    g->send, g->ret, g->recv, g->back, g->exp_in, g->exp_out, g->scratch,
                    g->wsend, g->wret, g->wrecv, g->wback};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        moe_cuda_free(g->cu, bufs[i]);
    }
    for (int c = 0; g->chunk_done != NULL && c < N; c++) {
        moe_cuda_event_destroy(g->chunk_done[c]);
    }
    for (int i = 0; g->call_ev != NULL && i < 2 * N * nl; i++) {
        moe_cuda_event_destroy(g->call_ev[i]);
    }
    moe_cuda_event_destroy(g->permuted);
    moe_cuda_event_destroy(g->anchor);
    free(g->gate);
    free(g->experts);
    free(g->chunk_done);
    free(g->call_ev);
    free(g);
    be->impl = NULL;
}

/* The gates (F32) and this rank's experts (model.dtype) of every layer onto the device. */
static moe_status_t upload_weights(moe_expert_backend_t *be, cuda_layer_t *g, moe_error_t *err)
{
    const moe_config_t *cfg = be->io->cfg;
    const moe_weights_t *w = be->io->weights;
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim, E = cfg->num_experts;
    int64_t up = (cfg->activation == MOE_ACT_SWIGLU ? 2 : 1) * F;
    int nl = be->io->num_local;
    moe_status_t st = MOE_OK;
    if (w->gate_bias != NULL) {
        st = moe_cuda_upload(g->cu, w->gate_bias, E, MOE_DTYPE_F32, (void **)&g->bias, err);
    }
    for (int l = 0; l < g->num_layers && st == MOE_OK; l++) {
        const moe_layer_weights_t *lw = &w->layers[l];
        if (lw->gate != NULL) {
            st = moe_cuda_upload(g->cu, lw->gate, E * H, MOE_DTYPE_F32, (void **)&g->gate[l], err);
        }
        for (int le = 0; le < nl && st == MOE_OK; le++) {
            moe_cuda_expert_t *x = &g->experts[l * nl + le];
            x->id = lw->experts[le].id;
            st = moe_cuda_upload(g->cu, lw->experts[le].w13, up * H, be->io->weights->value, &x->w13, err);
            if (st == MOE_OK) {
                st = moe_cuda_upload(g->cu, lw->experts[le].w2, H * F, be->io->weights->value, &x->w2, err);
            }
        }
    }
    return st;
}

/* Device buffers for the worst case, as moe_layer_ctx_init sizes the host ones. */
static moe_status_t alloc_buffers(moe_expert_backend_t *be, cuda_layer_t *g, moe_error_t *err)
{
    const moe_config_t *cfg = be->io->cfg;
    size_t T = (size_t)be->io->max_tokens, k = (size_t)cfg->top_k, E = (size_t)cfg->num_experts;
    size_t H = (size_t)cfg->hidden_dim, R = (size_t)be->io->max_recv, f = sizeof(float);
    size_t gather = (size_t)be->io->gather_rows;
    struct {
        void **p;
        size_t bytes;
    } want[] = {
        {(void **)&g->logits, T * E * f},         {(void **)&g->topk_w, T * k * f},
        {(void **)&g->topk_idx, T * k * 4},       {(void **)&g->send_token, T * k * 4},
        {(void **)&g->slot_pos, T * k * 4},       {(void **)&g->send, T * k * H * f},
        {(void **)&g->ret, T * k * H * f},        {(void **)&g->recv, R * H * f},
        {(void **)&g->back, R * H * f},           {(void **)&g->exp_in, gather * H * f},
        {(void **)&g->exp_out, gather * H * f},
        {&g->scratch, moe_cuda_expert_scratch_bytes(cfg->activation, cfg->hidden_dim,
                                                    cfg->ffn_dim, (int64_t)gather,
                                                    be->io->weights->value)},
        /* BF16 wire twins (0 bytes: none) */
        {&g->wsend, g->wire_bf16 ? T * k * (size_t)be->io->wire_row_bytes : 0},
        {&g->wret, g->wire_bf16 ? T * k * (size_t)be->io->wire_row_bytes : 0},
        {&g->wrecv, g->wire_bf16 ? R * (size_t)be->io->wire_row_bytes : 0},
        {&g->wback, g->wire_bf16 ? R * (size_t)be->io->wire_row_bytes : 0},
    };
    moe_status_t st = MOE_OK;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]) && st == MOE_OK; i++) {
        st = want[i].bytes > 0 ? moe_cuda_alloc(g->cu, want[i].bytes, want[i].p, err) : MOE_OK;
    }
    return st;
}

/* A host transport's row buffers (send, ret, recv, back: one range of the layer's arena),
 * page-locked so the copies of every exchange run at the bus's speed, asynchronously, not
 * through the driver's staging buffer (on an H100 VM the pageable copies of the default job
 * took most of a 1-rank step: docs/performance.md#gpu). One range: the buffers share pages. */
static void pin_rows(moe_expert_backend_t *be, cuda_layer_t *g)
{
    const moe_expert_io_t *io = be->io;
    size_t w = (size_t)io->wire_row_bytes;
    size_t pairs = (size_t)io->max_tokens * (size_t)io->cfg->top_k, R = (size_t)io->max_recv;
    struct {
        char *p;
        size_t bytes;
    } buf[] = {{(char *)io->send_buf, pairs * w}, {(char *)io->ret_buf, pairs * w},
               {(char *)io->recv_buf, R * w},     {(char *)io->back_buf, R * w}};
    const char *env = getenv("MOED_CUDA_PIN"); /* 0: pageable, for measurements */
    char *lo = NULL, *hi = NULL;
    if (env != NULL && strcmp(env, "0") == 0) {
        return;
    }
    for (size_t i = 0; i < sizeof(buf) / sizeof(buf[0]); i++) {
        if (buf[i].p != NULL && buf[i].bytes > 0) {
            lo = lo == NULL || buf[i].p < lo ? buf[i].p : lo;
            hi = hi == NULL || buf[i].p + buf[i].bytes > hi ? buf[i].p + buf[i].bytes : hi;
        }
    }
    if (lo != NULL && moe_cuda_host_pin(lo, (size_t)(hi - lo))) {
        g->pinned = lo;
    }
}

static moe_status_t create_events(moe_expert_backend_t *be, cuda_layer_t *g, moe_error_t *err)
{
    int N = be->io->chunks, calls = N * be->io->num_local;
    moe_status_t st = moe_cuda_event_create(g->cu, &g->permuted, err);
    if (st == MOE_OK) {
        st = moe_cuda_event_create(g->cu, &g->anchor, err);
    }
    for (int c = 0; c < N && st == MOE_OK; c++) {
        st = moe_cuda_event_create(g->cu, &g->chunk_done[c], err);
    }
    for (int i = 0; i < 2 * calls && st == MOE_OK; i++) {
        st = moe_cuda_event_create(g->cu, &g->call_ev[i], err);
    }
    return st;
}

static const moe_expert_ops_t k_cuda_ops = {
    .name = "cuda",
    .gate = gpu_gate,
    .permute = gpu_permute,
    .arrived = gpu_arrived,
    .expert = gpu_expert,
    .computed = gpu_computed,
    .merge = gpu_merge,
    .finish = gpu_finish,
    .destroy = gpu_destroy,
};

moe_status_t moe_expert_cuda_attach(moe_expert_backend_t *be, moe_expert_io_t *io, void *cuda,
                                    moe_error_t *err)
{
    if (io->cfg->activation != MOE_ACT_SWIGLU && io->cfg->activation != MOE_ACT_GELU) {
        /* the config refuses every family but mixtral on cuda; this keeps a new path honest:
         * its kernels and sizes know swiglu and gelu only */
        return moe_error_set(err, MOE_ERR_CONFIG, "runtime.device: cuda computes model.activation "
                             "swiglu or gelu only, not %s; use runtime.device: cpu",
                             moe_cfg_activation_name(io->cfg->activation));
    }
    if (cuda == NULL) {
        return moe_error_set(err, MOE_ERR_INTERNAL, "the GPU back-end needs a CUDA context");
    }
    cuda_layer_t *g = calloc(1, sizeof(*g));
    int L = (int)io->cfg->num_layers, nl = io->num_local, N = io->chunks;
    if (g == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the GPU layer");
    }
    be->ops = &k_cuda_ops; /* from here on, moe_expert_backend_destroy frees g */
    be->io = io;
    be->impl = g;
    g->cu = cuda;
    g->num_layers = L;
    g->host_rows = io->host_transport;
    g->wire_bf16 = io->wire_bf16;
    g->wire_ld = io->wire_row_bytes / 2;
    g->gate = calloc((size_t)L, sizeof(float *));
    g->experts = calloc((size_t)L * (size_t)(nl > 0 ? nl : 1), sizeof(moe_cuda_expert_t));
    g->chunk_done = calloc((size_t)N, sizeof(moe_cuda_event_t *));
    g->call_ev = calloc(2 * (size_t)N * (size_t)(nl > 0 ? nl : 1), sizeof(moe_cuda_event_t *));
    if (g->gate == NULL || g->experts == NULL || g->chunk_done == NULL || g->call_ev == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the GPU layer");
    }
    moe_status_t st = upload_weights(be, g, err);
    if (st == MOE_OK) {
        st = alloc_buffers(be, g, err);
    }
    if (st == MOE_OK) {
        st = create_events(be, g, err);
    }
    if (st == MOE_OK && g->host_rows) {
        pin_rows(be, g);
    }
    if (st == MOE_OK && !g->host_rows) { /* the transport moves the device rows */
        be->io->xsend = g->wire_bf16 ? g->wsend : (void *)g->send;
        be->io->xrecv = g->wire_bf16 ? g->wrecv : (void *)g->recv;
        be->io->xback = g->wire_bf16 ? g->wback : (void *)g->back;
        be->io->xret = g->wire_bf16 ? g->wret : (void *)g->ret;
    }
    return st;
}
