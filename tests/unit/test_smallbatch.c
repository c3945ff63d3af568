/* The small-batch expert kernels (expert/smallbatch.h) against a plain scalar reference
 * written here: for each weight type (BF16, FP8 e4m3 with block scales, MXFP4 e2m1 with e8m0
 * scales) and each kernel this CPU runs (avx2, avx512, avx512_bf16), random shapes with
 * ragged edges (outputs not a multiple of 64 or 16, inputs not of 32 or of the FP8 block),
 * rows 1..40, F32 and BF16 outputs, a split of the column blocks (threads), and the
 * dequantisations (to oneDNN's BF16 layout, to F32 rows). The weights are packed into the
 * blocked layout (model/weights.h) here; for BF16 also by oneDNN itself (moe_onednn_pack),
 * whose layout must then be that one, element for element. The reference decodes FP8 e4m3
 * and e2m1 / e8m0 from their definitions (OCP FP8 and MX v1.0), in double.
 * Then the expert FFN per call (expert/expert_small.h) on FP8 and MXFP4 weights: the
 * kernels' path and the GEMM path (dequantised for oneDNN or the BLAS) against the same
 * reference FFN, and the switch point taking the one or the other (the counts).
 * Run twice by ctest: as is, and with MOED_CPU_NO_BF16=1 (no avx512_bf16: the F32 kernels). */
#include <stdlib.h>
#include <string.h>

#include "expert/expert.h"
#include "expert/expert_small.h"
#include "expert/onednn.h"
#include "expert/smallbatch.h"
#include "model/weights.h"
#include "moe/bf16.h"
#include "moe/testctl.h"
#include "test_util.h"

static unsigned g_seed = 12345u;

static unsigned rnd(void)
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return g_seed >> 8;
}

static double unif(void) /* [-1, 1) */
{
    return (double)(rnd() & 0xffff) / 32768.0 - 1.0;
}

/* e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0: subnormal. */
static double ref_e4m3(uint8_t c)
{
    int e = (c >> 3) & 15, m = c & 7;
    double v = e == 0 ? m / 8.0 * ldexp(1.0, -6) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    return c & 0x80 ? -v : v;
}

/* e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0: 0 or 0.5. */
static double ref_e2m1(uint8_t nib)
{
    int e = (nib >> 1) & 3, m = nib & 1;
    double v = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * ldexp(1.0, e - 1);
    return nib & 8 ? -v : v;
}

/* A weight matrix W [n, k], row-major, as the file holds it, and its values. */
typedef struct mat {
    moe_sb_type_t type;
    int64_t n, k, bn, bk; /* FP8 scale block */
    uint16_t *bf16;       /* BF16: [n, k] */
    uint8_t *codes;       /* FP8: [n, k]; MXFP4: [n, k / 2] (even k low nibble) */
    float *fscale;        /* FP8: [ceil(n / bn), ceil(k / bk)] */
    uint8_t *escale;      /* MXFP4: [n, k / 32] */
    double *val;          /* [n, k] the values, from the definitions */
    /* the blocked layout */
    void *q;
    void *s;
    moe_sb_matrix_t m;
} mat_t;

/* gemm_case's FP8 matrices: some scale blocks of 2^8 and more (the FFN cases keep their
 * values small: SiLU of large sums would loosen their tolerance) */
static bool g_big_scales;
/* Outputs an FP8 scale covers (the checkpoint's weight_block_size rows): 128, or fewer so
 * that a 64-output column block holds several scales (their order in the kernels' lanes) */
static int64_t g_fp8_bn = 128;

static void mat_free(mat_t *a)
{
    free(a->bf16);
    free(a->codes);
    free(a->fscale);
    free(a->escale);
    free(a->val);
    free(a->q);
    free(a->s);
}

