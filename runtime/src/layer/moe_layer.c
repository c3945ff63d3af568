#include "layer/moe_layer.h"

#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "expert/expert.h"
#include "layer/gate.h"
#include "moe/stop.h"
#include "expert/nvtx.h"
#include "transport/wait.h"

static void *alloc_n(size_t n, size_t size, int *failed)
{
    void *p = calloc(n > 0 ? n : 1, size);
    if (p == NULL) {
        *failed = 1;
    }
    return p;
}

static const moe_layer_backend_t k_cpu_backend;

moe_status_t moe_layer_ctx_init(moe_layer_ctx_t *ctx, const moe_config_t *cfg, MPI_Comm comm,
                                moe_transport_t *transport, const moe_weights_t *weights,
                                int64_t max_tokens, void *device, moe_error_t *err)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->cfg = cfg;
    ctx->weights = weights;
    ctx->backend = &k_cpu_backend;
    ctx->comm = comm;
    ctx->transport = transport;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &ctx->rank), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &ctx->world_size), err);
    }
    if (st != MOE_OK) {
        return st;
    }
    int W = ctx->world_size, E = (int)cfg->num_experts, k = (int)cfg->top_k;
    int64_t H = cfg->hidden_dim, T = cfg->tokens_per_step;
    ctx->max_tokens = max_tokens;
    ctx->num_local = moe_cfg_experts_of_rank(cfg, ctx->rank, NULL);
    ctx->capacity = moe_plan_capacity(cfg->capacity_factor, T, k, E);
    /* A token picks an expert at most once: no local expert gets more than T rows. */
    ctx->max_recv = T * k < ctx->num_local * T ? T * k : ctx->num_local * T;
    ctx->tile_rows = T < 1024 ? T : 1024;
    ctx->chunks = (int)cfg->chunks;
    if (ctx->chunks * 2 > transport->num_slots) {
        return moe_error_set(err, MOE_ERR_INTERNAL, "the transport has %d slots, %d chunks need %d",
                             transport->num_slots, ctx->chunks, 2 * ctx->chunks);
    }

    if (moe_plan_init(&ctx->plan, W, E, k, max_tokens) != 0) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the dispatch plan");
    }
    int failed = 0;
    size_t pairs = (size_t)(max_tokens * k);
    ctx->logits = alloc_n((size_t)(max_tokens * E), sizeof(float), &failed);
    ctx->topk_idx = alloc_n(pairs, sizeof(int32_t), &failed);
    ctx->topk_w = alloc_n(pairs, sizeof(float), &failed);
    ctx->demand_before = alloc_n((size_t)E, sizeof(int32_t), &failed);
    ctx->send_buf = alloc_n(pairs * (size_t)H, sizeof(float), &failed);
    ctx->ret_buf = alloc_n(pairs * (size_t)H, sizeof(float), &failed);
    ctx->recv_buf = alloc_n((size_t)(ctx->max_recv * H), sizeof(float), &failed);
    ctx->back_buf = alloc_n((size_t)(ctx->max_recv * H), sizeof(float), &failed);
    ctx->recv_counts = alloc_n((size_t)W * (size_t)(ctx->num_local + 1), sizeof(int32_t), &failed);
    ctx->recv_rows = alloc_n((size_t)W, sizeof(int), &failed);
    ctx->recv_displs = alloc_n((size_t)W, sizeof(int), &failed);
    ctx->n_local_of = alloc_n((size_t)W, sizeof(int), &failed);
    ctx->n_local_displs = alloc_n((size_t)W, sizeof(int), &failed);
    ctx->recv_count_len = alloc_n((size_t)W, sizeof(int), &failed);
    size_t cw = (size_t)ctx->chunks * (size_t)W;
    ctx->chunk_send_rows = alloc_n(cw, sizeof(int), &failed);
    ctx->chunk_send_displs = alloc_n(cw, sizeof(int), &failed);
    ctx->chunk_recv_rows = alloc_n(cw, sizeof(int), &failed);
    ctx->chunk_recv_displs = alloc_n(cw, sizeof(int), &failed);
    ctx->count_reqs = alloc_n(2 * (size_t)W, sizeof(MPI_Request), &failed);
    ctx->count_peers = alloc_n(2 * (size_t)W, sizeof(int), &failed);
    ctx->src_from = alloc_n((size_t)W, sizeof(int64_t), &failed);
    ctx->src_rows = alloc_n((size_t)W, sizeof(int64_t), &failed);
    int64_t gather_rows = ctx->num_local > 0 ? T : 0;
    ctx->expert_in = alloc_n((size_t)(gather_rows * H), sizeof(float), &failed);
    ctx->expert_out = alloc_n((size_t)(gather_rows * H), sizeof(float), &failed);
    ctx->scratch = alloc_n(
        (size_t)moe_expert_scratch_floats(cfg->activation, cfg->ffn_dim, ctx->tile_rows),
        sizeof(float), &failed);
    ctx->acc_row = alloc_n((size_t)H, sizeof(float), &failed);
    ctx->rec.expert_rows = alloc_n((size_t)ctx->num_local, sizeof(int64_t), &failed);
    ctx->rec.expert_ns = alloc_n((size_t)ctx->num_local, sizeof(int64_t), &failed);
    ctx->rec.calls = alloc_n((size_t)ctx->chunks * (size_t)ctx->num_local,
                             sizeof(moe_prof_call_t), &failed);
    ctx->rec.spans = alloc_n(2 * (size_t)ctx->chunks, sizeof(moe_prof_span_t), &failed);
    ctx->rec.peer_wait_ns = alloc_n((size_t)W, sizeof(int64_t), &failed);
    if (failed) {
        moe_layer_ctx_destroy(ctx);
        return moe_error_set(err, MOE_ERR_NO_MEMORY,
                             "cannot allocate the step buffers (%lld tokens x %lld hidden)",
                             (long long)T, (long long)H);
    }
    for (int r = 0; r < W; r++) {
        ctx->n_local_of[r] = moe_cfg_experts_of_rank(cfg, r, NULL);
        ctx->n_local_displs[r] = r * ctx->num_local;
        ctx->recv_count_len[r] = ctx->num_local;
    }
    ctx->xsend = ctx->send_buf;
    ctx->xret = ctx->ret_buf;
    ctx->xrecv = ctx->recv_buf;
    ctx->xback = ctx->back_buf;
    if (cfg->device == MOE_DEVICE_CUDA) {
#ifdef MOE_HAVE_CUDA
        st = moe_layer_cuda_attach(ctx, device, err);
        if (st != MOE_OK) {
            moe_layer_ctx_destroy(ctx);
            return st;
        }
#else
        (void)device;
        moe_layer_ctx_destroy(ctx);
        return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                             "runtime.device: cuda is not available in this build; use cpu");
