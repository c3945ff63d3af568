/* The expert FFN per call: small-batch kernels or GEMM libraries (expert_small.h). */
#include "expert/expert_small.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "expert/expert.h"
#include "expert/expert_bf16.h"
#include "expert/gemm.h"
#include "moe/mem.h"
#include "moe/testctl.h"

/* Rows of W dequantised to F32 at a time for the BLAS (F32 compute, FP8 / MXFP4 weights):
 * 256 rows of the widest input (ffn or hidden) stay in L2 while the GEMM reads them. BF16
 * weights (F32 compute for want of native BF16) are widened a whole matrix at a time (up to
 * PANEL_BF16_MAX): panels of 256 rows made the default job's prefill (512 rows an expert
 * call) 0.75 of the GEMM limit against 0.87 with the weights held in F32 (Zen 3,
 * 2026-11-28), the SGEMM packing the call's rows again for every panel. */
#define PANEL_ROWS 256
/* BF16 weights' scratch at most (floats, 64 MiB): larger matrices (Mixtral's W13: 470 MB in
 * F32) are widened in panels of as many rows of the widest input as fit, multiples of 64
 * (DeepSeek-V3's W13, 4096 x 7168: panels of 2304 and 1792 rows). */
#define PANEL_BF16_MAX ((int64_t)16 << 20)

struct moe_expert_small {
    moe_sb_isa_t isa;   /* MOE_SB_NONE: the GEMM libraries only */
    moe_sb_type_t type; /* the held weights' type (F32-held: MOE_SB_BF16, unused) */
    bool quant;         /* FP8 or MXFP4 held as stored */
    bool bf16;          /* BF16 compute */
    bool own;           /* F32 compute of weights in moed's blocked layout (FP8, MXFP4, and
                         * BF16 where the CPU lacks native BF16): the kernels for few rows,
                         * the BLAS on panels widened to F32 for more */
    int64_t max_rows;   /* the switch point */
    int threads;
    int64_t H, F, up_n, kp_h, kp_f, sk;
    void *x;            /* [max_rows, kp_h] the rows, padded (zero past H) */
    void *a;            /* [max_rows, kp_f] the activated rows, padded (zero past F) */
    uint16_t *panel_up, *panel_down; /* BF16 compute: a dequantised expert, oneDNN's layout */
    float *panel;       /* F32 compute: [panel_rows, max(H, F)] */
    int64_t panel_rows; /* PANEL_ROWS, or (BF16 weights) a matrix's outputs whole, up to
                         * PANEL_BF16_MAX floats */
    int64_t calls[2], rows[2];
};

/* Measured on the CI machine (AMD EPYC Zen 4, 2 cores; tests/bench/bench_decode_kernel.sh,
 * docs/performance.md): about the largest row count at which the kernels still beat the
 * GEMM path, whose FP8 and MXFP4 calls first dequantise the whole expert. BF16: even with
 * oneDNN from 16 to 48 rows (within the runs' noise), slower from 64; FP8 (avx512_bf16):
 * faster up to 64 (1.1-1.4x), even to slower at 128; MXFP4 (its codes fetched ahead):
 * 1.16-1.21x faster at 16 rows, 1.07-1.10x at 24, even at 32 (its e2m1 decoding costs the
 * kernels about as much as oneDNN's dequantised GEMM there); F32 compute on the avx512
 * kernels (FP8 and MXFP4): faster up to 128. The avx2
 * kernels (32 rows a pass on a K-block decoded once, the scales on the sums; Zen 3,
 * 2026-11-28 09:08 UTC): FP8 2.08x at 64 rows, 1.38x at 128; MXFP4 1.84x at 64, 1.34x at
 * 128 (before the scales went on the sums, at 06:33 UTC: FP8 1.49x and 1.06x, MXFP4 1.64x
 * and 0.95x: 64 rows then). BF16 weights in F32 compute (CPUs without native BF16: held as
 * BF16, moe_expert_held_dtype) on the avx2 kernels against the whole matrix widened to F32
 * and the SGEMM (Zen 3, 2026-11-28 11:46 UTC): 2.04x at 16 rows, 1.48x at 32, 1.25x at 48,
 * 0.69x at 64. */
