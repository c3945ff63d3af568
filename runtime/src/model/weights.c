#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/bf16.h"
#include "moe/clock.h"
#include "moe/mem.h"
#include "moe/log.h"
#include "moe/stop.h"
#include "moe/testctl.h"
#include "moe/watchdog.h"
#include "moe_model/safetensors.h"
#include "model/checkpoint.h"
#include "model/family.h"
#include "model/rng.h"

/* A load this large takes seconds (F32 generation ran at 50-200 MB/s per rank on a 2-core
 * machine): below it nothing is printed, so small jobs keep their output short. */
#define LOAD_REPORT_BYTES ((size_t)256 << 20)
/* At most one progress line this often, so a log stays readable (lines, not '\r'). */
#define LOAD_REPORT_NS 5000000000LL

/* Random tensors are filled this many values at a time, so progress moves within one
 * expert too (a Mixtral expert is 672 MiB: tens of seconds on a loaded machine), and the
 * watchdog's pings are answered between pieces (16 MiB: well under a second each). */
#define LOAD_PIECE_FLOATS ((size_t)4 << 20)

/* Progress of the expert weights of the rank that reports (rank 0). Every rank builds its
 * own experts at the same time and no rank waits for another here, so rank 0 can only tell
 * its own progress; the lines say so. When placement auto gives rank 0 experts, it gives it
 * as many as any rank, so its progress is the job's to within one expert. */
typedef struct load_progress {
    bool show;
    double held_size;   /* bytes per value as held (4 F32, 2 BF16, 1 FP8, 0.5 MXFP4): the
                         * F32 bytes built scale by it */
    size_t done, total; /* expert bytes built / to build here */
    int64_t t0, last_ns;
} load_progress_t;

static double mib(size_t bytes)
{
    return (double)bytes / (double)(1 << 20);
}

/* "672 MiB" or "10.5 GiB". */
static const char *size_text(char *buf, size_t cap, size_t bytes)
{
    if (bytes < ((size_t)1 << 30)) {
        snprintf(buf, cap, "%.0f MiB", mib(bytes));
    } else {
        snprintf(buf, cap, "%.1f GiB", mib(bytes) / 1024.0);
    }
    return buf;
}

/* Experts `rank` builds over all layers (placement.layers gives a layer its own set, an
 * expert with replicas is built on each of its ranks), and its fewest and most in a layer. */
static int rank_expert_layers(const moe_config_t *cfg, int rank, int *lo, int *hi)
{
    int total = 0, a = INT32_MAX, b = 0;
    for (int l = 0; l < (int)cfg->num_layers; l++) {
        int n = moe_cfg_experts_of_rank_layer(cfg, l, rank, NULL);
        total += n;
        a = n < a ? n : a;
        b = n > b ? n : b;
    }
    *lo = a == INT32_MAX ? 0 : a;
    *hi = b;
    return total;
}

/* Largest count of expert-layers any rank (world_size ranks) builds, for the line rank 0
 * prints when it hosts no experts itself. */
static int max_expert_layers(const moe_config_t *cfg, int *most_in_layer)
{
    int most = 0, lo = 0, hi = 0;
    *most_in_layer = 0;
    for (int r = 0; r < cfg->world_size; r++) {
        int n = rank_expert_layers(cfg, r, &lo, &hi);
        most = n > most ? n : most;
        *most_in_layer = hi > *most_in_layer ? hi : *most_in_layer;
    }
    return most;
}

/* Say what rank 0 is about to build, and arm the progress lines when it is slow enough to
 * need them. */
static void progress_begin(const moe_config_t *cfg, int rank, bool random, size_t per_expert,
                           moe_dtype_t store, load_progress_t *p)
{
    memset(p, 0, sizeof(*p));
    const char *held = moe_weights_held_name(store);
    p->held_size = store == MOE_DTYPE_BF16    ? 2.0
                   : store == MOE_DTYPE_FP8   ? 1.0
                   : store == MOE_DTYPE_MXFP4 ? 0.5
                                              : 4.0;
    int lo = 0, hi = 0;
    int local_all = rank_expert_layers(cfg, rank, &lo, &hi);
    int most_in_layer = 0;
    int L = (int)cfg->num_layers, E = (int)cfg->num_experts;
    int most = max_expert_layers(cfg, &most_in_layer);
    const char *verb = random ? "generating" : "reading";
    const char *from = random ? "" : " from ";
    const char *file = random                                  ? ""
                       : strcmp(cfg->checkpoint, "none") != 0 ? cfg->checkpoint
                                                              : cfg->weights;
    size_t bytes = per_expert * (size_t)local_all;
    char per_layer[48];
    if (lo == hi) {
        snprintf(per_layer, sizeof(per_layer), "%d", hi);
    } else { /* placement.layers: a count per layer */
        snprintf(per_layer, sizeof(per_layer), "%d to %d", lo, hi);
    }
    char sz[32];
    if (rank != 0 || per_expert * (size_t)most < LOAD_REPORT_BYTES) {
        return;
    }
    if (local_all == 0) {
        MOE_INFO("weights: rank 0 hosts no experts; the expert ranks are %s theirs%s%s (up to %d "
                 "x %d layer%s, %s on one rank; %s, %.0f MiB per expert): no progress shown "
                 "from them",
                 verb, from, file, most_in_layer, L, L == 1 ? "" : "s",
                 size_text(sz, sizeof(sz), per_expert * (size_t)most), held, mib(per_expert));
        return;
    }
    if (lo == E && cfg->world_size <= 1) {
        MOE_INFO("weights: %s %d experts x %d layer%s%s%s (%s, %.0f MiB per expert, %s)", verb,
                 E, L, L == 1 ? "" : "s", from, file, held, mib(per_expert),
                 size_text(sz, sizeof(sz), bytes));
    } else {
        MOE_INFO("weights: rank 0 %s its %s of %d experts x %d layer%s%s%s (%s, %.0f MiB per "
                 "expert, %s); the other ranks build theirs at the same time, progress below "
                 "is rank 0's",
                 verb, per_layer, E, L, L == 1 ? "" : "s", from, file, held, mib(per_expert),
                 size_text(sz, sizeof(sz), bytes));
    }
    p->show = true;
    p->total = bytes;
    p->t0 = moe_now_ns();
    p->last_ns = p->t0;
}

/* MOE_TESTCTL_LOAD_DELAY (fault injection for tests/mpi/faults.sh): every piece of load
 * progress takes N ms more, asleep: a load slow and steady, on every rank with experts. */
static void test_load_delay(void)
{
    moe_testctl_sleep(MOE_TESTCTL_LOAD_DELAY, -1);
}

/* `bytes` more of this rank's experts built: counted for the watchdog (a rank that loads
 * answers its pings and is seen busy, not hung), and on rank 0 a line at most every
 * LOAD_REPORT_NS. */
static void progress_add(load_progress_t *p, size_t bytes)
{
    test_load_delay();
    moe_watchdog_progress((int64_t)bytes);
    if (p == NULL || !p->show) {
        return;
    }
    p->done += (size_t)((double)bytes / 4.0 * p->held_size);
    int64_t now = moe_now_ns();
    if (p->done >= p->total || now - p->last_ns < LOAD_REPORT_NS) {
        return;
    }
    p->last_ns = now;
    char a[32], b[32];
    MOE_INFO("weights: %s of %s (%d%%), %.0f s", size_text(a, sizeof(a), p->done),
             size_text(b, sizeof(b), p->total), (int)(100.0 * (double)p->done / (double)p->total),
             (double)(now - p->t0) * 1e-9);
}

/* moe_rng_fill_uniform in pieces, reporting each: values depend only on their index, so the
 * pieces make the same tensor as one call. */
static void fill_reported(float *dst, size_t n, uint64_t seed, uint64_t stream, float scale,
                          load_progress_t *p)
{
    for (size_t off = 0; off < n && !moe_stop_requested(); off += LOAD_PIECE_FLOATS) {
        size_t k = n - off < LOAD_PIECE_FLOATS ? n - off : LOAD_PIECE_FLOATS;
        moe_rng_fill_uniform(dst + off, k, seed, stream, off, scale);
        progress_add(p, k * sizeof(float));
    }
}

static void progress_end(const load_progress_t *p, size_t bytes, moe_status_t st)
{
    if (p->show && st == MOE_OK) {
        char sz[32];
        MOE_INFO("weights: done, %s in %.1f s", size_text(sz, sizeof(sz), bytes),
                 (double)(moe_now_ns() - p->t0) * 1e-9);
    }
}

