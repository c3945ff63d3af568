#include "layer/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void moe_plan_carve(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                    int64_t max_tokens, int max_slots, moe_arena_t *arena)
{
    moe_plan_carve_fan(plan, world_size, num_experts, top_k, max_tokens, max_slots, 1, arena);
}

void moe_plan_carve_fan(moe_plan_t *plan, int world_size, int num_experts, int top_k,
                        int64_t max_tokens, int max_slots, int fan, moe_arena_t *arena)
{
    max_slots = max_slots > num_experts ? max_slots : num_experts;
    fan = fan > 1 ? fan : 1;
    memset(plan, 0, sizeof(*plan));
    plan->world_size = world_size;
    plan->num_experts = num_experts;
    plan->top_k = top_k;
    plan->rows_per_token = top_k * fan;
    size_t pairs = (size_t)(max_tokens > 0 ? max_tokens : 1) * (size_t)top_k;
    size_t sent = pairs * (size_t)fan; /* (pair, copy) entries and rows, at most */
    size_t W = (size_t)world_size, E = (size_t)num_experts;
    plan->send_rows = moe_arena_take(arena, W, sizeof(int));
    plan->send_row_displs = moe_arena_take(arena, W, sizeof(int));
    plan->send_pairs = moe_arena_take(arena, W, sizeof(int));
    plan->dest_token = moe_arena_take(arena, W, sizeof(int));
    plan->dest_row = moe_arena_take(arena, W, sizeof(int));
    plan->count_msg_len = moe_arena_take(arena, W, sizeof(int));
    plan->count_msg_displs = moe_arena_take(arena, W, sizeof(int));
    plan->expert_demand = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_kept = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_dropped = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_cursor = moe_arena_take(arena, E, sizeof(int32_t));
    plan->dest_cursor = moe_arena_take(arena, W, sizeof(int));
    plan->max_slots = max_slots;
    plan->count_msg = moe_arena_take(arena, W + (size_t)max_slots + 2 * sent, sizeof(int32_t));
    plan->slot_kept = moe_arena_take(arena, (size_t)max_slots, sizeof(int32_t));
    plan->slot_cursor = moe_arena_take(arena, (size_t)max_slots, sizeof(int32_t));
    plan->expert_first = moe_arena_take(arena, E, sizeof(int32_t));
    plan->expert_copies = moe_arena_take(arena, E, sizeof(int32_t));
    plan->owner_slots = moe_arena_take(arena, E, sizeof(moe_cfg_replica_t));
    plan->slot_pos = moe_arena_take(arena, pairs, sizeof(int32_t));
    plan->send_token = moe_arena_take(arena, sent, sizeof(int32_t));
    plan->token_rows = moe_arena_take(arena, sent, sizeof(int32_t));
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

void moe_plan_build(moe_plan_t *plan, const int32_t *topk_idx, const float *topk_w,
                    int64_t tokens, const int32_t *owner, int64_t capacity,
                    const int32_t *demand_before)
{
    for (int e = 0; e < plan->num_experts; e++) {
        plan->owner_slots[e] = (moe_cfg_replica_t){.expert = (uint16_t)e, .rank = owner[e]};
    }
    moe_plan_build_slots(plan, topk_idx, topk_w, tokens, plan->owner_slots, plan->num_experts,
                         0, tokens > 0 ? tokens : 1, capacity, demand_before);
}

/* Balance: each expert with kept choices to one copy (expert_cursor[e], a slot): the copy
 * whose rank has the fewest experts so far, then rows, then the lowest rank, counting every
 * routing rank's kept choices where the layer gave them (balance_kept; plan.h). */
static void plan_balance_copies(moe_plan_t *plan, const moe_cfg_replica_t *slots)
{
    int W = plan->world_size, E = plan->num_experts;
    int *experts = plan->dest_cursor, *rows = plan->dest_row; /* scratch until the layout */
    memset(experts, 0, sizeof(int) * (size_t)W);
    memset(rows, 0, sizeof(int) * (size_t)W);
    for (int e = 0; e < E; e++) {
        int32_t best = plan->expert_first[e];
        for (int32_t s = best + 1; s < plan->expert_first[e] + plan->expert_copies[e]; s++) {
            int r = slots[s].rank, b = slots[best].rank;
            if (experts[r] < experts[b] || (experts[r] == experts[b] && rows[r] < rows[b])) {
                best = s; /* ranks ascending within an expert: ties keep the lower */
            }
        }
        plan->expert_cursor[e] = best;
        int32_t kept = plan->balance_kept != NULL ? plan->balance_kept[e] : plan->expert_kept[e];
        if (kept > 0) {
            experts[slots[best].rank]++;
            rows[slots[best].rank] += kept;
        }
    }
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
    if (plan->balance) {
        plan_balance_copies(plan, slots);
    }
    for (int64_t i = 0; i < pairs; i++) {
        if (plan->slot_pos[i] < 0) {
            continue;
        }
        int e = topk_idx[i];
        int64_t g = first_token + i / k, n = plan->expert_copies[e];
        if (plan->columns) { /* every copy: slot_pos names the first */
            plan->slot_pos[i] = plan->expert_first[e];
            for (int64_t c = 0; c < n; c++) {
                plan->slot_kept[plan->expert_first[e] + c]++;
            }
            continue;
        }
        int64_t j = n > 1 ? g * n / total_tokens : 0;
        int32_t s = plan->balance ? plan->expert_cursor[e]
                                  : plan->expert_first[e] + (int32_t)(j < n ? j : n - 1);
        plan->slot_pos[i] = s;
        plan->slot_kept[s]++;
    }
}

/* The slots a kept choice i goes to: [*s0, return): its one copy, or with column shares
 * all of its expert's copies. */
static int32_t choice_slots(const moe_plan_t *plan, const int32_t *topk_idx, int64_t i,
                            int32_t *s0)
{
    *s0 = plan->slot_pos[i];
    return *s0 + (plan->columns ? plan->expert_copies[topk_idx[i]] : 1);
}

/* One row per kept choice (dedup false): rows per destination, each slot's first row
 * (destinations in rank order, experts in id order within one), the counts message (each
 * slot's rows), then each choice's row, tokens ascending within a slot. */
static void plan_rows_per_pair(moe_plan_t *plan, int64_t pairs, const moe_cfg_replica_t *slots,
                               int n_slots)
{
    int W = plan->world_size, k = plan->top_k;
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
        plan->send_pairs[d] = plan->send_rows[d];
        row += plan->send_rows[d];
        msg += plan->count_msg_len[d];
    }
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
    for (int64_t i = 0; i < pairs; i++) {
        if (plan->slot_pos[i] < 0) {
            continue;
        }
        int32_t r = plan->slot_cursor[plan->slot_pos[i]]++;
        plan->slot_pos[i] = r;
        plan->send_token[r] = (int32_t)(i / k);
    }
    plan->num_send = row;
}

