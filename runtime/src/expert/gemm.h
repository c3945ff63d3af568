/* The one GEMM moed needs, behind the BLAS chosen at build time (MOED_BLAS):
 * C[M,N] = A[M,K] * B[N,K]^T + beta * C, all row-major with leading dimensions. */
#ifndef MOE_GEMM_H
#define MOE_GEMM_H

#include <stdint.h>

#include "moe/status.h"

moe_status_t moe_gemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Up to this many rows the CBLAS builds (OpenBLAS, BLIS) run one SGEMV a row instead of
 * the SGEMM, which packs B first: a decode call's weights are then read once a row, not
 * packed and read again. OpenBLAS 0.3.21, one core of a Zen 3, an expert's W13 (1536 x
 * 2048 F32, 64 of them): 1 row 17.7 GB/s of weights against 6.1 for the SGEMM (the core's
 * streaming read 19.8), 2 rows 9.6 against 6.1, 4 rows 5.8-6.6 against 6.5-7.0
 * (docs/performance.md, "F32 weights at few rows"). oneDNN's SGEMM is left to itself. */
#define MOE_GEMV_ROWS 2
/* Threads the BLAS may use in this process. */
void moe_gemm_set_threads(int threads);
/* "openblas 0.3.21" etc. */
const char *moe_gemm_backend_name(void);

#endif /* MOE_GEMM_H */