/* What loading one rank's weights needs at every step. */
typedef struct load_ctx {
    const moe_config_t *cfg;
    const moe_family_t *fam;   /* routing and shared experts: cfg->family */
    const moe_family_t *names; /* the tensor names of the file (a single file may differ) */
    moe_ckpt_t *ck;            /* NULL: random weights */
    load_progress_t *prog;
    bool round_bf16;           /* F32-held expert values rounded to BF16 (model.dtype bf16) */
    moe_dtype_t store;         /* MOE_DTYPE_BF16: experts held in BF16; FP8, MXFP4: as stored */
    moe_dtype_t shared_store;  /* the shared experts': F32, BF16 or FP8 (as stored) */
    moe_expert_weights_t tmp;  /* F32 staging of one expert when held in BF16, or in F32
                                * when split into column shares */
    moe_expert_weights_t qfull; /* FP8 / MXFP4 split into column shares: the whole expert */
    uint8_t *codes;            /* FP8 / MXFP4: one tensor's codes as the file holds them */
    uint8_t *mx_scales;        /* MXFP4: one slab's e8m0 scales */
    float *fp8_scales;         /* FP8: one tensor's block scales */
    float *slab;               /* gpt-oss: one expert's fused slab in F32, [H, 2F], kept for
                                * the whole load (made and freed per expert it raised glibc's
                                * mmap threshold, and the plain BF16 copies then stayed in the
                                * heap after their reorder: a BF16 load peaked at 2x) */
    int64_t fp8_block[2];      /* FP8: the checkpoint's scale block */
    moe_error_t *err;
} load_ctx_t;

static moe_status_t alloc_floats(float **p, size_t n, moe_error_t *err)
{
    *p = malloc((n > 0 ? n : 1) * sizeof(float));
    if (*p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %zu MiB for weights",
                             n * sizeof(float) >> 20);
    }
    return MOE_OK;
}

/* A 2-D tensor; the checkpoint's message names the file, tensor and both shapes. */
static moe_status_t read_matrix(load_ctx_t *c, const char *name, int64_t rows, int64_t cols,
                                float *dst)
{
    int64_t shape[2] = {rows, cols};
    return moe_ckpt_read(c->ck, name, 2, shape, dst, c->err);
}

static moe_status_t read_vector(load_ctx_t *c, const char *name, int64_t n, float *dst)
{
    return moe_ckpt_read(c->ck, name, 1, &n, dst, c->err);
}

static int64_t up_rows(const moe_config_t *cfg, int64_t ffn)
{
    return cfg->activation == MOE_ACT_GELU ? ffn : 2 * ffn;
}

/* Uniform with unit-variance outputs for unit-variance inputs: a = sqrt(3 / fan_in). */
static void random_ffn(const moe_config_t *cfg, int layer, int id, int64_t F,
                       moe_expert_weights_t *ew, load_progress_t *prog)
{
    int64_t H = cfg->hidden_dim;
    float a_in = sqrtf(3.0f / (float)H), a_out = sqrtf(3.0f / (float)F);
    fill_reported(ew->w13, (size_t)(F * H), cfg->seed,
                  moe_rng_stream(MOE_RNG_W1, (uint64_t)layer, (uint64_t)id), a_in, prog);
    if (cfg->activation != MOE_ACT_GELU) {
        fill_reported(ew->w13 + F * H, (size_t)(F * H), cfg->seed,
                      moe_rng_stream(MOE_RNG_W3, (uint64_t)layer, (uint64_t)id), a_in, prog);
    }
    fill_reported(ew->w2, (size_t)(H * F), cfg->seed,
                  moe_rng_stream(MOE_RNG_W2, (uint64_t)layer, (uint64_t)id), a_out, prog);
    if (ew->b13 != NULL) {
        moe_rng_fill_uniform(ew->b13, (size_t)(2 * F), cfg->seed,
                             moe_rng_stream(MOE_RNG_BIAS, (uint64_t)layer, (uint64_t)id), 0,
                             0.1f);
        moe_rng_fill_uniform(ew->b2, (size_t)H, cfg->seed,
                             moe_rng_stream(MOE_RNG_BIAS, (uint64_t)layer, (uint64_t)id),
                             (uint64_t)(2 * F), 0.1f);
    }
}

/* W1/W3/W2 (gate/up/down) of one separate expert or shared expert. */
static moe_status_t file_ffn(load_ctx_t *c, const char *pattern, int decoder, int id, int64_t F,
                             moe_expert_weights_t *ew)
{
    const moe_config_t *cfg = c->cfg;
    const moe_family_t *nm = c->names;
    int64_t H = cfg->hidden_dim;
    size_t tensor_bytes = (size_t)(H * F) * sizeof(float);
    char name[512];
    /* Patterns take (layer, expert, proj) or, for shared experts (id < 0), (layer, proj). */
#define TNAME(proj)                                                                          \
    (id >= 0 ? snprintf(name, sizeof(name), pattern, decoder, id, proj)                      \
             : snprintf(name, sizeof(name), pattern, decoder, proj))
    TNAME(nm->proj_gate);
    moe_status_t st = read_matrix(c, name, F, H, ew->w13);
    if (st == MOE_OK && cfg->activation != MOE_ACT_GELU) {
        progress_add(c->prog, tensor_bytes);
        TNAME(nm->proj_up);
        st = read_matrix(c, name, F, H, ew->w13 + F * H);
    }
    if (st == MOE_OK) {
        progress_add(c->prog, tensor_bytes);
        TNAME(nm->proj_down);
        st = read_matrix(c, name, H, F, ew->w2);
    }
#undef TNAME
    if (st == MOE_OK) {
        progress_add(c->prog, tensor_bytes);
    }
    return st;
}

/* gpt-oss: expert e's slabs of the fused tensors, de-interleaved (gate = even columns of
 * gate_up_proj[e] [H, 2F], up = odd) and transposed into W13 [2F, H], W2 [H, F]; an MXFP4
 * release (gate_up_proj_blocks [E, 2F, H/32, 16]: rows, not columns) dequantised. */
/* gpt-oss expert ew's biases (F32 or BF16 in the file), gate_up's de-interleaved like its
 * weights ([gate_0, up_0, gate_1, ...] -> [gate | up]; tmp holds 2F floats); then the
 * expert's load progress. */
static moe_status_t fused_biases(load_ctx_t *c, int decoder, moe_expert_weights_t *ew,
                                 float *tmp)
{
    const moe_family_t *nm = c->names;
    int64_t E = c->cfg->num_experts, H = c->cfg->hidden_dim, F = c->cfg->ffn_dim, e = ew->id;
    int64_t gub[2] = {E, 2 * F}, dnb[2] = {E, H};
    char name[512];
    snprintf(name, sizeof(name), nm->fused_gate_up_bias, decoder);
    moe_status_t st = moe_ckpt_read_slab(c->ck, name, 2, gub, e, tmp, c->err);
    for (int64_t j = 0; st == MOE_OK && j < F; j++) {
        ew->b13[j] = tmp[2 * j];
        ew->b13[F + j] = tmp[2 * j + 1];
    }
    if (st == MOE_OK) {
        snprintf(name, sizeof(name), nm->fused_down_bias, decoder);
        st = moe_ckpt_read_slab(c->ck, name, 2, dnb, e, ew->b2, c->err);
    }
    if (st == MOE_OK) {
        progress_add(c->prog, (size_t)(3 * H * F) * sizeof(float));
    }
    return st;
}

static moe_status_t fused_expert(load_ctx_t *c, int decoder, moe_expert_weights_t *ew)
{
    const moe_config_t *cfg = c->cfg;
    const moe_family_t *nm = c->names;
    int64_t E = cfg->num_experts, H = cfg->hidden_dim, F = cfg->ffn_dim, e = ew->id;
    int64_t gu[3] = {E, H, 2 * F}, dn[3] = {E, F, H};
    char name[512];
    moe_status_t st = c->slab == NULL ? alloc_floats(&c->slab, (size_t)(H * 2 * F), c->err)
                                      : MOE_OK;
    float *tmp = c->slab;
    snprintf(name, sizeof(name), nm->fused_gate_up, decoder);
    bool mx = st == MOE_OK && moe_ckpt_is_mxfp4(c->ck, name);
    if (mx) { /* MXFP4 widened on request: [2F, H] rows interleaved, not transposed */
        int64_t mgu[3] = {E, 2 * F, H}, mdn[3] = {E, H, F};
        st = moe_ckpt_read_mxfp4_f32(c->ck, name, mgu, e, tmp, c->err);
        for (int64_t j = 0; st == MOE_OK && j < F; j++) {
            memcpy(ew->w13 + j * H, tmp + 2 * j * H, (size_t)H * sizeof(float));
            memcpy(ew->w13 + (F + j) * H, tmp + (2 * j + 1) * H, (size_t)H * sizeof(float));
        }
        snprintf(name, sizeof(name), nm->fused_down, decoder);
        if (st == MOE_OK) {
            st = moe_ckpt_read_mxfp4_f32(c->ck, name, mdn, e, ew->w2, c->err);
        }
    } else if (st == MOE_OK) {
        st = moe_ckpt_read_slab(c->ck, name, 3, gu, e, tmp, c->err);
    }
    for (int64_t h = 0; st == MOE_OK && !mx && h < H; h++) {
        for (int64_t j = 0; j < F; j++) {
            ew->w13[j * H + h] = tmp[h * 2 * F + 2 * j];
            ew->w13[(F + j) * H + h] = tmp[h * 2 * F + 2 * j + 1];
        }
    }
    if (st == MOE_OK && !mx) {
        snprintf(name, sizeof(name), nm->fused_down, decoder);
        st = moe_ckpt_read_slab(c->ck, name, 3, dn, e, tmp, c->err);
    }
    for (int64_t f = 0; st == MOE_OK && !mx && f < F; f++) {
        for (int64_t h = 0; h < H; h++) {
            ew->w2[h * F + f] = tmp[f * H + h];
        }
    }
    if (st == MOE_OK) {
        st = fused_biases(c, decoder, ew, tmp);
    }
    return st;
}