static mat_t mat_make(moe_sb_type_t type, int64_t n, int64_t k)
{
    mat_t a = {.type = type, .n = n, .k = k, .bn = type == MOE_SB_FP8 ? g_fp8_bn : 128,
               .bk = 128};
    int64_t np = moe_blk_pad(n, MOE_BLK_N), kp = moe_blk_pad(k, MOE_BLK_K);
    a.val = calloc((size_t)(n * k), sizeof(double));
    if (type == MOE_SB_BF16) {
        a.bf16 = malloc((size_t)(n * k) * 2);
        for (int64_t i = 0; i < n * k; i++) {
            a.bf16[i] = moe_f32_to_bf16((float)unif());
            a.val[i] = moe_bf16_to_f32(a.bf16[i]);
        }
        a.q = calloc((size_t)(np * kp), 2);
        for (int64_t r = 0; r < n; r++) {
            for (int64_t c = 0; c < k; c++) {
                ((uint16_t *)a.q)[moe_blk_index(r, c, kp)] = a.bf16[r * k + c];
            }
        }
        a.m = (moe_sb_matrix_t){.type = type, .codes = a.q, .n = n, .k = k, .sk = 32};
    } else if (type == MOE_SB_FP8) {
        int64_t sr = (n + a.bn - 1) / a.bn, sc = (k + a.bk - 1) / a.bk, ks = (kp + a.bk - 1) / a.bk;
        a.codes = malloc((size_t)(n * k));
        a.fscale = malloc((size_t)(sr * sc) * sizeof(float));
        for (int64_t i = 0; i < sr * sc; i++) {
            a.fscale[i] = (float)ldexp(1.0 + 0.5 * unif(), -(int)(rnd() % 9)); /* 2^-8 .. 1.5 */
            if (g_big_scales && i % 4 == 0) { /* 2^8 .. 2^11: times 2^120 past F32's range
                                               * (the avx512 FP8 unfolded blocks); 2^72 ..
                                               * 2^75: times 2^56 (the avx2 ones) */
                a.fscale[i] = (float)ldexp(1.0 + 0.5 * unif(),
                                           (i / 4 % 2 ? 72 : 8) + (int)(rnd() % 4));
            }
        }
        for (int64_t i = 0; i < n * k; i++) {
            uint8_t c = (uint8_t)(rnd() & 0xff);
            if ((c & 0x7f) == 0x7f) {
                c &= 0xfe; /* no NaN: the loader refuses it */
            }
            if (i % 37 == 0) {
                c = (uint8_t)(rnd() & 0x87); /* some subnormals (exponent 0) and zeros */
            }
            a.codes[i] = c;
            a.val[i] = ref_e4m3(c) * (double)a.fscale[(i / k / a.bn) * sc + (i % k) / a.bk];
        }
        a.q = calloc((size_t)(np * kp), 1);
        a.s = calloc((size_t)(np * ks), sizeof(float));
        for (int64_t r = 0; r < n; r++) {
            for (int64_t c = 0; c < k; c++) {
                ((uint8_t *)a.q)[moe_blk_index(r, c, kp)] = a.codes[r * k + c];
            }
            for (int64_t j = 0; j < sc; j++) {
                ((float *)a.s)[moe_blk_scale_index(r, j, ks)] = a.fscale[(r / a.bn) * sc + j];
            }
        }
        a.m = (moe_sb_matrix_t){.type = type, .codes = a.q, .scales = a.s, .n = n, .k = k,
                                .sk = a.bk};
    } else {
        int64_t ks = k / 32;
        a.codes = malloc((size_t)(n * k / 2));
        a.escale = malloc((size_t)(n * ks));
        for (int64_t i = 0; i < n * ks; i++) {
            a.escale[i] = (uint8_t)(120 + rnd() % 14); /* 2^-7 .. 2^6 */
            if (i % 53 == 0) {
                a.escale[i] = (uint8_t)(rnd() % 2); /* 2^-127 (a subnormal) or 2^-126 */
            }
        }
        for (int64_t i = 0; i < n * k / 2; i++) {
            a.codes[i] = (uint8_t)(rnd() & 0xff);
            int64_t r = 2 * i / k, c = 2 * i % k;
            double s = ldexp(1.0, a.escale[r * ks + c / 32] - 127);
            a.val[r * k + c] = ref_e2m1(a.codes[i] & 15) * s;
            a.val[r * k + c + 1] = ref_e2m1(a.codes[i] >> 4) * s;
        }
        a.q = calloc((size_t)(np * kp / 2), 1);
        a.s = malloc((size_t)(np * ks));
        memset(a.s, 127, (size_t)(np * ks));
        for (int64_t r = 0; r < n; r++) {
            for (int64_t c = 0; c < k; c += 2) {
                uint8_t b = a.codes[(r * k + c) / 2];
                moe_mx_put(a.q, r, c, kp, b & 15);
                moe_mx_put(a.q, r, c + 1, kp, b >> 4);
            }
            for (int64_t j = 0; j < ks; j++) {
                ((uint8_t *)a.s)[moe_blk_scale_index(r, j, ks)] = a.escale[r * ks + j];
            }
        }
        a.m = (moe_sb_matrix_t){.type = type, .codes = a.q, .scales = a.s, .n = n, .k = k,
                                .sk = 32};
    }
    return a;
}

/* x [m, kp] (zero past k), as the kernels of `isa` read it (BF16 or F32), and its values. */
static void *rows_make(moe_sb_isa_t isa, int64_t m, int64_t k, int64_t kp, double *xv)
{
    bool bf = isa >= MOE_SB_AVX512_BF16;
    void *x = calloc((size_t)(m * kp), bf ? 2 : 4);
    for (int64_t r = 0; r < m; r++) {
        for (int64_t c = 0; c < k; c++) {
            float v = (float)(unif() * 2.0);
            if (bf) {
                ((uint16_t *)x)[r * kp + c] = moe_f32_to_bf16(v);
                v = moe_bf16_to_f32(moe_f32_to_bf16(v));
            } else {
                ((float *)x)[r * kp + c] = v;
            }
            xv[r * k + c] = v;
        }
    }
    return x;
}

