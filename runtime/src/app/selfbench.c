#include "app/selfbench.h"
#include "app/selfbench_lat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moe/clock.h"
#include "expert/expert.h"
#include "expert/expert_bf16.h"
#include "expert/gemm.h"
#include "expert/onednn.h"
#include "moe/log.h"
#include "moe/mpi_check.h"
#include "transport/wait.h"

/* Best time of `reps` GEMMs C[m,n] = A[m,k] B[n,k]^T, in ns. */
static int64_t best_gemm_ns(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                            float *c, int reps)
{
    int64_t best = INT64_MAX;
    moe_gemm_nt(m, n, k, a, k, b, k, 0.0f, c, n); /* warm */
    for (int r = 0; r < reps; r++) {
        int64_t t = moe_now_ns();
        moe_gemm_nt(m, n, k, a, k, b, k, 0.0f, c, n);
        t = moe_now_ns() - t;
        best = t < best ? t : best;
    }
    return best;
}

/* ------------------------------------------------------------------------------------ */
/* The machine's BF16 and F32 GEMM limits (dtype15): both measured in the same run, on one  */
/* rank while the others wait, so the figure is one rank's threads on an otherwise idle job */
/* ------------------------------------------------------------------------------------ */

/* GFLOP/s of the best F32 up + down GEMMs (the build's BLAS) of m rows, expert shapes. */
static double bench_f32_gflops(int64_t H, int64_t up_n, int64_t F, int64_t m)
{
    int64_t wide = up_n > H ? up_n : H, k = H > F ? H : F;
    float *a = calloc((size_t)(m * k), sizeof(float));
    float *w13 = malloc((size_t)(up_n * H) * sizeof(float));
    float *w2 = malloc((size_t)(H * F) * sizeof(float));
    float *c = calloc((size_t)(m * wide), sizeof(float));
    double gflops = 0.0;
    if (a != NULL && w13 != NULL && w2 != NULL && c != NULL) {
        for (int64_t i = 0; i < up_n * H; i++) {
            w13[i] = (float)(i % 13) * 0.01f;
        }
        for (int64_t i = 0; i < H * F; i++) {
            w2[i] = (float)(i % 11) * 0.01f;
        }
        int64_t t = best_gemm_ns(m, up_n, H, a, w13, c, 5) + best_gemm_ns(m, H, F, a, w2, c, 5);
        gflops = 2.0 * (double)m * (double)H * (double)(up_n + F) / (double)t;
    }
    free(a);
    free(w13);
    free(w2);
    free(c);
    return gflops;
}

/* Best of reps oneDNN BF16 GEMMs of m rows with packed weights w, in ns (0: failed). */
static int64_t best_bf16_ns(moe_onednn_t *o, int which, int64_t m, const uint16_t *a,
                            const void *w, float *c, int reps)
{
    int64_t best = INT64_MAX;
    if (moe_onednn_gemm(o, which, m, a, w, c, NULL) != MOE_OK) { /* warm, and the bucket */
        return 0;
    }
    for (int r = 0; r < reps; r++) {
        int64_t t = moe_now_ns();
        moe_onednn_gemm(o, which, m, a, w, c, NULL);
        t = moe_now_ns() - t;
        best = t < best ? t : best;
    }
    return best;
}

/* GFLOP/s of the best BF16 up + down GEMMs (oneDNN, packed weights) of m rows; 0 when the
 * CPU has no native BF16 or oneDNN fails. */
