#include "layer/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void moe_plan_carve(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                    int64_t max_tokens, moe_arena_t *arena)
{
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
    plan->count_msg = moe_arena_take(arena, E, sizeof(int32_t));
    plan->slot_pos = moe_arena_take(arena, pairs, sizeof(int32_t));
    plan->send_token = moe_arena_take(arena, pairs, sizeof(int32_t));
}

int moe_plan_init(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                  int64_t max_tokens)
{
    moe_arena_t sizing = {0};
    moe_plan_carve(plan, world_size, num_experts, top_k, max_tokens, &sizing);
    moe_arena_t arena = {.base = calloc(1, moe_arena_size(&sizing))};
    if (arena.base == NULL) {
        memset(plan, 0, sizeof(*plan));
        return -1;
    }
    moe_plan_carve(plan, world_size, num_experts, top_k, max_tokens, &arena);
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
    int W = plan->world_size, E = plan->num_experts, k = plan->top_k;
    int64_t pairs = tokens * k;
    plan->tokens = tokens;
    plan_apply_capacity(plan, topk_idx, pairs, capacity, demand_before);

    /* Rows per destination; then the first send row of each expert, destinations in rank
     * order and experts in id order within one (owner ascending, then id). */
    memset(plan->send_rows, 0, sizeof(int) * (size_t)W);
    memset(plan->count_msg_len, 0, sizeof(int) * (size_t)W);
    for (int e = 0; e < E; e++) {
        plan->send_rows[owner[e]] += plan->expert_kept[e];
        plan->count_msg_len[owner[e]]++;
    }
    int row = 0, msg = 0;
    for (int d = 0; d < W; d++) {
        plan->send_row_displs[d] = row;
        plan->count_msg_displs[d] = msg;
        row += plan->send_rows[d];
        msg += plan->count_msg_len[d];
    }
    /* Per destination, walk experts in id order: expert_cursor[e] becomes the first
     * send row of e, and the counts message lists kept rows in the same order. */
    int *cursor = plan->dest_cursor;
    memcpy(cursor, plan->send_row_displs, sizeof(int) * (size_t)W);
    for (int e = 0; e < E; e++) {
        plan->expert_cursor[e] = cursor[owner[e]];
        cursor[owner[e]] += plan->expert_kept[e];
    }
    memcpy(cursor, plan->count_msg_displs, sizeof(int) * (size_t)W);
    for (int e = 0; e < E; e++) {
        plan->count_msg[cursor[owner[e]]++] = plan->expert_kept[e];
    }
    /* Tokens ascending within each expert: one pass in token order. */
    for (int64_t i = 0; i < pairs; i++) {
        if (plan->slot_pos[i] < 0) {
            continue;
        }
        int32_t r = plan->expert_cursor[topk_idx[i]]++;
        plan->slot_pos[i] = r;
        plan->send_token[r] = (int32_t)(i / k);
    }
    plan->num_send = row;
    plan->num_dropped = 0;
    for (int e = 0; e < E; e++) {
        plan->num_dropped += plan->expert_dropped[e];
    }
}