/* Largest |y - ref| / (sum_k |x w| + tiny) over the m x n outputs (y F32 or BF16). */
static double worst(const mat_t *a, int64_t m, const double *xv, const void *y, int64_t ldy,
                    bool y_bf16, int64_t j0, int64_t j1)
{
    double bad = 0.0;
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = j0; j < j1; j++) {
            double s = 0.0, mag = 1e-30;
            for (int64_t c = 0; c < a->k; c++) {
                s += xv[r * a->k + c] * a->val[j * a->k + c];
                mag += fabs(xv[r * a->k + c] * a->val[j * a->k + c]);
            }
            double got = y_bf16 ? moe_bf16_to_f32(((const uint16_t *)y)[r * ldy + j])
                                : ((const float *)y)[r * ldy + j];
            double e = fabs(got - s) / mag;
            bad = e > bad || isnan(e) ? e : bad; /* a NaN or an inf output is the worst */
            if (isnan(bad)) {
                return bad;
            }
        }
    }
    return bad;
}

/* The kernel sets, each case running those this CPU has (moe_sb_cpu_has). */
static const moe_sb_isa_t k_isas[4] = {MOE_SB_AVX2, MOE_SB_AVX512, MOE_SB_AVX512_BF16,
                                       MOE_SB_AVX512_BF16_VBMI};

static const char *tname(moe_sb_type_t t)
{
    return t == MOE_SB_BF16 ? "bf16" : t == MOE_SB_FP8 ? "fp8" : "mxfp4";
}

/* One shape, every kernel this CPU runs, rows 1..40 (a few of them), F32 and BF16 outputs. */
static void gemm_case(moe_sb_type_t type, int64_t n, int64_t k)
{
    g_big_scales = true;
    mat_t a = mat_make(type, n, k);
    g_big_scales = false;
    int64_t kp = moe_blk_pad(k, MOE_BLK_K), nbn = moe_blk_pad(n, MOE_BLK_N) / MOE_BLK_N;
    const int rows[] = {1, 2, 3, 5, 6, 7, 8, 13, 16, 24, 33, 40};
    for (int ii = 0; ii < 4; ii++) {
        moe_sb_isa_t isa = k_isas[ii];
        if (!moe_sb_cpu_has(isa)) {
            continue;
        }
        for (size_t ri = 0; ri < sizeof(rows) / sizeof(rows[0]); ri++) {
            int64_t m = rows[ri];
            if ((rnd() % 3 != 0) && m > 3 && m != 40 && m != 7) {
                continue; /* 1-3, 7 (3 + 4) and 40 always, a third of the others at random:
                           * the run stays short */
            }
            double *xv = calloc((size_t)(m * k), sizeof(double));
            void *x = rows_make(isa, m, k, kp, xv);
            int64_t ldy = n + 3;
            float *y = malloc((size_t)(m * ldy) * sizeof(float));
            uint16_t *yb = malloc((size_t)(m * ldy) * sizeof(uint16_t));
            for (int64_t i = 0; i < m * ldy; i++) {
                y[i] = -12345.0f; /* outside the outputs: must stay */
            }
            moe_sb_gemm(isa, &a.m, m, x, kp, y, ldy, false, 0, nbn);
            double e = worst(&a, m, xv, y, ldy, false, 0, n);
            if (e > 2e-6) {
                fprintf(stderr, "%s %s n=%lld k=%lld rows=%lld: relative error %g\n", tname(type),
                        moe_sb_isa_name(isa), (long long)n, (long long)k, (long long)m, e);
            }
            CHECK(e <= 2e-6);
            int kept = 1;
            for (int64_t r = 0; r < m; r++) {
                for (int64_t j = n; j < ldy; j++) {
                    kept &= y[r * ldy + j] == -12345.0f;
                }
            }
            CHECK(kept);
            if (isa == MOE_SB_AVX2) {
                /* a row alone gives the same bits as beside the others (the avx2 kernels'
                 * arithmetic does not depend on a pass's rows), every row: the one-row
                 * kernels against the BF16 and FP8 passes of 2-4 rows and the 32-row ones */
                float *y1 = malloc((size_t)ldy * sizeof(float));
                for (int64_t r = 0; r < m; r++) {
                    moe_sb_gemm(isa, &a.m, 1, (const float *)x + r * kp, kp, y1, ldy, false, 0,
                                nbn);
                    CHECK(memcmp(y1, y + r * ldy, (size_t)n * sizeof(float)) == 0);
                }
                free(y1);
            }
            /* BF16 output, and the column blocks in two parts (as two threads run them) */
            int64_t cut = nbn / 2;
            moe_sb_gemm(isa, &a.m, m, x, kp, yb, ldy, true, 0, cut);
            moe_sb_gemm(isa, &a.m, m, x, kp, yb, ldy, true, cut, nbn);
            e = worst(&a, m, xv, yb, ldy, true, 0, n);
            CHECK(e <= 1.0 / 256);
            free(xv);
            free(x);
            free(y);
            free(yb);
        }
    }
    mat_free(&a);
}