static double bench_bf16_gflops(int64_t H, int64_t up_n, int64_t F, int64_t m, int threads)
{
    moe_onednn_t *o = NULL;
    if (!moe_cpu_bf16_native() || moe_onednn_create(H, up_n, F, m, threads, &o, NULL) != MOE_OK) {
        return 0.0;
    }
    int64_t rows = moe_onednn_bucket(m), k = H > F ? H : F, wide = up_n > H ? up_n : H;
    uint16_t *a = calloc((size_t)(rows * k), sizeof(uint16_t));
    uint16_t *w = malloc((size_t)(up_n * H > H * F ? up_n * H : H * F) * sizeof(uint16_t));
    float *c = calloc((size_t)(rows * wide), sizeof(float));
    void *p13 = NULL, *p2 = NULL;
    double gflops = 0.0;
    if (a != NULL && w != NULL && c != NULL) {
        for (int64_t i = 0; i < up_n * H || i < H * F; i++) {
            w[i] = moe_f32_to_bf16((float)(i % 13) * 0.01f);
        }
        if (moe_onednn_pack(o, MOE_ONEDNN_UP, w, &p13, NULL) == MOE_OK &&
            moe_onednn_pack(o, MOE_ONEDNN_DOWN, w, &p2, NULL) == MOE_OK) {
            int64_t t1 = best_bf16_ns(o, MOE_ONEDNN_UP, m, a, p13, c, 5);
            int64_t t2 = best_bf16_ns(o, MOE_ONEDNN_DOWN, m, a, p2, c, 5);
            gflops = t1 > 0 && t2 > 0 ? 2.0 * (double)m * (double)H * (double)(up_n + F) /
                                            (double)(t1 + t2)
                                      : 0.0;
        }
    }
    free(p13);
    free(p2);
    free(a);
    free(w);
    free(c);
    moe_onednn_destroy(o);
    return gflops;
}

/* limit[0] BF16, limit[1] F32: GFLOP/s of one rank's runtime.threads on the expert shapes,
 * rows per GEMM as an expert call of the run gets them on average (at most a BF16 tile). */
static moe_status_t bench_dtype_limits(moe_engine_t *eng, double limit[2], moe_error_t *err)
{
    const moe_config_t *cfg = eng->cfg;
    int64_t H = cfg->hidden_dim, F = moe_cfg_expert_ffn(cfg);
    int64_t up_n = cfg->activation == MOE_ACT_GELU ? F : 2 * F;
    int64_t m = cfg->tokens_per_step * cfg->top_k / cfg->num_experts;
    m = m < 16 ? 16 : m > MOE_BF16_TILE_ROWS ? MOE_BF16_TILE_ROWS : m;
    limit[0] = limit[1] = 0.0;
    moe_status_t st = moe_wait_barrier(eng->comm, err);
    if (st == MOE_OK && eng->rank == 0 && eng->cuda == NULL) {
        limit[0] = bench_bf16_gflops(H, up_n, F, m, (int)cfg->threads);
        limit[1] = bench_f32_gflops(H, up_n, F, m);
    }
    return st == MOE_OK ? moe_wait_barrier(eng->comm, err) : st;
}

/* The limits and the run's tokens/s against cores x the limit of its compute type. */
static void bench_dtype_print(const moe_engine_t *eng, const double limit[2], double tps)
{
    const moe_config_t *cfg = eng->cfg;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double per_token = (double)cfg->num_layers * (double)cfg->top_k *
                       moe_cfg_ffn_flops(cfg->activation, cfg->hidden_dim, cfg->ffn_dim, 1);
    bool bf16 = eng->weights.wire == MOE_NUM_BF16 || eng->weights.compute == MOE_NUM_BF16;
    double lim = (bf16 ? limit[0] : limit[1]) / (double)(cfg->threads > 0 ? cfg->threads : 1);
    double max_tps = (double)cores * lim * 1e9 / per_token;
    char label[64];
    snprintf(label, sizeof(label), "F32 GEMM GFLOP/s (%s)", moe_gemm_backend_name());
    printf("bench: %-30s %.1f per rank of %lld thread%s%s\n", "BF16 GEMM GFLOP/s (oneDNN)", limit[0],
           (long long)cfg->threads, cfg->threads == 1 ? "" : "s",
           limit[0] > 0 ? "" : " (no native BF16 on this CPU)");
    printf("bench: %-30s %.1f per rank of %lld thread%s\n", label, limit[1],
           (long long)cfg->threads,
           cfg->threads == 1 ? "" : "s");
    if (lim > 0) {
        printf("bench: tokens/s / (%ld cores x %s limit) %.2f  (limit %.0f tokens/s)\n", cores,
               bf16 ? "BF16" : "F32", tps / max_tps, max_tps);
    }
}

/* The experts this rank holds, over every layer: placement.layers may give a layer none
 * on a rank that holds others (layer 0's count alone once called such a rank expert-less). */
static int64_t bench_local_experts(const moe_engine_t *eng)
{
    int64_t n = 0;
    for (int l = 0; l < eng->weights.num_layers; l++) {
        n += eng->weights.layers[l].num_local;
    }
    return n;
}

