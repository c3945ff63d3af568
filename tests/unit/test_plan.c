/* The dispatch plan: send order, counts messages, capacity drops (local and global). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layer/plan.h"
#include "test_util.h"

/* 3 ranks; experts 0,1 on rank 1 and 2,3 on rank 2; 3 tokens, top-2:
 *   t0 -> {0, 2}, t1 -> {1, 2}, t2 -> {2, 0} */
static const int32_t k_owner[4] = {1, 1, 2, 2};
static const int32_t k_idx[6] = {0, 2, 1, 2, 2, 0};

static void test_order(void)
{
    moe_plan_t p;
    CHECK(moe_plan_init(&p, 3, 4, 2, 3) == 0);
    moe_plan_count_demand(&p, k_idx, 3);
    CHECK_INT_EQ(p.expert_demand[0], 2);
    CHECK_INT_EQ(p.expert_demand[1], 1);
    CHECK_INT_EQ(p.expert_demand[2], 3);
    CHECK_INT_EQ(p.expert_demand[3], 0);
    moe_plan_build(&p, k_idx, NULL, 3, k_owner, 0, NULL);
    CHECK_INT_EQ(p.num_send, 6);
    CHECK_INT_EQ(p.num_dropped, 0);
    const int rows[3] = {0, 3, 3}, displs[3] = {0, 0, 3};
    for (int d = 0; d < 3; d++) {
        CHECK_INT_EQ(p.send_rows[d], rows[d]);
        CHECK_INT_EQ(p.send_row_displs[d], displs[d]);
    }
    /* rank 1 gets e0 (t0, t2) then e1 (t1); rank 2 gets e2 (t0, t1, t2) */
    const int32_t tok[6] = {0, 2, 1, 0, 1, 2};
    for (int i = 0; i < 6; i++) {
        CHECK_INT_EQ(p.send_token[i], tok[i]);
    }
    const int32_t pos[6] = {0, 3, 2, 4, 5, 1};
    for (int i = 0; i < 6; i++) {
        CHECK_INT_EQ(p.slot_pos[i], pos[i]);
    }
    const int32_t msg[4] = {2, 1, 3, 0};
    for (int i = 0; i < 4; i++) {
        CHECK_INT_EQ(p.count_msg[i], msg[i]);
    }
    CHECK_INT_EQ(p.count_msg_len[0], 0);
    CHECK_INT_EQ(p.count_msg_len[1], 2);
    CHECK_INT_EQ(p.count_msg_displs[2], 2);
    moe_plan_destroy(&p);
    moe_plan_destroy(&p); /* twice is fine */
}

static void test_capacity(void)
{
    moe_plan_t p;
    CHECK(moe_plan_init(&p, 3, 4, 2, 3) == 0);
    moe_plan_count_demand(&p, k_idx, 3);
    moe_plan_build(&p, k_idx, NULL, 3, k_owner, 2, NULL);
    /* e2 keeps t0, t1 and drops t2's choice */
    CHECK_INT_EQ(p.num_dropped, 1);
    CHECK_INT_EQ(p.expert_dropped[2], 1);
    CHECK_INT_EQ(p.expert_kept[2], 2);
    CHECK_INT_EQ(p.slot_pos[4], -1);
    CHECK_INT_EQ(p.num_send, 5);
    CHECK_INT_EQ(p.send_rows[2], 2);
    /* One choice of e0 already made by a lower routing rank: t2's e0 choice is the third. */
    const int32_t before[4] = {1, 0, 0, 0};
    moe_plan_build(&p, k_idx, NULL, 3, k_owner, 2, before);
    CHECK_INT_EQ(p.expert_kept[0], 1);
    CHECK_INT_EQ(p.expert_dropped[0], 1);
    CHECK_INT_EQ(p.slot_pos[5], -1);
    CHECK_INT_EQ(p.slot_pos[0], 0);
    CHECK_INT_EQ(p.num_dropped, 2);
    /* rows stay contiguous and ordered after drops */
    CHECK_INT_EQ(p.send_rows[1], 2);
    CHECK_INT_EQ(p.send_token[0], 0); /* e0: t0 */
    CHECK_INT_EQ(p.send_token[1], 1); /* e1: t1 */
    moe_plan_destroy(&p);

    CHECK_INT_EQ(moe_plan_capacity(0.0, 2048, 2, 8), 0);
    CHECK_INT_EQ(moe_plan_capacity(1.25, 1024, 2, 8), 320);
    CHECK_INT_EQ(moe_plan_capacity(1.0, 10, 2, 3), 7); /* ceil(6.67) */
}