/* Small inputs (2^-24 x [-1, 1)) keep their precision: the products of FP8 values and such
 * inputs are far under F32's normal range wherever a kernel multiplies the codes' values x
 * 2^-120 (the avx2 kernels' decoding) by the inputs before the scales, unless it raises the
 * inputs first (FP8_X). The reference's tolerance as for ordinary inputs, every kernel. */
static void small_inputs_case(moe_sb_type_t type)
{
    int64_t n = 64, k = 256, kp = k;
    mat_t a = mat_make(type, n, k);
    for (int ii = 0; ii < 8; ii++) {
        int64_t m = ii < 4 ? 3 : 1; /* the kernels of several rows, then of one */
        if (!moe_sb_cpu_has(k_isas[ii % 4])) {
            continue;
        }
        bool bf = k_isas[ii % 4] >= MOE_SB_AVX512_BF16;
        double *xv = calloc((size_t)(m * k), sizeof(double));
        void *x = rows_make(k_isas[ii % 4], m, k, kp, xv);
        for (int64_t i = 0; i < m * k; i++) { /* times 2^-24: exact in F32 and BF16 */
            int64_t at = i / k * kp + i % k;
            if (bf) {
                uint16_t *xb = x;
                xb[at] = moe_f32_to_bf16(ldexpf(moe_bf16_to_f32(xb[at]), -24));
            } else {
                ((float *)x)[at] = ldexpf(((float *)x)[at], -24);
            }
            xv[i] = ldexp(xv[i], -24);
        }
        float *y = malloc((size_t)(m * n) * sizeof(float));
        moe_sb_gemm(k_isas[ii % 4], &a.m, m, x, kp, y, n, false, 0, n / MOE_BLK_N);
        double e = worst(&a, m, xv, y, n, false, 0, n);
        if (e > 2e-6) {
            fprintf(stderr, "%s %s, %lld rows of inputs of 2^-24: relative error %g\n",
                    tname(type), moe_sb_isa_name(k_isas[ii % 4]), (long long)m, e);
        }
        CHECK(e <= 2e-6);
        free(xv);
        free(x);
        free(y);
    }
    mat_free(&a);
}

/* Every code decodes exactly: W holds each FP8 code (but the NaNs) and each e2m1 nibble, x is
 * one-hot rows (y = one column of W, one product each, no sum to round): y must equal the
 * reference value rounded once to F32, for every kernel. */
static void exact_case(moe_sb_type_t type)
{
    int64_t n = 128, k = 256, kp = k;
    mat_t a = mat_make(type, n, k);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t c = 0; c < k; c++) {
            int64_t i = r * k + c;
            if (type == MOE_SB_FP8) {
                uint8_t code = (uint8_t)(i % 256);
                code = (code & 0x7f) == 0x7f ? 0 : code;
                a.codes[i] = code;
                ((uint8_t *)a.q)[moe_blk_index(r, c, kp)] = code;
                a.val[i] = ref_e4m3(code) * (double)a.fscale[(r / a.bn) * 2 + c / a.bk];
            } else if (type == MOE_SB_MXFP4 && c % 2 == 0) {
                uint8_t byte = (uint8_t)(i / 2 % 256);
                moe_mx_put(a.q, r, c, kp, byte & 15);
                moe_mx_put(a.q, r, c + 1, kp, byte >> 4);
                double sc = ldexp(1.0, a.escale[r * (k / 32) + c / 32] - 127);
                a.val[i] = ref_e2m1(byte & 15) * sc;
                a.val[i + 1] = ref_e2m1(byte >> 4) * sc;
            }
        }
    }
    for (int ii = 0; ii < 4; ii++) {
        if (!moe_sb_cpu_has(k_isas[ii])) {
            continue;
        }
        bool bf = k_isas[ii] >= MOE_SB_AVX512_BF16;
        int bad = 0;
        for (int64_t c0 = 0; c0 < k; c0 += 32) {
            int64_t m = 32;
            void *x = calloc((size_t)(m * kp), bf ? 2 : 4);
            for (int64_t r = 0; r < m; r++) {
                if (bf) {
                    ((uint16_t *)x)[r * kp + c0 + r] = moe_f32_to_bf16(1.0f);
                } else {
                    ((float *)x)[r * kp + c0 + r] = 1.0f;
                }
            }
            float *y = malloc((size_t)(m * n) * sizeof(float));
            moe_sb_gemm(k_isas[ii], &a.m, m, x, kp, y, n, false, 0, n / MOE_BLK_N);
            for (int64_t r = 0; r < m; r++) {
                for (int64_t j = 0; j < n; j++) {
                    float want = (float)a.val[j * k + c0 + r];
                    if (y[r * n + j] != want && fabs(want) >= 0x1p-126) { /* not subnormal */
                        if (bad++ < 3) {
                            fprintf(stderr, "%s %s: W[%lld, %lld] = %.9g, want %.9g\n",
                                    tname(type), moe_sb_isa_name(k_isas[ii]), (long long)j,
                                    (long long)(c0 + r), y[r * n + j], want);
                        }
                    }
                }
            }
            free(x);
            free(y);
        }
        CHECK_INT_EQ(bad, 0);
    }
    mat_free(&a);
}