/* GFLOP/s of the best GEMMs of the expert shapes; 0 on a rank with no expert work. */
static double gemm_limit_gflops(const moe_engine_t *eng)
{
    const moe_config_t *cfg = eng->cfg;
    if (eng->expert_calls == 0 || bench_local_experts(eng) == 0) {
        return 0.0;
    }
    int64_t H = cfg->hidden_dim, F = moe_cfg_expert_ffn(cfg);
    int64_t m = eng->expert_rows / eng->expert_calls;
    int64_t up_n = cfg->activation == MOE_ACT_GELU ? F : 2 * F;
    if (eng->cuda != NULL) { /* cuBLAS on the same shapes and dtype, in the plug-in */
        double tflops = 0.0;
        moe_status_t st = eng->plugin->gemm_probe(eng->cuda, eng->weights.value, cfg->activation, H, F,
                                                  m, 10, &tflops, NULL);
        return st == MOE_OK ? tflops * 1e3 : 0.0;
    }
    m = m < 1 ? 1 : m;
    if (eng->weights.compute == MOE_NUM_BF16) {
        return bench_bf16_gflops(H, up_n, F, m < 512 ? m : 512, (int)cfg->threads);
    }
    return bench_f32_gflops(H, up_n, F, m);
}

static double memcpy_gbps(size_t bytes)
{
    char *src = malloc(bytes), *dst = malloc(bytes);
    double best = 0.0;
    if (src != NULL && dst != NULL) {
        memset(src, 1, bytes);
        memset(dst, 0, bytes);
        for (int r = 0; r < 6; r++) {
            int64_t t = moe_now_ns();
            memcpy(dst, src, bytes);
            t = moe_now_ns() - t;
            double g = (double)bytes / (double)t;
            best = r > 0 && g > best ? g : best; /* first pass faults pages in */
        }
    }
    free(src);
    free(dst);
    return best;
}

/* Replay the last layer's dispatch + combine; *slowest: the slowest rank's ns per iter. */
static moe_status_t replay_exchange_ns(moe_engine_t *eng, int iters, int64_t *slowest,
                                       moe_error_t *err)
{
    moe_status_t st = moe_wait_barrier(eng->comm, err);
    if (st != MOE_OK) {
        return st;
    }
    int64_t t0 = moe_now_ns();
    for (int i = 0; i < iters && st == MOE_OK; i++) { /* a failed exchange ends the replay */
        st = moe_layer_replay_exchange(&eng->layer, NULL);
    }
    int64_t mine = (moe_now_ns() - t0) / iters;
    *slowest = 0;
    MPI_Request req;
    st = MOE_MPI(MPI_Iallreduce(&mine, slowest, 1, MPI_INT64_T, MPI_MAX, eng->comm, &req), err);
    return st == MOE_OK ? moe_wait_request(&req, "the bench's reduction", err) : st;
}

/* The collective part: sum[3] on rank 0 (run GFLOP/s, GEMM limit, ranks with experts), the
 * exchanged rows of every rank, and the replay's slowest ns per iteration. */
static moe_status_t bench_measure(moe_engine_t *eng, double sum[3], int64_t *all_pairs,
                                  int64_t *ex_ns, moe_error_t *err)
{
    /* In-run expert throughput and the GEMM limit, averaged over ranks with experts. */
    double run_gflops = eng->expert_ns > 0 ? eng->expert_flops / (double)eng->expert_ns : 0.0;
    moe_status_t st = moe_wait_barrier(eng->comm, err);
    double limit = st == MOE_OK ? gemm_limit_gflops(eng) : 0.0;
    double mine[3] = {run_gflops, limit, run_gflops > 0 ? 1.0 : 0.0};
    int64_t pairs = moe_layer_plan(&eng->layer)->num_send;
    MPI_Request req;
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Ireduce(mine, sum, 3, MPI_DOUBLE, MPI_SUM, 0, eng->comm, &req), err);
    }
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the bench's reduction", err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Iallreduce(&pairs, all_pairs, 1, MPI_INT64_T, MPI_SUM, eng->comm, &req),
                     err);
    }
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the bench's reduction", err);
    }
    if (st == MOE_OK) {
        st = replay_exchange_ns(eng, 10, ex_ns, err);
    }
    return st == MOE_OK ? moe_wait_barrier(eng->comm, err) : st;
}

/* Every rank's CPU share over the run (process CPU time, all threads, over wall time: the
 * cores it kept busy), gathered to rank 0 and printed there with the expert ranks' sum, the
 * figure that shows whether ranks sharing cores lose CPU to each other. Collective. */