#endif
    }
    return MOE_OK;
}

void moe_layer_ctx_destroy(moe_layer_ctx_t *ctx)
{
    if (ctx == NULL) {
        return;
    }
    if (ctx->backend != NULL && ctx->backend->destroy != NULL) {
        ctx->backend->destroy(ctx);
    }
    moe_plan_destroy(&ctx->plan);
    void *bufs[] = {ctx->logits,    ctx->topk_idx,      ctx->topk_w,     ctx->demand_before,
                    ctx->send_buf,  ctx->ret_buf,       ctx->recv_buf,   ctx->back_buf,
                    ctx->recv_counts, ctx->recv_rows,   ctx->recv_displs, ctx->n_local_of,
                    ctx->n_local_displs, ctx->recv_count_len, ctx->count_reqs,
                    ctx->count_peers, ctx->src_from, ctx->src_rows, ctx->expert_in, ctx->expert_out, ctx->scratch,
                    ctx->acc_row,   ctx->chunk_send_rows, ctx->chunk_send_displs,
                    ctx->chunk_recv_rows, ctx->chunk_recv_displs, ctx->rec.expert_rows,
                    ctx->rec.expert_ns, ctx->rec.calls, ctx->rec.spans, ctx->rec.peer_wait_ns};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        free(bufs[i]);
    }
    memset(ctx, 0, sizeof(*ctx));
}

