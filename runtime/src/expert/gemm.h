/* The one GEMM moed needs, behind the BLAS chosen at build time (MOED_BLAS):
 * C[M,N] = A[M,K] * B[N,K]^T + beta * C, all row-major with leading dimensions. */
#ifndef MOE_GEMM_H
#define MOE_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "moe/status.h"

moe_status_t moe_gemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Calls of up to MOE_GEMM_ROWS rows, on a CPU with AVX2 and FMA, run moed's own kernel: B
 * read once a pass of up to MOE_GEMM_PASS_ROWS rows (7-11 rows: two passes), each output's
 * rows' sums in registers (a decode call's weights streamed once, where the SGEMM packs
 * them first and reads them again); a row's values do not depend on the rows beside it.
 * An expert's two GEMMs (W13 1536 x 2048, W2 2048 x 768, F32, 32 experts in turn), one Zen 3
 * core, OpenBLAS 0.3.21, GB/s of weights, the kernel against the BLAS (SGEMV a row up to 2,
 * then SGEMM; bench_decode_kernel's f32 lines, docs/performance.md): 1 row 15.7 against
 * 14.9, 2 rows 17.0 against 9.2, 3 rows 13.6 against 4.6, 4 rows 13.1 against 6.7, 6 rows
 * 10.0 against 5.5 (the core's streaming read 18.9); in one pass 8 rows read 5.6 against
 * 5.6 (measured, not explained: a row of W13 is 8 KiB, so 4-6 rows pass L1 already), in
 * two passes 6.8-7.4; two
 * passes 1.83-1.93x faster than the SGEMM at 7 rows, 1.26-1.28x at 8 and 10, 1.00-1.05x at
 * 12. */
#define MOE_GEMM_PASS_ROWS 6
#define MOE_GEMM_ROWS 11
/* Without that kernel (no AVX2), up to this many rows the CBLAS builds (OpenBLAS, BLIS) run
 * one SGEMV a row instead of the SGEMM (1 row 17.7 GB/s against 6.1 for the SGEMM, 2 rows
 * 9.6 against 6.1, 4 rows 5.8-6.6 against 6.5-7.0, on that Zen 3). oneDNN's SGEMM is left
 * to itself. */
#define MOE_GEMV_ROWS 2
/* Whether this CPU runs moed's kernel for calls of up to MOE_GEMM_ROWS rows. */
bool moe_gemm_rows_kernel(void);
/* moe_gemm_nt without that kernel: the build's BLAS alone (the SGEMV a row up to
 * MOE_GEMV_ROWS on the CBLAS builds), for the benchmark that compares the two. */
moe_status_t moe_gemm_nt_blas(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                              const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Threads the BLAS may use in this process. */
void moe_gemm_set_threads(int threads);
/* "openblas 0.3.21" etc. */
const char *moe_gemm_backend_name(void);

#endif /* MOE_GEMM_H */