static moe_status_t bench_cpu_shares(const moe_engine_t *eng, moe_error_t *err)
{
    double mine[2] = {eng->run_ns > 0 ? (double)eng->run_cpu_ns / (double)eng->run_ns : 0.0,
                      (double)bench_local_experts(eng)};
    double *all = eng->rank == 0 ? calloc(2 * (size_t)eng->world_size, sizeof(double)) : NULL;
    if (eng->rank == 0 && all == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the bench's CPU table");
    }
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Igather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, eng->comm,
                                          &req),
                              err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the bench's CPU gather", err);
    }
    if (st == MOE_OK && eng->rank == 0) {
        double experts = 0.0, others = 0.0;
        printf("bench: CPU per rank, cores busy       ");
        for (int r = 0; r < eng->world_size; r++) {
            printf("%srank %d %.2f%s", r > 0 ? ", " : "", r, all[2 * r],
                   all[2 * r + 1] > 0 ? "" : " (no experts)");
            *(all[2 * r + 1] > 0 ? &experts : &others) += all[2 * r];
        }
        printf("\nbench: CPU, expert ranks together     %.2f cores (ranks without experts %.2f)\n",
               experts, others);
    }
    free(all);
    return st;
}

moe_status_t moe_selfbench_run(moe_engine_t *eng, moe_error_t *err)
{
    const moe_config_t *cfg = eng->cfg;
    int64_t H = cfg->hidden_dim;
    double sum[3] = {0, 0, 0};
    int64_t all_pairs = 0, ex_ns = 0;
    double limit[2];
    moe_bench_lat_t lat;
    moe_wait_set_where(eng->steps_done, 0, "--bench (after the steps)");
    moe_status_t st = bench_measure(eng, sum, &all_pairs, &ex_ns, err);
    if (st == MOE_OK) {
        st = moe_selfbench_latency(eng, &lat, err);
    }
    if (st == MOE_OK) {
        st = bench_dtype_limits(eng, limit, err);
    }
    if (st != MOE_OK) {
        return st;
    }
    double row_bytes = (double)moe_wire_row_bytes(H, eng->weights.wire);
    double payload = (double)all_pairs * row_bytes;
    double ex_gbps = ex_ns > 0 ? 2.0 * payload / (double)ex_ns : 0.0;
    double mc = eng->rank == 0 ? memcpy_gbps((size_t)payload > 4096 ? (size_t)payload : 4096) : 0;
    /* In-run exchange time on rank 0 includes waiting for the experts: shown for contrast. */
    double run_ex_s = (double)(eng->phase_ns[MOE_PHASE_DISPATCH] + eng->phase_ns[MOE_PHASE_COMBINE]) * 1e-9;
    double run_bytes = 2.0 * (double)eng->rows_sent * row_bytes;
    if (eng->rank == 0 && sum[2] > 0) {
        double n = sum[2];
        double tps = (double)eng->steps_done * (double)cfg->tokens_per_step /
                     ((double)eng->run_ns * 1e-9);
        printf("bench: device                         %s, transport %s, chunks %d\n",
               eng->device_name, moe_transport_name(eng->transport), (int)cfg->chunks);
        printf("bench: tokens/s                       %.0f\n", tps);
        printf("bench: expert FFN GFLOP/s (run)       %.2f per expert rank (mean of %.0f)\n",
               sum[0] / n, n);
        printf("bench: best GEMM GFLOP/s, same shapes %.2f per expert rank\n", sum[1] / n);
        printf("bench: expert compute / GEMM limit    %.1f%%\n", 100.0 * sum[0] / sum[1]);
        bench_dtype_print(eng, limit, tps);
        printf("bench: dispatch+combine GB/s (replay) %.2f  (%.2f MB per direction per layer)\n",
               ex_gbps, payload / 1e6);
        printf("bench: memcpy GB/s, same payload      %.2f\n", mc);
        printf("bench: exchange / memcpy              %.2fx slower\n", ex_gbps > 0 ? mc / ex_gbps : 0);
        if (run_ex_s > 0) {
            printf("bench: in-run exchange GB/s, rank 0   %.2f (includes waiting for experts)\n",
                   run_bytes / run_ex_s * 1e-9);
        }
        moe_selfbench_latency_print(&lat);
    }
    return bench_cpu_shares(eng, err);
}
