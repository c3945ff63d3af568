#include "moe_layer.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "expert.h"
#include "gate.h"
#include "moe/stop.h"
#include "wait.h"

const char *moe_phase_name(moe_phase_t phase)
{
    static const char *names[MOE_PHASE_COUNT] = {"gate", "dispatch", "expert", "combine",
                                                 "merge"};
    return phase < MOE_PHASE_COUNT ? names[phase] : "?";
}

static void *alloc_n(size_t n, size_t size, int *failed)
{
    void *p = calloc(n > 0 ? n : 1, size);
    if (p == NULL) {
        *failed = 1;
    }
    return p;
}

moe_status_t moe_layer_ctx_init(moe_layer_ctx_t *ctx, const moe_config_t *cfg, MPI_Comm comm,
                                moe_transport_t *transport, int64_t max_tokens,
                                moe_error_t *err)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->cfg = cfg;
    ctx->comm = comm;
    ctx->transport = transport;
    MPI_Comm_rank(comm, &ctx->rank);
    MPI_Comm_size(comm, &ctx->world_size);
    int W = ctx->world_size, E = (int)cfg->num_experts, k = (int)cfg->top_k;
    int64_t H = cfg->hidden_dim, T = cfg->tokens_per_step;
    ctx->max_tokens = max_tokens;
    ctx->num_local = moe_cfg_experts_of_rank(cfg, ctx->rank, NULL);
    ctx->capacity = moe_plan_capacity(cfg->capacity_factor, T, k, E);
    /* A token picks an expert at most once: no local expert gets more than T rows. */
    ctx->max_recv = T * k < ctx->num_local * T ? T * k : ctx->num_local * T;
    ctx->tile_rows = T < 1024 ? T : 1024;

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
    ctx->count_reqs = alloc_n(2 * (size_t)W, sizeof(MPI_Request), &failed);
    ctx->count_peers = alloc_n(2 * (size_t)W, sizeof(int), &failed);
    int64_t gather_rows = ctx->num_local > 0 ? T : 0;
    ctx->expert_in = alloc_n((size_t)(gather_rows * H), sizeof(float), &failed);
    ctx->expert_out = alloc_n((size_t)(gather_rows * H), sizeof(float), &failed);
    ctx->scratch = alloc_n(
        (size_t)moe_expert_scratch_floats(cfg->activation, cfg->ffn_dim, ctx->tile_rows),
        sizeof(float), &failed);
    ctx->acc_row = alloc_n((size_t)H, sizeof(float), &failed);
    ctx->rec.expert_begin_ns = alloc_n((size_t)ctx->num_local, sizeof(int64_t), &failed);
    ctx->rec.expert_end_ns = alloc_n((size_t)ctx->num_local, sizeof(int64_t), &failed);
    ctx->rec.expert_rows = alloc_n((size_t)ctx->num_local, sizeof(int64_t), &failed);
    ctx->rec.dispatch_done_ns = alloc_n((size_t)W, sizeof(int64_t), &failed);
    ctx->rec.combine_done_ns = alloc_n((size_t)W, sizeof(int64_t), &failed);
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
    return MOE_OK;
}

