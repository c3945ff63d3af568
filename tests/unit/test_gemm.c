/* Unit tests for moe_gemm_nt (expert/gemm.h): C[M,N] = A[M,K] B[N,K]^T + beta C with leading
 * dimensions, against a double-precision reference, on both sides of MOE_GEMM_ROWS (moed's
 * kernel up to it where the CPU has AVX2, else a GEMV a row up to MOE_GEMV_ROWS; the SGEMM
 * above), with beta 0 (C's old contents, NaN here, ignored) and 1, on 1 and 2 threads; on
 * the kernel each row alone gives the same bits as within the call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "expert/gemm.h"
#include "test_util.h"

static float val(int64_t i, int seed)
{
    return (float)((i * 2654435761u + (uint64_t)seed * 97u) % 2001u) / 1000.0f - 1.0f;
}

static void check_case(int64_t m, int64_t n, int64_t k, float beta)
{
    int64_t lda = k + 3, ldb = k + 5, ldc = n + 7;
    float *a = malloc(sizeof(float) * (size_t)(m * lda));
    float *b = malloc(sizeof(float) * (size_t)(n * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc));
    double *want = malloc(sizeof(double) * (size_t)(m * n));
    CHECK(a != NULL && b != NULL && c != NULL && want != NULL);
    if (a == NULL || b == NULL || c == NULL || want == NULL) {
        free(a), free(b), free(c), free(want);
        return;
    }
    for (int64_t i = 0; i < m * lda; i++) {
        a[i] = val(i, 1);
    }
    for (int64_t i = 0; i < n * ldb; i++) {
        b[i] = val(i, 2);
    }
    for (int64_t i = 0; i < m * ldc; i++) {
        c[i] = beta == 0.0f ? NAN : val(i, 3);
    }
    double most = 0.0;
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = 0; j < n; j++) {
            double s = beta == 0.0f ? 0.0 : (double)beta * c[r * ldc + j];
            for (int64_t i = 0; i < k; i++) {
                s += (double)a[r * lda + i] * b[j * ldb + i];
            }
            want[r * n + j] = s;
            most = fabs(s) > most ? fabs(s) : most;
        }
    }
    CHECK_INT_EQ(moe_gemm_nt(m, n, k, a, lda, b, ldb, beta, c, ldc), MOE_OK);
    double worst = 0.0;
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = 0; j < n; j++) {
            double d = fabs(c[r * ldc + j] - want[r * n + j]);
            worst = d > worst || isnan(d) ? d : worst;
        }
        for (int64_t j = n; j < ldc && r + 1 < m; j++) { /* the gaps between rows untouched */
            CHECK(beta == 0.0f ? isnan(c[r * ldc + j]) : c[r * ldc + j] == val(r * ldc + j, 3));
        }
    }
    /* F32 sums of k terms of magnitude <= 1: within k ulp-sized steps of the largest value */
    CHECK_NEAR(worst, 0.0, 1e-6 * (double)k * (most > 1.0 ? most : 1.0));
    if (m <= MOE_GEMM_ROWS && moe_gemm_rows_kernel() && beta == 0.0f) {
        float *one = malloc(sizeof(float) * (size_t)n);
        CHECK(one != NULL);
        int same = 1;
        for (int64_t r = 0; one != NULL && r < m; r++) {
            CHECK_INT_EQ(moe_gemm_nt(1, n, k, a + r * lda, lda, b, ldb, 0.0f, one, n), MOE_OK);
            same &= memcmp(one, c + r * ldc, sizeof(float) * (size_t)n) == 0;
        }
        CHECK(same);
        free(one);
    }
    free(a), free(b), free(c), free(want);
}

int main(void)
{
    for (int threads = 1; threads <= 2; threads++) {
        moe_gemm_set_threads(threads); /* 2: the kernel splits outputs from 48 */
        for (int64_t m = 1; m <= MOE_GEMM_ROWS + 2; m++) {
            check_case(m, 96, 256, 0.0f);
            check_case(m, 96, 256, 1.0f);
            for (int64_t n = 97; n <= 99; n++) { /* 1-3 outputs past the last whole pass */
                check_case(m, n, 259, 0.0f);     /* (of 2, 3 or 4), K % 8 */
            }
            check_case(m, 3, 64, 0.0f); /* fewer outputs than a pass */
            check_case(m, 1, 7, 0.0f);
            check_case(m, 33, 1, 1.0f);
            check_case(m, 5, 0, 0.0f); /* no inputs: C = beta C (0 here, over NaN) */
            check_case(m, 5, 0, 1.0f);
        }
    }
    moe_gemm_set_threads(1);
    /* no rows, no columns: nothing written, OK */
    CHECK_INT_EQ(moe_gemm_nt(0, 5, 5, NULL, 5, NULL, 5, 0.0f, NULL, 5), MOE_OK);
    return moe_test_finish("test_gemm");
}
