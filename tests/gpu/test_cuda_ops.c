/* The CUDA device library against the CPU path, op by op (as ggml's test-backend-ops):
 * weight upload (dtype rounding), gate, gather, merge, expert FFN in F32/BF16/F16, events,
 * memory accounting and the GEMM probe. One line per case; exit 77 (skip) without a GPU.
 *
 * Error measure: max |gpu - cpu| / max |cpu| over the whole output ("normalised error").
 * Tolerances, and why:
 *   gate (F32): both sides do an F32 GEMM and softmax; they differ by summation order over
 *     H terms and by expf's last bits (CUDA's expf is within 2 ulp). On probabilities in
 *     [0, 1] that is ~1e-6; 1e-4 leaves a wide margin. Top-k indices must be identical, except
 *     where two CPU probabilities differ by less than 1e-5 (a near tie that rounding may flip);
 *     exact ties (equal logits) must give identical indices, lower expert first.
 *   gather: a copy: bit-exact.
 *   merge: the kernel rounds the multiply and the add separately in the CPU's order, so it is
 *     bit-exact against the reference compiled without FMA contraction (GCC, ISO C, x86-64);
 *     1e-6 covers a compiler that contracts the reference loop.
 *   expert: the reference gets the weights and the input already rounded to the dtype (the
 *     upload test shows the GPU's rounding is bit-identical), so the one rounding the CPU
 *     does not do is the activation rounded to dtype before the down GEMM (unit roundoff u:
 *     2^-24 F32, 2^-9 BF16, 2^-11 F16), plus summation order in F32.
 *     The down GEMM sums F independent errors of relative size <= u: typically ~u of the
 *     output scale, a few u at worst over thousands of outputs.
 *       F32  1e-4 (order and expf/erff ulps only: observed ~1e-6)
 *       BF16 2e-2 (~10x u = 1.95e-3)
 *       F16  5e-3 (~10x u = 4.9e-4)
 *     A wrong layout, a missing activation or a transposed GEMM gives errors of order 1. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expert/cuda/moe_cuda.h"
#include "expert/expert.h"
#include "expert/gate.h"
#include "moe_model/safetensors.h"
#include "model/rng.h"
#include "test_util.h"

static moe_cuda_t *g_cuda;
static moe_error_t g_err;

/* A library call that must succeed: on failure print its message and count a failure. */
#define CHECK_OK(call)                                                                  \
    do {                                                                                \
        moe_status_t st_ = (call);                                                      \
        moe_test_checks_++;                                                             \
        if (st_ != MOE_OK) {                                                            \
            moe_test_failures_++;                                                       \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,           \
                    moe_status_name(st_), g_err.msg);                                   \
        }                                                                               \
    } while (0)

static const char *dtype_name(moe_dtype_t dt)
{
    return dt == MOE_DTYPE_BF16 ? "bf16" : dt == MOE_DTYPE_F16 ? "f16" : "f32";
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

static float *rand_floats(size_t n, uint64_t stream, float scale)
{
    float *p = xcalloc(n, sizeof(float));
    moe_rng_fill_uniform(p, n, 1234, stream, 0, scale);
    return p;
}

/* Uninitialised device memory (NULL for 0 bytes or on failure, which is counted). */
static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CHECK_OK(moe_cuda_alloc(g_cuda, bytes, &d, &g_err));
    return d;
}

/* Device copy of host bytes (NULL for 0 bytes or on failure, which is counted). */
static void *to_dev(const void *host, size_t bytes)
{
    void *d = dev_alloc(bytes);
    if (d != NULL) {
        CHECK_OK(moe_cuda_copy(g_cuda, d, host, bytes, MOE_CUDA_COPY_H2D,
                               MOE_CUDA_STREAM_COMPUTE, &g_err));
    }
    return d;
}

/* Wait for the compute stream, then copy device bytes back. */
static void from_dev(void *host, const void *dev, size_t bytes)
{
    CHECK_OK(moe_cuda_sync(g_cuda, MOE_CUDA_STREAM_COMPUTE, &g_err));
    if (dev != NULL) {
        CHECK_OK(moe_cuda_copy(g_cuda, host, dev, bytes, MOE_CUDA_COPY_D2H,
                               MOE_CUDA_STREAM_COMPUTE, &g_err));
        CHECK_OK(moe_cuda_sync(g_cuda, MOE_CUDA_STREAM_COMPUTE, &g_err));
    }
}

