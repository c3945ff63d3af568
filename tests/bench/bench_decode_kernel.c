/* bench_decode_kernel [--hidden H] [--ffn F] [--experts E] [--threads T] [--reps R]
 *                     [--rows 1,8,32,128] [--quick]
 *
 * The expert FFN at decode sizes, per weight type (BF16, FP8 e4m3, MXFP4): for each row
 * count, one call per expert over E experts in turn (their weights, E x 3 x H x F, far larger
 * than the caches: every call reads its expert from memory, as a decode step does), on
 * moed's small-batch kernels and on the GEMM path (oneDNN's BF16 matmul; FP8 and MXFP4
 * first dequantised to BF16), through the back-end's own calls (expert/expert_small.h). It
 * prints the GB/s of weight bytes as held (BF16 2 bytes a weight, FP8 1 + its scales,
 * MXFP4 0.5 + its scales) over the calls' time, against a streaming read of a large buffer
 * (sums of 512-bit loads, 1 GiB) on the same threads in the same run, and the switch
 * point: the most rows at which the kernels are still the faster (what
 * runtime.small_batch_rows: -1 takes, expert/expert_small.c). With no native BF16 (or
 * MOED_CPU_NO_BF16=1) the F32 kernels and the BLAS instead (FP8, MXFP4), and F32 weights
 * (as BF16 checkpoints are held then): an expert's two GEMMs through moe_gemm_nt against
 * the BLAS alone (expert/gemm.h).
 * Each figure is the best of R repetitions (default 3). Threads: OpenMP, pinned by the
 * caller (taskset / OMP_PROC_BIND); one thread by default. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expert/expert.h"
#include "expert/expert_bf16.h"
#include "expert/expert_small.h"
#include "expert/gemm.h"
#include "expert/onednn.h"
#include "expert/smallbatch.h"
#include "model/weights.h"
#include "moe/bf16.h"
#include "moe/mem.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned g_seed = 7u;

static uint8_t rnd8(void)
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return (uint8_t)(g_seed >> 24);
}

/* ------------------------------------------------------------------------------------ */
/* The streaming read                                                                    */

/* 64 floats at a time into eight vector sums, so the adds overlap as the loads do (one
 * dependent add a float read 4 GB/s on a Zen 3 core that streams 20); GCC's vector type of
 * 8 floats, cloned like the runtime's loops (MOE_VECTOR_CLONES): ymm with AVX2 and AVX-512,
 * pairs of xmm otherwise. */
typedef float v8f __attribute__((vector_size(32)));

MOE_VECTOR_CLONES static double sum_read(const float *p, size_t n)
{
    v8f a[8] = {{0}};
    for (size_t i = 0; i + 64 <= n; i += 64) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) { /* unrolled: the sums stay in registers */
            v8f x;
            memcpy(&x, p + i + 8 * (size_t)k, sizeof(x));
            a[k] += x;
        }
    }
    v8f t = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    double s = 0.0;
    for (int k = 0; k < 8; k++) {
        s += t[k];
    }
    return s;
}

/* GB/s of a read of `bytes` split between the threads, best of reps. */
static double stream_gbs(size_t bytes, int threads, int reps)
{
    float *buf = moe_alloc_large(bytes);
    size_t n = bytes / sizeof(float);
    if (buf == NULL) {
        return 0.0;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) {
        buf[i] = (float)(i & 7);
    }
    double best = 1e30, sink = 0.0;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
            size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
            size_t lo = n * t / nt / 64 * 64, hi = n * (t + 1) / nt / 64 * 64;
            sink += sum_read(buf + lo, hi - lo);
        }
        double dt = now_s() - t0;
        best = r > 0 && dt < best ? dt : best; /* the first touches the pages again: warm-up */
    }
    free(buf);
    if (sink == 12345.678) {
        printf(" ");
    }
    return (double)bytes / best * 1e-9;
}

/* ------------------------------------------------------------------------------------ */
/* Experts                                                                               */

