/* The CPU expert back-end (backend.h): the gate, the permutation, the experts (BLAS in F32,
 * or oneDNN in BF16, in row tiles) and the merge on the host buffers the layer's arena
 * holds. Rows on the wire are F32 or BF16 (io->wire_bf16): the permutation narrows them,
 * the experts read and write them in that type, the merge widens them and accumulates in
 * F32. Its state (impl): on expert ranks the per-call choice between the small-batch
 * kernels and the GEMMs (expert/expert_small.h), for BF16 compute also the oneDNN context
 * and the tile's scratch; on a rank that routes but hosts no experts and may use 2 CPUs
 * (the master), a row helper (moe/halves.h) that runs the second half of the gate's, the
 * permutation's and the merge's rows while the expert ranks wait for them. */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "expert/backend.h"
#include "expert/expert.h"
#include "expert/expert_bf16.h"
#include "expert/expert_small.h"
#include "expert/gate.h"
#include "moe/bf16.h"
#include "moe/halves.h"
#include "moe/log.h"

/* The back-end's state: the routing rank's row helper, and for BF16 compute one tile's
 * GEMM input, up projection, activation and output. */
typedef struct cpu_state {
    moe_halves_t *halves; /* the routing rank's row helper, or NULL */
    moe_onednn_t *dnn;
    moe_expert_small_t *small; /* the path per expert call (expert/expert_small.h) */
    uint16_t *in;   /* [tile, H] */
    uint16_t *h;    /* [tile, up_n] */
    uint16_t *act;  /* [tile, F] */
    float *out;     /* [tile, H] */
    /* a routing rank's shared experts held in BF16 or FP8 (weights->shared_store): their
     * path per call, and for BF16 compute their oneDNN context and one tile's scratch */
    moe_onednn_t *sh_dnn;
    moe_expert_small_t *sh_small;
    uint16_t *sh_in;  /* [tile, H] */
    uint16_t *sh_h;   /* [tile, up(Fs)] */
    uint16_t *sh_act; /* [tile, Fs] */
    float *sh_out;    /* [tile, H] */
} cpu_state_t;

/* One row of H values from one type to the other (or copied). */
MOE_VECTOR_CLONES static void copy_row(const void *src, bool src_bf16, void *dst, bool dst_bf16,
                                       int64_t H)
{
    if (src_bf16 == dst_bf16) {
        memcpy(dst, src, (size_t)H * (src_bf16 ? sizeof(uint16_t) : sizeof(float)));
    } else if (src_bf16) {
        moe_bf16_to_f32_n(dst, src, (size_t)H);
    } else {
        moe_bf16_from_f32_n(dst, src, (size_t)H);
    }
}

/* Rows [r0, r0 + m) of an expert call (n[s] rows at row from[s] per source s) between the
 * wire rows of buf and dense rows of H values (BF16 when dense_bf16): to dense when in. */
static void call_rows(const moe_expert_io_t *io, const int64_t *from, const int64_t *n,
                      int64_t r0, int64_t m, void *buf, void *dense, bool dense_bf16, bool in)
{
    int64_t H = io->cfg->hidden_dim, skip = r0, i = 0;
    size_t dsz = dense_bf16 ? sizeof(uint16_t) : sizeof(float);
    for (int s = 0; s < io->world_size && i < m; s++) {
        if (skip >= n[s]) {
            skip -= n[s];
            continue;
        }
        for (int64_t j = skip; j < n[s] && i < m; j++, i++) {
            char *w = (char *)buf + (from[s] + j) * io->wire_row_bytes;
            char *d = (char *)dense + (size_t)(i * H) * dsz;
            if (in) {
                copy_row(w, io->wire_bf16, d, dense_bf16, H);
            } else {
                copy_row(d, dense_bf16, w, io->wire_bf16, H);
            }
        }
        skip = 0;
    }
}

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

/* Loops of fewer rows run on one thread (waking the helper costs tens of us). */
#define MIN_SPLIT_ROWS 64

static moe_halves_t *cpu_halves(const moe_expert_backend_t *be)
{
    const cpu_state_t *cs = be->impl;
    return cs != NULL ? cs->halves : NULL;
}

typedef struct gate_job {
    const moe_router_t *r;
    const float *x, *wg;
    const moe_expert_io_t *io;
    moe_status_t st[2]; /* each half's */
} gate_job_t;

