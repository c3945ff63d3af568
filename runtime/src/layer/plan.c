#include "layer/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void moe_plan_carve(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                    int64_t max_tokens, int max_slots, moe_arena_t *arena)
{
    max_slots = max_slots > num_experts ? max_slots : num_experts;
    memset(plan, 0, sizeof(*plan));
    plan->world_size = world_size;
    plan->num_experts = num_experts;
    plan->top_k = top_k;
    size_t pairs = (size_t)(max_tokens > 0 ? max_tokens : 1) * (size_t)top_k;
    size_t W = (size_t)world_size, E = (size_t)num_experts;
    plan->send_rows = moe_arena_take(arena, W, sizeof(int));
    plan->send_row_displs = moe_arena_take(arena, W, sizeof(int));
    plan->count_msg_len = moe_arena_take(arena, W, sizeof(int));
    plan->count_msg_displs = moe_arena_take(arena, W, sizeof(int));
    plan->expert_demand = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_kept = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_dropped = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_cursor = moe_arena_take(arena, E, sizeof(int32_t));
    plan->dest_cursor = moe_arena_take(arena, W, sizeof(int));
    plan->max_slots = max_slots;
    plan->count_msg = moe_arena_take(arena, (size_t)max_slots, sizeof(int32_t));
    plan->slot_kept = moe_arena_take(arena, (size_t)max_slots, sizeof(int32_t));
    plan->slot_cursor = moe_arena_take(arena, (size_t)max_slots, sizeof(int32_t));
    plan->expert_first = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_copies = moe_arena_take(arena, E, sizeof(int32_t));
    plan->owner_slots = moe_arena_take(arena, E, sizeof(moe_cfg_replica_t));
    plan->slot_pos = moe_arena_take(arena, pairs, sizeof(int32_t));
    plan->send_token = moe_arena_take(arena, pairs, sizeof(int32_t));
}

int moe_plan_init(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                  int64_t max_tokens)
{
    moe_arena_t sizing = {0};
    moe_plan_carve(plan, world_size, num_experts, top_k, max_tokens, num_experts, &sizing);
    moe_arena_t arena = {.base = calloc(1, moe_arena_size(&sizing))};
    if (arena.base == NULL) {
        memset(plan, 0, sizeof(*plan));
        return -1;
    }
    moe_plan_carve(plan, world_size, num_experts, top_k, max_tokens, num_experts, &arena);
    plan->block = arena.base;
    return 0;
}

void moe_plan_destroy(moe_plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    free(plan->block);
    memset(plan, 0, sizeof(*plan));
}

void moe_plan_count_demand(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens)
{
    memset(plan->expert_demand, 0, sizeof(int32_t) * (size_t)plan->num_experts);
    int64_t pairs = tokens * plan->top_k;
    for (int64_t i = 0; i < pairs; i++) {
        plan->expert_demand[topk_idx[i]]++;
    }
}

int64_t moe_plan_capacity(double capacity_factor, int64_t tokens_per_step, int top_k,
                          int num_experts)
{
    if (capacity_factor <= 0.0) {
        return 0;
    }
    return (int64_t)ceil(capacity_factor * (double)tokens_per_step * top_k / num_experts);
}

/* Mark kept/dropped per choice; slot_pos holds 0 (kept) or -1 for now. */
static void plan_apply_capacity(moe_plan_t *plan, const int32_t *topk_idx, int64_t pairs,
                                int64_t capacity, const int32_t *demand_before)
{
    int E = plan->num_experts;
    memset(plan->expert_kept, 0, sizeof(int32_t) * (size_t)E);
    memset(plan->expert_dropped, 0, sizeof(int32_t) * (size_t)E);
    memset(plan->expert_cursor, 0, sizeof(int32_t) * (size_t)E);
    for (int64_t i = 0; i < pairs; i++) {
        int e = topk_idx[i];
        int64_t global_pos = (demand_before ? demand_before[e] : 0) + plan->expert_cursor[e]++;
        if (capacity > 0 && global_pos >= capacity) {
            plan->slot_pos[i] = -1;
            plan->expert_dropped[e]++;
        } else {
            plan->slot_pos[i] = 0;
            plan->expert_kept[e]++;
        }
    }
}