int64_t moe_expert_small_default_rows(moe_sb_type_t type, moe_sb_isa_t isa)
{
    if (isa == MOE_SB_AVX512_BF16 || isa == MOE_SB_AVX512_BF16_VBMI) {
        return type == MOE_SB_BF16 ? 16 : type == MOE_SB_FP8 ? 64 : 16; /* performance.md */
    }
    if (isa == MOE_SB_AVX512) { /* BF16: the avx2 figure, not measured on such a CPU */
        return type == MOE_SB_BF16 ? 48 : 128;
    }
    if (isa == MOE_SB_AVX2) {
        return type == MOE_SB_BF16 ? 48 : 128; /* performance.md */
    }
    return 0;
}

void moe_expert_small_destroy(moe_expert_small_t *s)
{
    if (s == NULL) {
        return;
    }
    free(s->x);
    free(s->a);
    free(s->panel_up);
    free(s->panel_down);
    free(s->panel);
    free(s);
}

static moe_sb_type_t held_type(moe_dtype_t store)
{
    return store == MOE_DTYPE_FP8 ? MOE_SB_FP8 : store == MOE_DTYPE_MXFP4 ? MOE_SB_MXFP4
                                                                          : MOE_SB_BF16;
}

/* The held weights' type and what follows from it and the compute type. */
static void held_types(moe_expert_small_t *s, moe_dtype_t store, moe_num_dtype_t compute)
{
    s->bf16 = compute == MOE_NUM_BF16;
    s->quant = store == MOE_DTYPE_FP8 || store == MOE_DTYPE_MXFP4;
    s->type = held_type(store);
    s->own = !s->bf16 && (s->quant || store == MOE_DTYPE_BF16);
}

/* The kernels' choice: which ISA (none: GEMMs only) and up to how many rows. */
static void pick(moe_expert_small_t *s, const moe_config_t *cfg, moe_dtype_t store,
                 moe_onednn_t *o, int64_t tile_rows)
{
    bool bf16_held = store == MOE_DTYPE_BF16;
    s->isa = s->quant || bf16_held ? moe_sb_isa(s->bf16) : MOE_SB_NONE;
    if (bf16_held && s->bf16 && (o == NULL || !moe_onednn_packed_blocked(o, MOE_ONEDNN_UP) ||
                                 !moe_onednn_packed_blocked(o, MOE_ONEDNN_DOWN))) {
        s->isa = MOE_SB_NONE; /* the kernels read oneDNN's packed layout only when blocked */
    }
    s->max_rows = cfg->small_batch_rows >= 0 ? cfg->small_batch_rows
                                             : moe_expert_small_default_rows(s->type, s->isa);
    s->max_rows = s->isa == MOE_SB_NONE ? 0 : s->max_rows;
    s->max_rows = s->max_rows > tile_rows ? tile_rows : s->max_rows;
}

void moe_expert_small_plan(const moe_config_t *cfg, moe_dtype_t store, moe_num_dtype_t compute,
                           moe_sb_isa_t *isa, int64_t *rows)
{
    moe_expert_small_t s = {0};
    held_types(&s, store, compute);
    moe_onednn_t *o = NULL;
    int64_t F = moe_cfg_expert_ffn(cfg), up_n = cfg->activation == MOE_ACT_GELU ? F : 2 * F;
    if (store == MOE_DTYPE_BF16 && s.bf16 &&
        moe_onednn_create(cfg->hidden_dim, up_n, F, MOE_BF16_TILE_ROWS,
                          (int)cfg->threads, &o, NULL) != MOE_OK) {
        o = NULL;
    }
    pick(&s, cfg, store, o, MOE_BF16_TILE_ROWS);
    moe_onednn_destroy(o);
    *isa = s.isa;
    *rows = s.max_rows;
}