void moe_layer_ctx_destroy(moe_layer_ctx_t *ctx)
{
    if (ctx == NULL) {
        return;
    }
    moe_plan_destroy(&ctx->plan);
    void *bufs[] = {ctx->logits,    ctx->topk_idx,      ctx->topk_w,     ctx->demand_before,
                    ctx->send_buf,  ctx->ret_buf,       ctx->recv_buf,   ctx->back_buf,
                    ctx->recv_counts, ctx->recv_rows,   ctx->recv_displs, ctx->n_local_of,
                    ctx->n_local_displs, ctx->recv_count_len, ctx->count_reqs,
                    ctx->count_peers, ctx->expert_in, ctx->expert_out, ctx->scratch,
                    ctx->acc_row,   ctx->rec.expert_begin_ns, ctx->rec.expert_end_ns,
                    ctx->rec.expert_rows, ctx->rec.dispatch_done_ns, ctx->rec.combine_done_ns};
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
static moe_status_t layer_route(moe_layer_ctx_t *ctx, const moe_layer_weights_t *lw,
                                const float *gate_bias, const float *x, int64_t tokens,
                                moe_error_t *err)
{
    const moe_config_t *cfg = ctx->cfg;
    int E = (int)cfg->num_experts;
    moe_status_t st = MOE_OK;
    if (tokens > 0) {
        st = moe_gate_forward(x, tokens, cfg->hidden_dim, lw->gate, E, (int)cfg->top_k,
                              cfg->normalize_topk, gate_bias, ctx->logits, ctx->topk_idx,
                              ctx->topk_w);
        if (st != MOE_OK) {
            return moe_error_set(err, st, "gate GEMM failed");
        }
    }
    moe_plan_count_demand(&ctx->plan, ctx->topk_idx, tokens);
    const int32_t *before = NULL;
    if (ctx->capacity > 0) {
        /* Global token order decides who is dropped: lower routing ranks come first. */
        MPI_Request req;
        int rc = MPI_Iexscan(ctx->plan.expert_demand, ctx->demand_before, E, MPI_INT32_T,
                             MPI_SUM, ctx->comm, &req);
        st = rc == MPI_SUCCESS ? moe_wait_request(&req, "the capacity scan", err)
                               : moe_mpi_check(rc, "MPI_Iexscan (capacity)", err);
        if (st != MOE_OK) {
            return st;
        }
        if (ctx->rank == 0) {
            memset(ctx->demand_before, 0, sizeof(int32_t) * (size_t)E);
        }
        before = ctx->demand_before;
    }
    moe_plan_build(&ctx->plan, ctx->topk_idx, tokens, cfg->expert_owner, ctx->capacity, before);
    return MOE_OK;
}

enum { COUNTS_TAG = 4241 };

/* Each rank tells every expert rank how many rows of each of its experts will come: point
 * to point (not a collective) so the watchdog can name a rank that never answers. */
static moe_status_t exchange_counts(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    moe_plan_t *p = &ctx->plan;
    int W = ctx->world_size, me = ctx->rank, n = 0, rc = MPI_SUCCESS;
    for (int s = 0; s < W && rc == MPI_SUCCESS; s++) {
        if (s != me && ctx->num_local > 0) {
            rc = MPI_Irecv(ctx->recv_counts + ctx->n_local_displs[s], ctx->num_local, MPI_INT32_T,
                           s, COUNTS_TAG, ctx->comm, &ctx->count_reqs[n]);
            ctx->count_peers[n++] = s;
        }
    }
    for (int d = 0; d < W && rc == MPI_SUCCESS; d++) {
        if (d != me && p->count_msg_len[d] > 0) {
            rc = MPI_Isend(p->count_msg + p->count_msg_displs[d], p->count_msg_len[d],
                           MPI_INT32_T, d, COUNTS_TAG, ctx->comm, &ctx->count_reqs[n]);
            ctx->count_peers[n++] = d;
        }
    }
    if (rc != MPI_SUCCESS) {
        return moe_mpi_check(rc, "posting the counts exchange", err);
    }
    memcpy(ctx->recv_counts + ctx->n_local_displs[me], p->count_msg + p->count_msg_displs[me],
           sizeof(int32_t) * (size_t)p->count_msg_len[me]);
    return moe_wait_all(ctx->count_reqs, ctx->count_peers, n, "the counts exchange", err);
}

/* Counts first (so receivers can size their blocks), then the rows. */
static moe_status_t layer_dispatch(moe_layer_ctx_t *ctx, const float *x, moe_error_t *err)
{
    moe_plan_t *p = &ctx->plan;
    int W = ctx->world_size, nl = ctx->num_local;
    int64_t H = ctx->cfg->hidden_dim;
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
    for (int64_t i = 0; i < p->num_send; i++) {
        memcpy(ctx->send_buf + i * H, x + (int64_t)p->send_token[i] * H, sizeof(float) * (size_t)H);
    }
    st = ctx->transport->ops->exchange(ctx->transport, ctx->send_buf, p->send_rows,
                                       p->send_row_displs, ctx->recv_buf, ctx->recv_rows,
                                       ctx->recv_displs, err);
    if (st != MOE_OK) {
        return st;
    }
    ctx->rec.dispatch_begin_ns = ctx->transport->begin_ns;
    memcpy(ctx->rec.dispatch_done_ns, ctx->transport->peer_done_ns, sizeof(int64_t) * (size_t)W);
    return MOE_OK;
}

/* Run local expert `le` over its rows, which sit in one block per source rank. */
static moe_status_t layer_expert(moe_layer_ctx_t *ctx, const moe_expert_weights_t *ew, int le)
{
    const moe_config_t *cfg = ctx->cfg;
    int W = ctx->world_size, nl = ctx->num_local;
    int64_t H = cfg->hidden_dim;
    int64_t off[MOE_MAX_RANKS], total = 0;
    int sources = 0, last = -1;
    for (int s = 0; s < W; s++) {
        off[s] = ctx->recv_displs[s];
        for (int e = 0; e < le; e++) {
            off[s] += ctx->recv_counts[s * nl + e];
        }
        int n = ctx->recv_counts[s * nl + le];
        total += n;
        if (n > 0) {
            sources++;
            last = s;
        }
    }
    ctx->rec.expert_rows[le] = total;
    if (total == 0) {
        return MOE_OK;
    }
    if (sources == 1) { /* contiguous already: no copy */
        return moe_expert_forward(ew, cfg->activation, H, cfg->ffn_dim, total,
                                  ctx->recv_buf + off[last] * H, ctx->back_buf + off[last] * H,
                                  ctx->scratch, ctx->tile_rows);
    }
    int64_t r = 0;
    for (int s = 0; s < W; s++) {
        size_t n = (size_t)ctx->recv_counts[s * nl + le];
        memcpy(ctx->expert_in + r * H, ctx->recv_buf + off[s] * H, n * (size_t)H * sizeof(float));
        r += (int64_t)n;
    }
    moe_status_t st = moe_expert_forward(ew, cfg->activation, H, cfg->ffn_dim, total,
                                         ctx->expert_in, ctx->expert_out, ctx->scratch,
                                         ctx->tile_rows);
    r = 0;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        size_t n = (size_t)ctx->recv_counts[s * nl + le];
        memcpy(ctx->back_buf + off[s] * H, ctx->expert_out + r * H, n * (size_t)H * sizeof(float));
        r += (int64_t)n;
    }
    return st;
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

moe_status_t moe_layer_forward(moe_layer_ctx_t *ctx, const moe_layer_weights_t *lw,
                               const float *gate_bias, float *x, int64_t tokens, int64_t step,
                               int layer, moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    moe_wait_set_where(step, layer, "gate");
    rec->phase_begin_ns[MOE_PHASE_GATE] = moe_now_ns();
    moe_status_t st = layer_route(ctx, lw, gate_bias, x, tokens, err);
    rec->phase_end_ns[MOE_PHASE_GATE] = rec->phase_begin_ns[MOE_PHASE_DISPATCH] = moe_now_ns();
    moe_wait_set_where(step, layer, "dispatch");
    if (st == MOE_OK) {
        st = layer_dispatch(ctx, x, err);
    }
    rec->phase_end_ns[MOE_PHASE_DISPATCH] = rec->phase_begin_ns[MOE_PHASE_EXPERT] = moe_now_ns();
    for (int le = 0; le < ctx->num_local && st == MOE_OK; le++) {
        if (moe_stop_requested()) { /* between expert calls: react within one call */
            st = moe_error_set(err, MOE_ERR_INTERRUPTED, "stop requested during the experts");
            break;
        }
        rec->expert_begin_ns[le] = moe_now_ns();
        st = layer_expert(ctx, &lw->experts[le], le);
        rec->expert_end_ns[le] = moe_now_ns();
        if (st != MOE_OK) {
            moe_error_set(err, st, "expert %d FFN failed", lw->experts[le].id);
        }
    }
    rec->phase_end_ns[MOE_PHASE_EXPERT] = rec->phase_begin_ns[MOE_PHASE_COMBINE] = moe_now_ns();
    moe_wait_set_where(step, layer, "combine");
    if (st == MOE_OK) {
        st = ctx->transport->ops->exchange(ctx->transport, ctx->back_buf, ctx->recv_rows,
                                           ctx->recv_displs, ctx->ret_buf, ctx->plan.send_rows,
                                           ctx->plan.send_row_displs, err);
        ctx->rec.combine_begin_ns = ctx->transport->begin_ns;
        memcpy(ctx->rec.combine_done_ns, ctx->transport->peer_done_ns,
               sizeof(int64_t) * (size_t)ctx->world_size);
    }
    rec->phase_end_ns[MOE_PHASE_COMBINE] = rec->phase_begin_ns[MOE_PHASE_MERGE] = moe_now_ns();
    if (st == MOE_OK) {
        layer_merge(ctx, x, tokens);
    }
    rec->phase_end_ns[MOE_PHASE_MERGE] = moe_now_ns();
    return st;
}
