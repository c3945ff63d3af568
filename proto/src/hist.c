#include "moe_proto/hist.h"

#include <string.h>

void moe_hist_reset(moe_hist_t *h)
{
    memset(h, 0, sizeof(*h));
}

int moe_hist_bucket_of(int64_t value)
{
    if (value < MOE_HIST_SUB) {
        return value < 0 ? 0 : (int)value; /* exact below 16 ns */
    }
    int msb = 63 - __builtin_clzll((unsigned long long)value);
    /* the 4 bits after the leading one pick the sub-bucket */
    int sub = (int)((value >> (msb - 4)) & (MOE_HIST_SUB - 1));
    int b = (msb - 3) * MOE_HIST_SUB + sub;
    return b < MOE_HIST_BUCKETS ? b : MOE_HIST_BUCKETS - 1;
}

int64_t moe_hist_bucket_low(int b)
{
    if (b < MOE_HIST_SUB) {
        return b;
    }
    int msb = b / MOE_HIST_SUB + 3, sub = b % MOE_HIST_SUB;
    return ((int64_t)1 << msb) + ((int64_t)sub << (msb - 4));
}

void moe_hist_add(moe_hist_t *h, int64_t value)
{
    if (h->count == 0 || value < h->min) {
        h->min = value;
    }
    if (h->count == 0 || value > h->max) {
        h->max = value;
    }
    h->count++;
    h->sum += (double)value;
    h->buckets[moe_hist_bucket_of(value)]++;
}

void moe_hist_merge(moe_hist_t *into, const moe_hist_t *from)
{
    if (from->count == 0) {
        return;
    }
    if (into->count == 0 || from->min < into->min) {
        into->min = from->min;
    }
    if (into->count == 0 || from->max > into->max) {
        into->max = from->max;
    }
    into->count += from->count;
    into->sum += from->sum;
    for (int b = 0; b < MOE_HIST_BUCKETS; b++) {
        into->buckets[b] += from->buckets[b];
    }
}

double moe_hist_mean(const moe_hist_t *h)
{
    return h->count > 0 ? h->sum / (double)h->count : 0.0;
}

double moe_hist_quantile(const moe_hist_t *h, double q)
{
    if (h->count == 0) {
        return 0.0;
    }
    if (q <= 0.0) {
        return (double)h->min;
    }
    if (q >= 1.0) {
        return (double)h->max;
    }
    /* rank of the sample (nearest-rank definition), then its bucket's midpoint */
    uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999999);
    rank = rank < 1 ? 1 : rank;
    if (rank >= h->count || rank == 1) { /* the largest or the smallest: kept exactly */
        return rank >= h->count ? (double)h->max : (double)h->min;
    }
    uint64_t seen = 0;
    for (int b = 0; b < MOE_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen >= rank) {
            double lo = (double)moe_hist_bucket_low(b);
            double hi = b + 1 < MOE_HIST_BUCKETS ? (double)moe_hist_bucket_low(b + 1) : lo;
            double mid = b < MOE_HIST_SUB ? lo : 0.5 * (lo + hi);
            mid = mid < (double)h->min ? (double)h->min : mid;
            return mid > (double)h->max ? (double)h->max : mid;
        }
    }
    return (double)h->max;
}