moe_status_t moe_expert_small_create(const moe_config_t *cfg, const moe_weights_t *w,
                                     moe_num_dtype_t compute, moe_onednn_t *o,
                                     int64_t tile_rows, moe_expert_small_t **out,
                                     moe_error_t *err)
{
    moe_expert_small_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the expert kernels");
    }
    s->H = cfg->hidden_dim;
    s->F = moe_cfg_expert_ffn(cfg);
    s->up_n = cfg->activation == MOE_ACT_GELU ? s->F : 2 * s->F;
    s->kp_h = moe_blk_pad(s->H, MOE_BLK_K);
    s->kp_f = moe_blk_pad(s->F, MOE_BLK_K);
    s->threads = cfg->threads > 1 ? (int)cfg->threads : 1;
    held_types(s, w->store, compute);
    s->sk = w->store == MOE_DTYPE_FP8 ? w->fp8_block[1] : MOE_MXFP4_BLOCK;
    pick(s, cfg, w->store, o, tile_rows);
    moe_status_t st = MOE_OK;
    if (s->quant && s->bf16 && (o == NULL || !moe_onednn_packed_blocked(o, MOE_ONEDNN_UP) ||
                                !moe_onednn_packed_blocked(o, MOE_ONEDNN_DOWN))) {
        st = moe_error_set(err, MOE_ERR_UNSUPPORTED, "oneDNN (ISA %s) packs BF16 weights in a "
                           "layout moed's FP8/MXFP4 dequantisation does not write; set "
                           "model.dtype: bf16 (weights widened at load) or "
                           "runtime.compute_dtype: f32", moe_onednn_isa_name());
    }
    size_t esz = s->bf16 ? sizeof(uint16_t) : sizeof(float);
    size_t rows = (size_t)(s->max_rows > 0 ? s->max_rows : 0);
    if (st == MOE_OK && rows > 0) { /* zeroed: the padding columns stay zero */
        s->x = calloc(rows * (size_t)s->kp_h, esz);
        s->a = calloc(rows * (size_t)s->kp_f, esz);
        if (s->x == NULL || s->a == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the kernels' rows");
        }
    }
    if (st == MOE_OK && s->quant && s->bf16) {
        s->panel_up = moe_alloc_large(moe_onednn_packed_bytes(o, MOE_ONEDNN_UP));
        s->panel_down = moe_alloc_large(moe_onednn_packed_bytes(o, MOE_ONEDNN_DOWN));
        if (s->panel_up == NULL || s->panel_down == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate a dequantised expert");
        }
    } else if (st == MOE_OK && s->own) {
        int64_t widest = s->H > s->F ? s->H : s->F;
        int64_t tallest = s->up_n > s->H ? s->up_n : s->H;
        int64_t fit = moe_testctl_panel_floats(PANEL_BF16_MAX) / widest / MOE_BLK_N * MOE_BLK_N;
        fit = fit < MOE_BLK_N ? MOE_BLK_N : fit;
        s->panel_rows = s->quant ? PANEL_ROWS : tallest < fit ? tallest : fit;
        s->panel = moe_alloc_large((size_t)(s->panel_rows * widest) * sizeof(float));
        if (s->panel == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate a dequantised panel");
        }
    }
    if (st != MOE_OK) {
        moe_expert_small_destroy(s);
        return st;
    }
    *out = s;
    return MOE_OK;
}

int64_t moe_expert_small_rows(const moe_expert_small_t *s)
{
    return s != NULL ? s->max_rows : 0;
}

moe_sb_isa_t moe_expert_small_isa(const moe_expert_small_t *s)
{
    return s != NULL ? s->isa : MOE_SB_NONE;
}

void moe_expert_small_counts(const moe_expert_small_t *s, int64_t calls[2], int64_t rows[2])
{
    for (int i = 0; i < 2; i++) {
        calls[i] = s != NULL ? s->calls[i] : 0;
        rows[i] = s != NULL ? s->rows[i] : 0;
    }
}

