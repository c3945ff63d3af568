/* Load-balance figures of a vector of per-expert loads (tokens). */
#ifndef MOE_BALANCE_H
#define MOE_BALANCE_H

#include <stdint.h>

typedef struct moe_balance {
    double gini;         /* 0 = perfectly even, (n-1)/n = all on one expert */
    double cv;           /* coefficient of variation: population stddev / mean */
    double entropy_norm; /* Shannon entropy of the load shares / ln(n): 1 = even, 0 = one */
    double max_mean;     /* max load / mean load: 1 = even, n = all on one */
} moe_balance_t;

/* All zeros (and max_mean 0) for an all-zero vector; n >= 1. */
void moe_balance_compute(const uint64_t *load, int n, moe_balance_t *out);

#endif /* MOE_BALANCE_H */