/* Dedup: rows and pairs per destination (a token's first kept choice to a rank opens its
 * row there), the counts messages' layout, each slot's first word in its message. */
static void plan_dedup_layout(moe_plan_t *plan, const int32_t *topk_idx, int64_t tokens,
                              const moe_cfg_replica_t *slots, int n_slots)
{
    int W = plan->world_size, k = plan->top_k;
    memset(plan->send_rows, 0, sizeof(int) * (size_t)W);
    memset(plan->send_pairs, 0, sizeof(int) * (size_t)W);
    memset(plan->count_msg_len, 0, sizeof(int) * (size_t)W);
    for (int d = 0; d < W; d++) {
        plan->dest_token[d] = -1;
    }
    for (int64_t i = 0; i < tokens * k; i++) {
        int32_t s0 = 0, s1 = plan->slot_pos[i] >= 0 ? choice_slots(plan, topk_idx, i, &s0) : 0;
        for (int32_t s = s0; s < s1; s++) {
            int d = slots[s].rank;
            plan->send_pairs[d]++;
            plan->send_rows[d] += plan->dest_token[d] != (int)(i / k);
            plan->dest_token[d] = (int)(i / k);
        }
    }
    /* count_msg_len: a rank's copies for now; nword / rword: where its next n[] word and
     * its next copy's row words go */
    int *nword = plan->dest_cursor, *rword = plan->dest_row;
    for (int s = 0; s < n_slots; s++) {
        plan->count_msg_len[slots[s].rank]++;
    }
    int row = 0, msg = 0;
    for (int d = 0; d < W; d++) {
        int m = plan->count_msg_len[d];
        plan->count_msg_len[d] = m > 0 ? 1 + m + 2 * plan->send_pairs[d] : 0;
        plan->send_row_displs[d] = row;
        plan->count_msg_displs[d] = msg;
        if (m > 0) {
            plan->count_msg[msg] = plan->send_rows[d];
        }
        nword[d] = msg + 1;
        rword[d] = msg + 1 + m;
        row += plan->send_rows[d];
        msg += plan->count_msg_len[d];
    }
    for (int s = 0; s < n_slots; s++) {
        int d = slots[s].rank;
        plan->count_msg[nword[d]++] = plan->slot_kept[s];
        plan->slot_cursor[s] = rword[d];
        rword[d] += plan->slot_kept[s];
    }
    plan->num_send = row;
}

