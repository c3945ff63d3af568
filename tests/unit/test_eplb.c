/* moed plan's packing (compare/eplb.h) on hand-computed cases. */
#include <math.h>
#include <stdint.h>

#include "moe_config/eplb.h"
#include "test_util.h"

/* Loads [10,1,1,1,1,1,1,1] on 2 expert ranks, R = 2, slots ceil(10/2) = 5. Replicate:
 * expert 0 (10 -> 5 + 5), then (one copy per rank: expert 0 is full) expert 1 (0.5 + 0.5).
 * Pack heaviest first: 5 | 5, the six 1s alternate (8 | 8), the two 0.5s (8.5 | 8.5):
 * max/mean 1.00. Contiguous (0-3 | 4-7) was 13 | 4: 13 / 8.5 = 1.53. */
static void test_hot_expert(void)
{
    const double loads[8] = {10, 1, 1, 1, 1, 1, 1, 1};
    const int32_t ranks[2] = {1, 2}, node[2] = {0, 0};
    uint8_t host[2 * 8];
    double load[2];
    moe_eplb_in_t in = {.num_experts = 8, .loads = loads, .num_ranks = 2, .ranks = ranks,
                        .node = node, .redundant = 2};
    moe_eplb_out_t out = {.host = host, .rank_load = load};
    moe_error_t err = {0};
    CHECK_INT_EQ(moe_eplb_place(&in, &out, &err), MOE_OK);
    CHECK(host[0] && host[8]); /* expert 0 on both */
    CHECK(host[1] && host[9]); /* expert 1 on both */
    CHECK(fabs(load[0] - 8.5) < 1e-9 && fabs(load[1] - 8.5) < 1e-9);
    CHECK(fabs(moe_eplb_max_mean(load, 2) - 1.0) < 1e-9);
    int n0 = 0, n1 = 0;
    for (int e = 0; e < 8; e++) {
        n0 += host[e];
        n1 += host[8 + e];
    }
    CHECK_INT_EQ(n0, 5);
    CHECK_INT_EQ(n1, 5);
    const double before[2] = {13, 4};
    CHECK(fabs(moe_eplb_max_mean(before, 2) - 13.0 / 8.5) < 1e-9);
    /* over the ranks holding an expert only: an empty third rank is in no mean */
    const double three[3] = {13, 4, 0};
    const bool held[3] = {true, true, false}, none[3] = {false, false, false};
    CHECK(fabs(moe_eplb_max_mean_held(three, held, 3) - 13.0 / 8.5) < 1e-9);
    CHECK(fabs(moe_eplb_max_mean(three, 3) - 13.0 / (17.0 / 3)) < 1e-9);
    CHECK(moe_eplb_max_mean_held(three, none, 3) == 0.0);
}

/* No replicas, 4 experts [4,3,2,1] on 2 ranks: 4 | 3, then 2 -> rank 1 (5), 1 -> rank 0 (5). */
static void test_no_replicas(void)
{
    const double loads[4] = {4, 3, 2, 1};
    const int32_t ranks[2] = {0, 1};
    uint8_t host[8];
    double load[2];
    moe_eplb_in_t in = {.num_experts = 4, .loads = loads, .num_ranks = 2, .ranks = ranks};
    moe_eplb_out_t out = {.host = host, .rank_load = load};
    moe_error_t err = {0};
    CHECK_INT_EQ(moe_eplb_place(&in, &out, &err), MOE_OK);
    CHECK(host[0] && host[3] && host[4 + 1] && host[4 + 2]);
    CHECK(fabs(load[0] - 5) < 1e-9 && fabs(load[1] - 5) < 1e-9);
}

/* More copies than ranks can keep apart: 2 experts, 2 ranks, R = 3. */
static void test_too_many(void)
{
    const double loads[2] = {1, 1};
    const int32_t ranks[2] = {0, 1};
    uint8_t host[4];
    double load[2];
    moe_eplb_in_t in = {.num_experts = 2, .loads = loads, .num_ranks = 2, .ranks = ranks,
                        .redundant = 3};
    moe_eplb_out_t out = {.host = host, .rank_load = load};
    moe_error_t err = {0};
    CHECK_INT_EQ(moe_eplb_place(&in, &out, &err), MOE_ERR_INVALID_ARG);
}