size_t moe_layer_ctx_buffer_bytes(const moe_layer_ctx_t *ctx)
{
    size_t pairs = (size_t)(ctx->max_tokens * ctx->cfg->top_k);
    size_t H = (size_t)ctx->cfg->hidden_dim;
    return sizeof(float) * H * (2 * pairs + 2 * (size_t)ctx->max_recv);
}

/* gate + capacity + plan: everything before bytes move. */
static moe_status_t layer_route(moe_layer_ctx_t *ctx, int layer, const float *x, int64_t tokens,
                                moe_error_t *err)
{
    int E = (int)ctx->cfg->num_experts;
    moe_status_t st = MOE_OK;
    if (tokens > 0 && (st = ctx->backend->gate(ctx, layer, x, tokens, err)) != MOE_OK) {
        return st;
    }
    moe_plan_count_demand(&ctx->plan, ctx->topk_idx, tokens);
    const int32_t *before = NULL;
    if (ctx->capacity > 0) {
        /* Global token order decides who is dropped: lower routing ranks come first. */
        MPI_Request req;
        st = MOE_MPI(MPI_Iexscan(ctx->plan.expert_demand, ctx->demand_before, E, MPI_INT32_T,
                                 MPI_SUM, ctx->comm, &req), err);
        if (st == MOE_OK) {
            st = moe_wait_request(&req, "the capacity scan", err);
        }
        if (st != MOE_OK) {
            return st;
        }
        if (ctx->rank == 0) {
            memset(ctx->demand_before, 0, sizeof(int32_t) * (size_t)E);
        }
        before = ctx->demand_before;
    }
    moe_plan_build(&ctx->plan, ctx->topk_idx, tokens, ctx->cfg->expert_owner, ctx->capacity,
                   before);
    return MOE_OK;
}

enum { COUNTS_TAG = 4241 };

/* Each rank tells every expert rank how many rows of each of its experts will come: point
 * to point (not a collective) so the watchdog can name a rank that never answers. */
static moe_status_t exchange_counts(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    moe_plan_t *p = &ctx->plan;
    int W = ctx->world_size, me = ctx->rank, n = 0;
    moe_status_t st = MOE_OK;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        if (s != me && ctx->num_local > 0) {
            st = MOE_MPI(MPI_Irecv(ctx->recv_counts + ctx->n_local_displs[s], ctx->num_local,
                                   MPI_INT32_T, s, COUNTS_TAG, ctx->comm, &ctx->count_reqs[n]),
                         err);
            ctx->count_peers[n++] = s;
        }
    }
    for (int d = 0; d < W && st == MOE_OK; d++) {
        if (d != me && p->count_msg_len[d] > 0) {
            st = MOE_MPI(MPI_Isend(p->count_msg + p->count_msg_displs[d], p->count_msg_len[d],
                                   MPI_INT32_T, d, COUNTS_TAG, ctx->comm, &ctx->count_reqs[n]),
                         err);
            ctx->count_peers[n++] = d;
        }
    }
    if (st != MOE_OK) {
        return st;
    }
    memcpy(ctx->recv_counts + ctx->n_local_displs[me], p->count_msg + p->count_msg_displs[me],
           sizeof(int32_t) * (size_t)p->count_msg_len[me]);
    return moe_wait_all(ctx->count_reqs, ctx->count_peers, n, "the counts exchange", err);
}

/* Piece c of N of a block of n rows: [n*c/N, n*(c+1)/N). */
static int piece_lo(int n, int c, int chunks)
{
    return (int)((int64_t)n * c / chunks);
}