static void test_empty(void)
{
    const int32_t owner[4] = {0, 0, 1, 1};
    moe_plan_t p;
    CHECK(moe_plan_init(&p, 2, 4, 2, 0) == 0);
    moe_plan_count_demand(&p, NULL, 0);
    moe_plan_build(&p, NULL, NULL, 0, owner, 0, NULL);
    CHECK_INT_EQ(p.num_send, 0);
    CHECK_INT_EQ(p.send_rows[1], 0);
    moe_plan_destroy(&p);
}

/* runtime.dedup: one row per (token, destination rank). Experts 0,1 on rank 1, 2,3 on
 * rank 2; 4 tokens, top-2:
 *   t0 -> {0, 1} (rank 1 twice), t1 -> {2, 0}, t2 -> {3, 2} (rank 2 twice), t3 -> {1, 3}
 * = 6 rows carrying 8 pairs: rank 1 gets t0, t1, t3; rank 2 gets t1, t2, t3. */
static const int32_t k_dd_idx[8] = {0, 1, 2, 0, 3, 2, 1, 3};
static const float k_dd_w[8] = {0.5f, 0.25f, 0.125f, 0.75f, 0.375f, 0.625f, 0.875f, 0.0625f};

static int32_t wbits(float w)
{
    int32_t b;
    memcpy(&b, &w, sizeof(b));
    return b;
}

static void test_dedup_plan(moe_plan_t *p)
{
    CHECK(moe_plan_init(p, 3, 4, 2, 4) == 0);
    p->dedup = true;
    moe_plan_count_demand(p, k_dd_idx, 4);
    moe_plan_build(p, k_dd_idx, k_dd_w, 4, k_owner, 0, NULL);
    CHECK_INT_EQ(p->num_send, 6);
    CHECK_INT_EQ(p->num_pairs, 8);
    const int rows[3] = {0, 3, 3}, pairs[3] = {0, 4, 4}, displs[3] = {0, 0, 3};
    for (int d = 0; d < 3; d++) {
        CHECK_INT_EQ(p->send_rows[d], rows[d]);
        CHECK_INT_EQ(p->send_pairs[d], pairs[d]);
        CHECK_INT_EQ(p->send_row_displs[d], displs[d]);
    }
    const int32_t tok[6] = {0, 1, 3, 1, 2, 3};
    for (int i = 0; i < 6; i++) {
        CHECK_INT_EQ(p->send_token[i], tok[i]);
    }
    /* both choices of t0 ride row 0, both of t2 row 4 */
    const int32_t pos[8] = {0, 0, 3, 1, 4, 4, 2, 5};
    const int32_t trows[8] = {0, -1, 1, 3, 4, -1, 2, 5}; /* ascending = by rank */
    for (int i = 0; i < 8; i++) {
        CHECK_INT_EQ(p->slot_pos[i], pos[i]);
        CHECK_INT_EQ(p->token_rows[i], trows[i]);
    }
    /* rank 1: rows 3 | e0: 2, e1: 2 | e0's rows t0 (0), t1 (1); e1's t0 (0), t3 (2) | weights */
    const int32_t msg1[11] = {3, 2, 2, 0, 1, 0, 2, wbits(0.5f), wbits(0.75f), wbits(0.25f),
                              wbits(0.875f)};
    const int32_t msg2[11] = {3, 2, 2, 0, 1, 1, 2, wbits(0.125f), wbits(0.625f),
                              wbits(0.375f), wbits(0.0625f)};
    CHECK_INT_EQ(p->count_msg_len[0], 0);
    CHECK_INT_EQ(p->count_msg_len[1], 11);
    CHECK_INT_EQ(p->count_msg_len[2], 11);
    for (int i = 0; i < 11; i++) {
        CHECK_INT_EQ(p->count_msg[p->count_msg_displs[1] + i], msg1[i]);
        CHECK_INT_EQ(p->count_msg[p->count_msg_displs[2] + i], msg2[i]);
    }
}

