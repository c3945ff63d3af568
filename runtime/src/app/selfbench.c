#include "app/selfbench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe/clock.h"
#include "expert/expert.h"
#include "expert/gemm.h"
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

/* GFLOP/s of the best GEMMs of the expert shapes; 0 on a rank with no expert work. */
static double gemm_limit_gflops(const moe_engine_t *eng)
{
    const moe_config_t *cfg = eng->cfg;
    if (eng->expert_calls == 0 || eng->weights.layers[0].num_local == 0) {
        return 0.0;
    }
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    int64_t m = eng->expert_rows / eng->expert_calls;
    int64_t up_n = cfg->activation == MOE_ACT_GELU ? F : 2 * F;
    if (eng->cuda != NULL) { /* cuBLAS on the same shapes and dtype, in the plug-in */
        double tflops = 0.0;
        moe_status_t st = eng->plugin->gemm_probe(eng->cuda, cfg->dtype, cfg->activation, H, F,
                                                  m, 10, &tflops, NULL);
        return st == MOE_OK ? tflops * 1e3 : 0.0;
    }
    float *a = calloc((size_t)(m * (H > F ? H : F)), sizeof(float));
    float *c = calloc((size_t)(m * (up_n > H ? up_n : H)), sizeof(float));
    double gflops = 0.0;
    if (a != NULL && c != NULL) {
        const moe_expert_weights_t *ew = &eng->weights.layers[0].experts[0];
        int64_t t_up = best_gemm_ns(m, up_n, H, a, ew->w13, c, 5);
        int64_t t_down = best_gemm_ns(m, H, F, a, ew->w2, c, 5);
        double flops = 2.0 * (double)m * (double)H * (double)(up_n + F);
        gflops = flops / (double)(t_up + t_down);
    }
    free(a);
    free(c);
    return gflops;
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
    moe_layer_ctx_t *ctx = &eng->layer;
    moe_transport_t *t = ctx->transport;
    moe_status_t st = moe_wait_barrier(eng->comm, err);
    if (st != MOE_OK) {
        return st;
    }
    int64_t t0 = moe_now_ns();
    for (int i = 0; i < iters && st == MOE_OK; i++) { /* a failed exchange ends the replay */
        st = moe_transport_exchange(t, ctx->io.xsend, ctx->plan.send_rows,
                                    ctx->plan.send_row_displs, ctx->io.xrecv, ctx->recv_rows,
                                    ctx->recv_displs, NULL);
        if (st == MOE_OK) {
            st = moe_transport_exchange(t, ctx->io.xback, ctx->recv_rows, ctx->recv_displs,
                                        ctx->io.xret, ctx->plan.send_rows,
                                        ctx->plan.send_row_displs, NULL);
        }
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
    int64_t pairs = eng->layer.plan.num_send;
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
                      (double)eng->weights.layers[0].num_local};
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
    moe_status_t st = bench_measure(eng, sum, &all_pairs, &ex_ns, err);
    if (st != MOE_OK) {
        return st;
    }
    double payload = (double)all_pairs * (double)H * sizeof(float);
    double ex_gbps = ex_ns > 0 ? 2.0 * payload / (double)ex_ns : 0.0;
    double mc = eng->rank == 0 ? memcpy_gbps((size_t)payload > 4096 ? (size_t)payload : 4096) : 0;
    /* In-run exchange time on rank 0 includes waiting for the experts: shown for contrast. */
    double run_ex_s = (double)(eng->phase_ns[MOE_PHASE_DISPATCH] + eng->phase_ns[MOE_PHASE_COMBINE]) * 1e-9;
    double run_bytes = 2.0 * (double)eng->rows_sent * (double)H * sizeof(float);
    if (eng->rank == 0 && sum[2] > 0) {
        double n = sum[2];
        double tps = (double)eng->steps_done * (double)cfg->tokens_per_step /
                     ((double)eng->run_ns * 1e-9);
        printf("bench: device                         %s, transport %s, chunks %d\n",
               eng->device_name, eng->transport->ops->name, (int)cfg->chunks);
        printf("bench: tokens/s                       %.0f\n", tps);
        printf("bench: expert FFN GFLOP/s (run)       %.2f per expert rank (mean of %.0f)\n",
               sum[0] / n, n);
        printf("bench: best GEMM GFLOP/s, same shapes %.2f per expert rank\n", sum[1] / n);
        printf("bench: expert compute / GEMM limit    %.1f%%\n", 100.0 * sum[0] / sum[1]);
        printf("bench: dispatch+combine GB/s (replay) %.2f  (%.2f MB per direction per layer)\n",
               ex_gbps, payload / 1e6);
        printf("bench: memcpy GB/s, same payload      %.2f\n", mc);
        printf("bench: exchange / memcpy              %.2fx slower\n", ex_gbps > 0 ? mc / ex_gbps : 0);
        if (run_ex_s > 0) {
            printf("bench: in-run exchange GB/s, rank 0   %.2f (includes waiting for experts)\n",
                   run_bytes / run_ex_s * 1e-9);
        }
    }
    return bench_cpu_shares(eng, err);
}