/* Expert w's up (which 0) or down (1) matrix as the kernels see it. */
static moe_sb_matrix_t matrix(const moe_expert_small_t *s, const moe_expert_weights_t *w,
                              int which)
{
    moe_sb_matrix_t m = {.type = s->type, .sk = s->sk};
    m.n = which == 0 ? s->up_n : s->H;
    m.k = which == 0 ? s->H : s->F;
    if (s->type == MOE_SB_BF16) {
        m.codes = which == 0 ? w->w13_packed : w->w2_packed;
    } else {
        m.codes = which == 0 ? w->w13_q : w->w2_q;
        m.scales = which == 0 ? w->w13_s : w->w2_s;
    }
    return m;
}

/* y = x W^T on the kernels, the column blocks split between the threads. */
static void kernel(const moe_expert_small_t *s, const moe_sb_matrix_t *m, int64_t rows,
                   const void *x, int64_t ldx, void *y, int64_t ldy, bool y_bf16)
{
    int64_t nbn = moe_blk_pad(m->n, MOE_BLK_N) / MOE_BLK_N;
    if (s->threads <= 1 || nbn < 2) {
        moe_sb_gemm(s->isa, m, rows, x, ldx, y, ldy, y_bf16, 0, nbn);
        return;
    }
#pragma omp parallel num_threads(s->threads)
    {
        int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t b0 = nbn * t / nt, b1 = nbn * (t + 1) / nt;
        if (b1 > b0) {
            moe_sb_gemm(s->isa, m, rows, x, ldx, y, ldy, y_bf16, b0, b1);
        }
    }
}

/* rows of in (stride H) into s->x at stride kp_h when H is not a multiple of 32. */
static const void *padded_rows(moe_expert_small_t *s, const void *in, int64_t rows,
                               int64_t *ldx)
{
    size_t esz = s->bf16 ? sizeof(uint16_t) : sizeof(float);
    *ldx = s->H;
    if (s->kp_h == s->H) {
        return in;
    }
    for (int64_t r = 0; r < rows; r++) {
        memcpy((char *)s->x + (size_t)(r * s->kp_h) * esz,
               (const char *)in + (size_t)(r * s->H) * esz, (size_t)s->H * esz);
    }
    *ldx = s->kp_h;
    return s->x;
}

static void count(moe_expert_small_t *s, int path, int64_t rows)
{
    s->calls[path]++;
    s->rows[path] += rows;
}

moe_status_t moe_expert_small_forward_bf16(moe_expert_small_t *s, moe_onednn_t *o,
                                           const moe_expert_weights_t *w, moe_activation_t act,
                                           int64_t hidden, int64_t ffn, int64_t rows,
                                           const uint16_t *in, uint16_t *h, uint16_t *a,
                                           float *out, moe_error_t *err)
{
    if (s->isa != MOE_SB_NONE && rows <= s->max_rows) {
        count(s, 0, rows);
        moe_sb_matrix_t up = matrix(s, w, 0), down = matrix(s, w, 1);
        int64_t ldx = hidden;
        const void *x = padded_rows(s, in, rows, &ldx);
        kernel(s, &up, rows, x, ldx, h, s->up_n, true);
        moe_expert_activate_bf16_ld(w, act, h, rows, ffn, s->a, s->kp_f);
        kernel(s, &down, rows, s->a, s->kp_f, out, hidden, false);
        moe_expert_add_bias(out, rows, hidden, w->b2);
        return MOE_OK;
    }
    count(s, 1, rows);
    if (!s->quant) {
        return moe_expert_forward_bf16(o, w, act, hidden, ffn, rows, in, h, a, out, err);
    }
    /* FP8 / MXFP4: the whole expert into oneDNN's packed BF16, then its matmuls */
    moe_sb_matrix_t up = matrix(s, w, 0), down = matrix(s, w, 1);
    int64_t nb_up = moe_blk_pad(up.n, MOE_BLK_N) / MOE_BLK_N;
    int64_t nb_down = moe_blk_pad(down.n, MOE_BLK_N) / MOE_BLK_N;
#pragma omp parallel for num_threads(s->threads) schedule(static) if (s->threads > 1)
    for (int64_t b = 0; b < nb_up + nb_down; b++) {
        if (b < nb_up) {
            moe_sb_dequant_bf16(s->isa, &up, s->panel_up, b, b + 1);
        } else {
            moe_sb_dequant_bf16(s->isa, &down, s->panel_down, b - nb_up, b - nb_up + 1);
        }
    }
    moe_expert_weights_t packed = *w;
    packed.w13_packed = s->panel_up;
    packed.w2_packed = s->panel_down;
    return moe_expert_forward_bf16(o, &packed, act, hidden, ffn, rows, in, h, a, out, err);
}

