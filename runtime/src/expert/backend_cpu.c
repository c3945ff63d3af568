/* The CPU expert back-end (backend.h): the gate, the permutation, the experts (BLAS, in
 * row tiles) and the merge on the host buffers the layer's arena holds. It has no state of
 * its own (impl stays NULL). */
#include <math.h>
#include <string.h>

#include "expert/backend.h"
#include "expert/expert.h"
#include "expert/gate.h"

int moe_expert_only_source(const int64_t *n, int world)
{
    int only = -1;
    for (int s = 0; s < world; s++) {
        if (n[s] > 0) {
            if (only >= 0) {
                return -1;
            }
            only = s;
        }
    }
    return only;
}

void moe_expert_backend_destroy(moe_expert_backend_t *be)
{
    if (be == NULL) {
        return;
    }
    if (be->ops != NULL && be->ops->destroy != NULL) {
        be->ops->destroy(be);
    }
    memset(be, 0, sizeof(*be));
}

static moe_status_t cpu_gate(moe_expert_backend_t *be, int layer, const float *x,
                             int64_t tokens, moe_error_t *err)
{
    const moe_expert_io_t *io = be->io;
    const moe_config_t *cfg = io->cfg;
    const moe_layer_weights_t *lw = &io->weights->layers[layer];
    const moe_family_t *fam = moe_family_get(cfg->family);
    moe_router_t r;
    /* The router bias: gpt-oss's own (routing_skew folded in at load), V3's correction bias
     * for selection only, else the routing_skew prior. */
    const float *logit_bias = io->weights->gate_bias, *select_bias = NULL;
    if (fam != NULL && fam->route == MOE_ROUTE_GPT_OSS) {
        logit_bias = lw->gate_bias;
    } else if (fam != NULL && fam->route == MOE_ROUTE_DEEPSEEK_V3) {
        select_bias = lw->gate_bias;
    }
    moe_router_init(&r, cfg, logit_bias, select_bias);
    moe_status_t st = moe_gate_route(&r, x, tokens, cfg->hidden_dim, lw->gate, io->logits,
                                     io->topk_idx, io->topk_w);
    return st == MOE_OK ? MOE_OK : moe_error_set(err, st, "gate GEMM failed");
}

static moe_status_t cpu_permute(moe_expert_backend_t *be, const float *x, const void **after,
                                moe_error_t *err)
{
    const moe_expert_io_t *io = be->io;
    int64_t H = io->cfg->hidden_dim;
    for (int64_t i = 0; i < io->num_send; i++) {
        memcpy(io->send_buf + i * H, x + (int64_t)io->send_token[i] * H,
               sizeof(float) * (size_t)H);
    }
    *after = NULL;
    return MOE_OK;
}

static moe_status_t cpu_arrived(moe_expert_backend_t *be, int c, moe_error_t *err)
{
    return MOE_OK; /* the transport wrote the host rows the experts read */
}

static moe_status_t cpu_computed(moe_expert_backend_t *be, int c, const void **after,
                                 moe_error_t *err)
{
    *after = NULL; /* the experts ran synchronously */
    return MOE_OK;
}