/* The dequantisations: to BF16 in the blocked layout (vectorised and scalar) equal to the
 * reference value rounded to BF16, to F32 rows equal to the value in F32 (code x scale). */
static void dequant_case(moe_sb_type_t type, int64_t n, int64_t k)
{
    mat_t a = mat_make(type, n, k);
    int64_t np = moe_blk_pad(n, MOE_BLK_N), kp = moe_blk_pad(k, MOE_BLK_K);
    uint16_t *d1 = calloc((size_t)(np * kp), 2), *d2 = calloc((size_t)(np * kp), 2);
    float *f = malloc((size_t)(n * k) * sizeof(float));
    moe_sb_dequant_bf16(MOE_SB_NONE, &a.m, d1, 0, np / MOE_BLK_N);
    int same = 1, exact = 1, zero_pad = 1;
    if (moe_sb_cpu_has(MOE_SB_AVX512_BF16)) {
        moe_sb_dequant_bf16(MOE_SB_AVX512_BF16, &a.m, d2, 0, np / MOE_BLK_N);
        /* the same bits, but values under F32's smallest normal (2^-126: an e8m0 scale of
         * 0 or 1) are 0 there (vcvtne2ps2bf16 flushes subnormals) */
        for (int64_t i = 0; i < np * kp; i++) {
            same &= d1[i] == d2[i] ||
                    ((d2[i] & 0x7fff) == 0 && fabs(moe_bf16_to_f32(d1[i])) < 0x1p-126);
        }
    }
    moe_sb_dequant_f32(&a.m, f, 0, n);
    /* pieces of rows (starts on and off multiples of 8 and 64, the avx2 BF16 code's 8-row
     * groups and the scalar rows) give the same values as the whole */
    float *g = malloc((size_t)(n * k) * sizeof(float));
    int pieces = 1;
    for (int64_t r0 = 0, step = 0; r0 < n; step++) {
        static const int64_t len[] = {8, 16, 3, 64, 5, 40, 1, 72};
        int64_t r1 = r0 + len[step % 8] < n ? r0 + len[step % 8] : n;
        moe_sb_dequant_f32(&a.m, g + r0 * k, r0, r1);
        r0 = r1;
    }
    pieces = memcmp(f, g, (size_t)(n * k) * sizeof(float)) == 0;
    free(g);
    if (type == MOE_SB_BF16) { /* the runtime's packing into the blocked layout */
        uint16_t *p = malloc((size_t)(np * kp) * 2);
        moe_sb_pack_bf16(a.bf16, n, k, p);
        pieces &= memcmp(p, a.q, (size_t)(np * kp) * 2) == 0;
        free(p);
    }
    CHECK(pieces);
    for (int64_t r = 0; r < np; r++) {
        for (int64_t c = 0; c < kp; c++) {
            uint16_t h = d1[moe_blk_index(r, c, kp)];
            if (r >= n || c >= k) {
                zero_pad &= h == 0;
                continue;
            }
            exact &= h == moe_f32_to_bf16((float)a.val[r * k + c]);
            exact &= f[r * k + c] == (float)a.val[r * k + c] ||
                     (type == MOE_SB_FP8 &&
                      fabs(f[r * k + c] - a.val[r * k + c]) <= 1e-7 * fabs(a.val[r * k + c]));
            exact &= moe_sb_value(&a.m, r, c) == f[r * k + c];
        }
    }
    if (!same || !exact || !zero_pad) {
        fprintf(stderr, "dequant %s n=%lld k=%lld: vectorised = scalar %d, values %d, "
                "padding zero %d\n", tname(type), (long long)n, (long long)k, same, exact,
                zero_pad);
    }
    CHECK(same);
    CHECK(exact);
    CHECK(zero_pad);
    free(d1);
    free(d2);
    free(f);
    mat_free(&a);
}

/* oneDNN's packed BF16 is the blocked layout: element (r, c) where moe_blk_index says, and
 * the kernels give the reference on it. */
