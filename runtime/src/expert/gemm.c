#include "expert/gemm.h"

#include <stdlib.h>

#if defined(MOE_BLAS_DNNL)
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif

#if defined(MOE_BLAS_OPENBLAS)
void openblas_set_num_threads(int num_threads);
#elif defined(MOE_BLAS_BLIS)
void bli_thread_set_num_threads(long n_threads);
#endif

moe_status_t moe_gemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m == 0 || n == 0) {
        return MOE_OK;
    }
#if defined(MOE_BLAS_DNNL)
    dnnl_status_t st = dnnl_sgemm('N', 'T', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return st == dnnl_success ? MOE_OK : MOE_ERR_BLAS;
#else
    if (m <= MOE_GEMV_ROWS && k > 0) { /* a GEMV a row: B streamed once a row, not packed
                                        * (k 0: SGEMV would not apply beta, SGEMM does) */
        for (int64_t r = 0; r < m; r++) {
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, 1.0f, b, (int)ldb,
                        a + r * lda, 1, beta, c + r * ldc, 1);
        }
        return MOE_OK;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a,
                (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return MOE_OK;
#endif
}

void moe_gemm_set_threads(int threads)
{
#if defined(MOE_BLAS_OPENBLAS)
    openblas_set_num_threads(threads);
#elif defined(MOE_BLAS_BLIS)
    bli_thread_set_num_threads(threads);
#else
    /* oneDNN's threading is OpenMP's: honour OMP_NUM_THREADS set before start. */
    (void)threads;
#endif
}

const char *moe_gemm_backend_name(void)
{
    return MOED_BLAS_NAME;
}