/* Dedup: each token's rows (tokens ascending within a destination), each kept choice's
 * row index and weight into its slots' lists, and the token's rows in ascending order. */
static void plan_dedup_rows(moe_plan_t *plan, const int32_t *topk_idx, const float *topk_w,
                            int64_t tokens, const moe_cfg_replica_t *slots)
{
    int W = plan->world_size, k = plan->top_k, stride = plan->rows_per_token;
    int *cursor = plan->dest_cursor;
    memcpy(cursor, plan->send_row_displs, sizeof(int) * (size_t)W);
    for (int d = 0; d < W; d++) {
        plan->dest_token[d] = -1;
    }
    for (int64_t t = 0; t < tokens; t++) {
        int32_t *tr = plan->token_rows + t * stride;
        int n = 0;
        for (int j = 0; j < k; j++) {
            int64_t i = t * k + j;
            int32_t s0 = 0, s1 = plan->slot_pos[i] >= 0 ? choice_slots(plan, topk_idx, i, &s0) : 0;
            for (int32_t s = s0; s < s1; s++) {
                int d = slots[s].rank;
                if (plan->dest_token[d] != (int)t) { /* the token's first choice on d */
                    plan->dest_token[d] = (int)t;
                    plan->dest_row[d] = cursor[d]++;
                    plan->send_token[plan->dest_row[d]] = (int32_t)t;
                    int at = n++; /* insert, keeping the token's rows ascending */
                    for (; at > 0 && tr[at - 1] > plan->dest_row[d]; at--) {
                        tr[at] = tr[at - 1];
                    }
                    tr[at] = plan->dest_row[d];
                }
                int32_t w = plan->slot_cursor[s]++;
                int32_t pairs_d = plan->send_pairs[d];
                plan->count_msg[w] = plan->dest_row[d] - plan->send_row_displs[d];
                memcpy(&plan->count_msg[w + pairs_d], &topk_w[i], sizeof(float));
            }
            if (s1 > s0) {
                plan->slot_pos[i] = plan->dest_row[slots[s1 - 1].rank];
            }
        }
        for (int j = n; j < stride; j++) {
            tr[j] = -1;
        }
    }
}

void moe_plan_build_slots(moe_plan_t *plan, const int32_t *topk_idx, const float *topk_w,
                          int64_t tokens, const moe_cfg_replica_t *slots, int n_slots,
                          int64_t first_token, int64_t total_tokens, int64_t capacity,
                          const int32_t *demand_before)
{
    int E = plan->num_experts, k = plan->top_k;
    int64_t pairs = tokens * k;
    plan->tokens = tokens;
    plan_apply_capacity(plan, topk_idx, pairs, capacity, demand_before);
    plan_pick_slots(plan, topk_idx, pairs, slots, n_slots, first_token, total_tokens);
    if (plan->dedup) {
        plan_dedup_layout(plan, topk_idx, tokens, slots, n_slots);
        plan_dedup_rows(plan, topk_idx, topk_w, tokens, slots);
    } else {
        plan_rows_per_pair(plan, pairs, slots, n_slots);
    }
    plan->num_dropped = 0;
    for (int e = 0; e < E; e++) {
        plan->num_dropped += plan->expert_dropped[e];
    }
    plan->num_pairs = pairs - plan->num_dropped;
}