static void onednn_case(int64_t h, int64_t ffn)
{
    moe_onednn_t *o = NULL;
    if (!moe_cpu_bf16_native() || moe_onednn_create(h, 2 * ffn, ffn, 64, 1, &o, NULL) != MOE_OK) {
        printf("no native BF16: oneDNN's layout not checked\n");
        return;
    }
    CHECK(moe_onednn_packed_blocked(o, MOE_ONEDNN_UP));
    CHECK(moe_onednn_packed_blocked(o, MOE_ONEDNN_DOWN));
    mat_t a = mat_make(MOE_SB_BF16, 2 * ffn, h);
    void *packed = NULL;
    CHECK(moe_onednn_pack(o, MOE_ONEDNN_UP, a.bf16, &packed, NULL) == MOE_OK);
    int64_t kp = moe_blk_pad(h, MOE_BLK_K), np = moe_blk_pad(2 * ffn, MOE_BLK_N);
    CHECK_INT_EQ(moe_onednn_packed_bytes(o, MOE_ONEDNN_UP), np * kp * 2);
    if (packed != NULL) {
        CHECK(memcmp(packed, a.q, (size_t)(np * kp) * 2) == 0);
        moe_sb_matrix_t m = a.m;
        m.codes = packed;
        int64_t rows = 3;
        double *xv = calloc((size_t)(rows * h), sizeof(double));
        void *x = rows_make(MOE_SB_AVX512_BF16, rows, h, kp, xv);
        float *y = malloc((size_t)(rows * 2 * ffn) * sizeof(float));
        moe_sb_gemm(MOE_SB_AVX512_BF16, &m, rows, x, kp, y, 2 * ffn, false, 0, np / MOE_BLK_N);
        CHECK(worst(&a, rows, xv, y, 2 * ffn, false, 0, 2 * ffn) <= 2e-6);
        free(xv);
        free(x);
        free(y);
    }
    free(packed);
    mat_free(&a);
    moe_onednn_destroy(o);
}

/* ------------------------------------------------------------------------------------ */
/* The FFN per call: kernels and GEMM paths against the reference FFN                    */

static double silu(double v)
{
    return v / (1.0 + exp(-v));
}

/* One SwiGLU expert of H x F held as `type` (FP8, MXFP4, or BF16 for F32 compute), rows
 * 1..max: both paths, each compute type this CPU runs, against the reference in double. */
static void ffn_case(moe_sb_type_t type, int64_t H, int64_t F, int threads)
{
    mat_t up = mat_make(type, 2 * F, H), down = mat_make(type, H, F);
    moe_weights_t w = {.store = type == MOE_SB_FP8     ? MOE_DTYPE_FP8
                                : type == MOE_SB_MXFP4 ? MOE_DTYPE_MXFP4
                                                       : MOE_DTYPE_BF16,
                       .fp8_block = {128, 128}};
    moe_expert_weights_t ew = {.id = 3, .w13_q = up.q, .w13_s = up.s, .w2_q = down.q,
                               .w2_s = down.s};
    if (type == MOE_SB_BF16) { /* BF16 for F32 compute: the blocked layout (no native BF16) */
        ew = (moe_expert_weights_t){.id = 3, .w13_packed = up.q, .w2_packed = down.q};
    }
    const int64_t tile = 64;
    for (int bf = 0; bf < 2; bf++) {
        moe_num_dtype_t compute = bf ? MOE_NUM_BF16 : MOE_NUM_F32;
        if (bf && (!moe_cpu_bf16_native() || type == MOE_SB_BF16)) {
            continue; /* BF16 weights in BF16 compute: oneDNN's layout (onednn_case) */
        }
        for (int path = 0; path < 2; path++) { /* switch point 576 (kernels) or 0 (GEMMs) */
            moe_config_t cfg = {.hidden_dim = H, .ffn_dim = F, .activation = MOE_ACT_SWIGLU,
                                .threads = threads, .small_batch_rows = path == 0 ? 576 : 0};
            moe_onednn_t *o = NULL;
            moe_expert_small_t *s = NULL;
            moe_error_t err;
            moe_error_clear(&err);
            if (bf) {
                CHECK(moe_onednn_create(H, 2 * F, F, tile, threads, &o, &err) == MOE_OK);
            }
            CHECK(moe_expert_small_create(&cfg, &w, compute, o, tile, &s, &err) == MOE_OK);
            if (s == NULL) {
                fprintf(stderr, "%s\n", err.msg);
                moe_onednn_destroy(o);
                continue;
            }
            bool kernels = moe_expert_small_isa(s) != MOE_SB_NONE && path == 0;
            int64_t rows = 1 + (int64_t)(rnd() % 40), bucket = moe_onednn_bucket(rows);
            double *xv = calloc((size_t)(bucket * H), sizeof(double));
            float *xf = calloc((size_t)(bucket * H), sizeof(float));
            uint16_t *xb = calloc((size_t)(bucket * H), 2);
            for (int64_t i = 0; i < rows * H; i++) {
                float v = (float)unif();
                if (bf) {
                    v = moe_bf16_to_f32(moe_f32_to_bf16(v));
                }
                xv[i] = v;
                xf[i] = v;
                xb[i] = moe_f32_to_bf16(v);
            }
            float *out = calloc((size_t)(bucket * H), sizeof(float));
            float *scratch = calloc((size_t)(tile * 2 * F), sizeof(float));
            uint16_t *hb = calloc((size_t)(tile * 2 * F), 2), *ab = calloc((size_t)(tile * F), 2);
            moe_status_t st = bf ? moe_expert_small_forward_bf16(s, o, &ew, MOE_ACT_SWIGLU, H, F,
                                                                 rows, xb, hb, ab, out, &err)
                                 : moe_expert_small_forward_f32(s, &ew, MOE_ACT_SWIGLU, H, F,
                                                                rows, xf, out, scratch, tile,
                                                                &err);
            CHECK(st == MOE_OK);
            int64_t calls[2], nrows[2];
            moe_expert_small_counts(s, calls, nrows);
            CHECK_INT_EQ(calls[0], kernels ? 1 : 0);
            CHECK_INT_EQ(calls[1], kernels ? 0 : 1);
            CHECK_INT_EQ(nrows[kernels ? 0 : 1], rows);
            /* the reference: BF16 compute rounds the up projection and the activation; its
             * GEMM path the dequantised weights too (code x scale to BF16: oneDNN's input) */
            bool wround = bf && !kernels;
#define WV(m, i) (wround ? (double)moe_bf16_to_f32(moe_f32_to_bf16((float)(m).val[i])) \
                         : (m).val[i])
            double worst_e = 0.0;
            double *hv = malloc((size_t)(2 * F) * sizeof(double));
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t j = 0; j < 2 * F; j++) {
                    double t = 0.0;
                    for (int64_t c = 0; c < H; c++) {
                        t += xv[r * H + c] * WV(up, j * H + c);
                    }
                    hv[j] = bf ? moe_bf16_to_f32(moe_f32_to_bf16((float)t)) : t;
                }
                for (int64_t j = 0; j < F; j++) {
                    double act = silu(hv[j]) * hv[F + j];
                    hv[j] = bf ? moe_bf16_to_f32(moe_f32_to_bf16((float)act)) : act;
                }
                for (int64_t j = 0; j < H; j++) {
                    double t = 0.0, mag = 1e-30;
                    for (int64_t c = 0; c < F; c++) {
                        t += hv[c] * WV(down, j * F + c);
                        mag += fabs(hv[c] * WV(down, j * F + c));
                    }
                    double e = fabs(out[r * H + j] - t) / mag;
                    if (!isnan(worst_e) && (isnan(e) || e > worst_e)) { /* NaN: the worst */
                        worst_e = e;
                    }
                }
            }
