/* Online rebalancing (runtime.rebalance_every N, runtime.redundant_experts R): every N steps
 * the ranks agree on a new placement from the last window's router counts and move expert
 * weights to where it puts them, between two steps.
 *
 * 1. One reduction (sum) of every rank's window: per layer per expert the choices its
 *    routing ranks kept (after model.capacity_factor: the rows the experts computed, what
 *    `moed plan --routing` models), counted per range of global token index (below), and
 *    per rank the rows its experts computed. Every rank then holds the same counts.
 * 2. Every rank computes the same placement from them with the EPLB packing (moe_config/eplb.h:
 *    `moed plan`'s code), per layer, on the expert ranks (moe_cfg_expert_ranks), R extra
 *    copies per layer, slots ceil((E + R) / expert ranks) per rank per layer. The
 *    prediction for it splits a copied expert's kept choices as the dispatch will (copy j of
 *    n takes global tokens [ceil(j T / n), ceil((j + 1) T / n)), layer/plan.h), not evenly
 *    as the packing weighs them: the ranges the window counts in are those edges for every
 *    n up to the most copies an expert can get (1 + R, at most the ranks and
 *    MOE_REBALANCE_EXACT_COPIES), so the prediction is the rows the window's choices give
 *    under the new placement. An expert given more copies than that has a range's choices
 *    shared over the copies it spans in proportion (an estimate, said so).
 *    A placement that cuts the predicted max/mean by less than 2%, or that is the live one,
 *    is not taken (the rebalance is recorded with 0 experts moved and the imbalance after
 *    equal to the one before).
 * 3. A rank gaining an expert gets its weights point to point (MPI_Isend/Irecv through
 *    MOE_MPI, waited with transport/wait.h) from a rank that holds it now (the k-th gained
 *    copy of expert e comes from old holder k mod holders); a rank keeps its old copies until
 *    every move has arrived, then drops those the new placement does not give it.
 * 4. The new sets become placement.layers of the engine's live config
 *    (moe_cfg_set_layer_sets): the plan and the counts exchange use them from the next step.
 * 5. The ranks agree on the rebalance's cost (moe_rebalance_result_t.critical_ns): the
 *    slowest rank's, not rank 0's.
 * The output does not change: the plan splits a replicated expert's tokens by global token
 * index whatever the placement (layer/plan.h). */
#ifndef MOE_REBALANCE_H
#define MOE_REBALANCE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe/status.h"
#include "model/weights.h"
#include "layer/plan.h"

/* The most copies of one expert whose split the window's token ranges resolve exactly: 80
 * ranges (8 * 80 bytes per layer and expert, twice) at most. */
#define MOE_REBALANCE_EXACT_COPIES 16

typedef struct moe_rebalance {
    int L, E, W;
    int B;           /* token ranges per (layer, expert) */
    int copies;      /* the most copies an expert's split is exact for */
    int64_t T;       /* workload.tokens_per_step: global tokens of a step */
    int64_t *edge;   /* [B + 1]: range b is global tokens [edge[b], edge[b + 1]) of a step */
    int64_t *window; /* [L * E * B + W]: kept choices per (layer, expert, range), then rows per
                      * rank */
    int64_t *sum;    /* the same summed over the ranks */
} moe_rebalance_t;

/* One rebalance, the same on every rank except the times. */
typedef struct moe_rebalance_result {
    int64_t moved;          /* expert copies sent to a rank that lacked them, all layers */
    int64_t bytes;          /* moved x bytes of one expert's weights */
    int64_t begin_ns, end_ns; /* on this rank: reduction, packing, moves, switch, and the
                                 wait for the slowest rank to finish its own (so every
                                 rank's span ends with the rebalance's critical path) */
    int64_t reduced_ns;       /* on this rank: when the counts' reduction ended */
    /* The rebalance's critical path, the same on every rank: the reduction as the last rank
     * to arrive saw it (the least of the ranks' reductions) plus the slowest rank's work
     * after it (packing, its moves, switch), and the rank that was slowest. Not rank 0's
     * time: in master routing rank 0 moves no weights. */
    int64_t critical_ns;
    int slowest_rank;
    double before;          /* max / mean of the rows over the window of the ranks that
                               hold experts (a master that holds some included) */
    double after;           /* the same predicted for the new placement: the window's kept
                               choices split over copies as the dispatch splits them */
    bool estimated;         /* after is an estimate: an expert got more copies than
                               MOE_REBALANCE_EXACT_COPIES (see step 2) */
} moe_rebalance_result_t;

moe_status_t moe_rebalance_init(moe_rebalance_t *rb, const moe_config_t *cfg, int world,
                                moe_error_t *err);
void moe_rebalance_destroy(moe_rebalance_t *rb); /* accepts a zeroed struct */

/* Add one layer's forward to the window: the plan's kept choices (slot_pos >= 0) of
 * topk_idx [plan->tokens, k], this rank's tokens being global tokens first_token..., and
 * expert_rows [num_local] computed on `rank`. O(tokens x k); no allocation. */
void moe_rebalance_account(moe_rebalance_t *rb, int layer, const moe_plan_t *plan,
                           const int32_t *topk_idx, int64_t first_token,
                           const int64_t *expert_rows, int num_local, int rank);

/* Steps 1-4 above. Collective over comm; live is the config the layer and w were built
 * from (its placement.layers sets are replaced). An error is every rank's (a move that
 * fails on one rank fails the run, as a lost peer does). */
moe_status_t moe_rebalance_apply(moe_rebalance_t *rb, moe_config_t *live, moe_weights_t *w,
                                 MPI_Comm comm, int rank, moe_rebalance_result_t *res,
                                 moe_error_t *err);

#endif /* MOE_REBALANCE_H */