typedef struct bench {
    int64_t H, F, E, tile;
    int threads, reps;
    moe_onednn_t *o;
    moe_num_dtype_t compute;
    moe_weights_t w;
    moe_expert_weights_t *ex;
    void *arena;             /* FP8 / MXFP4: the experts in one region, as the loader holds them */
    size_t bytes_per_expert; /* as held */
} bench_t;

/* E experts of `type` with random codes (FP8: no NaN code; scales near 1); FP8 and MXFP4 in
 * one region as the loader holds a layer's experts (moe_weights_quant_arena). */
static int make_experts(bench_t *b, moe_sb_type_t type)
{
    int64_t H = b->H, F = b->F;
    b->ex = calloc((size_t)b->E, sizeof(*b->ex));
    moe_config_t cfg = {.hidden_dim = H, .ffn_dim = F, .activation = MOE_ACT_SWIGLU};
    b->w = (moe_weights_t){.store = type == MOE_SB_BF16    ? MOE_DTYPE_BF16
                                    : type == MOE_SB_FP8 ? MOE_DTYPE_FP8
                                                         : MOE_DTYPE_MXFP4,
                           .fp8_block = {128, 128}};
    uint16_t *plain13 = malloc((size_t)(2 * F * H) * 2), *plain2 = malloc((size_t)(H * F) * 2);
    if (type != MOE_SB_BF16) {
        moe_error_t err = {0};
        if (moe_weights_quant_arena(&cfg, b->w.store, 128, (int)b->E, b->ex, &b->arena,
                                    &err) != MOE_OK) {
            fprintf(stderr, "bench_decode_kernel: %s\n", err.msg);
            return 1;
        }
    }
    for (int64_t e = 0; e < b->E; e++) {
        moe_expert_weights_t *ew = &b->ex[e];
        if (type == MOE_SB_BF16) {
            for (int64_t i = 0; i < 2 * F * H; i++) {
                plain13[i] = moe_f32_to_bf16(((float)rnd8() - 128.0f) / 1024.0f);
            }
            for (int64_t i = 0; i < H * F; i++) {
                plain2[i] = moe_f32_to_bf16(((float)rnd8() - 128.0f) / 1024.0f);
            }
            if (b->compute != MOE_NUM_BF16) { /* F32 compute: moed's blocked layout */
                ew->w13_packed = moe_alloc_large((size_t)(moe_blk_pad(2 * F, MOE_BLK_N) *
                                                          moe_blk_pad(H, MOE_BLK_K)) * 2);
                ew->w2_packed = moe_alloc_large((size_t)(moe_blk_pad(H, MOE_BLK_N) *
                                                         moe_blk_pad(F, MOE_BLK_K)) * 2);
                if (ew->w13_packed == NULL || ew->w2_packed == NULL) {
                    return 1;
                }
                moe_sb_pack_bf16(plain13, 2 * F, H, ew->w13_packed);
                moe_sb_pack_bf16(plain2, H, F, ew->w2_packed);
            } else if (moe_onednn_pack(b->o, MOE_ONEDNN_UP, plain13, &ew->w13_packed, NULL) !=
                           MOE_OK ||
                       moe_onednn_pack(b->o, MOE_ONEDNN_DOWN, plain2, &ew->w2_packed, NULL) !=
                           MOE_OK) {
                return 1;
            }
            b->bytes_per_expert = (size_t)(3 * H * F) * 2;
            continue;
        }
        size_t q[4];
        moe_weights_quant_bytes(&cfg, b->w.store, 128, q);
        b->bytes_per_expert = q[0] + q[1] + q[2] + q[3];
        uint8_t *p[4] = {ew->w13_q, ew->w13_s, ew->w2_q, ew->w2_s};
        for (int i = 0; i < 4; i++) {
            for (size_t j = 0; j < q[i]; j++) {
                uint8_t v = rnd8();
                if (i % 2 == 1) { /* scales: FP8 floats near 2^-6, e8m0 near 2^-4 */
                    v = type == MOE_SB_FP8 ? (j % 4 == 3 ? 0x3c : 0) : (uint8_t)(123 + v % 3);
                } else if (type == MOE_SB_FP8 && (v & 0x7f) == 0x7f) {
                    v = 0x30;
                }
                p[i][j] = v;
            }
        }
    }
    free(plain13);
    free(plain2);
    return 0;
}

