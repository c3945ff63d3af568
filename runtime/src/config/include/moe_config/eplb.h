/* Expert placement like DeepSeek's EPLB (github.com/deepseek-ai/EPLB, eplb.py), in C:
 * replicate the hottest experts, then pack the copies onto the expert ranks so each carries
 * about the same load; with nodes, balance the nodes first so a token's rows stay inside
 * one node as far as the loads allow. In the config part (config/eplb.c) so that both
 * `moed plan` (profiler/src/planner/planner.c) and online rebalancing
 * (runtime.rebalance_every, layer/rebalance.c) compute placements with the same code. */
#ifndef MOE_EPLB_H
#define MOE_EPLB_H

#include <stdbool.h>
#include <stdint.h>

#include "moe/status.h"

/* One layer's problem: loads[E] (the router's counts), the expert ranks (ranks[n], the
 * master excluded), node[n] the node index of each (all 0: one node), R extra copies. */
typedef struct moe_eplb_in {
    int num_experts;
    const double *loads;
    int num_ranks;
    const int32_t *ranks;
    const int32_t *node;
    int redundant;
    int slots;          /* copies a rank may hold; 0: ceil((E + R) / n) (per node) */
} moe_eplb_in_t;

/* The answer: host[r * E + e] = 1 when ranks[r] holds a copy of e; rank_load[r] the
 * predicted load (each expert's load split evenly over its copies). Slots per rank:
 * ceil((E + R) / n) (per node: ceil((E_node + R_node) / n_node)). */
typedef struct moe_eplb_out {
    uint8_t *host;      /* [n * E], caller's */
    double *rank_load;  /* [n], caller's */
} moe_eplb_out_t;

/* Returns MOE_OK, or MOE_ERR_INVALID_ARG with the reason in err (R beyond the free slots,
 * more copies of an expert than ranks, a packing that cannot keep copies apart). */
moe_status_t moe_eplb_place(const moe_eplb_in_t *in, moe_eplb_out_t *out, moe_error_t *err);

/* max / mean of v[0..n) (0 when the mean is 0). */
double moe_eplb_max_mean(const double *v, int n);
/* The same over the ranks j with holds[j] (those holding an expert: a rank left empty by the
 * packing, where there are fewer copies than ranks, is in no mean: the report's and the
 * plan's before and after average over the holders too); holds NULL: every rank. */
double moe_eplb_max_mean_held(const double *v, const bool *holds, int n);

#endif /* MOE_EPLB_H */