#undef WV
            /* BF16: the roundings of h may flip (F32 sums in another order): a few BF16 ulps */
            double tol = !bf ? 1e-5 : 1e-2;
            if (worst_e > tol) {
                fprintf(stderr, "ffn %s %s %s rows=%lld threads=%d: relative error %g\n",
                        tname(type), bf ? "bf16" : "f32", kernels ? "kernels" : "gemm",
                        (long long)rows, threads, worst_e);
            }
            CHECK(worst_e <= tol);
            free(hv);
            free(xv);
            free(xf);
            free(xb);
            free(out);
            free(scratch);
            free(hb);
            free(ab);
            moe_expert_small_destroy(s);
            moe_onednn_destroy(o);
        }
    }
    mat_free(&up);
    mat_free(&down);
}

/* moe_weights_quant_arena, as the loader holds a layer's FP8 / MXFP4 experts: n experts'
 * four pieces each in a row, 64-byte aligned, sized as moe_weights_quant_bytes says, codes 0
 * and MXFP4's scales 2^0 (127); one expert freed gives its pages back and leaves the others'
 * bytes alone; an expert of its own (moe_weights_expert_alloc, online rebalancing) in one
 * region that freeing it frees (ASan's leak check sees the rest). */
static void arena_case(moe_dtype_t store)
{
    moe_config_t cfg = {.hidden_dim = 2048, .ffn_dim = 768, .activation = MOE_ACT_SWIGLU};
    size_t b[4];
    moe_weights_quant_bytes(&cfg, store, 128, b);
    enum { N = 3 };
    moe_expert_weights_t ew[N];
    memset(ew, 0, sizeof(ew));
    void *arena = NULL;
    moe_error_t err = {0};
    CHECK(moe_weights_quant_arena(&cfg, store, 128, N, ew, &arena, &err) == MOE_OK);
    if (arena == NULL) {
        return;
    }
    size_t per = 0;
    for (int i = 0; i < 4; i++) {
        per += (b[i] + 63) / 64 * 64;
    }
    for (int e = 0; e < N; e++) {
        uint8_t *base = (uint8_t *)arena + per * (size_t)e;
        uint8_t *piece[4] = {ew[e].w13_q, ew[e].w13_s, ew[e].w2_q, ew[e].w2_s};
        CHECK(ew[e].q_pooled == per && !ew[e].q_owner && ew[e].w13_q == base);
        for (int i = 0; i < 4; i++) {
            CHECK((uintptr_t)piece[i] % 64 == 0);
            CHECK(piece[i] >= base && piece[i] + b[i] <= base + per);
            CHECK(i == 0 || piece[i] >= piece[i - 1] + b[i - 1]);
        }
        CHECK(ew[e].w13_q[0] == 0 && ew[e].w2_q[b[2] - 1] == 0);
        if (store == MOE_DTYPE_MXFP4) {
            CHECK(((uint8_t *)ew[e].w13_s)[0] == 127 && ((uint8_t *)ew[e].w2_s)[b[3] - 1] == 127);
        } else {
            CHECK(((float *)ew[e].w2_s)[b[3] / sizeof(float) - 1] == 0.0f);
        }
        memset(base, 0x5A, per);
    }
    moe_weights_expert_free(&ew[1]);
    CHECK(ew[1].w13_q == NULL && ew[0].q_pooled == per && ew[2].q_pooled == per);
    const uint8_t *e0 = arena, *e2 = (const uint8_t *)arena + 2 * per;
    CHECK(e0[per - 1] == 0x5A && e2[0] == 0x5A && e2[per - 1] == 0x5A);
    moe_weights_expert_free(&ew[0]);
    moe_weights_expert_free(&ew[2]);
    free(arena);

    moe_expert_weights_t own;
    CHECK(moe_weights_expert_alloc(&cfg, 5, store, 128, &own, &err) == MOE_OK);
    CHECK(own.id == 5 && own.q_owner && own.q_pooled == per);
    CHECK((uint8_t *)own.w2_s + b[3] <= own.w13_q + per);
    moe_weights_expert_free(&own);
    CHECK(own.w13_q == NULL);
}