static void test_dedup(void)
{
    moe_plan_t p;
    test_dedup_plan(&p);
    /* rank 1 reads it: rank 0's message (3 rows) and ranks 1, 2 with none; 2 chunks cut
     * rank 0's block into [0, 1) and [1, 3) */
    enum { W = 3, NL = 2, N = 2 };
    int64_t stride = moe_plan_msg_words(2, NL, 4);
    CHECK_INT_EQ(stride, 1 + NL + 2 * 4 * 2);
    int32_t msgs[3 * 19] = {0};
    memcpy(msgs, p.count_msg + p.count_msg_displs[1], sizeof(int32_t) * 11);
    const int displs[W] = {0, 3, 3}, cdispls[N * W] = {0, 3, 3, 1, 3, 3};
    const int crows[N * W] = {1, 0, 0, 2, 0, 0};
    moe_plan_pairs_t pp;
    moe_arena_t sizing = {0};
    moe_plan_pairs_carve(&pp, W, NL, N, 3 * NL, 3, &sizing);
    moe_arena_t a = {.base = calloc(1, moe_arena_size(&sizing))};
    moe_plan_pairs_carve(&pp, W, NL, N, 3 * NL, 3, &a);
    CHECK_INT_EQ(moe_plan_pairs_read(&pp, msgs, stride, NL, displs, cdispls, crows), -1);
    /* e0 chunk 0: t0's row; chunk 1: t1's; e1 chunk 0: t0's; chunk 1: t3's */
    const int32_t off[5] = {0, 1, 2, 3, 4}, row[4] = {0, 1, 0, 2};
    const float w[4] = {0.5f, 0.75f, 0.25f, 0.875f};
    for (int i = 0; i < 5; i++) {
        CHECK_INT_EQ(pp.off[i], off[i]);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_INT_EQ(pp.row[i], row[i]);
        CHECK(pp.w[i] == w[i]);
    }
    CHECK_INT_EQ(pp.tot[0], 4);
    CHECK_INT_EQ(pp.row_pairs[0], 2); /* t0: e0 and e1 */
    CHECK_INT_EQ(pp.row_pairs[1], 1);
    CHECK_INT_EQ(pp.row_pairs[2], 1);
    /* a message that does not fit its rows is refused, naming its source */
    msgs[4] = 3; /* e0's second row index past rank 0's 3 rows */
    CHECK_INT_EQ(moe_plan_pairs_read(&pp, msgs, stride, NL, displs, cdispls, crows), 0);
    msgs[4] = 0; /* not ascending */
    CHECK_INT_EQ(moe_plan_pairs_read(&pp, msgs, stride, NL, displs, cdispls, crows), 0);
    msgs[4] = 1;
    msgs[19 + 1] = 9; /* rank 1 announces 9 pairs of e0 that do not fit its message */
    CHECK_INT_EQ(moe_plan_pairs_read(&pp, msgs, stride, NL, displs, cdispls, crows), 1);
    msgs[19 + 1] = -1;
    CHECK_INT_EQ(moe_plan_pairs_read(&pp, msgs, stride, NL, displs, cdispls, crows), 1);
    free(a.base);
    msgs[19 + 1] = 0;

    /* the same with rank 0's block at row 2 of 8, the others' places after it (the receives
     * posted before the counts: blocks with gaps); the pairs of each row count afresh in
     * its own block, whatever the buffer held before */
    const int gdispls[W] = {2, 6, 7}, gcdispls[N * W] = {2, 6, 7, 3, 6, 7};
    sizing = (moe_arena_t){0};
    moe_plan_pairs_carve(&pp, W, NL, N, 3 * NL, 8, &sizing);
    a = (moe_arena_t){.base = calloc(1, moe_arena_size(&sizing))};
    moe_plan_pairs_carve(&pp, W, NL, N, 3 * NL, 8, &a);
    for (int i = 0; i < 8; i++) {
        pp.row_pairs[i] = 7; /* the last step's */
    }
    CHECK_INT_EQ(moe_plan_pairs_read(&pp, msgs, stride, NL, gdispls, gcdispls, crows), -1);
    const int32_t grow[4] = {2, 3, 2, 4};
    for (int i = 0; i < 4; i++) {
        CHECK_INT_EQ(pp.row[i], grow[i]);
    }
    CHECK_INT_EQ(pp.row_pairs[2], 2);
    CHECK_INT_EQ(pp.row_pairs[3], 1);
    CHECK_INT_EQ(pp.row_pairs[4], 1);
    free(a.base);

    /* capacity 1 per expert: e0 keeps t0 (drops t1's), e1 t0 (drops t3's), e2 t1 (drops
     * t2's), e3 t2 (drops t3's): t3 sends nothing, t1 only to rank 2 */
    moe_plan_build(&p, k_dd_idx, k_dd_w, 4, k_owner, 1, NULL);
    CHECK_INT_EQ(p.num_dropped, 4);
    CHECK_INT_EQ(p.num_pairs, 4);
    CHECK_INT_EQ(p.num_send, 3); /* t0 -> 1, t1 -> 2, t2 -> 2 */
    CHECK_INT_EQ(p.send_rows[1], 1);
    CHECK_INT_EQ(p.send_pairs[1], 2);
    CHECK_INT_EQ(p.send_rows[2], 2);
    CHECK_INT_EQ(p.slot_pos[3], -1);
    CHECK_INT_EQ(p.token_rows[6], -1); /* t3: no row */
    CHECK_INT_EQ(p.token_rows[2], 1);  /* t1: rank 2's first row */
    CHECK_INT_EQ(p.token_rows[3], -1);
    moe_plan_destroy(&p);
}

