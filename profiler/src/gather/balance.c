#include "gather/balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Gini from the sorted loads: G = sum_i (2i - n - 1) x_i / (n sum x), i = 1..n. */
static double gini_of(const uint64_t *load, int n, double total)
{
    uint64_t small[256];
    uint64_t *s = n <= 256 ? small : malloc(sizeof(uint64_t) * (size_t)n);
    if (s == NULL) {
        return NAN;
    }
    memcpy(s, load, sizeof(uint64_t) * (size_t)n);
    qsort(s, (size_t)n, sizeof(uint64_t), cmp_u64);
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += (2.0 * (i + 1) - n - 1) * (double)s[i];
    }
    if (s != small) {
        free(s);
    }
    return acc / ((double)n * total);
}

void moe_balance_compute(const uint64_t *load, int n, moe_balance_t *out)
{
    memset(out, 0, sizeof(*out));
    double total = 0.0, mx = 0.0;
    for (int i = 0; i < n; i++) {
        total += (double)load[i];
        mx = (double)load[i] > mx ? (double)load[i] : mx;
    }
    if (n < 1 || total <= 0.0) {
        return;
    }
    double mean = total / n, var = 0.0, ent = 0.0;
    for (int i = 0; i < n; i++) {
        double d = (double)load[i] - mean, p = (double)load[i] / total;
        var += d * d;
        ent -= p > 0.0 ? p * log(p) : 0.0;
    }
    out->gini = gini_of(load, n, total);
    out->cv = sqrt(var / n) / mean;
    out->entropy_norm = n > 1 ? ent / log((double)n) : 1.0;
    out->max_mean = mx / mean;
}