/* max |got - want| / max |want|; infinity if got has a NaN where want has none. */
static double norm_err(const float *got, const float *want, size_t n)
{
    double md = 0.0, mw = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= md)) {
            md = isnan(d) ? INFINITY : d;
        }
        mw = fmax(mw, fabs((double)want[i]));
    }
    return md == 0.0 ? 0.0 : md / (mw > 0.0 ? mw : 1.0);
}

static bool report(const char *what, double err, double tol)
{
    bool ok = err <= tol;
    moe_test_checks_++;
    if (!ok) {
        moe_test_failures_++;
    }
    printf("%-58s err %.3e  tol %.0e  %s\n", what, err, tol, ok ? "ok" : "FAIL");
    return ok;
}

/* ---- upload: the device's rounding is the CPU's (moe_f32_to_bf16 / moe_f32_to_f16) ---- */

static uint16_t host_round(moe_dtype_t dt, float v)
{
    return dt == MOE_DTYPE_BF16 ? moe_f32_to_bf16(v) : moe_f32_to_f16(v);
}

static void test_upload(moe_dtype_t dt)
{
    /* halfway cases of both formats, f16 overflow and subnormals, bf16 carry into inf */
    const float special[] = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 1.0009765625f,
                             65504.0f, 65519.0f, 65520.0f, -70000.0f, 6.0e-8f, 3.0e-8f,
                             2.9e-8f, 1.0e-5f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY, NAN,
                             1e-40f};
    const size_t ns = sizeof special / sizeof special[0], n = ns + 5000;
    float *host = rand_floats(n, 1, 1.0f);
    memcpy(host, special, sizeof special);
    for (size_t i = ns; i < n; i++) {
        host[i] = ldexpf(host[i], (int)(i % 60) - 30); /* many binades */
    }
    void *dev = NULL;
    CHECK_OK(moe_cuda_upload(g_cuda, host, (int64_t)n, dt, &dev, &g_err));
    size_t esz = moe_cuda_dtype_size(dt), bad = 0;
    unsigned char *back = xcalloc(n, esz);
    from_dev(back, dev, n * esz);
    for (size_t i = 0; i < n; i++) {
        if (dt == MOE_DTYPE_F32) {
            bad += memcmp(back + 4 * i, &host[i], 4) != 0 && !isnan(host[i]);
            continue;
        }
        uint16_t got, want = host_round(dt, host[i]);
        memcpy(&got, back + 2 * i, 2);
        bool nan_ok = isnan(host[i]) && (dt == MOE_DTYPE_BF16 ? moe_bf16_to_f32(got) != moe_bf16_to_f32(got)
                                                              : moe_f16_to_f32(got) != moe_f16_to_f32(got));
        if (got != want && !nan_ok) {
            if (bad++ < 5) {
                fprintf(stderr, "upload %s: %.9g -> 0x%04x, CPU 0x%04x\n", dtype_name(dt),
                        (double)host[i], got, want);
            }
        }
    }
    char what[96];
    snprintf(what, sizeof what, "upload %s n=%zu (bit-exact)", dtype_name(dt), n);
    report(what, (double)bad, 0.0);
    moe_cuda_free(g_cuda, dev);
    free(back);
    free(host);
}

/* ---- gate ---- */

typedef enum {
    TIE_NONE = 0,  /* random x and wg */
    TIE_ALL = 1,   /* wg = 0: every logit equal, top-k = experts 0..k-1 */
    TIE_GROUP = 2, /* experts 2, 5, 6 have wg rows 0 and bias +4: exact ties on top */
} tie_mode_t;

typedef struct gate_case {
    int64_t tokens, hidden;
    int experts, k;
    bool renorm, bias;
    tie_mode_t tie;
} gate_case_t;

