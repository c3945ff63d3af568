/* Latency histogram: fixed size, log-linear buckets (16 per power of two, so any value is
 * known to within 1/32 of itself), mergeable by adding buckets. Values are nanoseconds. */
#ifndef MOE_HIST_H
#define MOE_HIST_H

#include <stdint.h>

#define MOE_HIST_SUB 16                 /* buckets per power of two */
#define MOE_HIST_BUCKETS (40 * MOE_HIST_SUB) /* up to 2^40 ns (~18 min) */

typedef struct moe_hist {
    uint64_t count;
    double sum;       /* of values */
    int64_t min;
    int64_t max;
    uint32_t buckets[MOE_HIST_BUCKETS];
} moe_hist_t;

void moe_hist_reset(moe_hist_t *h);
void moe_hist_add(moe_hist_t *h, int64_t value);
void moe_hist_merge(moe_hist_t *into, const moe_hist_t *from);
/* q in [0, 1]; the value below which a fraction q of the samples fall (nearest rank), within
 * 1/32 relative; exact where that sample is the smallest or the largest (p99 of fewer than
 * 100 samples is the max); 0 when empty. */
double moe_hist_quantile(const moe_hist_t *h, double q);
double moe_hist_mean(const moe_hist_t *h);
int moe_hist_bucket_of(int64_t value);
/* Lower bound of bucket b. */
int64_t moe_hist_bucket_low(int b);

#endif /* MOE_HIST_H */