/* The F32 biases (gpt-oss: swiglu_oai only) and the clamp of expert ew, whichever type
 * holds its matrices. */
static moe_status_t alloc_ffn_biases(const moe_config_t *cfg, int64_t F, moe_expert_weights_t *ew,
                                     moe_error_t *err)
{
    int64_t H = cfg->hidden_dim;
    moe_status_t st = MOE_OK;
    if (cfg->activation == MOE_ACT_SWIGLU_OAI) {
        st = alloc_floats(&ew->b13, (size_t)(2 * F), err);
        if (st == MOE_OK) {
            st = alloc_floats(&ew->b2, (size_t)H, err);
        }
    }
    ew->limit = (float)cfg->swiglu_limit;
    return st;
}

/* Buffers of one FFN of inner width F (biases for gpt-oss). */
static moe_status_t alloc_ffn(const moe_config_t *cfg, int64_t F, moe_expert_weights_t *ew,
                              moe_error_t *err)
{
    int64_t H = cfg->hidden_dim;
    moe_status_t st = alloc_floats(&ew->w13, (size_t)(up_rows(cfg, F) * H), err);
    if (st == MOE_OK) {
        st = alloc_floats(&ew->w2, (size_t)(H * F), err);
    }
    return st == MOE_OK ? alloc_ffn_biases(cfg, F, ew, err) : st;
}

static void free_ffn(moe_expert_weights_t *ew)
{
    free(ew->w13);
    free(ew->w2);
    free(ew->w13_bf16);
    free(ew->w2_bf16);
    free(ew->w13_packed);
    free(ew->w2_packed);
    if (ew->q_pooled > 0 && ew->q_owner) { /* its own region */
        free(ew->w13_q);
    } else if (ew->q_pooled > 0) { /* a piece of its layer's q_arena: its pages back */
        moe_release_pages(ew->q_region, ew->q_region_bytes, ew->w13_q, ew->q_pooled);
    } else {
        free(ew->w13_q);
        free(ew->w2_q);
        free(ew->w13_s);
        free(ew->w2_s);
    }
    free(ew->b13);
    free(ew->b2);
}

static void round_bf16(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        v[i] = moe_bf16_to_f32(moe_f32_to_bf16(v[i]));
    }
}

/* BF16 buffers of an FFN of inner width F and its F32 biases (held in BF16: the FFN is
 * staged in F32 first). */
static moe_status_t alloc_ffn_bf16(const moe_config_t *cfg, int64_t F, moe_expert_weights_t *ew,
                                   moe_error_t *err)
{
    int64_t H = cfg->hidden_dim;
    size_t n13 = (size_t)(up_rows(cfg, F) * H), n2 = (size_t)(H * F);
    ew->w13_bf16 = malloc(n13 * sizeof(uint16_t));
    ew->w2_bf16 = malloc(n2 * sizeof(uint16_t));
    moe_status_t st = ew->w13_bf16 == NULL || ew->w2_bf16 == NULL
                          ? moe_error_set(err, MOE_ERR_NO_MEMORY,
                                          "cannot allocate %zu MiB for BF16 weights",
                                          (n13 + n2) * sizeof(uint16_t) >> 20)
                          : MOE_OK;
    return st == MOE_OK ? alloc_ffn_biases(cfg, F, ew, err) : st;
}

/* A staged F32 FFN of inner width F into ew's BF16 buffers (biases stay F32). */
static void stage_to_bf16(const moe_config_t *cfg, int64_t F, const moe_expert_weights_t *tmp,
                          moe_expert_weights_t *ew)
{
    int64_t H = cfg->hidden_dim;
    moe_bf16_from_f32_n(ew->w13_bf16, tmp->w13, (size_t)(up_rows(cfg, F) * H));
    moe_bf16_from_f32_n(ew->w2_bf16, tmp->w2, (size_t)(H * F));
    if (ew->b13 != NULL) {
        memcpy(ew->b13, tmp->b13, (size_t)(2 * F) * sizeof(float));
        memcpy(ew->b2, tmp->b2, (size_t)H * sizeof(float));
    }
}

/* Bytes of the codes and of the scales of one matrix of n outputs and k inputs held as
 * `store` (FP8 or MXFP4) in the blocked layout (weights.h); sk: FP8's scale block inputs. */
static void quant_sizes(moe_dtype_t store, int64_t n, int64_t k, int64_t sk, size_t *codes,
                        size_t *scales)
{
    int64_t np = moe_blk_pad(n, MOE_BLK_N), kp = moe_blk_pad(k, MOE_BLK_K);
    if (store == MOE_DTYPE_MXFP4) {
        *codes = (size_t)(np * kp / 2);
        *scales = (size_t)(np * (kp / MOE_MXFP4_BLOCK));
    } else {
        *codes = (size_t)(np * kp);
        *scales = (size_t)(np * ((kp + sk - 1) / sk)) * sizeof(float);
    }
}

/* Bytes of an FFN of inner width F held as `store` (FP8 or MXFP4): b[0..3] = W13's codes and
 * scales, W2's codes and scales. */
static void ffn_quant_bytes(const moe_config_t *cfg, moe_dtype_t store, int64_t sk, int64_t F,
                            size_t b[4])
{
    int64_t H = cfg->hidden_dim;
    quant_sizes(store, up_rows(cfg, F), H, sk, &b[0], &b[1]);
    quant_sizes(store, H, F, sk, &b[2], &b[3]);
}

/* n FFNs of inner width F held as stored, carved from one region (moe_weights_quant_arena). */
static moe_status_t quant_arena(const moe_config_t *cfg, moe_dtype_t store, int64_t sk,
                                int64_t F, int n, moe_expert_weights_t *ew, void **arena,
                                moe_error_t *err)
{
    size_t b[4], off[5] = {0};
    ffn_quant_bytes(cfg, store, sk, F, b);
    for (int i = 0; i < 4; i++) {
        off[i + 1] = off[i] + (b[i] + 63) / 64 * 64; /* each piece 64-byte aligned */
    }
    size_t per = off[4];
    *arena = NULL;
    if (n <= 0) {
        return MOE_OK;
    }
    uint8_t *r = moe_alloc_large(per * (size_t)n);
    if (r == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %zu MiB for %s weights",
                             per * (size_t)n >> 20, moe_weights_held_name(store));
    }
    memset(r, 0, per * (size_t)n); /* codes: zero is the padding; FP8's padding scales 0 */
    for (int e = 0; e < n; e++) {
        uint8_t *base = r + per * (size_t)e;
        ew[e].w13_q = base;
        ew[e].w13_s = base + off[1];
        ew[e].w2_q = base + off[2];
        ew[e].w2_s = base + off[3];
        ew[e].q_pooled = per;
        ew[e].q_region = r;
        ew[e].q_region_bytes = per * (size_t)n;
        if (store == MOE_DTYPE_MXFP4) { /* MXFP4's padding rows: scale 2^0 */
            memset(ew[e].w13_s, 127, b[1]);
            memset(ew[e].w2_s, 127, b[3]);
        }
    }
    *arena = r;
    return MOE_OK;
}

moe_status_t moe_weights_quant_arena(const moe_config_t *cfg, moe_dtype_t store, int64_t sk,
                                     int n, moe_expert_weights_t *ew, void **arena,
                                     moe_error_t *err)
{
    return quant_arena(cfg, store, sk, moe_cfg_expert_ffn(cfg), n, ew, arena, err);
}

/* The matrices of an FFN of inner width F held as stored (store FP8 or MXFP4), in one region
 * of its own (q_owner), and its F32 biases. */
static moe_status_t alloc_ffn_quant(const moe_config_t *cfg, moe_dtype_t store, int64_t sk,
                                    int64_t F, moe_expert_weights_t *ew, moe_error_t *err)
{
    void *region = NULL;
    moe_status_t st = quant_arena(cfg, store, sk, F, 1, ew, &region, err);
    ew->q_owner = region != NULL;
    return st == MOE_OK ? alloc_ffn_biases(cfg, F, ew, err) : st;
}