/* The gate GEMM and the routing of tokens [lo, hi) (each row on its own). */
static void gate_rows(void *arg, int64_t lo, int64_t hi)
{
    gate_job_t *j = arg;
    const moe_expert_io_t *io = j->io;
    int64_t H = io->cfg->hidden_dim, E = io->cfg->num_experts, k = io->cfg->top_k;
    j->st[lo > 0] = moe_gate_route(j->r, j->x + lo * H, hi - lo, H, j->wg, io->logits + lo * E,
                                   io->topk_idx + lo * k, io->topk_w + lo * k);
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
    gate_job_t job = {.r = &r, .x = x, .wg = lw->gate, .io = io, .st = {MOE_OK, MOE_OK}};
    moe_halves_run(cpu_halves(be), gate_rows, &job, tokens, MIN_SPLIT_ROWS);
    moe_status_t st = job.st[0] != MOE_OK ? job.st[0] : job.st[1];
    return st == MOE_OK ? MOE_OK : moe_error_set(err, st, "gate GEMM failed");
}

typedef struct permute_job {
    const moe_expert_io_t *io;
    const float *x;
} permute_job_t;

/* Send rows [lo, hi): each a copy of its token's row, in the wire type. */
static void permute_rows(void *arg, int64_t lo, int64_t hi)
{
    const permute_job_t *j = arg;
    const moe_expert_io_t *io = j->io;
    int64_t H = io->cfg->hidden_dim;
    for (int64_t i = lo; i < hi; i++) {
        copy_row(j->x + (int64_t)io->send_token[i] * H, false,
                 (char *)io->send_buf + i * io->wire_row_bytes, io->wire_bf16, H);
    }
}

static moe_status_t cpu_permute(moe_expert_backend_t *be, const float *x, const void **after,
                                moe_error_t *err)
{
    permute_job_t job = {.io = be->io, .x = x};
    moe_halves_run(cpu_halves(be), permute_rows, &job, be->io->num_send, MIN_SPLIT_ROWS);
    *after = NULL;
    return MOE_OK;
}

/* The transport wrote the host rows the experts read. Dedup: chunk c's rows wait for all
 * their terms. */
static moe_status_t cpu_arrived(moe_expert_backend_t *be, int c, moe_error_t *err)
{
    const moe_expert_io_t *io = be->io;
    int W = io->world_size;
    for (int s = 0; s < W && io->dedup; s++) {
        int64_t r0 = io->chunk_recv_displs[c * W + s];
        memcpy(io->row_left + r0, io->row_pairs + r0,
               sizeof(int32_t) * (size_t)io->chunk_recv_rows[c * W + s]);
    }
    return MOE_OK;
}

/* The experts ran synchronously (dedup: each row was written to the wire with its last
 * term). */
static moe_status_t cpu_computed(moe_expert_backend_t *be, int c, const void **after,
                                 moe_error_t *err)
{
    *after = NULL;
    return MOE_OK;
}