static void free_experts(bench_t *b)
{
    for (int64_t e = 0; b->ex != NULL && e < b->E; e++) {
        moe_weights_expert_free(&b->ex[e]);
    }
    free(b->ex);
    b->ex = NULL;
    free(b->arena);
    b->arena = NULL;
}

/* Seconds per call of `rows` rows over the E experts in turn, best of reps (one warm pass). */
static double time_calls(bench_t *b, moe_expert_small_t *s, int64_t rows, void *in, void *h,
                         void *a, float *out)
{
    double best = 1e30;
    for (int r = 0; r < b->reps + 1; r++) {
        double t0 = now_s();
        for (int64_t e = 0; e < b->E; e++) {
            if (b->compute == MOE_NUM_BF16) {
                moe_expert_small_forward_bf16(s, b->o, &b->ex[e], MOE_ACT_SWIGLU, b->H, b->F, rows,
                                              in, h, a, out, NULL);
            } else {
                moe_expert_small_forward_f32(s, &b->ex[e], MOE_ACT_SWIGLU, b->H, b->F, rows, in,
                                             out, h, b->tile, NULL);
            }
        }
        double dt = (now_s() - t0) / (double)b->E;
        best = r > 0 && dt < best ? dt : best;
    }
    return best;
}

static const char *type_name(moe_sb_type_t t)
{
    return t == MOE_SB_BF16 ? "bf16" : t == MOE_SB_FP8 ? "fp8" : "mxfp4";
}

/* The table of one weight type; returns its switch point (-1: none measured). */
static int64_t run_type(bench_t *b, moe_sb_type_t type, const int64_t *rows, int nrows,
                        double stream)
{
    if (make_experts(b, type) != 0) {
        fprintf(stderr, "bench_decode_kernel: cannot build the %s experts\n", type_name(type));
        free_experts(b);
        return -1;
    }
    moe_expert_small_t *sk = NULL, *sg = NULL;
    moe_config_t cfg = {.hidden_dim = b->H, .ffn_dim = b->F, .activation = MOE_ACT_SWIGLU,
                        .threads = b->threads, .small_batch_rows = (int64_t)b->tile};
    moe_error_t err;
    moe_error_clear(&err);
    if (moe_expert_small_create(&cfg, &b->w, b->compute, b->o, b->tile, &sk, &err) != MOE_OK) {
        fprintf(stderr, "bench_decode_kernel: %s\n", err.msg);
        free_experts(b);
        return -1;
    }
    cfg.small_batch_rows = 0;
    moe_expert_small_create(&cfg, &b->w, b->compute, b->o, b->tile, &sg, &err);
    if (moe_expert_small_isa(sk) == MOE_SB_NONE || sg == NULL) {
        printf("%-6s no small-batch kernels for this weight type here\n", type_name(type));
        moe_expert_small_destroy(sk);
        moe_expert_small_destroy(sg);
        free_experts(b);
        return -1;
    }
    size_t esz = b->compute == MOE_NUM_BF16 ? 2 : 4;
    int64_t T = moe_onednn_bucket(b->tile);
    void *in = calloc((size_t)(T * b->H), esz), *h = calloc((size_t)(T * 2 * b->F), 4);
    void *a = calloc((size_t)(T * b->F), 2);
    float *out = calloc((size_t)(T * b->H), sizeof(float));
    int64_t sw = 0;
    bool lost = false;
    for (int i = 0; i < nrows; i++) {
        int64_t m = rows[i];
        double tk = time_calls(b, sk, m, in, h, a, out);
        double tg = time_calls(b, sg, m, in, h, a, out);
        double gk = (double)b->bytes_per_expert / tk * 1e-9;
        double gg = (double)b->bytes_per_expert / tg * 1e-9;
        printf("%-6s rows %4lld  kernels %7.3f ms %6.1f GB/s (%.2f of the read)   GEMM path "
               "%7.3f ms %6.1f GB/s   kernels/GEMM %.2fx\n",
               type_name(type), (long long)m, tk * 1e3, gk, gk / stream, tg * 1e3, gg, tg / tk);
        if (!lost && tk <= tg) {
            sw = m;
        } else {
            lost = true;
        }
    }
    printf("%-6s switch point: the kernels up to %lld rows (of those measured), %s kernels, "
           "%.1f MiB an expert as held\n", type_name(type), (long long)sw,
           moe_sb_isa_name(moe_expert_small_isa(sk)),
           (double)b->bytes_per_expert / (1 << 20));
    free(in);
    free(h);
    free(a);
    free(out);
    moe_expert_small_destroy(sk);
    moe_expert_small_destroy(sg);
    free_experts(b);
    return sw;
}

