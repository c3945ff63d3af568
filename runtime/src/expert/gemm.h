/* The one GEMM moed needs, behind the BLAS chosen at build time (MOED_BLAS):
 * C[M,N] = A[M,K] * B[N,K]^T + beta * C, all row-major with leading dimensions. */
#ifndef MOE_GEMM_H
#define MOE_GEMM_H

#include <stdint.h>

#include "moe/status.h"

moe_status_t moe_gemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Threads the BLAS may use in this process. */
void moe_gemm_set_threads(int threads);
/* "openblas 0.3.21" etc. */
const char *moe_gemm_backend_name(void);

#endif /* MOE_GEMM_H */