void moe_plan_build(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens,
                    const int32_t *owner, int64_t capacity, const int32_t *demand_before)
{
    for (int e = 0; e < plan->num_experts; e++) {
        plan->owner_slots[e] = (moe_cfg_replica_t){.expert = (uint16_t)e, .rank = owner[e]};
    }
    moe_plan_build_slots(plan, topk_idx, tokens, plan->owner_slots, plan->num_experts, 0,
                         tokens > 0 ? tokens : 1, capacity, demand_before);
}

/* Each kept choice's slot into slot_pos (the copy of its expert that takes its token);
 * slot_kept counts them. */
static void plan_pick_slots(moe_plan_t *plan, const int32_t *topk_idx, int64_t pairs,
                            const moe_cfg_replica_t *slots, int n_slots, int64_t first_token,
                            int64_t total_tokens)
{
    int E = plan->num_experts, k = plan->top_k;
    memset(plan->expert_copies, 0, sizeof(int32_t) * (size_t)E);
    memset(plan->slot_kept, 0, sizeof(int32_t) * (size_t)n_slots);
    for (int s = n_slots - 1; s >= 0; s--) {
        plan->expert_first[slots[s].expert] = s;
        plan->expert_copies[slots[s].expert]++;
    }
    for (int64_t i = 0; i < pairs; i++) {
        if (plan->slot_pos[i] < 0) {
            continue;
        }
        int e = topk_idx[i];
        int64_t g = first_token + i / k, n = plan->expert_copies[e];
        int64_t j = n > 1 ? g * n / total_tokens : 0;
        int32_t s = plan->expert_first[e] + (int32_t)(j < n ? j : n - 1);
        plan->slot_pos[i] = s;
        plan->slot_kept[s]++;
    }
}

void moe_plan_build_slots(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens,
                          const moe_cfg_replica_t *slots, int n_slots, int64_t first_token,
                          int64_t total_tokens, int64_t capacity, const int32_t *demand_before)
{
    int W = plan->world_size, E = plan->num_experts, k = plan->top_k;
    int64_t pairs = tokens * k;
    plan->tokens = tokens;
    plan_apply_capacity(plan, topk_idx, pairs, capacity, demand_before);
    plan_pick_slots(plan, topk_idx, pairs, slots, n_slots, first_token, total_tokens);

    /* Rows per destination; then the first send row of each slot, destinations in rank
     * order and experts in id order within one (slots are sorted by expert). */
    memset(plan->send_rows, 0, sizeof(int) * (size_t)W);
    memset(plan->count_msg_len, 0, sizeof(int) * (size_t)W);
    for (int s = 0; s < n_slots; s++) {
        plan->send_rows[slots[s].rank] += plan->slot_kept[s];
        plan->count_msg_len[slots[s].rank]++;
    }
    int row = 0, msg = 0;
    for (int d = 0; d < W; d++) {
        plan->send_row_displs[d] = row;
        plan->count_msg_displs[d] = msg;
        row += plan->send_rows[d];
        msg += plan->count_msg_len[d];
    }
    /* Per destination, walk its slots in expert order: slot_cursor[s] becomes the first
     * send row of s, and the counts message lists kept rows in the same order. */
    int *cursor = plan->dest_cursor;
    memcpy(cursor, plan->send_row_displs, sizeof(int) * (size_t)W);
    for (int s = 0; s < n_slots; s++) {
        plan->slot_cursor[s] = cursor[slots[s].rank];
        cursor[slots[s].rank] += plan->slot_kept[s];
    }
    memcpy(cursor, plan->count_msg_displs, sizeof(int) * (size_t)W);
    for (int s = 0; s < n_slots; s++) {
        plan->count_msg[cursor[slots[s].rank]++] = plan->slot_kept[s];
    }
    /* Tokens ascending within each slot: one pass in token order. */
    for (int64_t i = 0; i < pairs; i++) {
        if (plan->slot_pos[i] < 0) {
            continue;
        }
        int32_t r = plan->slot_cursor[plan->slot_pos[i]]++;
        plan->slot_pos[i] = r;
        plan->send_token[r] = (int32_t)(i / k);
    }
    plan->num_send = row;
    plan->num_dropped = 0;
    for (int e = 0; e < E; e++) {
        plan->num_dropped += plan->expert_dropped[e];
    }
}
