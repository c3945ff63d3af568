/* The dispatch plan of one layer on one routing rank: which (token, choice) pairs go to
 * which rank, in what order, and which are dropped by the capacity limit.
 *
 * Rows (plan->dedup false): one send row per kept (token, choice) pair. Send order:
 * destination rank ascending, then expert id ascending, then token ascending. The receiver
 * therefore gets, from each source, one block per local expert in id order.
 *
 * Rows (plan->dedup true, runtime.dedup): one send row per (token, destination rank) that
 * carries at least one kept choice of the token. Send order: destination rank ascending,
 * then token ascending. The receiver learns from the counts message which of its experts
 * each row goes through, with which weight (see "Counts message" below); it sums a row's
 * weighted expert outputs and returns one row, which the routing rank adds to the token
 * (moe_plan_t.token_rows).
 *
 * Column shares (plan->columns, placement.copies: columns; dedup only): every copy of an
 * expert holds a share of its ffn columns, so a kept choice goes to every copy: a pair for
 * each, on the token's row to each copy's rank, all with the choice's weight. The ranks'
 * rows of a token add up to the whole expert's output. A token then has up to k x copies
 * rows (token_rows' stride, rows_per_token).
 *
 * Balance (plan->balance, placement.copies: balance): every kept choice of an expert goes
 * to the same one of its copies, picked per plan: experts in id order, each (with kept
 * choices) to the copy whose rank has been given the fewest experts so far, then the fewest
 * rows, then the lowest rank. The ranks then read about as many experts each (within one)
 * however few the step touches. With several routing ranks each plan counts the kept
 * choices of all of them (balance_kept, summed over the routing ranks), so every routing
 * rank picks the same copy of an expert and each touched expert is read by one rank.
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
 * every rank drops exactly what the single-rank run drops.
 *
 * Counts message (int32 words, one to each rank that hosts a copy in the layer, m = its
 * copies, in slot order = expert id order; rank-local, never leaves the job's homogeneous
 * ranks, so no byte order is fixed):
 *   dedup false: n[0..m): the rows of each copy (its block of the send rows).
 *   dedup true:  rows | n[0..m) | row[...] | wbits[...]: the rows sent to the rank; the
 *                pairs of each copy; then, copy after copy, the index (within the rank's
 *                block of rows, ascending) of each pair's row; then the pairs' weights
 *                (F32 bits) in the same order. 1 + m + 2 * pairs words. */
#ifndef MOE_PLAN_H
#define MOE_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "layer/arena.h"