/* Inputs [k0, k0 + K) of row sn of a blocked FP8 or MXFP4 matrix of kps (padded) inputs,
 * with their scales, into inputs [0, K) of row dn of one of kpd: k0 a whole number of scale
 * blocks (sk inputs; MXFP4's 32). */
static void slice_quant_row(moe_dtype_t store, int64_t sk, const uint8_t *sq, const void *ss,
                            int64_t sn, int64_t kps, uint8_t *dq, void *ds, int64_t dn,
                            int64_t kpd, int64_t k0, int64_t K)
{
    bool mx = store == MOE_DTYPE_MXFP4;
    for (int64_t k = 0; k < K; k++) {
        if (mx) {
            moe_mx_put(dq, dn, k, kpd, moe_mx_get(sq, sn, k0 + k, kps));
        } else {
            dq[moe_blk_index(dn, k, kpd)] = sq[moe_blk_index(sn, k0 + k, kps)];
        }
    }
    int64_t bs = mx ? MOE_MXFP4_BLOCK : sk;
    int64_t kss = (kps + bs - 1) / bs, ksd = (kpd + bs - 1) / bs;
    for (int64_t j = 0; j < ksd; j++) {
        int64_t from = moe_blk_scale_index(sn, k0 / bs + j, kss);
        int64_t to = moe_blk_scale_index(dn, j, ksd);
        if (mx) {
            ((uint8_t *)ds)[to] = ((const uint8_t *)ss)[from];
        } else {
            ((float *)ds)[to] = ((const float *)ss)[from];
        }
    }
}

/* Column share [f0, f0 + Fl) of a loaded expert of inner width model.ffn_dim (full: F32, or
 * FP8 / MXFP4 blocked as c->store) into ew, held as c->store (F32 narrowed to BF16 for
 * BF16): W13's gate rows f0.. and up rows F + f0.., W2's inputs f0.., the gate_up biases
 * alike; the down bias on the first share only, zero on the others (the shares' outputs
 * add up in the merge). */
static void slice_ffn(const load_ctx_t *c, const moe_expert_weights_t *full, int64_t f0,
                      int64_t Fl, moe_expert_weights_t *ew)
{
    const moe_config_t *cfg = c->cfg;
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim, sk = c->fp8_block[1];
    bool quant = c->store == MOE_DTYPE_FP8 || c->store == MOE_DTYPE_MXFP4;
    bool bf16 = c->store == MOE_DTYPE_BF16;
    int64_t kh = moe_blk_pad(H, MOE_BLK_K), kf = moe_blk_pad(F, MOE_BLK_K);
    int64_t kl = moe_blk_pad(Fl, MOE_BLK_K);
    for (int64_t n = 0; n < up_rows(cfg, Fl); n++) {
        int64_t from = (n / Fl) * F + f0 + n % Fl; /* gate rows, then up rows */
        if (quant) {
            slice_quant_row(c->store, sk, full->w13_q, full->w13_s, from, kh, ew->w13_q,
                            ew->w13_s, n, kh, 0, H);
        } else if (bf16) {
            moe_bf16_from_f32_n(ew->w13_bf16 + n * H, full->w13 + from * H, (size_t)H);
        } else {
            memcpy(ew->w13 + n * H, full->w13 + from * H, (size_t)H * sizeof(float));
        }
    }
    for (int64_t h = 0; h < H; h++) {
        if (quant) {
            slice_quant_row(c->store, sk, full->w2_q, full->w2_s, h, kf, ew->w2_q, ew->w2_s, h,
                            kl, f0, Fl);
        } else if (bf16) {
            moe_bf16_from_f32_n(ew->w2_bf16 + h * Fl, full->w2 + h * F + f0, (size_t)Fl);
        } else {
            memcpy(ew->w2 + h * Fl, full->w2 + h * F + f0, (size_t)Fl * sizeof(float));
        }
    }
    if (ew->b13 != NULL) {
        memcpy(ew->b13, full->b13 + f0, (size_t)Fl * sizeof(float));
        memcpy(ew->b13 + Fl, full->b13 + F + f0, (size_t)Fl * sizeof(float));
        for (int64_t h = 0; h < H; h++) {
            ew->b2[h] = f0 == 0 ? full->b2[h] : 0.0f;
        }
    }
}

/* Output rows [row0, row0 + rows) of a blocked FP8 matrix of kp (padded) inputs from a
 * checkpoint tensor: codes [rows, cols] and its block scales [ceil(rows / b0)][ceil(cols /
 * b1)], each output row taking the scales of its block row. */
static void pack_fp8(uint8_t *q, float *sc, int64_t kp, int64_t row0, int64_t rows,
                     int64_t cols, const uint8_t *codes, const float *scales,
                     const int64_t *block)
{
    int64_t ks = (kp + block[1] - 1) / block[1], scols = (cols + block[1] - 1) / block[1];
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = row0 + r;
        for (int64_t k = 0; k < cols; k++) {
            q[moe_blk_index(n, k, kp)] = codes[r * cols + k];
        }
        for (int64_t j = 0; j < scols; j++) {
            sc[moe_blk_scale_index(n, j, ks)] = scales[(r / block[0]) * scols + j];
        }
    }
}

/* An MXFP4 slab [rows, cols] (blocks: cols / 2 bytes a row, scales: cols / 32) into a blocked
 * matrix of kp = cols inputs; slab row r is output row r, or with gate_up_f > 0 (gpt-oss's
 * fused gate_up_proj, gate and up interleaved) row r / 2 (even r: the gate) or
 * gate_up_f + r / 2 (odd r: the up projection). Byte i of a row holds inputs 2i (low nibble)
 * and 2i + 1, which the blocked layout keeps in two bytes (weights.h). */
static void pack_mxfp4(uint8_t *q, uint8_t *sc, int64_t rows, int64_t cols,
                       const uint8_t *blocks, const uint8_t *scales, int64_t gate_up_f)
{
    int64_t kp = cols, ks = cols / MOE_MXFP4_BLOCK, bpr = cols / 2;
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = gate_up_f > 0 ? (r % 2 == 0 ? r / 2 : gate_up_f + r / 2) : r;
        for (int64_t i = 0; i < bpr; i++) {
            uint8_t b = blocks[r * bpr + i];
            moe_mx_put(q, n, 2 * i, kp, b & 0xF);
            moe_mx_put(q, n, 2 * i + 1, kp, b >> 4);
        }
        for (int64_t j = 0; j < ks; j++) {
            sc[moe_blk_scale_index(n, j, ks)] = scales[r * ks + j];
        }
    }
}

void moe_weights_quant_bytes(const moe_config_t *cfg, moe_dtype_t store, int64_t sk,
                             size_t bytes[4])
{
    ffn_quant_bytes(cfg, store, sk, moe_cfg_expert_ffn(cfg), bytes);
}

/* An FP8 FFN of inner width F (gate, up, down of a separate expert, or with id < 0 the
 * shared experts: pattern takes (layer, proj) then) read as stored into ew's blocked codes. */
static moe_status_t fp8_ffn(load_ctx_t *c, const char *pattern, int decoder, int id, int64_t F,
                            moe_expert_weights_t *ew)
{
    const moe_config_t *cfg = c->cfg;
    const moe_family_t *nm = c->names;
    int64_t H = cfg->hidden_dim;
    int64_t kp13 = moe_blk_pad(H, MOE_BLK_K), kp2 = moe_blk_pad(F, MOE_BLK_K);
    const char *proj[3] = {nm->proj_gate, nm->proj_up, nm->proj_down};
    moe_status_t st = MOE_OK;
    char name[512];
    for (int p = 0; p < 3 && st == MOE_OK; p++) {
        if (p == 1 && cfg->activation == MOE_ACT_GELU) {
            continue; /* gelu: W13 is W1 only */
        }
        int64_t rows = p == 2 ? H : F, cols = p == 2 ? F : H;
        if (id >= 0) {
            snprintf(name, sizeof(name), pattern, decoder, id, proj[p]);
        } else {
            snprintf(name, sizeof(name), pattern, decoder, proj[p]);
        }
        st = moe_ckpt_read_fp8(c->ck, name, rows, cols, c->codes, c->fp8_scales, c->err);
        if (st == MOE_OK && p < 2) {
            pack_fp8(ew->w13_q, ew->w13_s, kp13, p * F, rows, cols, c->codes, c->fp8_scales,
                     c->fp8_block);
        } else if (st == MOE_OK) {
            pack_fp8(ew->w2_q, ew->w2_s, kp2, 0, rows, cols, c->codes, c->fp8_scales,
                     c->fp8_block);
        }
        if (st == MOE_OK) {
            progress_add(c->prog, (size_t)(rows * cols) * sizeof(float));
        }
    }
    return st;
}