static void gate_inputs(const gate_case_t *gc, float **x, float **wg, float **bias)
{
    int64_t T = gc->tokens, H = gc->hidden, E = gc->experts;
    *x = rand_floats((size_t)(T * H), 2, 1.0f);
    *wg = rand_floats((size_t)(E * H), 3, gc->tie == TIE_GROUP ? 1e-3f : 0.1f);
    *bias = NULL;
    if (gc->bias || gc->tie == TIE_GROUP) {
        *bias = xcalloc((size_t)E, sizeof(float));
        moe_weights_skew_bias(*bias, (int)E, 1.2);
    }
    for (int e = 0; e < E; e++) {
        bool zero = gc->tie == TIE_ALL || (gc->tie == TIE_GROUP && (e == 2 || e == 5 || e == 6));
        if (zero) {
            memset(*wg + e * H, 0, sizeof(float) * (size_t)H);
        }
        if (zero && gc->tie == TIE_GROUP) {
            (*bias)[e] = 4.0f;
        }
    }
}

/* Indices equal, or (random data only) swapped within a near tie of CPU probabilities. */
static size_t gate_index_mismatches(const gate_case_t *gc, const int32_t *got,
                                    const int32_t *want, const float *cpu_prob, size_t *near)
{
    size_t bad = 0;
    for (int64_t t = 0; t < gc->tokens; t++) {
        for (int j = 0; j < gc->k; j++) {
            int32_t g = got[t * gc->k + j], w = want[t * gc->k + j];
            if (g == w) {
                continue;
            }
            const float *p = cpu_prob + t * gc->experts;
            bool in_range = g >= 0 && g < gc->experts;
            if (gc->tie == TIE_NONE && in_range && fabsf(p[g] - p[w]) <= 1e-5f) {
                (*near)++;
            } else if (bad++ < 5) {
                fprintf(stderr, "gate token %lld choice %d: GPU expert %d, CPU expert %d\n",
                        (long long)t, j, g, w);
            }
        }
    }
    return bad;
}

static void test_gate(const gate_case_t *gc)
{
    int64_t T = gc->tokens, H = gc->hidden, E = gc->experts, k = gc->k;
    float *x, *wg, *bias;
    gate_inputs(gc, &x, &wg, &bias);
    float *logits = xcalloc((size_t)(T * E), sizeof(float));
    int32_t *idx = xcalloc((size_t)(T * k), sizeof(int32_t));
    float *w = xcalloc((size_t)(T * k), sizeof(float));
    CHECK_OK(moe_gate_forward(x, T, H, wg, (int)E, (int)k, gc->renorm, bias, logits, idx, w));

    float *d_x = to_dev(x, sizeof(float) * (size_t)(T * H));
    float *d_wg = to_dev(wg, sizeof(float) * (size_t)(E * H));
    float *d_bias = bias ? to_dev(bias, sizeof(float) * (size_t)E) : NULL;
    float *d_logits = dev_alloc(sizeof(float) * (size_t)(T * E));
    int32_t *d_idx = dev_alloc(sizeof(int32_t) * (size_t)(T * k));
    float *d_w = dev_alloc(sizeof(float) * (size_t)(T * k));
    CHECK_OK(moe_cuda_gate(g_cuda, d_x, T, H, d_wg, (int)E, (int)k, gc->renorm, d_bias, d_logits,
                           d_idx, d_w, &g_err));

    float *g_logits = xcalloc((size_t)(T * E), sizeof(float));
    int32_t *g_idx = xcalloc((size_t)(T * k), sizeof(int32_t));
    float *g_w = xcalloc((size_t)(T * k), sizeof(float));
    from_dev(g_logits, d_logits, sizeof(float) * (size_t)(T * E));
    from_dev(g_idx, d_idx, sizeof(int32_t) * (size_t)(T * k));
    from_dev(g_w, d_w, sizeof(float) * (size_t)(T * k));

    size_t near = 0, bad = gate_index_mismatches(gc, g_idx, idx, logits, &near);
    char what[128];
    snprintf(what, sizeof what, "gate T=%lld H=%lld E=%lld k=%lld%s%s%s: index mismatches",
             (long long)T, (long long)H, (long long)E, (long long)k, gc->renorm ? " renorm" : "",
             gc->bias ? " bias" : "",
             gc->tie == TIE_ALL ? " ties:all" : gc->tie == TIE_GROUP ? " ties:group" : "");
    report(what, (double)bad, 0.0);
    if (near > 0) {
        printf("  (%zu near-tie swaps within 1e-5 of CPU probability accepted)\n", near);
    }
    snprintf(what, sizeof what, "gate T=%lld E=%lld k=%lld: probabilities", (long long)T,
             (long long)E, (long long)k);
    report(what, norm_err(g_logits, logits, (size_t)(T * E)), 1e-4);
    snprintf(what, sizeof what, "gate T=%lld E=%lld k=%lld: top-k weights", (long long)T,
             (long long)E, (long long)k);
    report(what, norm_err(g_w, w, (size_t)(T * k)), 1e-4); /* sorted: a near-tie swap moves ~0 */

    void *dev[] = {d_x, d_wg, d_bias, d_logits, d_idx, d_w};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) {
        moe_cuda_free(g_cuda, dev[i]);
    }
    void *host[] = {x, wg, bias, logits, idx, w, g_logits, g_idx, g_w};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) {
        free(host[i]);
    }
}