/* Cut every send and receive block into the chunks' pieces. */
static void layer_cut_chunks(moe_layer_ctx_t *ctx)
{
    int W = ctx->world_size, N = ctx->chunks;
    const moe_plan_t *p = &ctx->plan;
    for (int c = 0; c < N; c++) {
        for (int r = 0; r < W; r++) {
            int i = c * W + r, s_lo = piece_lo(p->send_rows[r], c, N);
            int r_lo = piece_lo(ctx->recv_rows[r], c, N);
            ctx->chunk_send_displs[i] = p->send_row_displs[r] + s_lo;
            ctx->chunk_send_rows[i] = piece_lo(p->send_rows[r], c + 1, N) - s_lo;
            ctx->chunk_recv_displs[i] = ctx->recv_displs[r] + r_lo;
            ctx->chunk_recv_rows[i] = piece_lo(ctx->recv_rows[r], c + 1, N) - r_lo;
        }
    }
}

/* Counts first (so receivers can size their blocks), then the rows are laid out in send
 * order and cut into chunks. */
static moe_status_t layer_prepare_rows(moe_layer_ctx_t *ctx, const float *x,
                                       const void **after, moe_error_t *err)
{
    int W = ctx->world_size, nl = ctx->num_local;
    moe_status_t st = exchange_counts(ctx, err);
    if (st != MOE_OK) {
        return st;
    }
    int row = 0;
    for (int s = 0; s < W; s++) {
        int n = 0;
        for (int e = 0; e < nl; e++) {
            n += ctx->recv_counts[s * nl + e];
        }
        ctx->recv_rows[s] = n;
        ctx->recv_displs[s] = row;
        row += n;
    }
    layer_cut_chunks(ctx);
    return ctx->backend->permute(ctx, x, after, err);
}

static moe_status_t start_dispatch(moe_layer_ctx_t *ctx, int c, const void *after,
                                   moe_error_t *err)
{
    int i = c * ctx->world_size;
    return ctx->transport->ops->start(ctx->transport, c, ctx->xsend, ctx->chunk_send_rows + i,
                                      ctx->chunk_send_displs + i, ctx->xrecv,
                                      ctx->chunk_recv_rows + i, ctx->chunk_recv_displs + i, after,
                                      err);
}

static moe_status_t start_combine(moe_layer_ctx_t *ctx, int c, const void *after,
                                  moe_error_t *err)
{
    int i = c * ctx->world_size;
    return ctx->transport->ops->start(ctx->transport, ctx->chunks + c, ctx->xback,
                                      ctx->chunk_recv_rows + i, ctx->chunk_recv_displs + i,
                                      ctx->xret, ctx->chunk_send_rows + i,
                                      ctx->chunk_send_displs + i, after, err);
}