/* The FFN over rows in tiles, driving the exchanges in flight between tiles. */
static moe_status_t cpu_ffn(const moe_expert_io_t *io, const moe_expert_weights_t *ew,
                            int64_t rows, const float *in, float *out, moe_error_t *err)
{
    const moe_config_t *cfg = io->cfg;
    int64_t H = cfg->hidden_dim;
    for (int64_t r0 = 0; r0 < rows; r0 += io->tile_rows) {
        int64_t m = rows - r0 < io->tile_rows ? rows - r0 : io->tile_rows;
        moe_status_t st = moe_expert_forward(ew, cfg->activation, H, cfg->ffn_dim, m,
                                             in + r0 * H, out + r0 * H, io->scratch,
                                             io->tile_rows);
        if (st != MOE_OK) {
            return moe_error_set(err, st, "expert %d FFN failed", ew->id);
        }
        if (io->chunks > 1 && (st = io->progress(io->progress_arg, NULL, 0, err)) != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}

/* Contiguous rows run in place; rows from several sources are gathered and scattered. */
static moe_status_t cpu_expert(moe_expert_backend_t *be, int layer, int le, int call,
                               const int64_t *from, const int64_t *n, int64_t total,
                               moe_error_t *err)
{
    const moe_expert_io_t *io = be->io;
    const moe_expert_weights_t *ew = &io->weights->layers[layer].experts[le];
    int W = io->world_size, only = moe_expert_only_source(n, W);
    int64_t H = io->cfg->hidden_dim;
    if (only >= 0) {
        return cpu_ffn(io, ew, total, io->recv_buf + from[only] * H,
                       io->back_buf + from[only] * H, err);
    }
    int64_t r = 0;
    for (int s = 0; s < W; s++) {
        memcpy(io->expert_in + r * H, io->recv_buf + from[s] * H,
               (size_t)(n[s] * H) * sizeof(float));
        r += n[s];
    }
    moe_status_t st = cpu_ffn(io, ew, total, io->expert_in, io->expert_out, err);
    r = 0;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        memcpy(io->back_buf + from[s] * H, io->expert_out + r * H,
               (size_t)(n[s] * H) * sizeof(float));
        r += n[s];
    }
    return st;
}

/* The shared experts over every token, in row tiles (driving the exchange in flight between
 * tiles), Qwen2-MoE's sigmoid gate applied per token. */
static moe_status_t cpu_shared(moe_expert_backend_t *be, int layer, const float *x,
                               int64_t tokens, moe_error_t *err)
{
    moe_expert_io_t *io = be->io;
    const moe_config_t *cfg = io->cfg;
    const moe_layer_weights_t *lw = &io->weights->layers[layer];
    int64_t H = cfg->hidden_dim, Fs = io->weights->shared_ffn;
    for (int64_t r0 = 0; r0 < tokens; r0 += io->tile_rows) {
        int64_t m = tokens - r0 < io->tile_rows ? tokens - r0 : io->tile_rows;
        moe_status_t st = moe_expert_forward(&lw->shared, cfg->activation, H, Fs, m,
                                             x + r0 * H, io->shared_out + r0 * H,
                                             io->shared_scratch, io->tile_rows);
        if (st != MOE_OK) {
            return moe_error_set(err, st, "shared expert FFN failed");
        }
        if ((st = io->progress(io->progress_arg, NULL, 0, err)) != MOE_OK) {
            return st;
        }
    }
    for (int64_t t = 0; lw->shared_gate != NULL && t < tokens; t++) {
        double dot = 0.0;
        for (int64_t h = 0; h < H; h++) {
            dot += (double)x[t * H + h] * (double)lw->shared_gate[h];
        }
        float g = 1.0f / (1.0f + expf(-(float)dot));
        for (int64_t h = 0; h < H; h++) {
            io->shared_out[t * H + h] *= g;
        }
    }
    io->shared_ran = true;
    return MOE_OK;
}

/* x[t] += sum_j w[t,j] * out(t,j), choices in order j = 0..k-1 so the sum is the same
 * whatever the placement. */
static moe_status_t cpu_merge(moe_expert_backend_t *be, float *x, int64_t tokens,
                              moe_error_t *err)
{
    const moe_expert_io_t *io = be->io;
    int k = (int)io->cfg->top_k;
    int64_t H = io->cfg->hidden_dim;
    float *acc = io->acc_row;
    for (int64_t t = 0; t < tokens; t++) {
        memset(acc, 0, sizeof(float) * (size_t)H);
        for (int j = 0; j < k; j++) {
            int32_t pos = io->slot_pos[t * k + j];
            if (pos < 0) {
                continue; /* dropped by capacity: contributes nothing */
            }
            float w = io->topk_w[t * k + j];
            const float *o = io->ret_buf + (int64_t)pos * H;
            for (int64_t h = 0; h < H; h++) {
                acc[h] += w * o[h];
            }
        }
        float *xr = x + t * H;
        const float *sh = io->shared_ran ? io->shared_out + t * H : NULL;
        for (int64_t h = 0; sh != NULL && h < H; h++) {
            acc[h] += sh[h];
        }
        for (int64_t h = 0; h < H; h++) {
            xr[h] += acc[h];
        }
    }
    return MOE_OK;
}

static moe_status_t cpu_finish(moe_expert_backend_t *be, moe_prof_call_t *calls, int num_calls,
                               int64_t *expert_ns, moe_error_t *err)
{
    return MOE_OK; /* the host times are the true ones */
}

static const moe_expert_ops_t k_cpu_ops = {
    .name = "cpu",
    .gate = cpu_gate,
    .permute = cpu_permute,
    .arrived = cpu_arrived,
    .expert = cpu_expert,
    .computed = cpu_computed,
    .shared = cpu_shared,
    .merge = cpu_merge,
    .finish = cpu_finish,
    .destroy = NULL,
};

void moe_expert_cpu_attach(moe_expert_backend_t *be, moe_expert_io_t *io)
{
    be->ops = &k_cpu_ops;
    be->io = io;
    be->impl = NULL;
}