/* The FFN over rows in tiles, driving the exchanges in flight between tiles. */
static moe_status_t cpu_ffn(const moe_expert_io_t *io, cpu_state_t *cs,
                            const moe_expert_weights_t *ew, int64_t rows, const float *in,
                            float *out, moe_error_t *err)
{
    const moe_config_t *cfg = io->cfg;
    int64_t H = cfg->hidden_dim;
    for (int64_t r0 = 0; r0 < rows; r0 += io->tile_rows) {
        int64_t m = rows - r0 < io->tile_rows ? rows - r0 : io->tile_rows;
        moe_status_t st = moe_expert_small_forward_f32(cs != NULL ? cs->small : NULL, ew,
                                                       cfg->activation, H,
                                                       moe_cfg_expert_ffn(cfg), m, in + r0 * H,
                                                       out + r0 * H, io->scratch, io->tile_rows,
                                                       err);
        if (st != MOE_OK) {
            return st;
        }
        if (io->chunks > 1 && (st = io->progress(io->progress_arg, NULL, 0, err)) != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}

/* BF16 compute: tile by tile, the rows as BF16 GEMM input (BF16 wire rows of one source
 * feed the GEMM where they lie), the output back to the wire rows. */
static moe_status_t cpu_expert_bf16(const moe_expert_io_t *io, cpu_state_t *cs,
                                    const moe_expert_weights_t *ew, const int64_t *from,
                                    const int64_t *n, int64_t total, moe_error_t *err)
{
    const moe_config_t *cfg = io->cfg;
    int64_t H = cfg->hidden_dim;
    int only = moe_expert_only_source(n, io->world_size);
    moe_status_t st = MOE_OK;
    int64_t tiles = (total + MOE_BF16_TILE_ROWS - 1) / MOE_BF16_TILE_ROWS;
    for (int64_t t = 0; t < tiles && st == MOE_OK; t++) {
        int64_t r0 = total * t / tiles, m = total * (t + 1) / tiles - r0;
        const uint16_t *in = cs->in;
        /* The bucket's rows past m are read too: only where no exchange is still writing
         * (one chunk: every row has arrived) or there are none. */
        int64_t rows = moe_onednn_bucket(m);
        if (io->wire_bf16 && only >= 0 && io->wire_row_bytes == H * 2 &&
            (io->chunks == 1 || rows == m) && from[only] + r0 + rows <= io->max_recv) {
            in = (const uint16_t *)((const char *)io->recv_buf +
                                    (from[only] + r0) * io->wire_row_bytes);
        } else {
            call_rows(io, from, n, r0, m, io->recv_buf, cs->in, true, true);
        }
        st = moe_expert_small_forward_bf16(cs->small, cs->dnn, ew, cfg->activation, H,
                                           moe_cfg_expert_ffn(cfg), m, in, cs->h, cs->act,
                                           cs->out, err);
        if (st != MOE_OK) {
            return st; /* oneDNN's message says which GEMM */
        }
        call_rows(io, from, n, r0, m, io->back_buf, cs->out, false, false);
        if (io->chunks > 1) {
            st = io->progress(io->progress_arg, NULL, 0, err);
        }
    }
    return st;
}

/* Contiguous rows run in place; rows from several sources, or BF16 rows, are gathered (as
 * F32) and scattered. */
static moe_status_t cpu_expert(moe_expert_backend_t *be, int layer, int le, int call,
                               const int64_t *from, const int64_t *n, int64_t total,
                               moe_error_t *err)
{
    const moe_expert_io_t *io = be->io;
    const moe_expert_weights_t *ew = &io->weights->layers[layer].experts[le];
    int W = io->world_size, only = moe_expert_only_source(n, W);
    int64_t H = io->cfg->hidden_dim;
    if (io->compute == MOE_NUM_BF16) {
        return cpu_expert_bf16(io, be->impl, ew, from, n, total, err);
    }
    if (io->wire_bf16) {
        call_rows(io, from, n, 0, total, io->recv_buf, io->expert_in, false, true);
        moe_status_t st = cpu_ffn(io, be->impl, ew, total, io->expert_in, io->expert_out, err);
        if (st == MOE_OK) {
            call_rows(io, from, n, 0, total, io->back_buf, io->expert_out, false, false);
        }
        return st;
    }
    if (only >= 0) {
        return cpu_ffn(io, be->impl, ew, total, io->recv_buf + from[only] * H,
                       io->back_buf + from[only] * H, err);
    }
    int64_t r = 0;
    for (int s = 0; s < W; s++) {
        memcpy(io->expert_in + r * H, io->recv_buf + from[s] * H,
               (size_t)(n[s] * H) * sizeof(float));
        r += n[s];
    }
    moe_status_t st = cpu_ffn(io, be->impl, ew, total, io->expert_in, io->expert_out, err);
    r = 0;
    for (int s = 0; s < W && st == MOE_OK; s++) {
        memcpy(io->back_buf + from[s] * H, io->expert_out + r * H,
               (size_t)(n[s] * H) * sizeof(float));
        r += n[s];
    }
    return st;
}

/* Dedup: out [m, H] (F32), the FFN of rows rows[0..m) with weights w, into each row's F32
 * sum: its first term stored, later ones added (experts come in ascending order); with
 * its last term the row goes to the wire type. A row of one term here is written to the
 * wire directly; BF16 rows of more sum in row_sum, F32 rows where they are sent. */
MOE_VECTOR_CLONES static void pairs_add(const moe_expert_io_t *io, const int32_t *rows,
                                        const float *w, int64_t m, const float *out)
{
    int64_t H = io->cfg->hidden_dim;
    for (int64_t i = 0; i < m; i++) {
        int32_t r = rows[i];
        bool first = io->row_left[r] == io->row_pairs[r], last = io->row_left[r] == 1;
        io->row_left[r]--;
        float wi = w[i];
        const float *o = out + i * H;
        char *wire = (char *)io->back_buf + (int64_t)r * io->wire_row_bytes;
        if (!io->wire_bf16 || !(first && last)) {
            float *a = io->wire_bf16 ? io->row_sum + (int64_t)r * H : (float *)wire;
            if (first) {
                for (int64_t h = 0; h < H; h++) {
                    a[h] = wi * o[h];
                }
            } else {
                for (int64_t h = 0; h < H; h++) {
                    a[h] += wi * o[h];
                }
            }
            if (last && io->wire_bf16) {
                moe_bf16_from_f32_n((uint16_t *)wire, a, (size_t)H);
            }
        } else { /* a BF16 row of one term */
            uint16_t *b = (uint16_t *)wire;
            for (int64_t h = 0; h < H; h++) {
                b[h] = moe_f32_to_bf16(wi * o[h]);
            }
        }
    }
}

/* Dedup, BF16 compute: tile by tile, the rows gathered as BF16 GEMM input, the weighted
 * outputs into the rows' sums. */
static moe_status_t cpu_pairs_bf16(const moe_expert_io_t *io, cpu_state_t *cs,
                                   const moe_expert_weights_t *ew, const int32_t *rows,
                                   const float *w, int64_t n, moe_error_t *err)
{
    const moe_config_t *cfg = io->cfg;
    int64_t H = cfg->hidden_dim;
    moe_status_t st = MOE_OK;
    int64_t tiles = (n + MOE_BF16_TILE_ROWS - 1) / MOE_BF16_TILE_ROWS;
    for (int64_t t = 0; t < tiles && st == MOE_OK; t++) {
        int64_t r0 = n * t / tiles, m = n * (t + 1) / tiles - r0;
        for (int64_t i = 0; i < m; i++) {
            copy_row((const char *)io->recv_buf + (int64_t)rows[r0 + i] * io->wire_row_bytes,
                     io->wire_bf16, cs->in + i * H, true, H);
        }
        st = moe_expert_small_forward_bf16(cs->small, cs->dnn, ew, cfg->activation, H,
                                           moe_cfg_expert_ffn(cfg), m, cs->in, cs->h,
                                           cs->act, cs->out, err);
        if (st != MOE_OK) {
            return st; /* oneDNN's message says which GEMM */
        }
        pairs_add(io, rows + r0, w + r0, m, cs->out);
        if (io->chunks > 1) {
            st = io->progress(io->progress_arg, NULL, 0, err);
        }
    }
    return st;
}

/* Dedup: local expert le over received rows rows[0..n) (backend.h's pairs slot). F32
 * compute gathers them (as F32) for the FFN's tiles. */
static moe_status_t cpu_pairs(moe_expert_backend_t *be, int layer, int le, int call,
                              const int32_t *rows, const float *w, int64_t n, moe_error_t *err)
{
    const moe_expert_io_t *io = be->io;
    const moe_expert_weights_t *ew = &io->weights->layers[layer].experts[le];
    int64_t H = io->cfg->hidden_dim;
    if (io->compute == MOE_NUM_BF16) {
        return cpu_pairs_bf16(io, be->impl, ew, rows, w, n, err);
    }
    for (int64_t i = 0; i < n; i++) {
        copy_row((const char *)io->recv_buf + (int64_t)rows[i] * io->wire_row_bytes,
                 io->wire_bf16, io->expert_in + i * H, false, H);
    }
    moe_status_t st = cpu_ffn(io, be->impl, ew, n, io->expert_in, io->expert_out, err);
    if (st == MOE_OK) {
        pairs_add(io, rows, w, n, io->expert_out);
    }
    return st;
}

/* Rows [r0, r0 + m) of the shared experts into io->shared_out: F32-held on the BLAS; held
 * in BF16 or FP8 on the small-batch kernels or the GEMMs as the experts' calls are
 * (expert/expert_small.h), in BF16 compute from the rows narrowed to BF16. */
static moe_status_t shared_rows(const moe_expert_io_t *io, cpu_state_t *cs,
                                const moe_expert_weights_t *sw, const float *x, int64_t r0,
                                int64_t m, moe_error_t *err)
{
    const moe_config_t *cfg = io->cfg;
    int64_t H = cfg->hidden_dim, Fs = io->weights->shared_ffn;
    float *out = io->shared_out + r0 * H;
    if (cs == NULL || cs->sh_small == NULL) {
        moe_status_t st = moe_expert_forward(sw, cfg->activation, H, Fs, m, x + r0 * H, out,
                                             io->shared_scratch, io->tile_rows);
        return st == MOE_OK ? st : moe_error_set(err, st, "shared expert FFN failed");
    }
    if (io->weights->shared_compute != MOE_NUM_BF16) {
        return moe_expert_small_forward_f32(cs->sh_small, sw, cfg->activation, H, Fs, m,
                                            x + r0 * H, out, io->shared_scratch, io->tile_rows,
                                            err);
    }
    moe_bf16_from_f32_n(cs->sh_in, x + r0 * H, (size_t)(m * H));
    moe_status_t st = moe_expert_small_forward_bf16(cs->sh_small, cs->sh_dnn, sw,
                                                    cfg->activation, H, Fs, m, cs->sh_in,
                                                    cs->sh_h, cs->sh_act, cs->sh_out, err);
    if (st == MOE_OK) { /* the GEMM bucket's rows past m are junk: only m rows out */
        memcpy(out, cs->sh_out, (size_t)(m * H) * sizeof(float));
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
    cpu_state_t *cs = be->impl;
    int64_t H = cfg->hidden_dim;
    int64_t tile = cs != NULL && cs->sh_small != NULL &&
                           io->weights->shared_compute == MOE_NUM_BF16
                       ? MOE_BF16_TILE_ROWS
                       : io->tile_rows;
    for (int64_t r0 = 0; r0 < tokens; r0 += tile) {
        int64_t m = tokens - r0 < tile ? tokens - r0 : tile;
        moe_status_t st = shared_rows(io, cs, &lw->shared, x, r0, m, err);
        if (st != MOE_OK) {
            return st;
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

typedef struct merge_job {
    const moe_expert_io_t *io;
    float *x;
} merge_job_t;

/* Tokens [lo, hi): x[t] += sum_j w[t,j] * out(t,j) (+ the shared experts'), choices in
 * order j = 0..k-1 so the sum is the same whatever the placement, each token's sum in F32
 * in a row of acc_row of its own half (the helper's: the second). Dedup: the token's
 * returned rows (its ranks' sums, ascending rank) in place of the choices, weight 1 (exact). */
MOE_VECTOR_CLONES static void merge_rows(void *arg, int64_t lo, int64_t hi)
{
    const merge_job_t *mj = arg;
    const moe_expert_io_t *io = mj->io;
    int k = (int)io->cfg->top_k;
    int64_t H = io->cfg->hidden_dim;
    float *acc = io->acc_row + (lo > 0 ? H : 0);
    for (int64_t t = lo; t < hi; t++) {
        memset(acc, 0, sizeof(float) * (size_t)H);
        int n = io->dedup ? io->rows_per_token : k;
        for (int j = 0; j < n; j++) {
            /* dedup: the token's rows in ascending order, each a weighted sum already */
            int32_t pos = io->dedup ? io->token_rows[t * n + j] : io->slot_pos[t * k + j];
            if (pos < 0 && io->dedup) {
                break; /* the token's last row is done */
            }
            if (pos < 0) {
                continue; /* dropped by capacity: contributes nothing */
            }
            float w = io->dedup ? 1.0f : io->topk_w[t * k + j];
            const char *row = (const char *)io->ret_buf + (int64_t)pos * io->wire_row_bytes;
            if (io->wire_bf16) {
                const uint16_t *o = (const uint16_t *)row;
                for (int64_t h = 0; h < H; h++) {
                    acc[h] += w * moe_bf16_to_f32(o[h]);
                }
            } else {
                const float *o = (const float *)row;
                for (int64_t h = 0; h < H; h++) {
                    acc[h] += w * o[h];
                }
            }
        }
        float *xr = mj->x + t * H;
        const float *sh = io->shared_ran ? io->shared_out + t * H : NULL;
        for (int64_t h = 0; sh != NULL && h < H; h++) {
            acc[h] += sh[h];
        }
        for (int64_t h = 0; h < H; h++) {
            xr[h] += acc[h];
        }
    }
}

static moe_status_t cpu_merge(moe_expert_backend_t *be, float *x, int64_t tokens,
                              moe_error_t *err)
{
    merge_job_t job = {.io = be->io, .x = x};
    moe_halves_run(cpu_halves(be), merge_rows, &job, tokens, MIN_SPLIT_ROWS);
    return MOE_OK;
}

static moe_status_t cpu_finish(moe_expert_backend_t *be, moe_prof_call_t *calls, int num_calls,
                               int64_t *expert_ns, moe_error_t *err)
{
    return MOE_OK; /* the host times are the true ones */
}

static void cpu_destroy(moe_expert_backend_t *be)
{
    cpu_state_t *cs = be->impl;
    if (cs == NULL) {
        return;
    }
    moe_halves_destroy(cs->halves);
    if (cs->small != NULL) { /* which path the expert calls took (MOED_LOG_LEVEL=debug) */
        int64_t calls[2], rows[2];
        moe_expert_small_counts(cs->small, calls, rows);
        MOE_DEBUG("expert calls: %lld on the small-batch kernels (%s, up to %lld rows; %lld "
                  "rows), %lld on the GEMMs (%lld rows)", (long long)calls[0],
                  moe_sb_isa_name(moe_expert_small_isa(cs->small)),
                  (long long)moe_expert_small_rows(cs->small), (long long)rows[0],
                  (long long)calls[1], (long long)rows[1]);
    }
    moe_expert_small_destroy(cs->small);
    moe_onednn_destroy(cs->dnn);
    free(cs->in);
    free(cs->h);
    free(cs->act);
    free(cs->out);
    moe_expert_small_destroy(cs->sh_small);
    moe_onednn_destroy(cs->sh_dnn);
    free(cs->sh_in);
    free(cs->sh_h);
    free(cs->sh_act);
    free(cs->sh_out);
    free(cs);
    be->impl = NULL;
}

static const moe_expert_ops_t k_cpu_ops = {
    .name = "cpu",
    .gate = cpu_gate,
    .permute = cpu_permute,
    .arrived = cpu_arrived,
    .expert = cpu_expert,
    .pairs = cpu_pairs,
    .computed = cpu_computed,
    .shared = cpu_shared,
    .merge = cpu_merge,
    .finish = cpu_finish,
    .destroy = cpu_destroy,
};

/* BF16 compute of an FFN of inner width F: one tile's (T rows) GEMM input, up projection,
 * activation and output, zeroed (the rows past a tile's end that a GEMM bucket computes
 * hold finite junk), and oneDNN's context for those shapes, primitives made. */
static moe_status_t bf16_scratch(size_t T, size_t H, size_t up_n, size_t F, int threads,
                                 uint16_t **in, uint16_t **h, uint16_t **act, float **out,
                                 moe_onednn_t **dnn, moe_error_t *err)
{
    *in = calloc(T * H, sizeof(uint16_t));
    *h = calloc(T * up_n, sizeof(uint16_t));
    *act = calloc(T * F, sizeof(uint16_t));
    *out = calloc(T * H, sizeof(float));
    moe_status_t st = *in == NULL || *h == NULL || *act == NULL || *out == NULL
                          ? moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate BF16 scratch")
                          : moe_onednn_create((int64_t)H, (int64_t)up_n, (int64_t)F, (int64_t)T,
                                              threads, dnn, err);
    return st == MOE_OK ? moe_onednn_prepare(*dnn, err) : st;
}

/* The oneDNN context and one tile's scratch, for BF16 compute; the per-call path. */
static moe_status_t cpu_state_create(const moe_expert_io_t *io, cpu_state_t **out,
                                     moe_error_t *err)
{
    const moe_config_t *cfg = io->cfg;
    size_t T = MOE_BF16_TILE_ROWS, H = (size_t)cfg->hidden_dim;
    size_t F = (size_t)moe_cfg_expert_ffn(cfg);
    size_t up_n = cfg->activation == MOE_ACT_GELU ? F : 2 * F;
    cpu_state_t *cs = calloc(1, sizeof(*cs));
    if (cs == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the CPU back-end");
    }
    moe_status_t st = bf16_scratch(T, H, up_n, F, (int)cfg->threads, &cs->in, &cs->h, &cs->act,
                                   &cs->out, &cs->dnn, err);
    if (st == MOE_OK) {
        st = moe_expert_small_create(cfg, io->weights, io->compute, cs->dnn, (int64_t)T,
                                     &cs->small, err);
    }
    if (st != MOE_OK) {
        moe_expert_backend_t tmp = {.impl = cs};
        cpu_destroy(&tmp);
        return st;
    }
    *out = cs;
    return MOE_OK;
}

/* A routing rank's shared experts held in BF16 or FP8: their per-call path (a context of
 * their width Fs: the config's ffn_dim replaced) and for BF16 compute oneDNN's context and
 * one tile's scratch, into cs. */
static moe_status_t cpu_shared_create(const moe_expert_io_t *io, cpu_state_t *cs,
                                      moe_error_t *err)
{
    const moe_weights_t *w = io->weights;
    moe_config_t *scfg = malloc(sizeof(*scfg));
    if (scfg == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the shared experts' path");
    }
    *scfg = *io->cfg;
    scfg->ffn_dim = w->shared_ffn;
    scfg->column_shares = 1; /* shared experts are whole */
    bool bf16 = w->shared_compute == MOE_NUM_BF16;
    size_t T = MOE_BF16_TILE_ROWS, H = (size_t)scfg->hidden_dim, Fs = (size_t)w->shared_ffn;
    size_t up_n = scfg->activation == MOE_ACT_GELU ? Fs : 2 * Fs;
    moe_status_t st = MOE_OK;
    if (bf16) {
        st = bf16_scratch(T, H, up_n, Fs, (int)scfg->threads, &cs->sh_in, &cs->sh_h,
                          &cs->sh_act, &cs->sh_out, &cs->sh_dnn, err);
    }
    if (st == MOE_OK) {
        moe_weights_t view = {.store = w->shared_store,
                              .fp8_block = {w->fp8_block[0], w->fp8_block[1]}};
        st = moe_expert_small_create(scfg, &view, w->shared_compute, cs->sh_dnn,
                                     bf16 ? (int64_t)T : io->tile_rows, &cs->sh_small, err);
    }
    free(scfg);
    return st;
}

moe_status_t moe_expert_cpu_attach(moe_expert_backend_t *be, moe_expert_io_t *io,
                                   moe_error_t *err)
{
    cpu_state_t *cs = NULL;
    if (io->compute == MOE_NUM_BF16 && io->num_local > 0) {
        moe_status_t st = cpu_state_create(io, &cs, err);
        if (st != MOE_OK) {
            return st;
        }
    } else if (io->num_local > 0) { /* F32: the kernels' path for FP8 / MXFP4 held */
        cs = calloc(1, sizeof(*cs));
        moe_status_t st = cs == NULL ? moe_error_set(err, MOE_ERR_NO_MEMORY,
                                                     "cannot allocate the CPU back-end")
                                     : moe_expert_small_create(io->cfg, io->weights,
                                                               io->compute, NULL, io->tile_rows,
                                                               &cs->small, err);
        if (st != MOE_OK) {
            free(cs);
            return st;
        }
    }
    cpu_set_t mask;
    if (io->num_local == 0 && io->max_tokens >= MIN_SPLIT_ROWS &&
        sched_getaffinity(0, sizeof(mask), &mask) == 0 && CPU_COUNT(&mask) >= 2) {
        cs = calloc(1, sizeof(*cs)); /* the routing rank: only the row helper */
        moe_status_t st = cs == NULL ? moe_error_set(err, MOE_ERR_NO_MEMORY,
                                                     "cannot allocate the CPU back-end")
                                     : moe_halves_create(true, &cs->halves, err);
        if (st != MOE_OK) {
            free(cs);
            return st;
        }
    }
    if (io->weights->shared_ffn > 0 && io->weights->shared_store != MOE_DTYPE_F32) {
        cs = cs != NULL ? cs : calloc(1, sizeof(*cs));
        moe_status_t st = cs == NULL ? moe_error_set(err, MOE_ERR_NO_MEMORY,
                                                     "cannot allocate the CPU back-end")
                                     : cpu_shared_create(io, cs, err);
        if (st != MOE_OK) {
            moe_expert_backend_t tmp = {.impl = cs};
            cpu_destroy(&tmp);
            return st;
        }
    }
    be->ops = &k_cpu_ops;
    be->io = io;
    be->impl = cs;
    return MOE_OK;
}