/* The FFN over rows in tiles, driving the exchanges in flight between tiles. */
static moe_status_t layer_ffn(moe_layer_ctx_t *ctx, const moe_expert_weights_t *ew,
                              int64_t rows, const float *in, float *out, moe_error_t *err)
{
    const moe_config_t *cfg = ctx->cfg;
    int64_t H = cfg->hidden_dim;
    for (int64_t r0 = 0; r0 < rows; r0 += ctx->tile_rows) {
        int64_t m = rows - r0 < ctx->tile_rows ? rows - r0 : ctx->tile_rows;
        moe_status_t st = moe_expert_forward(ew, cfg->activation, H, cfg->ffn_dim, m,
                                             in + r0 * H, out + r0 * H, ctx->scratch,
                                             ctx->tile_rows);
        if (st != MOE_OK) {
            return moe_error_set(err, st, "expert %d FFN failed", ew->id);
        }
        if (ctx->chunks > 1 && (st = moe_transport_progress(ctx->transport, err)) != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}

/* Local expert le's rows of chunk c: from each source s the part of its block [a, b)
 * inside the chunk's piece [lo, hi) of s's block, into ctx->src_from / src_rows. */
static int64_t layer_expert_rows(moe_layer_ctx_t *ctx, int le, int c)
{
    int W = ctx->world_size, nl = ctx->num_local;
    int64_t total = 0;
    for (int s = 0; s < W; s++) {
        int64_t a = ctx->recv_displs[s];
        for (int e = 0; e < le; e++) {
            a += ctx->recv_counts[s * nl + e];
        }
        int64_t b = a + ctx->recv_counts[s * nl + le];
        int64_t lo = ctx->chunk_recv_displs[c * W + s];
        int64_t hi = lo + ctx->chunk_recv_rows[c * W + s];
        int64_t from = a > lo ? a : lo, n = (b < hi ? b : hi) - from;
        ctx->src_from[s] = from;
        ctx->src_rows[s] = n > 0 ? n : 0;
        total += ctx->src_rows[s];
    }
    return total;
}

int moe_layer_only_source(const moe_layer_ctx_t *ctx, const int64_t *n)
{
    int only = -1;
    for (int s = 0; s < ctx->world_size; s++) {
        if (n[s] > 0) {
            if (only >= 0) {
                return -1;
            }
            only = s;
        }
    }
    return only;
}

/* Every local expert over chunk c, each call recorded (host times; a device back-end
 * corrects them in finish). */
static moe_status_t layer_chunk_experts(moe_layer_ctx_t *ctx, int layer, int c,
                                        moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    for (int le = 0; le < ctx->num_local; le++) {
        if (moe_stop_requested()) { /* between expert calls: react within one call */
            return moe_error_set(err, MOE_ERR_INTERRUPTED, "stop requested during the experts");
        }
        int64_t rows = layer_expert_rows(ctx, le, c);
        if (rows == 0) {
            continue;
        }
        int64_t b = moe_now_ns();
        moe_status_t st = ctx->backend->expert(ctx, layer, le, rec->num_calls, ctx->src_from,
                                               ctx->src_rows, rows, err);
        int64_t e = moe_now_ns();
        if (st != MOE_OK) {
            return st;
        }
        rec->expert_rows[le] += rows;
        rec->expert_ns[le] += e - b;
        rec->calls[rec->num_calls++] = (moe_prof_call_t){
            .local = le, .chunk = c, .rows = rows, .begin_ns = b, .end_ns = e};
    }
    return MOE_OK;
}

/* x[t] += sum_j w[t,j] * out(t,j), choices in order j = 0..k-1 so the sum is the same
 * whatever the placement. */
static void layer_merge(moe_layer_ctx_t *ctx, float *x, int64_t tokens)
{
    int k = (int)ctx->cfg->top_k;
    int64_t H = ctx->cfg->hidden_dim;
    float *acc = ctx->acc_row;
    for (int64_t t = 0; t < tokens; t++) {
        memset(acc, 0, sizeof(float) * (size_t)H);
        for (int j = 0; j < k; j++) {
            int32_t pos = ctx->plan.slot_pos[t * k + j];
            if (pos < 0) {
                continue; /* dropped by capacity: contributes nothing */
            }
            float w = ctx->topk_w[t * k + j];
            const float *o = ctx->ret_buf + (int64_t)pos * H;
            for (int64_t h = 0; h < H; h++) {
                acc[h] += w * o[h];
            }
        }
        float *xr = x + t * H;
        for (int64_t h = 0; h < H; h++) {
            xr[h] += acc[h];
        }
    }
}

/* The exchanges' spans and per-peer waits, once every slot has completed. */
static void layer_record_exchanges(moe_layer_ctx_t *ctx)
{
    moe_layer_record_t *rec = &ctx->rec;
    const moe_transport_t *t = ctx->transport;
    int W = ctx->world_size, N = ctx->chunks;
    memset(rec->peer_wait_ns, 0, sizeof(int64_t) * (size_t)W);
    rec->num_spans = 0;
    for (int slot = 0; slot < 2 * N; slot++) {
        const moe_xfer_t *x = &t->xfer[slot];
        int c = slot % N, combine = slot >= N;
        /* dispatch: rows come from the senders; combine: back from the expert ranks */
        const int *rows_in = combine ? ctx->chunk_send_rows + c * W : ctx->chunk_recv_rows + c * W;
        for (int p = 0; p < W; p++) {
            if (rows_in[p] > 0) {
                rec->peer_wait_ns[p] += x->peer_done_ns[p] - x->begin_ns;
            }
        }
        rec->spans[rec->num_spans++] = (moe_prof_span_t){
            .kind = combine ? MOE_PROF_SPAN_COMBINE : MOE_PROF_SPAN_DISPATCH,
            .chunk = c, .begin_ns = x->begin_ns, .end_ns = x->end_ns};
    }
}

/* Dispatch, experts and combine, chunk by chunk (see moe_layer.h). */
static moe_status_t layer_pipeline(moe_layer_ctx_t *ctx, const void *permuted, int64_t step,
                                   int layer, moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    const moe_layer_backend_t *be = ctx->backend;
    int N = ctx->chunks;
    moe_status_t st = start_dispatch(ctx, 0, permuted, err);
    for (int c = 0; c < N && st == MOE_OK; c++) {
        st = moe_transport_wait(ctx->transport, c, "the row dispatch", err);
        if (st == MOE_OK) {
            st = be->arrived(ctx, c, err);
        }
        if (c == 0) {
            rec->phase_end_ns[MOE_PHASE_DISPATCH] = rec->phase_begin_ns[MOE_PHASE_EXPERT] =
                moe_now_ns();
            moe_wait_set_where(step, layer, "expert");
        }
        if (st == MOE_OK && c + 1 < N) {
            st = start_dispatch(ctx, c + 1, permuted, err);
        }
        if (st == MOE_OK) {
            st = layer_chunk_experts(ctx, layer, c, err);
        }
        const void *computed = NULL;
        if (st == MOE_OK) {
            st = be->computed(ctx, c, &computed, err);
        }
        if (st == MOE_OK) {
            st = start_combine(ctx, c, computed, err);
        }
    }
    rec->phase_end_ns[MOE_PHASE_EXPERT] = rec->phase_begin_ns[MOE_PHASE_COMBINE] = moe_now_ns();
    moe_wait_set_where(step, layer, "combine");
    for (int c = 0; c < N && st == MOE_OK; c++) {
        st = moe_transport_wait(ctx->transport, N + c, "the row combine", err);
    }
    for (int slot = 0; slot < 2 * N && st != MOE_OK; slot++) {
        if (ctx->transport->xfer[slot].active) {
            ctx->transport->ops->cancel(ctx->transport, slot);
        }
    }
    rec->phase_end_ns[MOE_PHASE_COMBINE] = moe_now_ns();
    return st;
}

moe_status_t moe_layer_forward(moe_layer_ctx_t *ctx, float *x, int64_t tokens, int64_t step,
                               int layer, moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    memset(rec->expert_rows, 0, sizeof(int64_t) * (size_t)ctx->num_local);
    memset(rec->expert_ns, 0, sizeof(int64_t) * (size_t)ctx->num_local);
    rec->num_calls = 0;
    rec->num_spans = 0;
    moe_wait_set_where(step, layer, "gate");
    moe_nvtx_push("gate");
    rec->phase_begin_ns[MOE_PHASE_GATE] = moe_now_ns();
    moe_status_t st = layer_route(ctx, layer, x, tokens, err);
    rec->phase_end_ns[MOE_PHASE_GATE] = rec->phase_begin_ns[MOE_PHASE_DISPATCH] = moe_now_ns();
    moe_nvtx_pop();
    moe_wait_set_where(step, layer, "dispatch");
    moe_nvtx_push("exchange and experts");
    const void *permuted = NULL;
    if (st == MOE_OK) {
        st = layer_prepare_rows(ctx, x, &permuted, err);
    }
    if (st == MOE_OK) {
        st = layer_pipeline(ctx, permuted, step, layer, err);
    } else {
        int64_t now = moe_now_ns();
        for (int ph = MOE_PHASE_DISPATCH; ph <= MOE_PHASE_COMBINE; ph++) {
            rec->phase_begin_ns[ph] = rec->phase_end_ns[ph] = now;
        }
    }
    moe_nvtx_pop();
    moe_nvtx_push("merge");
    rec->phase_begin_ns[MOE_PHASE_MERGE] = moe_now_ns();
    if (st == MOE_OK) {
        layer_record_exchanges(ctx);
        st = ctx->backend->merge(ctx, x, tokens, err);
    }
    if (st == MOE_OK) {
        st = ctx->backend->finish(ctx, err);
    }
    rec->phase_end_ns[MOE_PHASE_MERGE] = moe_now_ns();
    moe_nvtx_pop();
    return st;
}

/* ---- the CPU back-end ------------------------------------------------------------- */

static moe_status_t cpu_gate(moe_layer_ctx_t *ctx, int layer, const float *x, int64_t tokens,
                             moe_error_t *err)
{
    const moe_config_t *cfg = ctx->cfg;
    moe_status_t st = moe_gate_forward(x, tokens, cfg->hidden_dim,
                                       ctx->weights->layers[layer].gate, (int)cfg->num_experts,
                                       (int)cfg->top_k, cfg->normalize_topk,
                                       ctx->weights->gate_bias, ctx->logits, ctx->topk_idx,
                                       ctx->topk_w);
    return st == MOE_OK ? MOE_OK : moe_error_set(err, st, "gate GEMM failed");
}

static moe_status_t cpu_permute(moe_layer_ctx_t *ctx, const float *x, const void **after,
                                moe_error_t *err)
{
    const moe_plan_t *p = &ctx->plan;
    int64_t H = ctx->cfg->hidden_dim;
    for (int64_t i = 0; i < p->num_send; i++) {
        memcpy(ctx->send_buf + i * H, x + (int64_t)p->send_token[i] * H, sizeof(float) * (size_t)H);
    }
    *after = NULL;
    return MOE_OK;
}

static moe_status_t cpu_nothing(moe_layer_ctx_t *ctx, int c, moe_error_t *err)
{
    return MOE_OK;
}

static moe_status_t cpu_computed(moe_layer_ctx_t *ctx, int c, const void **after,
                                 moe_error_t *err)
{
    *after = NULL;
    return MOE_OK;
}

/* Contiguous rows run in place; rows from several sources are gathered and scattered. */
static moe_status_t cpu_expert(moe_layer_ctx_t *ctx, int layer, int le, int call,
                               const int64_t *from, const int64_t *n, int64_t total,
                               moe_error_t *err)
{
    const moe_expert_weights_t *ew = &ctx->weights->layers[layer].experts[le];
    int W = ctx->world_size, only = moe_layer_only_source(ctx, n);
    int64_t H = ctx->cfg->hidden_dim;
    if (only >= 0) {
        return layer_ffn(ctx, ew, total, ctx->recv_buf + from[only] * H,
                         ctx->back_buf + from[only] * H, err);
    }
    int64_t r = 0;
    for (int s = 0; s < W; s++) {
        memcpy(ctx->expert_in + r * H, ctx->recv_buf + from[s] * H, (size_t)(n[s] * H) * sizeof(float));
        r += n[s];
    }
    moe_status_t st = layer_ffn(ctx, ew, total, ctx->expert_in, ctx->expert_out, err);
    r = 0;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        memcpy(ctx->back_buf + from[s] * H, ctx->expert_out + r * H, (size_t)(n[s] * H) * sizeof(float));
        r += n[s];
    }
    return st;
}

static moe_status_t cpu_merge(moe_layer_ctx_t *ctx, float *x, int64_t tokens, moe_error_t *err)
{
    layer_merge(ctx, x, tokens);
    return MOE_OK;
}

static moe_status_t cpu_finish(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    return MOE_OK;
}

static const moe_layer_backend_t k_cpu_backend = {
    .name = "cpu",
    .gate = cpu_gate,
    .permute = cpu_permute,
    .arrived = cpu_nothing,
    .expert = cpu_expert,
    .computed = cpu_computed,
    .merge = cpu_merge,
    .finish = cpu_finish,
    .destroy = NULL,
};