/* gpt-oss MXFP4 expert e: its slabs of gate_up_proj_blocks/_scales [E, 2F, H/32, 16] (gate and
 * up rows interleaved) and down_proj_blocks/_scales [E, H, F/32, 16], as stored, into ew's
 * blocked codes; the biases (BF16 in the release) in F32, de-interleaved like the BF16 form's. */
static moe_status_t mxfp4_expert(load_ctx_t *c, int decoder, moe_expert_weights_t *ew)
{
    const moe_config_t *cfg = c->cfg;
    const moe_family_t *nm = c->names;
    int64_t E = cfg->num_experts, H = cfg->hidden_dim, F = cfg->ffn_dim, e = ew->id;
    int64_t gu[3] = {E, 2 * F, H}, dn[3] = {E, H, F};
    char name[512];
    float *tmp = NULL;
    snprintf(name, sizeof(name), nm->fused_gate_up, decoder);
    moe_status_t st = moe_ckpt_read_mxfp4_slab(c->ck, name, gu, e, c->codes, c->mx_scales,
                                               c->err);
    if (st == MOE_OK) {
        pack_mxfp4(ew->w13_q, ew->w13_s, 2 * F, H, c->codes, c->mx_scales, F);
        snprintf(name, sizeof(name), nm->fused_down, decoder);
        st = moe_ckpt_read_mxfp4_slab(c->ck, name, dn, e, c->codes, c->mx_scales, c->err);
    }
    if (st == MOE_OK) {
        pack_mxfp4(ew->w2_q, ew->w2_s, H, F, c->codes, c->mx_scales, 0);
        st = alloc_floats(&tmp, (size_t)(2 * F), c->err);
    }
    if (st == MOE_OK) {
        st = fused_biases(c, decoder, ew, tmp);
    }
    free(tmp);
    return st;
}

/* Staging for one tensor read as stored (FP8 codes and scales, or an MXFP4 slab) of an FFN
 * of inner width up to F. */
static moe_status_t alloc_quant_staging(load_ctx_t *c, int64_t F)
{
    const moe_config_t *cfg = c->cfg;
    int64_t H = cfg->hidden_dim, b0 = c->fp8_block[0], b1 = c->fp8_block[1];
    size_t sc = (size_t)(((F + b0 - 1) / b0) * ((H + b1 - 1) / b1));
    size_t sc2 = (size_t)(((H + b0 - 1) / b0) * ((F + b1 - 1) / b1));
    c->codes = malloc((size_t)(F * H) + 1);
    c->fp8_scales = malloc((sc > sc2 ? sc : sc2) * sizeof(float) + 1);
    c->mx_scales = malloc((size_t)(2 * F * H / MOE_MXFP4_BLOCK) + 1);
    if (c->codes == NULL || c->fp8_scales == NULL || c->mx_scales == NULL) {
        return moe_error_set(c->err, MOE_ERR_NO_MEMORY, "cannot allocate the staging of one "
                             "expert tensor");
    }
    return MOE_OK;
}

moe_status_t moe_weights_expert_alloc(const moe_config_t *cfg, int32_t id, moe_dtype_t store,
                                      int64_t sk, moe_expert_weights_t *ew, moe_error_t *err)
{
    memset(ew, 0, sizeof(*ew));
    ew->id = id;
    int64_t F = moe_cfg_expert_ffn(cfg);
    moe_status_t st = store == MOE_DTYPE_BF16 ? alloc_ffn_bf16(cfg, F, ew, err)
                      : store == MOE_DTYPE_FP8 || store == MOE_DTYPE_MXFP4
                          ? alloc_ffn_quant(cfg, store, sk, F, ew, err)
                          : alloc_ffn(cfg, F, ew, err);
    if (st != MOE_OK) {
        free_ffn(ew);
        memset(ew, 0, sizeof(*ew));
    }
    return st;
}

void moe_weights_expert_free(moe_expert_weights_t *ew)
{
    if (ew != NULL) {
        free_ffn(ew);
        memset(ew, 0, sizeof(*ew));
    }
}

/* The gate [E, H] and its bias [E] when the family has one. */
static moe_status_t load_gate(load_ctx_t *c, int layer, moe_layer_weights_t *lw)
{
    const moe_config_t *cfg = c->cfg;
    int64_t E = cfg->num_experts, H = cfg->hidden_dim;
    int decoder = cfg->layer_ids[layer];
    char name[512];
    moe_status_t st = alloc_floats(&lw->gate, (size_t)(E * H), c->err);
    if (st == MOE_OK && c->fam->gate_bias != NULL) {
        st = alloc_floats(&lw->gate_bias, (size_t)E, c->err);
    }
    if (st != MOE_OK || c->ck == NULL) {
        if (st == MOE_OK) {
            moe_rng_fill_uniform(lw->gate, (size_t)(E * H), cfg->seed,
                                 moe_rng_stream(MOE_RNG_GATE, (uint64_t)layer, 0), 0,
                                 sqrtf(3.0f / (float)H));
        }
        if (st == MOE_OK && lw->gate_bias != NULL) {
            moe_rng_fill_uniform(lw->gate_bias, (size_t)E, cfg->seed,
                                 moe_rng_stream(MOE_RNG_BIAS, (uint64_t)layer, (uint64_t)E + 1),
                                 0, c->fam->route == MOE_ROUTE_GPT_OSS ? 0.5f : 0.1f);
        }
        return st;
    }
    snprintf(name, sizeof(name), c->names->gate, decoder);
    st = read_matrix(c, name, E, H, lw->gate);
    if (st == MOE_OK && lw->gate_bias != NULL) {
        snprintf(name, sizeof(name), c->names->gate_bias, decoder);
        st = read_vector(c, name, E, lw->gate_bias);
    }
    return st;
}

/* Shared experts (all n_shared_experts as one FFN of width shared_ffn) held as
 * c->shared_store (F32; BF16, staged in F32 first; FP8 as stored) and Qwen2-MoE's
 * shared_expert_gate [1, H] (F32). */
static moe_status_t load_shared(load_ctx_t *c, int layer, int64_t Fs, moe_layer_weights_t *lw)
{
    const moe_config_t *cfg = c->cfg;
    int64_t H = cfg->hidden_dim;
    int decoder = cfg->layer_ids[layer];
    char name[512];
    bool bf16 = c->shared_store == MOE_DTYPE_BF16, fp8 = c->shared_store == MOE_DTYPE_FP8;
    moe_expert_weights_t staged = {.id = -1};
    moe_expert_weights_t *f = bf16 ? &staged : &lw->shared; /* where the F32 values go */
    lw->has_shared = true;
    lw->shared.id = -1;
    moe_status_t st = fp8 ? alloc_ffn_quant(cfg, MOE_DTYPE_FP8, c->fp8_block[1], Fs, &lw->shared,
                                            c->err)
                          : alloc_ffn(cfg, Fs, f, c->err);
    if (st == MOE_OK && bf16) {
        st = alloc_ffn_bf16(cfg, Fs, &lw->shared, c->err);
    }
    if (st == MOE_OK && c->fam->shared == MOE_SHARED_GATED) {
        st = alloc_floats(&lw->shared_gate, (size_t)H, c->err);
    }
    if (st == MOE_OK && c->ck == NULL) {
        random_ffn(cfg, layer, (int)cfg->num_experts, Fs, f, NULL);
        if (lw->shared_gate != NULL) {
            moe_rng_fill_uniform(lw->shared_gate, (size_t)H, cfg->seed,
                                 moe_rng_stream(MOE_RNG_GATE, (uint64_t)layer, 1), 0,
                                 sqrtf(3.0f / (float)H));
        }
    } else if (st == MOE_OK) {
        st = fp8 ? fp8_ffn(c, c->names->shared_expert, decoder, -1, Fs, &lw->shared)
                 : file_ffn(c, c->names->shared_expert, decoder, -1, Fs, f);
        if (st == MOE_OK && lw->shared_gate != NULL) {
            snprintf(name, sizeof(name), c->names->shared_gate, decoder);
            st = read_matrix(c, name, 1, H, lw->shared_gate);
        }
    }
    if (st == MOE_OK && bf16) {
        stage_to_bf16(cfg, Fs, &staged, &lw->shared);
    }
    free_ffn(&staged);
    return st;
}