/* F32 weights (an expert's W13 [2F, H] and W2 [H, F], E experts in turn): the two GEMMs of
 * a call through moe_gemm_nt (moed's kernel up to MOE_GEMM_ROWS rows, where the CPU has
 * AVX2) and through the build's BLAS alone, GB/s of weights over the calls' time. */
static void run_f32(const bench_t *b, const int64_t *rows, int nrows, double stream)
{
    int64_t H = b->H, F = b->F, T = 0;
    for (int i = 0; i < nrows; i++) {
        T = rows[i] > T ? rows[i] : T;
    }
    size_t per = (size_t)(3 * H * F); /* floats an expert */
    float *w = moe_alloc_large(per * (size_t)b->E * sizeof(float));
    float *x = calloc((size_t)(T * H), sizeof(float)), *h = calloc((size_t)(T * 2 * F), 4);
    float *out = calloc((size_t)(T * H), sizeof(float));
    if (w == NULL || x == NULL || h == NULL || out == NULL) {
        fprintf(stderr, "bench_decode_kernel: cannot allocate the f32 experts\n");
        free(w), free(x), free(h), free(out);
        return;
    }
    for (size_t i = 0; i < per * (size_t)b->E; i++) {
        w[i] = (float)(rnd8() % 201) * 0.01f - 1.0f;
    }
    for (int64_t i = 0; i < T * H; i++) {
        x[i] = (float)(rnd8() % 201) * 0.01f - 1.0f;
    }
    moe_gemm_set_threads(b->threads);
    for (int i = 0; i < nrows; i++) {
        int64_t m = rows[i];
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < b->reps + 1; r++) {
            for (int path = 0; path < 2; path++) {
                moe_status_t (*g)(int64_t, int64_t, int64_t, const float *, int64_t,
                                  const float *, int64_t, float, float *, int64_t) =
                    path == 0 ? moe_gemm_nt : moe_gemm_nt_blas;
                double t0 = now_s();
                for (int64_t e = 0; e < b->E; e++) {
                    const float *w13 = w + per * (size_t)e, *w2 = w13 + 2 * H * F;
                    g(m, 2 * F, H, x, H, w13, H, 0.0f, h, 2 * F);
                    g(m, H, F, h, 2 * F, w2, F, 0.0f, out, H);
                }
                double dt = (now_s() - t0) / (double)b->E;
                best[path] = r > 0 && dt < best[path] ? dt : best[path];
            }
        }
        double bytes = (double)per * sizeof(float);
        printf("f32    rows %4lld  moe_gemm_nt %7.3f ms %6.1f GB/s (%.2f of the read)   BLAS "
               "%7.3f ms %6.1f GB/s   BLAS/moe_gemm_nt %.2fx\n",
               (long long)m, best[0] * 1e3, bytes / best[0] * 1e-9, bytes / best[0] * 1e-9 / stream,
               best[1] * 1e3, bytes / best[1] * 1e-9, best[1] / best[0]);
    }
    printf("f32    moe_gemm_nt runs moed's kernel up to %d rows here%s, %.1f MiB an expert\n",
           moe_gemm_rows_kernel() ? MOE_GEMM_ROWS : 0,
           moe_gemm_rows_kernel() ? "" : " (no AVX2: the BLAS)",
           (double)per * sizeof(float) / (1 << 20));
    free(w), free(x), free(h), free(out);
}