static void test_gate_ties_exact(void)
{
    /* TIE_ALL with renormalisation: indices 0..k-1 and weights exactly 1/k in F32 */
    const gate_case_t gc = {9, 16, 8, 3, true, false, TIE_ALL};
    float *x, *wg, *bias;
    gate_inputs(&gc, &x, &wg, &bias);
    float *d_x = to_dev(x, sizeof(float) * 9 * 16), *d_wg = to_dev(wg, sizeof(float) * 8 * 16);
    float *d_logits, *d_w;
    int32_t *d_idx, g_idx[27];
    float g_w[27];
    d_logits = dev_alloc(sizeof(float) * 9 * 8);
    d_idx = dev_alloc(sizeof g_idx);
    d_w = dev_alloc(sizeof g_w);
    CHECK_OK(moe_cuda_gate(g_cuda, d_x, 9, 16, d_wg, 8, 3, true, NULL, d_logits, d_idx, d_w,
                           &g_err));
    from_dev(g_idx, d_idx, sizeof g_idx);
    from_dev(g_w, d_w, sizeof g_w);
    size_t bad = 0;
    for (int i = 0; i < 27; i++) {
        bad += g_idx[i] != i % 3 || g_w[i] != 0.125f / 0.375f; /* 1/8 each, sum 3/8 in F32 */
    }
    report("gate all-equal logits: experts 0,1,2 and weight 1/3", (double)bad, 0.0);
    void *dev[] = {d_x, d_wg, d_logits, d_idx, d_w};
    for (size_t i = 0; i < 5; i++) {
        moe_cuda_free(g_cuda, dev[i]);
    }
    free(x);
    free(wg);
}