static moe_status_t load_layer(load_ctx_t *c, int rank, bool routes, int64_t Fs, int layer,
                               moe_layer_weights_t *lw)
{
    const moe_config_t *cfg = c->cfg;
    moe_status_t st = routes ? load_gate(c, layer, lw) : MOE_OK;
    if (st == MOE_OK && routes && Fs > 0) {
        st = load_shared(c, layer, Fs, lw);
    }
    int32_t ids[MOE_MAX_EXPERTS];
    int n = moe_cfg_experts_of_rank_layer(cfg, layer, rank, ids); /* placement.layers aware */
    lw->experts = calloc((size_t)(n > 0 ? n : 1), sizeof(*lw->experts));
    if (st == MOE_OK && lw->experts == NULL) {
        st = moe_error_set(c->err, MOE_ERR_NO_MEMORY, "cannot allocate expert table");
    }
    bool bf16 = c->store == MOE_DTYPE_BF16;
    bool quant = c->store == MOE_DTYPE_FP8 || c->store == MOE_DTYPE_MXFP4;
    int64_t F = cfg->ffn_dim, Fl = moe_cfg_expert_ffn(cfg); /* Fl < F: column shares */
    if (st == MOE_OK && quant) { /* the layer's experts held as stored: one region */
        st = moe_weights_quant_arena(cfg, c->store, c->fp8_block[1], n, lw->experts,
                                     &lw->q_arena, c->err);
    }
    for (int i = 0; st == MOE_OK && i < n; i++) {
        moe_expert_weights_t *ew = &lw->experts[i];
        ew->id = ids[i];
        lw->num_local = i + 1;
        /* Held in BF16: built in F32 in c->tmp, then narrowed (one expert's F32 at a time).
         * A column share: the whole expert built in c->tmp (F32) or c->qfull, then cut. */
        moe_expert_weights_t *f = Fl < F ? (quant ? &c->qfull : &c->tmp) : bf16 ? &c->tmp : ew;
        f->id = ew->id;
        st = quant  ? alloc_ffn_biases(cfg, Fl, ew, c->err) /* the codes: q_arena */
             : bf16 ? alloc_ffn_bf16(cfg, Fl, ew, c->err)
                    : alloc_ffn(cfg, Fl, ew, c->err);
        if (st == MOE_OK && quant) { /* held as stored: read straight into its layout */
            st = c->store == MOE_DTYPE_FP8
                     ? fp8_ffn(c, c->names->expert, cfg->layer_ids[layer], ew->id, F, f)
                     : mxfp4_expert(c, cfg->layer_ids[layer], f);
        } else if (st == MOE_OK && c->ck == NULL) {
            random_ffn(cfg, layer, ew->id, cfg->ffn_dim, f, c->prog);
        } else if (st == MOE_OK && c->names->expert == NULL) {
            st = fused_expert(c, cfg->layer_ids[layer], f);
        } else if (st == MOE_OK) {
            st = file_ffn(c, c->names->expert, cfg->layer_ids[layer], ew->id, cfg->ffn_dim, f);
        }
        if (st == MOE_OK && Fl < F) {
            slice_ffn(c, f, moe_cfg_column_first(cfg, layer, ew->id, rank), Fl, ew);
        } else if (st == MOE_OK && bf16) {
            stage_to_bf16(cfg, F, &c->tmp, ew);
        }
        if (st == MOE_OK && !bf16 && !quant && c->round_bf16) {
            /* F32 compute on weights asked as BF16: the values the BF16 path would hold */
            round_bf16(ew->w13, (size_t)(up_rows(cfg, Fl) * cfg->hidden_dim));
            round_bf16(ew->w2, (size_t)(cfg->hidden_dim * Fl));
        }
        if (st == MOE_OK && moe_stop_requested()) {
            /* Ctrl-C while a large model builds: stop here, not after every expert */
            st = moe_error_set(c->err, MOE_ERR_INTERRUPTED, "stopped while building the weights");
        }
    }
    return st;
}

/* The tensor names of the file: the family's, or (one model.weights file, written before
 * model.family existed) the first family whose gate tensor the file holds. */
static moe_status_t pick_names(load_ctx_t *c)
{
    char name[512];
    int decoder = c->cfg->layer_ids[0];
    snprintf(name, sizeof(name), c->fam->gate, decoder);
    if (moe_ckpt_has(c->ck, name) || strcmp(c->cfg->checkpoint, "none") != 0) {
        c->names = c->fam;
        return MOE_OK;
    }
    for (int i = 0; i < moe_family_count(); i++) {
        const moe_family_t *f = moe_family_at(i);
        snprintf(name, sizeof(name), f->gate, decoder);
        if (f->expert != NULL && moe_ckpt_has(c->ck, name)) {
            c->names = f;
            return MOE_OK;
        }
    }
    snprintf(name, sizeof(name), c->fam->gate, decoder);
    return moe_error_set(c->err, MOE_ERR_WEIGHTS,
                         "%s: no MoE gate tensor for layer %d: looked for '%s' (model.family "
                         "%s) and every other family's; check model.first_layer (now %lld)",
                         moe_ckpt_name(c->ck), decoder, name, moe_cfg_family_name(c->fam->id),
                         (long long)c->cfg->first_layer);
}

/* Bytes of one FFN of inner width F as held here (matrices of elem bytes, F32 biases). */
static size_t ffn_bytes(const moe_config_t *cfg, int64_t F, size_t elem)
{
    int64_t H = cfg->hidden_dim;
    size_t n = (size_t)((up_rows(cfg, F) + F) * H) * elem;
    if (cfg->activation == MOE_ACT_SWIGLU_OAI) {
        n += (size_t)(2 * F + H) * sizeof(float);
    }
    return n;
}

static int64_t shared_ffn(const moe_config_t *cfg, const moe_family_t *fam)
{
    if (fam->shared == MOE_SHARED_NONE || cfg->n_shared_experts == 0) {
        return 0;
    }
    return cfg->shared_ffn_dim > 0 ? cfg->shared_ffn_dim : cfg->ffn_dim * cfg->n_shared_experts;
}

int64_t moe_weights_shared_ffn(const moe_config_t *cfg)
{
    return shared_ffn(cfg, moe_family_get(cfg->family));
}

/* Bytes of one FFN of inner width F held as `store` (FP8, MXFP4: the blocked codes and
 * scales, sk: FP8's scale block inputs), F32 biases included. */
static double held_ffn_bytes(const moe_config_t *cfg, moe_dtype_t store, int64_t sk, int64_t F)
{
    if (store != MOE_DTYPE_FP8 && store != MOE_DTYPE_MXFP4) {
        return (double)ffn_bytes(cfg, F, store == MOE_DTYPE_BF16 ? sizeof(uint16_t)
                                                                 : sizeof(float));
    }
    int64_t H = cfg->hidden_dim;
    size_t q[4];
    ffn_quant_bytes(cfg, store, sk, F, q);
    double b = (double)q[0] + (double)q[1] + (double)q[2] + (double)q[3];
    return cfg->activation == MOE_ACT_SWIGLU_OAI ? b + (double)(2 * F + H) * sizeof(float) : b;
}

static double held_expert_bytes(const moe_config_t *cfg, moe_dtype_t store, int64_t sk)
{
    return held_ffn_bytes(cfg, store, sk, moe_cfg_expert_ffn(cfg));
}

void moe_weights_bytes(const moe_config_t *cfg, moe_dtype_t store, moe_dtype_t shared_store,
                       double *per_expert, double *routing)
{
    /* as moe_weights_load counts them, in double: no size_t product to overflow */
    int64_t Fs = shared_ffn(cfg, moe_family_get(cfg->family));
    double gate = (double)cfg->num_experts * (double)(cfg->hidden_dim + 1) * sizeof(float);
    double shared = Fs > 0 ? held_ffn_bytes(cfg, shared_store, 128, Fs) +
                                 (double)cfg->hidden_dim * sizeof(float)
                           : 0.0;
    *per_expert = held_expert_bytes(cfg, store, 128); /* FP8: DeepSeek's 128-input blocks */
    *routing = (gate + shared) * (double)cfg->num_layers;
}

/* skew as a log-prior: added to the gpt-oss router bias, else the router's own bias. */
static moe_status_t apply_skew(const moe_config_t *cfg, const moe_family_t *fam,
                               moe_weights_t *w, moe_error_t *err)
{
    int E = (int)cfg->num_experts;
    moe_status_t st = alloc_floats(&w->gate_bias, (size_t)E, err);
    if (st != MOE_OK) {
        return st;
    }
    moe_weights_skew_bias(w->gate_bias, E, cfg->routing_skew);
    for (int l = 0; fam->route == MOE_ROUTE_GPT_OSS && l < w->num_layers; l++) {
        for (int e = 0; w->layers[l].gate_bias != NULL && e < E; e++) {
            w->layers[l].gate_bias[e] += w->gate_bias[e];
        }
    }
    return MOE_OK;
}

static void describe(const moe_config_t *cfg, const load_ctx_t *c, moe_weights_t *w)
{
    if (c->ck == NULL) {
        snprintf(w->naming, sizeof(w->naming), "%s (random)",
                 moe_cfg_family_name(c->fam->id));
        snprintf(w->dtype, sizeof(w->dtype), "random");
        return;
    }
    snprintf(w->dtype, sizeof(w->dtype), "%s", moe_ckpt_dtypes(c->ck));
    if (c->names == c->fam) {
        snprintf(w->naming, sizeof(w->naming), "%s (%s)", moe_cfg_family_name(c->fam->id),
                 w->dtype);
    } else {
        snprintf(w->naming, sizeof(w->naming), "%s names, %s routing (%s)",
                 moe_cfg_family_name(c->names->id), moe_cfg_family_name(c->fam->id), w->dtype);
    }
    (void)cfg;
}