/* Experts 0-3 each on ranks 1 and 2: the slots sorted by expert, then rank. */
static void both_ranks(moe_cfg_replica_t slots[8])
{
    for (int s = 0; s < 8; s++) {
        slots[s] = (moe_cfg_replica_t){.expert = (uint16_t)(s / 2), .rank = 1 + s % 2};
    }
}

/* A plan of 3 ranks and 4 experts with 8 slots carved from one block (returned: free it). */
static void *carve(moe_plan_t *p, int k, int64_t tokens, int fan)
{
    moe_arena_t sizing = {0};
    moe_plan_carve_fan(p, 3, 4, k, tokens, 8, fan, &sizing);
    moe_arena_t a = {.base = calloc(1, moe_arena_size(&sizing))};
    moe_plan_carve_fan(p, 3, 4, k, tokens, 8, fan, &a);
    return a.base;
}

/* placement.copies: columns: experts 0-3 each split over ranks 1 and 2 (slots sorted by
 * expert, then rank), k_dd_idx's tokens: every token goes to both ranks, one row each,
 * carrying all its choices (each rank runs its share of both experts): 8 rows, 16 (pair,
 * share) entries, 8 kept choices. */
static void test_columns(void)
{
    moe_cfg_replica_t slots[8];
    both_ranks(slots);
    moe_plan_t p;
    void *block = carve(&p, 2, 4, 2);
    p.dedup = true;
    p.columns = true;
    CHECK_INT_EQ(p.rows_per_token, 4);
    moe_plan_count_demand(&p, k_dd_idx, 4);
    moe_plan_build_slots(&p, k_dd_idx, k_dd_w, 4, slots, 8, 0, 4, 0, NULL);
    CHECK_INT_EQ(p.num_send, 8);
    CHECK_INT_EQ(p.num_pairs, 8);
    const int rows[3] = {0, 4, 4}, pairs[3] = {0, 8, 8}, displs[3] = {0, 0, 4};
    for (int d = 0; d < 3; d++) {
        CHECK_INT_EQ(p.send_rows[d], rows[d]);
        CHECK_INT_EQ(p.send_pairs[d], pairs[d]);
        CHECK_INT_EQ(p.send_row_displs[d], displs[d]);
    }
    for (int i = 0; i < 8; i++) {
        CHECK_INT_EQ(p.send_token[i], i % 4);
        CHECK_INT_EQ(p.slot_kept[i], 2); /* every share keeps its expert's 2 tokens */
    }
    for (int t = 0; t < 4; t++) { /* rank 1's row, rank 2's row, then none */
        CHECK_INT_EQ(p.token_rows[t * 4], t);
        CHECK_INT_EQ(p.token_rows[t * 4 + 1], 4 + t);
        CHECK_INT_EQ(p.token_rows[t * 4 + 2], -1);
        CHECK_INT_EQ(p.token_rows[t * 4 + 3], -1);
    }
    /* both ranks: rows 4 | 2 pairs a share | e0: t0, t1; e1: t0, t3; e2: t1, t2; e3: t2, t3
     * (rows within the rank's block) | their weights */
    const int32_t msg[21] = {4, 2, 2, 2, 2, 0, 1, 0, 3, 1, 2, 2, 3, wbits(0.5f), wbits(0.75f),
                             wbits(0.25f), wbits(0.875f), wbits(0.125f), wbits(0.625f),
                             wbits(0.375f), wbits(0.0625f)};
    for (int d = 1; d < 3; d++) {
        CHECK_INT_EQ(p.count_msg_len[d], 21);
        for (int i = 0; i < 21; i++) {
            CHECK_INT_EQ(p.count_msg[p.count_msg_displs[d] + i], msg[i]);
        }
    }
    /* capacity 1: each expert keeps its first token on both shares; t3 keeps nothing */
    moe_plan_build_slots(&p, k_dd_idx, k_dd_w, 4, slots, 8, 0, 4, 1, NULL);
    CHECK_INT_EQ(p.num_dropped, 4);
    CHECK_INT_EQ(p.num_send, 6); /* t0, t1, t2 to both ranks */
    CHECK_INT_EQ(p.send_pairs[1], 4);
    CHECK_INT_EQ(p.token_rows[12], -1);
    free(block);
}

