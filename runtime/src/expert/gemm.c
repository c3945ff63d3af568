#include "expert/gemm.h"

#include <omp.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define GEMM_X86 1
#include <immintrin.h>
#endif

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

static int g_threads = 1; /* moe_gemm_set_threads */

#ifdef GEMM_X86
#define ROWS_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* The sum of v's 8 lanes, always in the same order. */
ROWS_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* C[0..M, j0..j1) of moe_gemm_nt, P outputs (rows of B) at a time (j1 - j0 a multiple of
 * P), each output's M sums in registers: 8 lanes of products in K order, then their sum
 * (hsum8), then K's last k % 8 terms in order. An output's value does not depend on M, P or
 * the rows beside it. */
ROWS_INLINE void rows_block(const int M, const int P, int64_t j0, int64_t j1, int64_t k,
                            const float *a, int64_t lda, const float *b, int64_t ldb,
                            float beta, float *c, int64_t ldc)
{
    const int64_t k8 = k & ~(int64_t)7;
    for (int64_t j = j0; j < j1; j += P) {
        const float *w = b + j * ldb;
        __m256 acc[4][MOE_GEMM_PASS_ROWS];
#pragma GCC unroll 4
        for (int u = 0; u < P; u++) {
#pragma GCC unroll 8
            for (int r = 0; r < M; r++) {
                acc[u][r] = _mm256_setzero_ps();
            }
        }
        for (int64_t i = 0; i < k8; i += 8) {
            __m256 v[4];
#pragma GCC unroll 4
            for (int u = 0; u < P; u++) {
                v[u] = _mm256_loadu_ps(w + u * ldb + i);
            }
#pragma GCC unroll 8
            for (int r = 0; r < M; r++) {
                const __m256 x = _mm256_loadu_ps(a + r * lda + i);
#pragma GCC unroll 4
                for (int u = 0; u < P; u++) {
                    acc[u][r] = _mm256_fmadd_ps(v[u], x, acc[u][r]);
                }
            }
        }
        for (int u = 0; u < P; u++) {
            for (int r = 0; r < M; r++) {
                float sum = hsum8(acc[u][r]);
                for (int64_t i = k8; i < k; i++) {
                    sum += w[u * ldb + i] * a[r * lda + i];
                }
                float *o = c + r * ldc + j + u;
                *o = beta == 0.0f ? sum : sum + beta * *o;
            }
        }
    }
}

/* C[0..M, j0..j1): whole passes of P outputs, the last j1 - j0 mod P outputs one at a time. */
ROWS_INLINE void rows_run(const int M, const int P, int64_t j0, int64_t j1, int64_t k,
                          const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                          float *c, int64_t ldc)
{
    const int64_t jp = j0 + (j1 - j0) / P * P;
    rows_block(M, P, j0, jp, k, a, lda, b, ldb, beta, c, ldc);
    rows_block(M, 1, jp, j1, k, a, lda, b, ldb, beta, c, ldc);
}

/* An instance for each row count M, P outputs a pass: their M x P sums, B's P rows and a
 * row of A in the 16 ymm registers (4 rows 3 outputs: 13.1 GB/s against 10.5 for 2 outputs,
 * gemm.h's measure). */
__attribute__((target("avx2,fma"))) static void rows_part(int64_t m, int64_t j0, int64_t j1,
                                                          int64_t k, const float *a,
                                                          int64_t lda, const float *b,
                                                          int64_t ldb, float beta, float *c,
                                                          int64_t ldc)
{
    _Static_assert(MOE_GEMM_PASS_ROWS == 6, "an instance for each row count");
    switch (m) {
    case 1: rows_run(1, 4, j0, j1, k, a, lda, b, ldb, beta, c, ldc); break;
    case 2: rows_run(2, 4, j0, j1, k, a, lda, b, ldb, beta, c, ldc); break;
    case 3: rows_run(3, 3, j0, j1, k, a, lda, b, ldb, beta, c, ldc); break;
    case 4: rows_run(4, 3, j0, j1, k, a, lda, b, ldb, beta, c, ldc); break;
    case 5: rows_run(5, 2, j0, j1, k, a, lda, b, ldb, beta, c, ldc); break;
    default: rows_run(6, 2, j0, j1, k, a, lda, b, ldb, beta, c, ldc); break;
    }
}

/* A pass of m <= MOE_GEMM_PASS_ROWS rows: the threads split the outputs in runs of 12 (a
 * multiple of every P). */
static void gemm_pass(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    int t = g_threads > 1 && n >= 24 * g_threads ? g_threads : 1;
    if (t == 1) {
        rows_part(m, 0, n, k, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#pragma omp parallel num_threads(t)
    {
        int64_t runs = (n + 11) / 12, me = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t j0 = runs * me / nt * 12, j1 = runs * (me + 1) / nt * 12;
        rows_part(m, j0, j1 < n ? j1 : n, k, a, lda, b, ldb, beta, c, ldc);
    }
}
#endif

bool moe_gemm_rows_kernel(void)
{
#ifdef GEMM_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

moe_status_t moe_gemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m == 0 || n == 0) {
        return MOE_OK;
    }
#ifdef GEMM_X86
    if (m <= MOE_GEMM_ROWS && moe_gemm_rows_kernel()) { /* passes of equal size (+-1) */
        int64_t passes = (m + MOE_GEMM_PASS_ROWS - 1) / MOE_GEMM_PASS_ROWS;
        for (int64_t p = 0; p < passes; p++) {
            int64_t r0 = m * p / passes, r1 = m * (p + 1) / passes;
            gemm_pass(r1 - r0, n, k, a + r0 * lda, lda, b, ldb, beta, c + r0 * ldc, ldc);
        }
        return MOE_OK;
    }
#endif
    return moe_gemm_nt_blas(m, n, k, a, lda, b, ldb, beta, c, ldc);
}

moe_status_t moe_gemm_nt_blas(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
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
    g_threads = threads > 1 ? threads : 1;
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