/* model.dtype auto: what a file dtype is held as: FP8 and MXFP4 as stored on the CPU,
 * dequantised to BF16 on cuda (its GEMMs take BF16). */
static moe_dtype_t dtype_of_file(const char *name, bool cuda)
{
    if (strcmp(name, "F8_E4M3") == 0 || strcmp(name, "MXFP4") == 0) {
        return cuda ? MOE_DTYPE_BF16 : name[0] == 'F' ? MOE_DTYPE_FP8 : MOE_DTYPE_MXFP4;
    }
    if (strcmp(name, "BF16") == 0) {
        return MOE_DTYPE_BF16;
    }
    return strcmp(name, "F16") == 0 ? MOE_DTYPE_F16 : MOE_DTYPE_F32;
}

/* The type `rank`'s first expert tensor of layer 0 (its gate projection) is held as. */
/* With id < 0: the shared experts' gate projection of layer 0 (F32 where the file's names
 * have none). */
static moe_status_t first_expert_dtype(const moe_config_t *cfg, int32_t id, moe_dtype_t *out,
                                       moe_error_t *err)
{
    load_ctx_t c = {.cfg = cfg, .fam = moe_family_get(cfg->family), .err = err};
    const char *dn = "F32";
    char name[512];
    moe_status_t st = moe_ckpt_open(cfg, &c.ck, err);
    if (st == MOE_OK) {
        st = pick_names(&c);
    }
    if (st == MOE_OK && id < 0) {
        if (c.names->shared_expert != NULL) {
            snprintf(name, sizeof(name), c.names->shared_expert, cfg->layer_ids[0],
                     c.names->proj_gate);
            st = moe_ckpt_dtype_of(c.ck, name, &dn, err);
        }
    } else if (st == MOE_OK) {
        if (c.names->expert != NULL) {
            snprintf(name, sizeof(name), c.names->expert, cfg->layer_ids[0], id,
                     c.names->proj_gate);
        } else {
            snprintf(name, sizeof(name), c.names->fused_gate_up, cfg->layer_ids[0]);
        }
        if (c.names->expert == NULL && moe_ckpt_is_mxfp4(c.ck, name)) {
            dn = "MXFP4"; /* gpt-oss's release: gate_up_proj_blocks and _scales */
        } else {
            st = moe_ckpt_dtype_of(c.ck, name, &dn, err);
        }
    }
    if (st == MOE_OK) {
        *out = dtype_of_file(dn, cfg->device == MOE_DEVICE_CUDA);
    }
    moe_ckpt_close(c.ck);
    return st;
}

void moe_weights_quant_note(const moe_config_t *cfg, moe_dtype_t held, char *buf, size_t n)
{
    moe_ckpt_t *ck = NULL;
    int64_t block[2] = {128, 128};
    if (held == MOE_DTYPE_MXFP4) {
        snprintf(buf, n, "e2m1, e8m0 scales per %d values", MOE_MXFP4_BLOCK);
        return;
    }
    if (moe_ckpt_open(cfg, &ck, NULL) == MOE_OK) {
        moe_ckpt_fp8_block(ck, block);
    }
    moe_ckpt_close(ck);
    snprintf(buf, n, "%lldx%lld block scales", (long long)block[0], (long long)block[1]);
}

moe_status_t moe_weights_shared_dtype(const moe_config_t *cfg, moe_dtype_t *out, moe_error_t *err)
{
    bool random = strcmp(cfg->weights, "random") == 0 && strcmp(cfg->checkpoint, "none") == 0;
    const moe_family_t *fam = moe_family_get(cfg->family);
    moe_dtype_t d = cfg->dtype;
    *out = MOE_DTYPE_F32;
    if (shared_ffn(cfg, fam) == 0 || (d == MOE_DTYPE_AUTO && random)) {
        return MOE_OK;
    }
    if (d == MOE_DTYPE_AUTO) {
        moe_status_t st = first_expert_dtype(cfg, -1, &d, err);
        if (st != MOE_OK) {
            return st;
        }
    }
    *out = d == MOE_DTYPE_F16 ? MOE_DTYPE_F32 : d;
    return MOE_OK;
}

moe_status_t moe_weights_value_dtype(const moe_config_t *cfg, int rank, moe_dtype_t *out,
                                     moe_error_t *err)
{
    int32_t ids[MOE_MAX_EXPERTS];
    bool random = strcmp(cfg->weights, "random") == 0 && strcmp(cfg->checkpoint, "none") == 0;
    moe_dtype_t d = cfg->dtype;
    if (d == MOE_DTYPE_AUTO) {
        d = MOE_DTYPE_F32;
        if (!random && moe_cfg_experts_of_rank(cfg, rank, ids) > 0) {
            moe_status_t st = first_expert_dtype(cfg, ids[0], &d, err);
            if (st != MOE_OK) {
                return st;
            }
        }
    }
    /* No F16 arithmetic on the CPU: F16 widens to F32 exactly (BF16 would lose bits). */
    *out = d == MOE_DTYPE_F16 && cfg->device != MOE_DEVICE_CUDA ? MOE_DTYPE_F32 : d;
    return MOE_OK;
}

const char *moe_weights_held_name(moe_dtype_t held)
{
    return held == MOE_DTYPE_BF16    ? "BF16"
           : held == MOE_DTYPE_FP8   ? "FP8"
           : held == MOE_DTYPE_MXFP4 ? "MXFP4"
                                     : "F32";
}

moe_status_t moe_weights_check_fp8_shares(const moe_config_t *cfg, const moe_ckpt_t *ck,
                                          moe_error_t *err)
{
    int64_t block[2] = {128, 128};
    moe_ckpt_fp8_block(ck, block);
    if (moe_cfg_expert_ffn(cfg) == cfg->ffn_dim || moe_cfg_expert_ffn(cfg) % block[1] == 0) {
        return MOE_OK; /* not split (placement.copies: columns), or in whole blocks */
    }
    char ok[96] = "none";
    moe_cfg_share_counts(cfg->ffn_dim, block[1], ok, sizeof(ok));
    return moe_error_set(err, MOE_ERR_UNSUPPORTED, "placement.copies: columns: a share of %lld "
                         "of model.ffn_dim %lld cuts the FP8 scale blocks of %lld inputs of %s "
                         "(quantization_config.weight_block_size); copies of an expert that "
                         "keep whole blocks: %s; or model.dtype: bf16 to widen the weights",
                         (long long)moe_cfg_expert_ffn(cfg), (long long)cfg->ffn_dim,
                         (long long)block[1], moe_ckpt_name(ck), ok);
}