static void test_gate_args(void)
{
    CHECK_INT_EQ(moe_cuda_gate(g_cuda, NULL, 4, 8, NULL, 8, 9, false, NULL, NULL, NULL, NULL,
                               &g_err),
                 MOE_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(g_err.msg, "k 9");
    CHECK_INT_EQ(moe_cuda_gate(g_cuda, NULL, 0, 8, NULL, 8, 2, false, NULL, NULL, NULL, NULL,
                               &g_err),
                 MOE_OK);
    printf("%-58s ok\n", "gate: k > E rejected, T = 0 does nothing");
}

/* ---- gather ---- */

static void test_gather(int64_t n, int64_t src_rows, int64_t hidden, bool drops)
{
    float *src = rand_floats((size_t)(src_rows * hidden), 4, 1.0f);
    int32_t *rows = xcalloc((size_t)n, sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        rows[i] = (int32_t)(moe_rng_u64(7, 8, (uint64_t)i) % (uint64_t)src_rows);
        rows[i] = drops && i % 5 == 3 ? -1 : rows[i];
    }
    float *want = xcalloc((size_t)(n * hidden), sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        if (rows[i] >= 0) {
            memcpy(want + i * hidden, src + rows[i] * hidden, sizeof(float) * (size_t)hidden);
        }
    }
    float *d_src = to_dev(src, sizeof(float) * (size_t)(src_rows * hidden));
    int32_t *d_rows = to_dev(rows, sizeof(int32_t) * (size_t)n);
    float *d_dst, *got = xcalloc((size_t)(n * hidden), sizeof(float));
    d_dst = dev_alloc(sizeof(float) * (size_t)(n * hidden));
    if (n > 0) { /* poison, so a row the kernel skips shows */
        memset(got, 0x7f, sizeof(float) * (size_t)(n * hidden));
        CHECK_OK(moe_cuda_copy(g_cuda, d_dst, got, sizeof(float) * (size_t)(n * hidden),
                               MOE_CUDA_COPY_H2D, MOE_CUDA_STREAM_COMPUTE, &g_err));
    }
    CHECK_OK(moe_cuda_gather_rows(g_cuda, d_dst, d_src, d_rows, n, hidden, &g_err));
    from_dev(got, d_dst, sizeof(float) * (size_t)(n * hidden));
    char what[96];
    snprintf(what, sizeof what, "gather n=%lld src_rows=%lld H=%lld%s (bit-exact)", (long long)n,
             (long long)src_rows, (long long)hidden, drops ? " with -1 rows" : "");
    report(what, n == 0 ? 0.0 : (double)(memcmp(got, want, sizeof(float) * (size_t)(n * hidden)) != 0),
           0.0);
    moe_cuda_free(g_cuda, d_src);
    moe_cuda_free(g_cuda, d_rows);
    moe_cuda_free(g_cuda, d_dst);
    free(src);
    free(rows);
    free(want);
    free(got);
}

/* ---- merge ---- */

/* layer_merge of moe_layer.c on plain arrays. */
static void cpu_merge(float *x, int64_t tokens, int64_t H, int k, const int32_t *slot_pos,
                      const float *topk_w, const float *ret)
{
    float *acc = xcalloc((size_t)H, sizeof(float));
    for (int64_t t = 0; t < tokens; t++) {
        memset(acc, 0, sizeof(float) * (size_t)H);
        for (int j = 0; j < k; j++) {
            int32_t pos = slot_pos[t * k + j];
            if (pos < 0) {
                continue;
            }
            float w = topk_w[t * k + j];
            const float *o = ret + (int64_t)pos * H;
            for (int64_t h = 0; h < H; h++) {
                acc[h] += w * o[h];
            }
        }
        for (int64_t h = 0; h < H; h++) {
            x[t * H + h] += acc[h];
        }
    }
    free(acc);
}

static void test_merge(int64_t T, int64_t H, int k, int drop_every)
{
    int32_t *pos = xcalloc((size_t)(T * k), sizeof(int32_t));
    int64_t R = 0;
    for (int64_t s = 0; s < T * k; s++) { /* kept slots get rows in a scrambled order */
        pos[s] = drop_every > 0 && s % drop_every == drop_every - 1 ? -1 : (int32_t)R++;
    }
    for (int64_t s = T * k - 1; s > 0; s--) {
        int64_t o = (int64_t)(moe_rng_u64(9, 10, (uint64_t)s) % (uint64_t)(s + 1));
        int32_t tmp = pos[s];
        pos[s] = pos[o];
        pos[o] = tmp;
    }
    float *w = rand_floats((size_t)(T * k), 11, 1.0f);
    float *ret = rand_floats((size_t)(R * H), 12, 3.0f);
    float *x = rand_floats((size_t)(T * H), 13, 1.0f);
    float *d_x = to_dev(x, sizeof(float) * (size_t)(T * H));
    float *d_w = to_dev(w, sizeof(float) * (size_t)(T * k));
    float *d_ret = to_dev(ret, sizeof(float) * (size_t)(R * H));
    int32_t *d_pos = to_dev(pos, sizeof(int32_t) * (size_t)(T * k));
    CHECK_OK(moe_cuda_merge(g_cuda, d_x, T, H, k, d_pos, d_w, d_ret, &g_err));
    float *got = xcalloc((size_t)(T * H), sizeof(float));
    from_dev(got, d_x, sizeof(float) * (size_t)(T * H));
    cpu_merge(x, T, H, k, pos, w, ret);
    char what[96];
    snprintf(what, sizeof what, "merge T=%lld H=%lld k=%d rows=%lld dropped=%lld", (long long)T,
             (long long)H, k, (long long)R, (long long)(T * k - R));
    report(what, norm_err(got, x, (size_t)(T * H)), 1e-6);
    void *dev[] = {d_x, d_w, d_ret, d_pos};
    for (size_t i = 0; i < 4; i++) {
        moe_cuda_free(g_cuda, dev[i]);
    }
    void *host[] = {pos, w, ret, x, got};
    for (size_t i = 0; i < 5; i++) {
        free(host[i]);
    }
}

/* ---- expert ---- */

/* v rounded to dtype and back: what the GPU holds for v. */
static void round_to(moe_dtype_t dt, float *v, size_t n)
{
    for (size_t i = 0; dt != MOE_DTYPE_F32 && i < n; i++) {
        v[i] = dt == MOE_DTYPE_BF16 ? moe_bf16_to_f32(moe_f32_to_bf16(v[i]))
                                    : moe_f16_to_f32(moe_f32_to_f16(v[i]));
    }
}

static double expert_tolerance(moe_dtype_t dt)
{
    return dt == MOE_DTYPE_BF16 ? 2e-2 : dt == MOE_DTYPE_F16 ? 5e-3 : 1e-4;
}

/* GPU out[rows,H] for the given host weights and input (F32, unrounded). */
static void gpu_expert(moe_dtype_t dt, moe_activation_t act, int64_t H, int64_t F, int64_t rows,
                       const moe_expert_weights_t *hw, const float *in, float *out)
{
    int64_t up_n = act == MOE_ACT_SWIGLU ? 2 * F : F;
    moe_cuda_expert_t w = {hw->id, NULL, NULL};
    CHECK_OK(moe_cuda_upload(g_cuda, hw->w13, up_n * H, dt, &w.w13, &g_err));
    CHECK_OK(moe_cuda_upload(g_cuda, hw->w2, H * F, dt, &w.w2, &g_err));
    float *d_in = to_dev(in, sizeof(float) * (size_t)(rows * H));
    float *d_out = dev_alloc(sizeof(float) * (size_t)(rows * H));
    /* sized for more rows than used: the layout must not care */
    void *scratch = dev_alloc(moe_cuda_expert_scratch_bytes(act, H, F, rows + 3, dt));
    CHECK_OK(moe_cuda_expert_forward(g_cuda, &w, dt, act, H, F, rows, d_in, d_out, scratch,
                                     &g_err));
    from_dev(out, d_out, sizeof(float) * (size_t)(rows * H));
    void *dev[] = {w.w13, w.w2, d_in, d_out, scratch};
    for (size_t i = 0; i < 5; i++) {
        moe_cuda_free(g_cuda, dev[i]);
    }
}

static void test_expert(moe_dtype_t dt, moe_activation_t act, int64_t H, int64_t F, int64_t rows)
{
    int64_t up_n = act == MOE_ACT_SWIGLU ? 2 * F : F;
    /* Scales as moed's random weights: ~1/sqrt(fan-in), so activations stay O(1). */
    moe_expert_weights_t hw = {.id = 7,
                               .w13 = rand_floats((size_t)(up_n * H), 14, 1.7f / sqrtf((float)H)),
                               .w2 = rand_floats((size_t)(H * F), 15, 1.7f / sqrtf((float)F))};
    float *in = rand_floats((size_t)(rows * H), 16, 1.0f);
    float *got = xcalloc((size_t)(rows * H), sizeof(float));
    gpu_expert(dt, act, H, F, rows, &hw, in, got);

    round_to(dt, hw.w13, (size_t)(up_n * H));
    round_to(dt, hw.w2, (size_t)(H * F));
    round_to(dt, in, (size_t)(rows * H));
    int64_t tile = 16;
    float *want = xcalloc((size_t)(rows * H), sizeof(float));
    float *scratch = xcalloc((size_t)moe_expert_scratch_floats(act, F, tile), sizeof(float));
    CHECK_OK(moe_expert_forward(&hw, act, H, F, rows, in, want, scratch, tile));

    char what[96];
    snprintf(what, sizeof what, "expert %s %s H=%lld F=%lld rows=%lld", dtype_name(dt),
             act == MOE_ACT_SWIGLU ? "swiglu" : "gelu", (long long)H, (long long)F,
             (long long)rows);
    report(what, norm_err(got, want, (size_t)(rows * H)), expert_tolerance(dt));
    void *host[] = {hw.w13, hw.w2, in, got, want, scratch};
    for (size_t i = 0; i < 6; i++) {
        free(host[i]);
    }
}

static void test_experts(void)
{
    static const int64_t shapes[][3] = { /* H, F, rows */
        {64, 96, 0}, {64, 96, 1}, {64, 96, 5}, {64, 96, 64}, {67, 45, 1}, {67, 45, 33},
        {256, 704, 130},
    };
    const moe_dtype_t dts[] = {MOE_DTYPE_F32, MOE_DTYPE_BF16, MOE_DTYPE_F16};
    for (size_t d = 0; d < 3; d++) {
        for (int a = 0; a < 2; a++) {
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                test_expert(dts[d], a == 0 ? MOE_ACT_SWIGLU : MOE_ACT_GELU, shapes[s][0],
                            shapes[s][1], shapes[s][2]);
            }
        }
    }
}