/* F32 compute, FP8 / MXFP4 / BF16 over many rows: W in panels of rows (BF16: the whole
 * matrix up to PANEL_BF16_MAX) dequantised to F32, each panel's columns of the output by
 * the BLAS. */
static moe_status_t panels_f32(moe_expert_small_t *s, const moe_sb_matrix_t *m, int64_t rows,
                               const float *x, int64_t ldx, float *y, int64_t ldy)
{
    for (int64_t r0 = 0; r0 < m->n; r0 += s->panel_rows) {
        int64_t r1 = r0 + s->panel_rows < m->n ? r0 + s->panel_rows : m->n;
        /* in groups of 64 rows (a column block: the vector code's 8-row groups whole) */
#pragma omp parallel for num_threads(s->threads) schedule(static) if (s->threads > 1)
        for (int64_t g = r0; g < r1; g += MOE_BLK_N) {
            int64_t g1 = g + MOE_BLK_N < r1 ? g + MOE_BLK_N : r1;
            moe_sb_dequant_f32(m, s->panel + (g - r0) * m->k, g, g1);
        }
        moe_status_t st = moe_gemm_nt(rows, r1 - r0, m->k, x, ldx, s->panel, m->k, 0.0f,
                                      y + r0, ldy);
        if (st != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}

moe_status_t moe_expert_small_forward_f32(moe_expert_small_t *s, const moe_expert_weights_t *w,
                                          moe_activation_t act, int64_t hidden, int64_t ffn,
                                          int64_t rows, const float *in, float *out,
                                          float *scratch, int64_t tile_rows, moe_error_t *err)
{
    if (s == NULL || (!s->own && (s->isa == MOE_SB_NONE || rows > s->max_rows))) {
        if (s != NULL) {
            count(s, 1, rows);
        }
        moe_status_t st = moe_expert_forward(w, act, hidden, ffn, rows, in, out, scratch,
                                             tile_rows);
        return st == MOE_OK ? st : moe_error_set(err, st, "expert %d FFN failed", w->id);
    }
    moe_sb_matrix_t up = matrix(s, w, 0), down = matrix(s, w, 1);
    bool small = s->isa != MOE_SB_NONE && rows <= s->max_rows;
    count(s, small ? 0 : 1, rows);
    for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
        int64_t m = rows - r0 < tile_rows ? rows - r0 : tile_rows;
        const float *x = in + r0 * hidden;
        float *y = out + r0 * hidden;
        moe_status_t st = MOE_OK;
        if (small) {
            int64_t ldx = hidden;
            const void *xp = padded_rows(s, x, m, &ldx);
            kernel(s, &up, m, xp, ldx, scratch, s->up_n, false);
        } else {
            st = panels_f32(s, &up, m, x, hidden, scratch, s->up_n);
        }
        if (st != MOE_OK) {
            return moe_error_set(err, st, "expert %d FFN failed", w->id);
        }
        moe_expert_activate(w, act, scratch, m, ffn); /* packed into the first F columns */
        if (small) {
            float *a = s->a;
            for (int64_t r = 0; r < m; r++) {
                memcpy(a + r * s->kp_f, scratch + r * s->up_n, (size_t)ffn * sizeof(float));
            }
            kernel(s, &down, m, a, s->kp_f, y, hidden, false);
        } else {
            st = panels_f32(s, &down, m, scratch, s->up_n, y, hidden);
        }
        if (st != MOE_OK) {
            return moe_error_set(err, st, "expert %d FFN failed", w->id);
        }
        moe_expert_add_bias(y, m, hidden, w->b2);
    }
    return MOE_OK;
}
