/* --profiler-ab: the pairs' statistics (see profiler_ab.h). */
#include "app/profiler_ab.h"

#include <math.h>
#include <stdlib.h>

bool moe_ab_step_on(int64_t k, int64_t s)
{
    int64_t block = s / k, pair = block / 2;
    return (block % 2 == 0) == (pair % 2 == 0);
}

static int ab_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int moe_ab_compute(const int64_t *block_ns, int64_t blocks, int64_t k, moe_ab_result_t *out)
{
    int64_t pairs = blocks / 2, first = pairs >= 3 ? 1 : 0, n = pairs - first;
    *out = (moe_ab_result_t){0};
    if (n < 1 || k < 1) {
        return -1;
    }
    double *r = malloc(sizeof(double) * (size_t)n);
    if (r == NULL) {
        return -1;
    }
    double on_sum = 0, off_sum = 0, mean = 0;
    for (int64_t p = first; p < pairs; p++) {
        bool on_first = moe_ab_step_on(k, 2 * p * k);
        double a = (double)block_ns[2 * p], b = (double)block_ns[2 * p + 1];
        double on = on_first ? a : b, off = on_first ? b : a;
        r[p - first] = on > 0 ? off / on : 0;
        on_sum += on;
        off_sum += off;
        mean += r[p - first];
    }
    mean /= (double)n;
    double var = 0;
    for (int64_t i = 0; i < n; i++) {
        var += (r[i] - mean) * (r[i] - mean);
    }
    double se = n > 1 ? sqrt(var / (double)(n - 1) / (double)n) : 0;
    qsort(r, (size_t)n, sizeof(double), ab_cmp);
    double steps = (double)n * (double)k;
    *out = (moe_ab_result_t){
        .pairs = n,
        .on_ms_per_step = on_sum * 1e-6 / steps,
        .off_ms_per_step = off_sum * 1e-6 / steps,
        .median = n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]),
        .mean = mean,
        .lo = mean - 1.96 * se,
        .hi = mean + 1.96 * se,
        .totals = on_sum > 0 ? off_sum / on_sum : 0,
    };
    free(r);
    return 0;
}