/* placement.copies: balance: experts 0-3 each whole on ranks 1 and 2, k_dd_idx's tokens
 * (every expert kept twice). In id order: e0 -> rank 1 (both empty: the lower), e1 -> 2,
 * e2 -> 1 (1 expert and 2 rows each: the lower), e3 -> 2. Rows: t0 (e0 | e1) to both,
 * t1 (e2, e0) to rank 1, t2 (e3 | e2) to both, t3 (e1, e3) to rank 2. */
static void test_balance(void)
{
    moe_cfg_replica_t slots[8];
    both_ranks(slots);
    moe_plan_t p;
    void *block = carve(&p, 2, 4, 1);
    p.dedup = true;
    p.balance = true;
    moe_plan_count_demand(&p, k_dd_idx, 4);
    moe_plan_build_slots(&p, k_dd_idx, k_dd_w, 4, slots, 8, 0, 4, 0, NULL);
    const int32_t kept[8] = {2, 0, 0, 2, 2, 0, 0, 2};
    for (int s = 0; s < 8; s++) {
        CHECK_INT_EQ(p.slot_kept[s], kept[s]);
    }
    CHECK_INT_EQ(p.num_send, 6);
    CHECK_INT_EQ(p.send_rows[1], 3);
    CHECK_INT_EQ(p.send_rows[2], 3);
    CHECK_INT_EQ(p.send_pairs[1], 4);
    CHECK_INT_EQ(p.send_pairs[2], 4);
    const int32_t tok[6] = {0, 1, 2, 0, 2, 3};
    for (int i = 0; i < 6; i++) {
        CHECK_INT_EQ(p.send_token[i], tok[i]);
    }
    /* the same without dedup: one row per choice, each on its expert's chosen copy */
    p.dedup = false;
    moe_plan_build_slots(&p, k_dd_idx, k_dd_w, 4, slots, 8, 0, 4, 0, NULL);
    for (int s = 0; s < 8; s++) {
        CHECK_INT_EQ(p.slot_kept[s], kept[s]);
    }
    CHECK_INT_EQ(p.send_rows[1], 4);
    CHECK_INT_EQ(p.send_rows[2], 4);
    /* one token on all four experts: 2 + 2, where the position split sends all 4 to rank 1 */
    const int32_t one[4] = {0, 1, 2, 3};
    const float w4[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    moe_plan_t q;
    void *block_q = carve(&q, 4, 1, 1);
    q.dedup = true;
    for (int bal = 0; bal < 2; bal++) {
        q.balance = bal == 1;
        moe_plan_count_demand(&q, one, 1);
        moe_plan_build_slots(&q, one, w4, 1, slots, 8, 0, 1, 0, NULL);
        CHECK_INT_EQ(q.send_pairs[1], bal ? 2 : 4);
        CHECK_INT_EQ(q.send_pairs[2], bal ? 2 : 0);
    }
    /* Two routing ranks (global tokens 0 and 1): t0 on {0, 1}, t1 on {1, 2}; slot 2e is
     * expert e on rank 1, 2e + 1 on rank 2. Each counting its own token: t0's e0 -> 1, e1
     * -> 2; t1's e1 -> 1 (its first), e2 -> 2: e1 read on both ranks. Both counting the
     * layer's kept choices (e0 1, e1 2, e2 1): e0 -> 1, e1 -> 2, e2 -> 1 (one expert each,
     * rows 1 against 2), the same plan on both. */
    const int32_t t0[2] = {0, 1}, t1[2] = {1, 2}, all[4] = {1, 2, 1, 0};
    const float w2[2] = {0.5f, 0.5f};
    moe_plan_t r;
    void *block_r = carve(&r, 2, 1, 1);
    r.dedup = true;
    r.balance = true;
    for (int global = 0; global < 2; global++) {
        r.balance_kept = global ? all : NULL;
        moe_plan_count_demand(&r, t0, 1);
        moe_plan_build_slots(&r, t0, w2, 1, slots, 8, 0, 2, 0, NULL);
        CHECK_INT_EQ(r.slot_kept[0], 1); /* e0 on rank 1 */
        CHECK_INT_EQ(r.slot_kept[3], 1); /* e1 on rank 2 */
        moe_plan_count_demand(&r, t1, 1);
        moe_plan_build_slots(&r, t1, w2, 1, slots, 8, 1, 2, 0, NULL);
        CHECK_INT_EQ(r.slot_kept[2], (global ? 0 : 1)); /* e1 on rank 1 */
        CHECK_INT_EQ(r.slot_kept[3], (global ? 1 : 0)); /* e1 on rank 2 */
        CHECK_INT_EQ(r.slot_kept[4], (global ? 1 : 0)); /* e2 on rank 1 */
        CHECK_INT_EQ(r.slot_kept[5], (global ? 0 : 1)); /* e2 on rank 2 */
    }
    free(block_r);
    free(block);
    free(block_q);
}

int main(void)
{
    test_order();
    test_capacity();
    test_empty();
    test_dedup();
    test_columns();
    test_balance();
    return moe_test_finish("test_plan");
}