static int parse_rows(const char *s, int64_t *rows, int max)
{
    int n = 0;
    while (*s != '\0' && n < max) {
        rows[n++] = strtoll(s, (char **)&s, 10);
        s += *s == ',';
    }
    return n;
}

int main(int argc, char **argv)
{
    bench_t b = {.H = 2048, .F = 768, .E = 32, .threads = 1, .reps = 3, .tile = 576};
    int64_t rows[32] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128};
    int nrows = 11;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(argv[i], "--hidden") == 0) {
            b.H = atoll(v), i++;
        } else if (strcmp(argv[i], "--ffn") == 0) {
            b.F = atoll(v), i++;
        } else if (strcmp(argv[i], "--experts") == 0) {
            b.E = atoll(v), i++;
        } else if (strcmp(argv[i], "--threads") == 0) {
            b.threads = atoi(v), i++;
        } else if (strcmp(argv[i], "--reps") == 0) {
            b.reps = atoi(v), i++;
        } else if (strcmp(argv[i], "--rows") == 0) {
            nrows = parse_rows(v, rows, 32), i++;
        } else if (strcmp(argv[i], "--quick") == 0) {
            b.E = 4, b.reps = 1, nrows = parse_rows("1,8,32,128", rows, 32);
        } else {
            fprintf(stderr, "usage: bench_decode_kernel [--hidden H] [--ffn F] [--experts E] "
                            "[--threads T] [--reps R] [--rows 1,8,32,128] [--quick]\n");
            return 2;
        }
    }
    if (b.H <= 0 || b.F <= 0 || b.E <= 0 || b.threads <= 0 || b.reps <= 0 || nrows <= 0) {
        fprintf(stderr, "bench_decode_kernel: sizes, threads and reps must be positive\n");
        return 2;
    }
    b.compute = moe_cpu_bf16_native() ? MOE_NUM_BF16 : MOE_NUM_F32;
    if (b.compute == MOE_NUM_BF16 &&
        moe_onednn_create(b.H, 2 * b.F, b.F, b.tile, b.threads, &b.o, NULL) != MOE_OK) {
        fprintf(stderr, "bench_decode_kernel: oneDNN would not start\n");
        return 1;
    }
    double stream = stream_gbs((size_t)1 << 30, b.threads, b.reps);
    printf("bench_decode_kernel: hidden %lld, ffn %lld, %lld SwiGLU experts in turn, %d "
           "thread%s, %s compute (%s), best of %d\n",
           (long long)b.H, (long long)b.F, (long long)b.E, b.threads, b.threads == 1 ? "" : "s",
           b.compute == MOE_NUM_BF16 ? "bf16" : "f32",
           b.compute == MOE_NUM_BF16 ? moe_onednn_isa_name() : "the build's BLAS", b.reps);
    printf("streaming read of 1 GiB on %d thread%s: %.1f GB/s\n", b.threads,
           b.threads == 1 ? "" : "s", stream);
    if (b.compute != MOE_NUM_BF16) { /* F32 weights (model.dtype: f32) */
        run_f32(&b, rows, nrows, stream);
    }
    int64_t sw[MOE_SB_TYPES];
    for (int t = 0; t < MOE_SB_TYPES; t++) {
        sw[t] = run_type(&b, (moe_sb_type_t)t, rows, nrows, stream);
    }
    printf("switch points (rows): bf16 %lld, fp8 %lld, mxfp4 %lld; runtime.small_batch_rows -1 "
           "takes bf16 %lld, fp8 %lld, mxfp4 %lld here\n", (long long)sw[0], (long long)sw[1],
           (long long)sw[2],
           (long long)moe_expert_small_default_rows(MOE_SB_BF16, moe_sb_isa(b.compute == MOE_NUM_BF16)),
           (long long)moe_expert_small_default_rows(MOE_SB_FP8, moe_sb_isa(b.compute == MOE_NUM_BF16)),
           (long long)moe_expert_small_default_rows(MOE_SB_MXFP4, moe_sb_isa(b.compute == MOE_NUM_BF16)));
    moe_onednn_destroy(b.o);
    return 0;
}