/* ---- events, memory accounting, GEMM probe ---- */

static void test_events(void)
{
    moe_cuda_event_t *b = NULL, *e = NULL;
    int64_t ns = -1;
    bool done = false;
    CHECK_OK(moe_cuda_event_create(g_cuda, &b, &g_err));
    CHECK_OK(moe_cuda_event_create(g_cuda, &e, &g_err));
    CHECK_OK(moe_cuda_event_record(g_cuda, b, MOE_CUDA_STREAM_COMPUTE, &g_err));
    test_merge(512, 1024, 4, 0); /* some work between the two */
    CHECK_OK(moe_cuda_event_record(g_cuda, e, MOE_CUDA_STREAM_COMPUTE, &g_err));
    CHECK_OK(moe_cuda_stream_wait_event(g_cuda, MOE_CUDA_STREAM_COMM, e, &g_err));
    CHECK_OK(moe_cuda_sync(g_cuda, MOE_CUDA_STREAM_COMM, &g_err));
    CHECK_OK(moe_cuda_event_query(e, &done, &g_err));
    CHECK(done);
    CHECK_OK(moe_cuda_event_elapsed_ns(b, e, &ns, &g_err));
    CHECK(ns >= 0);
    printf("%-58s %lld ns  %s\n", "events: record, wait, query, elapsed", (long long)ns,
           done && ns >= 0 ? "ok" : "FAIL");
    moe_cuda_event_destroy(b);
    moe_cuda_event_destroy(e);
}