/* Two nodes of two ranks (a hostfile), loads [8,4,2,2,1,1,1,1], R = 2. Nodes first,
 * heaviest first onto the node with the least load per rank and room (4 experts each):
 * node 0 gets 0, 4, 6, 7 (11), node 1 gets 1, 2, 3, 5 (9); one extra copy per node (2 x 2/4).
 * Node 0: expert 0 replicated (4 + 4), slots ceil(5/2) = 3: r0 {0, 4, 7} = 6, r1 {0, 6} = 5.
 * Node 1: expert 1 replicated (2 + 2): r2 {1, 2, 5} = 5, r3 {1, 3} = 4. Every copy of an
 * expert stays inside its node. */
static void test_nodes(void)
{
    const double loads[8] = {8, 4, 2, 2, 1, 1, 1, 1};
    const int32_t ranks[4] = {1, 2, 3, 4}, node[4] = {0, 0, 1, 1};
    static const uint8_t want[4][8] = {{1, 0, 0, 0, 1, 0, 0, 1},
                                       {1, 0, 0, 0, 0, 0, 1, 0},
                                       {0, 1, 1, 0, 0, 1, 0, 0},
                                       {0, 1, 0, 1, 0, 0, 0, 0}};
    static const double want_load[4] = {6, 5, 5, 4};
    uint8_t host[4 * 8];
    double load[4];
    moe_eplb_in_t in = {.num_experts = 8, .loads = loads, .num_ranks = 4, .ranks = ranks,
                        .node = node, .redundant = 2};
    moe_eplb_out_t out = {.host = host, .rank_load = load};
    moe_error_t err = {0};
    CHECK_INT_EQ(moe_eplb_place(&in, &out, &err), MOE_OK);
    for (int r = 0; r < 4; r++) {
        CHECK(fabs(load[r] - want_load[r]) < 1e-9);
        for (int e = 0; e < 8; e++) {
            CHECK_INT_EQ(host[r * 8 + e], want[r][e]);
        }
    }
    CHECK(fabs(moe_eplb_max_mean(load, 4) - 1.2) < 1e-9);
}

/* A node of one rank holds no extra copy apart: the copy goes to the node of two ranks (it
 * went to the more loaded node and the packing then failed, "more copies than ranks can hold
 * apart"); with every node of one rank none can, said so. */
static void test_nodes_room(void)
{
    const double loads[4] = {8, 4, 2, 2};
    const int32_t ranks[3] = {1, 2, 3}, node[3] = {0, 1, 1}, one[3] = {0, 1, 2};
    uint8_t host[3 * 4];
    double load[3];
    moe_eplb_in_t in = {.num_experts = 4, .loads = loads, .num_ranks = 3, .ranks = ranks,
                        .node = node, .redundant = 1};
    moe_eplb_out_t out = {.host = host, .rank_load = load};
    moe_error_t err = {0};
    CHECK_INT_EQ(moe_eplb_place(&in, &out, &err), MOE_OK);
    int copies = 0;
    for (int i = 0; i < 3 * 4; i++) {
        copies += host[i];
    }
    CHECK_INT_EQ(copies, 5); /* 4 experts and the extra copy */
    for (int e = 0; e < 4; e++) { /* the copy on node 1: rank 0 holds no expert twice */
        CHECK(!(host[0 * 4 + e] && (host[1 * 4 + e] || host[2 * 4 + e])));
    }
    in.node = one;
    CHECK_INT_EQ(moe_eplb_place(&in, &out, &err), MOE_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(err.msg, "1 extra copies: the nodes' ranks hold 0 apart");
}

int main(void)
{
    test_hot_expert();
    test_no_replicas();
    test_too_many();
    test_nodes();
    test_nodes_room();
    return moe_test_finish("test_eplb");
}