moe_status_t moe_weights_load(const moe_config_t *cfg, int rank, bool routes, moe_dtype_t value,
                              moe_dtype_t store, moe_dtype_t experts_store,
                              moe_dtype_t shared_store, moe_weights_t *w, moe_error_t *err)
{
    memset(w, 0, sizeof(*w));
    load_progress_t prog;
    bool random = strcmp(cfg->weights, "random") == 0 && strcmp(cfg->checkpoint, "none") == 0;
    if ((shared_store == MOE_DTYPE_FP8 && random) || shared_store == MOE_DTYPE_MXFP4 ||
        shared_store == MOE_DTYPE_F16 || shared_store == MOE_DTYPE_AUTO) {
        shared_store = MOE_DTYPE_F32; /* no FP8 random values; MXFP4 has no shared experts */
    }
    load_ctx_t c = {.cfg = cfg, .fam = moe_family_get(cfg->family), .prog = &prog,
                    .store = store, .shared_store = shared_store, .err = err};
    /* With auto, F32-held weights keep the file's values (FP8 dequantised exactly). */
    c.round_bf16 = store != MOE_DTYPE_BF16 && cfg->dtype == MOE_DTYPE_BF16;
    bool bf16 = store == MOE_DTYPE_BF16;
    bool quant = store == MOE_DTYPE_FP8 || store == MOE_DTYPE_MXFP4;
    bool hosts = moe_cfg_experts_of_rank(cfg, rank, NULL) > 0;
    int64_t Fs = shared_ffn(cfg, c.fam);
    int lo = 0, hi = 0; /* every layer's own set (placement.layers), not layer 0's */
    int expert_layers = rank_expert_layers(cfg, rank, &lo, &hi);
    c.fp8_block[0] = c.fp8_block[1] = 128;
    moe_status_t st = random ? MOE_OK : moe_ckpt_open(cfg, &c.ck, err);
    if (st == MOE_OK && !random) {
        st = pick_names(&c);
        moe_ckpt_fp8_block(c.ck, c.fp8_block);
    }
    bool shared_fp8 = routes && Fs > 0 && shared_store == MOE_DTYPE_FP8;
    if (st == MOE_OK && (store == MOE_DTYPE_FP8 || shared_fp8) &&
        c.fp8_block[1] % MOE_BLK_K != 0) {
        st = moe_error_set(err, MOE_ERR_UNSUPPORTED, "%s: quantization_config.weight_block_size "
                           "[%lld, %lld]: moed holds FP8 weights as stored only with scale blocks "
                           "of a multiple of %d inputs; set model.dtype: bf16 to widen them",
                           moe_ckpt_name(c.ck), (long long)c.fp8_block[0],
                           (long long)c.fp8_block[1], MOE_BLK_K);
    }
    if (st == MOE_OK && store == MOE_DTYPE_MXFP4 && c.names->expert != NULL) {
        st = moe_error_set(err, MOE_ERR_INTERNAL, "MXFP4 experts are gpt-oss's fused tensors");
    }
    if (st == MOE_OK && ((quant && hosts) || shared_fp8)) {
        st = alloc_quant_staging(&c, shared_fp8 && Fs > cfg->ffn_dim ? Fs : cfg->ffn_dim);
    }
    bool split = moe_cfg_expert_ffn(cfg) < cfg->ffn_dim; /* placement.copies: columns */
    if (st == MOE_OK && hosts && store == MOE_DTYPE_FP8) {
        st = moe_weights_check_fp8_shares(cfg, c.ck, err);
    }
    if (st == MOE_OK && (bf16 || (split && !quant)) && hosts) {
        st = alloc_ffn(cfg, cfg->ffn_dim, &c.tmp, err);
    }
    if (st == MOE_OK && split && quant && hosts) {
        st = alloc_ffn_quant(cfg, store, c.fp8_block[1], cfg->ffn_dim, &c.qfull, err);
    }
    size_t per_expert = (size_t)held_expert_bytes(cfg, store, c.fp8_block[1]);
    size_t local_bytes = per_expert * (size_t)expert_layers;
    if (st != MOE_OK) {
        goto out_close;
    }
    w->num_layers = (int)cfg->num_layers;
    w->layers = calloc((size_t)w->num_layers, sizeof(*w->layers));
    if (w->layers == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate layer table");
        goto out_close;
    }
    /* progress counts the bytes built: a column share is cut from its whole expert; a rank
     * hosting none tells how the expert ranks hold theirs */
    moe_dtype_t shown = hosts ? store : experts_store;
    progress_begin(cfg, rank, random,
                   split ? (size_t)held_ffn_bytes(cfg, shown, c.fp8_block[1], cfg->ffn_dim)
                         : (size_t)held_expert_bytes(cfg, shown, c.fp8_block[1]),
                   shown, &prog);
    for (int l = 0; l < w->num_layers && st == MOE_OK; l++) {
        st = load_layer(&c, rank, routes, Fs, l, &w->layers[l]);
    }
    progress_end(&prog, local_bytes, st);
    if (st == MOE_OK && cfg->routing_skew > 0.0) { /* random weights or a checkpoint's */
        st = apply_skew(cfg, c.fam, w, err);
    }
    w->value = value;
    w->store = bf16 || quant ? store : MOE_DTYPE_F32;
    w->fp8_block[0] = c.fp8_block[0];
    w->fp8_block[1] = c.fp8_block[1];
    w->bytes_per_expert = per_expert;
    w->expert_bytes = local_bytes;
    w->shared_ffn = Fs;
    w->shared_store = routes && Fs > 0 ? shared_store : MOE_DTYPE_F32;
    if (routes) {
        size_t gate = (size_t)(cfg->num_experts * (cfg->hidden_dim + 1)) * sizeof(float);
        size_t shared = Fs > 0 ? (size_t)held_ffn_bytes(cfg, shared_store, c.fp8_block[1], Fs) +
                                     (size_t)cfg->hidden_dim * sizeof(float)
                               : 0;
        w->routing_bytes = (gate + shared) * (size_t)cfg->num_layers;
    }
    describe(cfg, &c, w);
out_close:
    free_ffn(&c.tmp);
    free_ffn(&c.qfull);
    free(c.slab);
    free(c.codes);
    free(c.fp8_scales);
    free(c.mx_scales);
    moe_ckpt_close(c.ck);
    if (st != MOE_OK) {
        moe_weights_destroy(w);
    }
    return st;
}

void moe_weights_destroy(moe_weights_t *w)
{
    if (w == NULL) {
        return;
    }
    for (int l = 0; w->layers != NULL && l < w->num_layers; l++) {
        moe_layer_weights_t *lw = &w->layers[l];
        free(lw->gate);
        free(lw->gate_bias);
        free_ffn(&lw->shared);
        free(lw->shared_gate);
        for (int i = 0; lw->experts != NULL && i < lw->num_local; i++) {
            free_ffn(&lw->experts[i]);
        }
        free(lw->experts);
        free(lw->q_arena); /* after its pieces */
    }
    free(w->layers);
    free(w->gate_bias);
    memset(w, 0, sizeof(*w));
}

/* workload.input's tensor 'input' against [tokens_per_step, hidden_dim]: the message gives
 * both shapes. */
static moe_status_t input_shape(const moe_config_t *cfg, const moe_st_file_t *f,
                                moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, T = cfg->tokens_per_step;
    const moe_st_tensor_info_t *ti = moe_st_find(f, "input");
    if (ti != NULL && ti->ndim == 2 && ti->shape[0] == T && ti->shape[1] == H) {
        return MOE_OK;
    }
    char has[160] = "the file has no tensor 'input'";
    if (ti != NULL) {
        size_t n = (size_t)snprintf(has, sizeof(has), "the file's 'input' has shape [");
        for (int d = 0; d < ti->ndim && n < sizeof(has); d++) {
            n += (size_t)snprintf(has + n, sizeof(has) - n, "%s%lld", d == 0 ? "" : ", ",
                                  (long long)ti->shape[d]);
        }
        if (n < sizeof(has)) {
            snprintf(has + n, sizeof(has) - n, "]%s", ti->ndim == 2 && ti->shape[1] == H ?
                     "; set workload.tokens_per_step to its rows, or leave the key out" : "");
        }
    }
    return moe_error_set(err, MOE_ERR_WEIGHTS,
                         "%s: workload.input needs tensor 'input' of shape [%lld, %lld] "
                         "(workload.tokens_per_step, model.hidden_dim); %s",
                         cfg->input, (long long)T, (long long)H, has);
}

moe_status_t moe_input_check(const moe_config_t *cfg, moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    if (strcmp(cfg->input, "random") == 0) {
        return MOE_OK;
    }
    moe_status_t st = moe_st_open(cfg->input, &f, err);
    if (st == MOE_OK) {
        st = input_shape(cfg, f, err);
        moe_st_close(f);
    }
    return st;
}

moe_status_t moe_input_load(const moe_config_t *cfg, int batch, int64_t first, int64_t count,
                            float *dst, moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, T = cfg->tokens_per_step;
    if (strcmp(cfg->input, "random") == 0) {
        /* Unit-variance uniform; batch b is an independent slice of one stream. */
        uint64_t start = ((uint64_t)batch * (uint64_t)T + (uint64_t)first) * (uint64_t)H;
        moe_rng_fill_uniform(dst, (size_t)(count * H), cfg->seed,
                             moe_rng_stream(MOE_RNG_INPUT, 0, 0), start, sqrtf(3.0f));
        return MOE_OK;
    }
    moe_st_file_t *f = NULL;
    float *all = NULL;
    moe_status_t st = moe_st_open(cfg->input, &f, err);
    if (st != MOE_OK) {
        return st;
    }
    st = input_shape(cfg, f, err);
    if (st == MOE_OK) {
        st = alloc_floats(&all, (size_t)(T * H), err);
    }
    if (st == MOE_OK) {
        st = moe_st_read_f32(f, "input", all, (size_t)(T * H), err);
    }
    if (st == MOE_OK) {
        memcpy(dst, all + first * H, (size_t)(count * H) * sizeof(float));
    }
    free(all);
    moe_st_close(f);
    return st;
}

moe_status_t moe_input_rows(const char *path, int64_t *rows, moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    moe_status_t st = moe_st_open(path, &f, err);
    if (st != MOE_OK) {
        return st;
    }
    const moe_st_tensor_info_t *ti = moe_st_find(f, "input");
    if (ti == NULL || ti->ndim != 2) {
        st = moe_error_set(err, MOE_ERR_WEIGHTS, "%s: no 2-D tensor 'input'", path);
    } else {
        *rows = ti->shape[0];
    }
    moe_st_close(f);
    return st;
}

void moe_weights_skew_bias(float *bias, int num_experts, double skew)
{
    for (int e = 0; e < num_experts; e++) {
        bias[e] = (float)(-skew * log((double)e + 1.0));
    }
}
