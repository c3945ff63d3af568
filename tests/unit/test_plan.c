/* The dispatch plan: send order, counts messages, capacity drops (local and global). */
#include <stdint.h>

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
    moe_plan_build(&p, k_idx, 3, k_owner, 0, NULL);
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
    moe_plan_build(&p, k_idx, 3, k_owner, 2, NULL);
    /* e2 keeps t0, t1 and drops t2's choice */
    CHECK_INT_EQ(p.num_dropped, 1);
    CHECK_INT_EQ(p.expert_dropped[2], 1);
    CHECK_INT_EQ(p.expert_kept[2], 2);
    CHECK_INT_EQ(p.slot_pos[4], -1);
    CHECK_INT_EQ(p.num_send, 5);
    CHECK_INT_EQ(p.send_rows[2], 2);
    /* One choice of e0 already made by a lower routing rank: t2's e0 choice is the third. */
    const int32_t before[4] = {1, 0, 0, 0};
    moe_plan_build(&p, k_idx, 3, k_owner, 2, before);
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
    moe_plan_build(&p, NULL, 0, owner, 0, NULL);
    CHECK_INT_EQ(p.num_send, 0);
    CHECK_INT_EQ(p.send_rows[1], 0);
    moe_plan_destroy(&p);
}

int main(void)
{
    test_order();
    test_capacity();
    test_empty();
    return moe_test_finish("test_plan");
}