static void test_mem_usage(void)
{
    uint64_t cur0, peak0, cur1, peak1, cur2;
    void *p = NULL, *q = NULL;
    moe_cuda_mem_usage(&cur0, &peak0);
    CHECK_OK(moe_cuda_alloc(g_cuda, 3 << 20, &p, &g_err));
    CHECK_OK(moe_cuda_alloc(g_cuda, 1000, &q, &g_err));
    moe_cuda_mem_usage(&cur1, &peak1);
    moe_cuda_free(g_cuda, p);
    moe_cuda_free(g_cuda, q);
    moe_cuda_mem_usage(&cur2, NULL);
    CHECK_INT_EQ(cur1 - cur0, (3 << 20) + 1000);
    CHECK(peak1 >= cur1 && peak1 >= peak0);
    CHECK_INT_EQ(cur2, cur0);
    CHECK_OK(moe_cuda_alloc(g_cuda, 0, &p, &g_err));
    CHECK(p == NULL);
    printf("%-58s %llu -> %llu -> %llu bytes, peak %llu  %s\n", "memory accounting",
           (unsigned long long)cur0, (unsigned long long)cur1, (unsigned long long)cur2,
           (unsigned long long)peak1, cur1 - cur0 == (3u << 20) + 1000 && cur2 == cur0 ? "ok" : "FAIL");
}

/* Host memory page-locked for the copies (the host transports' row buffers), at an address
 * that is not page-aligned: a round trip through the device is exact; NULL or 0 bytes is
 * refused. */
