/* The dispatch plan of one layer on one routing rank: which (token, choice) pairs go to
 * which rank, in what order, and which are dropped by the capacity limit.
 *
 * Send order: destination rank ascending, then expert id ascending, then token ascending.
 * The receiver therefore gets, from each source, one block per local expert in id order.
 *
 * Replicas: a slot is one copy of an expert on one rank (the config's placement entries
 * of the layer, sorted by expert then rank). An expert with n copies sends a kept choice
 * of global token g (of total_tokens routed per step) to copy floor(g * n / total_tokens):
 * contiguous shares by token index in global token order, so master and symmetric routing
 * send every token to the same copy and the output does not change.
 *
 * Capacity: an expert keeps the first `capacity` choices in global token order (tokens of
 * lower routing ranks come first; within a token, choice 0 first). `demand_before[e]` is
 * the number of choices of expert e made by lower routing ranks (an exclusive scan), so
 * every rank drops exactly what the single-rank run drops. */
#ifndef MOE_PLAN_H
#define MOE_PLAN_H

#include <stdint.h>

#include "moe_config/config.h"
#include "layer/arena.h"

typedef struct moe_plan {
    int world_size;
    int num_experts;
    int top_k;
    int64_t tokens;          /* routed by this rank */
    int64_t num_send;        /* rows sent (kept choices) */
    int64_t num_dropped;     /* choices dropped by capacity */
    int *send_rows;          /* [world] rows to each rank */
    int *send_row_displs;    /* [world] first row for each rank */
    int32_t *expert_demand;  /* [E] choices of each expert before capacity */
    int32_t *expert_kept;    /* [E] rows sent to each expert */
    int32_t *expert_dropped; /* [E] */
    int32_t *slot_pos;       /* [T*k] row in the send buffer, or -1 if dropped */
    int32_t *send_token;     /* [T*k] token of each send row (first num_send used) */
    /* Counts message: for each destination, its local experts' kept counts in id order. */
    int32_t *count_msg;      /* [max_slots] */
    int *count_msg_len;      /* [world] */
    int *count_msg_displs;   /* [world] */
    int32_t *expert_cursor;  /* [E] scratch */
    int *dest_cursor;        /* [world] scratch */
    int max_slots;           /* placement entries of a layer, at most */
    int32_t *slot_kept;      /* [max_slots] rows sent to each copy */
    int32_t *slot_cursor;    /* [max_slots] scratch */
    int32_t *expert_first;   /* [E] first slot of each expert */
    int32_t *expert_copies;  /* [E] its slots */
    moe_cfg_replica_t *owner_slots; /* [E]: moe_plan_build's one copy per expert */
    void *block;             /* what moe_plan_init allocated; NULL when carved */
} moe_plan_t;

/* Carve the plan's arrays for up to max_tokens routed tokens from arena (layer/arena.h;
 * with a sizing arena every pointer is NULL). The plan does not own them. */
void moe_plan_carve(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                    int64_t max_tokens, int max_slots, moe_arena_t *arena);

/* Allocate for up to max_tokens routed tokens, one block. Returns 0 on success, -1 on no
 * memory. */
int moe_plan_init(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                  int64_t max_tokens);
void moe_plan_destroy(moe_plan_t *plan); /* accepts a zeroed, destroyed or carved plan */

/* Count the demand per expert of topk_idx [tokens, k] into plan->expert_demand. */
void moe_plan_count_demand(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens);

/* Build the plan. owner [E]: rank of each expert (one copy each). capacity 0: no limit.
 * demand_before [E] may be NULL when capacity is 0. Call after moe_plan_count_demand. */
void moe_plan_build(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens,
                    const int32_t *owner, int64_t capacity, const int32_t *demand_before);

/* The same with replicas: slots [n_slots] (<= max_slots) sorted by expert then rank, every
 * expert at least once; this rank's tokens are global tokens first_token.. of
 * total_tokens. Capacity counts per expert, before the split. */
void moe_plan_build_slots(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens,
                          const moe_cfg_replica_t *slots, int n_slots, int64_t first_token,
                          int64_t total_tokens, int64_t capacity, const int32_t *demand_before);

/* ceil(cf * T * k / E); 0 when cf is 0. */
int64_t moe_plan_capacity(double capacity_factor, int64_t tokens_per_step, int top_k,
                          int num_experts);

#endif /* MOE_PLAN_H */