typedef struct moe_plan {
    int world_size;
    int num_experts;
    int top_k;
    int64_t tokens;          /* routed by this rank */
    bool dedup;              /* one row per (token, rank): set before building */
    bool columns;            /* copies are column shares (dedup): set before building */
    bool balance;            /* each expert's tokens to its least-loaded copy: likewise */
    const int32_t *balance_kept; /* [E] balance: each expert's kept choices over every
                                  * routing rank (NULL: this plan's own); set before building */
    int rows_per_token;      /* token_rows' stride: k, or k x fan (carve's) */
    int64_t num_send;        /* rows sent (kept choices; dedup: (token, rank) pairs) */
    int64_t num_pairs;       /* kept (token, choice) pairs the rows carry */
    int64_t num_dropped;     /* choices dropped by capacity */
    int *send_rows;          /* [world] rows to each rank */
    int *send_pairs;         /* [world] (token, choice) pairs the rows to each rank carry */
    int *send_row_displs;    /* [world] first row for each rank */
    int32_t *expert_demand;  /* [E] choices of each expert before capacity */
    int32_t *expert_kept;    /* [E] rows sent to each expert */
    int32_t *expert_dropped; /* [E] */
    int32_t *slot_pos;       /* [T*k] row in the send buffer that carries each choice, or -1
                              * if dropped (dedup: the choices of one token to one rank
                              * share a row) */
    int32_t *send_token;     /* [T*k*fan] token of each send row (first num_send used) */
    int32_t *token_rows;     /* [T*rows_per_token] dedup: token t's rows, ascending (= by
                              * rank), -1 after the last: the merge adds them in this order */
    int *dest_token;         /* [world] scratch: the last token given a row to each rank */
    int *dest_row;           /* [world] scratch: that row */
    /* Counts message to each destination (see above), at count_msg_displs[d]. */
    int32_t *count_msg;      /* [world + max_slots + 2 * T * k * fan] */
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
/* The same for column shares: fan, the most copies a choice goes to (1: replicas). */
void moe_plan_carve_fan(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                        int64_t max_tokens, int max_slots, int fan, moe_arena_t *arena);

/* Allocate for up to max_tokens routed tokens, one block. Returns 0 on success, -1 on no
 * memory. */
int moe_plan_init(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                  int64_t max_tokens);
void moe_plan_destroy(moe_plan_t *plan); /* accepts a zeroed, destroyed or carved plan */

/* Count the demand per expert of topk_idx [tokens, k] into plan->expert_demand. */
void moe_plan_count_demand(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens);

/* Build the plan. owner [E]: rank of each expert (one copy each). capacity 0: no limit.
 * demand_before [E] may be NULL when capacity is 0. topk_w [tokens, k]: the choices'
 * weights, read only when plan->dedup (may be NULL otherwise). Call after
 * moe_plan_count_demand. */
void moe_plan_build(moe_plan_t *plan, const int32_t *topk_idx, const float *topk_w,
                    int64_t tokens, const int32_t *owner, int64_t capacity,
                    const int32_t *demand_before);

/* The same with replicas: slots [n_slots] (<= max_slots) sorted by expert then rank, every
 * expert at least once; this rank's tokens are global tokens first_token.. of
 * total_tokens. Capacity counts per expert, before the split. */
void moe_plan_build_slots(moe_plan_t *plan, const int32_t *topk_idx, const float *topk_w,
                          int64_t tokens, const moe_cfg_replica_t *slots, int n_slots,
                          int64_t first_token, int64_t total_tokens, int64_t capacity,
                          const int32_t *demand_before);

/* Words of one dedup counts message, at most: from a rank routing up to max_tokens tokens
 * to a rank with up to num_local copies in a layer. */
int64_t moe_plan_msg_words(int top_k, int num_local, int64_t max_tokens);

/* The expert rank's side of a dedup step: the pairs its experts run over, read from every
 * source's counts message, ordered by local expert, then chunk, then source, then row, so
 * that one expert call (local expert le, chunk c) takes the contiguous pairs
 * [off[le * chunks + c], off[le * chunks + c + 1]). row: the pair's row in the received
 * rows (the source's block start + its index); w: its weight. */
typedef struct moe_plan_pairs {
    int world_size, num_local, chunks;
    int64_t cap;             /* pairs at most */
    int32_t *row;            /* [cap] */
    float *w;                /* [cap] */
    int32_t *off;            /* [num_local * chunks + 1] */
    int32_t *row_pairs;      /* [max_rows] pairs of each received row (>= 1) */
    int64_t *cur, *pre, *tot; /* [world] scratch; tot: each source's pairs */
} moe_plan_pairs_t;

/* Carve for up to cap pairs in up to max_rows received rows, num_local local experts
 * (moe_plan_carve's way). */
void moe_plan_pairs_carve(moe_plan_pairs_t *pp, int world_size, int num_local, int chunks,
                          int64_t cap, int64_t max_rows, moe_arena_t *arena);

/* Read the counts messages msgs[s * stride ...] of every source s (their rows laid out at
 * recv_displs[s] and cut into chunks as chunk_recv_displs/rows [chunks * world]: absolute
 * rows, piece c of s at [c * world + s]) for nl local experts. Returns -1 when
 * every message was read, else the first source whose message does not fit (a count past
 * the words, a row outside its block or out of order, more pairs than cap). */
int moe_plan_pairs_read(moe_plan_pairs_t *pp, const int32_t *msgs, int64_t stride, int nl,
                        const int *recv_displs, const int *chunk_recv_displs,
                        const int *chunk_recv_rows);

/* ceil(cf * T * k / E); 0 when cf is 0. */
int64_t moe_plan_capacity(double capacity_factor, int64_t tokens_per_step, int top_k,
                          int num_experts);

#endif /* MOE_PLAN_H */