int main(void)
{
    const char *nobf = getenv("MOED_CPU_NO_BF16");
    bool forced = nobf != NULL && nobf[0] != '\0' && strcmp(nobf, "0") != 0;
    printf("kernels here: avx2 %d, avx512 %d, avx512_bf16 %d, avx512_bf16+vbmi %d%s\n",
           moe_sb_cpu_has(MOE_SB_AVX2), moe_sb_cpu_has(MOE_SB_AVX512),
           moe_sb_cpu_has(MOE_SB_AVX512_BF16), moe_sb_cpu_has(MOE_SB_AVX512_BF16_VBMI),
           forced ? " (MOED_CPU_NO_BF16 set)" : "");
    if (forced) { /* the variable takes avx512_bf16 away: F32 kernels for BF16 compute none */
        CHECK(!moe_sb_cpu_has(MOE_SB_AVX512_BF16));
        CHECK(!moe_sb_cpu_has(MOE_SB_AVX512_BF16_VBMI));
        CHECK(moe_sb_isa(true) == MOE_SB_NONE);
    }
    CHECK(moe_sb_isa(false) != MOE_SB_NONE || !moe_sb_cpu_has(MOE_SB_AVX2));
    /* shapes: ragged outputs (n % 64, n % 16), inputs past a 32 block and a 128 FP8 block */
    const int64_t shapes[][2] = {{1, 32}, {16, 64}, {17, 96}, {64, 128}, {100, 160},
                                 {130, 256}, {200, 288}, {77, 416}};
    for (int t = 0; t < MOE_SB_TYPES; t++) {
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
            gemm_case((moe_sb_type_t)t, shapes[i][0], shapes[i][1]);
            dequant_case((moe_sb_type_t)t, shapes[i][0], shapes[i][1]);
        }
        if (t != MOE_SB_MXFP4) { /* inputs not a multiple of 32 (MXFP4's must be) */
            gemm_case((moe_sb_type_t)t, 70, 136);
            gemm_case((moe_sb_type_t)t, 3, 45);
            dequant_case((moe_sb_type_t)t, 70, 136);
            dequant_case((moe_sb_type_t)t, 3, 45); /* odd: the packing's last input alone */
            dequant_case((moe_sb_type_t)t, 65, 33); /* a last K-block of that input only */
            dequant_case((moe_sb_type_t)t, 1, 1);
        }
    }
    exact_case(MOE_SB_FP8);
    exact_case(MOE_SB_MXFP4);
    small_inputs_case(MOE_SB_FP8);
    small_inputs_case(MOE_SB_MXFP4);
    g_fp8_bn = 16; /* FP8 scales differing within a column block, some of them past 2^72 */
    gemm_case(MOE_SB_FP8, 130, 288);
    g_fp8_bn = 128;
    onednn_case(160, 136);
    onednn_case(256, 96);
    for (int threads = 1; threads <= 2; threads++) {
        ffn_case(MOE_SB_FP8, 160, 136, threads);
        ffn_case(MOE_SB_MXFP4, 192, 96, threads);
        ffn_case(MOE_SB_BF16, 160, 136, threads);
        ffn_case(MOE_SB_BF16, 256, 72, threads); /* H past 2F: the down matrix the taller */
    }
    /* BF16 widened in panels (a large matrix's way) on small ones: 64-row panels */
    setenv("MOED_TEST_PANEL_FLOATS", "1", 1);
    moe_testctl_reload();
    for (int threads = 1; threads <= 2; threads++) {
        ffn_case(MOE_SB_BF16, 160, 136, threads); /* W13 272 rows: 5 panels, the last 16 */
    }
    unsetenv("MOED_TEST_PANEL_FLOATS");
    moe_testctl_reload();
    arena_case(MOE_DTYPE_FP8);
    arena_case(MOE_DTYPE_MXFP4);
    return moe_test_finish("test_smallbatch");
}