static void test_host_pin(void)
{
    size_t n = (size_t)3 << 18; /* 3 MiB of floats, not page-aligned (the arena's aren't) */
    float *buf = malloc(n * sizeof(float) + 64), *h = buf + 3, *back = malloc(n * sizeof(float));
    void *d = NULL;
    CHECK(buf != NULL && back != NULL);
    for (size_t i = 0; i < n; i++) {
        h[i] = (float)i * 0.5f;
    }
    bool pinned = moe_cuda_host_pin(h, n * sizeof(float));
    CHECK(pinned);
    CHECK_OK(moe_cuda_alloc(g_cuda, n * sizeof(float), &d, &g_err));
    CHECK_OK(moe_cuda_copy(g_cuda, d, h, n * sizeof(float), MOE_CUDA_COPY_H2D,
                           MOE_CUDA_STREAM_COMPUTE, &g_err));
    CHECK_OK(moe_cuda_copy(g_cuda, back, d, n * sizeof(float), MOE_CUDA_COPY_D2H,
                           MOE_CUDA_STREAM_COMPUTE, &g_err));
    CHECK_OK(moe_cuda_sync(g_cuda, MOE_CUDA_STREAM_COMPUTE, &g_err));
    bool same = memcmp(h, back, n * sizeof(float)) == 0;
    CHECK(same);
    moe_cuda_host_unpin(h);
    CHECK(!moe_cuda_host_pin(NULL, 16) && !moe_cuda_host_pin(h, 0));
    moe_cuda_free(g_cuda, d);
    free(buf);
    free(back);
    printf("%-58s %s  %s\n", "host memory pinned, round trip", pinned ? "pinned" : "not pinned",
           pinned && same ? "ok" : "FAIL");
}

static void test_probe(void)
{
    double tf = -1.0;
    CHECK_OK(moe_cuda_gemm_probe(g_cuda, MOE_DTYPE_BF16, MOE_ACT_SWIGLU, 1024, 1024, 512, 3, &tf,
                                 &g_err));
    CHECK(tf > 0.0 && isfinite(tf));
    printf("%-58s %.1f TFLOP/s  %s\n", "gemm probe bf16 swiglu H=1024 F=1024 rows=512", tf,
           tf > 0.0 && isfinite(tf) ? "ok" : "FAIL");
}

int main(void)
{
    char why[256];
    if (!moe_cuda_available(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    moe_error_clear(&g_err);
    if (moe_cuda_create(0, &g_cuda, &g_err) != MOE_OK) {
        fprintf(stderr, "moe_cuda_create: %s\n", g_err.msg);
        return 1;
    }
    printf("device 0: %s\n", moe_cuda_device_name(g_cuda));
    for (moe_dtype_t dt = MOE_DTYPE_F32; dt <= MOE_DTYPE_F16; dt++) {
        test_upload(dt);
    }
    static const gate_case_t gates[] = {
        {0, 16, 8, 2, false, false, TIE_NONE},     {1, 16, 8, 2, false, false, TIE_NONE},
        {37, 33, 8, 2, true, false, TIE_NONE},     {129, 64, 64, 6, true, true, TIE_NONE},
        {300, 128, 256, 8, false, true, TIE_NONE}, {5, 8, 1024, 16, true, true, TIE_NONE},
        {17, 8, 33, 33, true, false, TIE_NONE},    {9, 16, 8, 3, true, false, TIE_ALL},
        {50, 32, 16, 2, false, true, TIE_GROUP},   {50, 32, 16, 3, true, true, TIE_GROUP},
        {64, 16, 40, 40, false, false, TIE_ALL},
    };
    for (size_t i = 0; i < sizeof gates / sizeof gates[0]; i++) {
        test_gate(&gates[i]);
    }
    test_gate_ties_exact();
    test_gate_args();
    test_gather(0, 4, 16, false);
    test_gather(1, 3, 7, false);
    test_gather(19, 5, 33, true);
    test_gather(300, 64, 128, true);
    test_gather(300, 64, 130, false);
    test_merge(0, 8, 2, 0);
    test_merge(1, 5, 1, 0);
    test_merge(13, 33, 2, 3);
    test_merge(200, 256, 8, 5);
    test_merge(64, 1030, 3, 2);
    test_experts();
    test_host_pin();
    test_events();
    test_mem_usage();
    test_probe();
    moe_cuda_destroy(g_cuda);
    return moe_test_finish("test_cuda_ops");
}