int64_t moe_plan_msg_words(int top_k, int num_local, int64_t max_tokens)
{
    int64_t per_row = top_k < num_local ? top_k : num_local;
    return 1 + num_local + 2 * (max_tokens > 0 ? max_tokens : 0) * per_row;
}

void moe_plan_pairs_carve(moe_plan_pairs_t *pp, int world_size, int num_local, int chunks,
                          int64_t cap, int64_t max_rows, moe_arena_t *arena)
{
    memset(pp, 0, sizeof(*pp));
    pp->world_size = world_size;
    pp->num_local = num_local;
    pp->chunks = chunks;
    pp->cap = cap;
    pp->row = moe_arena_take(arena, (size_t)cap, sizeof(int32_t));
    pp->w = moe_arena_take(arena, (size_t)cap, sizeof(float));
    pp->off = moe_arena_take(arena, (size_t)num_local * (size_t)chunks + 1, sizeof(int32_t));
    pp->row_pairs = moe_arena_take(arena, (size_t)max_rows, sizeof(int32_t));
    pp->cur = moe_arena_take(arena, (size_t)world_size, sizeof(int64_t));
    pp->pre = moe_arena_take(arena, (size_t)world_size, sizeof(int64_t));
    pp->tot = moe_arena_take(arena, (size_t)world_size, sizeof(int64_t));
}

/* Source s's message: its pairs in all (-1 when its n[] words do not fit stride). */
static int64_t pairs_total(const int32_t *m, int64_t stride, int nl)
{
    int64_t total = 0;
    for (int e = 0; e < nl; e++) {
        if (m[1 + e] < 0) {
            return -1;
        }
        total += m[1 + e];
    }
    return 1 + nl + 2 * total <= stride ? total : -1;
}

int moe_plan_pairs_read(moe_plan_pairs_t *pp, const int32_t *msgs, int64_t stride, int nl,
                        const int *recv_displs, const int *chunk_recv_displs,
                        const int *chunk_recv_rows)
{
    int W = pp->world_size, N = pp->chunks;
    for (int s = 0; s < W; s++) {
        pp->tot[s] = 1 + nl <= stride ? pairs_total(msgs + s * stride, stride, nl) : -1;
        if (pp->tot[s] < 0) {
            return s;
        }
        pp->pre[s] = 0; /* pairs of the local experts before le */
    }
    for (int s = 0; s < W; s++) { /* each source's block (the blocks may have gaps) */
        int64_t rows = 0;
        for (int c = 0; c < N; c++) {
            rows += chunk_recv_rows[c * W + s];
        }
        memset(pp->row_pairs + recv_displs[s], 0, sizeof(int32_t) * (size_t)rows);
    }
    int64_t n = 0;
    for (int le = 0; le < nl; le++) {
        memset(pp->cur, 0, sizeof(int64_t) * (size_t)W);
        for (int c = 0; c < N; c++) {
            pp->off[le * N + c] = (int32_t)n;
            for (int s = 0; s < W; s++) {
                const int32_t *m = msgs + s * stride;
                int64_t ne = m[1 + le];
                const int32_t *rows = m + 1 + nl + pp->pre[s];
                const int32_t *wb = rows + pp->tot[s];
                int64_t hi = chunk_recv_displs[c * W + s] - recv_displs[s] +
                             chunk_recv_rows[c * W + s];
                for (int64_t *i = &pp->cur[s]; *i < ne && rows[*i] < hi; (*i)++) {
                    if (rows[*i] < 0 || (*i > 0 && rows[*i] <= rows[*i - 1]) || n >= pp->cap) {
                        return s;
                    }
                    pp->row[n] = recv_displs[s] + rows[*i];
                    pp->row_pairs[pp->row[n]]++;
                    memcpy(&pp->w[n], &wb[*i], sizeof(float));
                    n++;
                }
            }
        }
        for (int s = 0; s < W; s++) {
            const int32_t *m = msgs + s * stride;
            if (pp->cur[s] != m[1 + le]) {
                return s; /* a row past the source's block */
            }
            pp->pre[s] += m[1 + le];
        }
    }
    pp->off[nl * N] = (int32_t)n;
    return -1;
}
