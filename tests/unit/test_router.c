/* Softmax, top-k and the gate against hand-computed values. */
#include <stdint.h>

#include "expert/gate.h"
#include "model/weights.h"
#include "test_util.h"

static void test_softmax(void)
{
    float row[3] = {1.0f, 2.0f, 3.0f};
    moe_softmax_row(row, 3);
    /* e^(x-3) / sum: 0.0900306, 0.2447285, 0.6652410 */
    CHECK_NEAR(row[0], 0.09003057, 1e-6);
    CHECK_NEAR(row[1], 0.24472847, 1e-6);
    CHECK_NEAR(row[2], 0.66524096, 1e-6);
    float big[2] = {1000.0f, 1000.0f}; /* would overflow expf without the max shift */
    moe_softmax_row(big, 2);
    CHECK_NEAR(big[0], 0.5, 1e-7);
    CHECK_NEAR(big[1], 0.5, 1e-7);
}

static void test_topk(void)
{
    const float p[4] = {0.2f, 0.3f, 0.3f, 0.2f};
    int32_t idx[4];
    float w[4];
    moe_topk_row(p, 4, 2, idx, w);
    CHECK_INT_EQ(idx[0], 1); /* tie 1 vs 2: lower id first */
    CHECK_INT_EQ(idx[1], 2);
    moe_topk_row(p, 4, 3, idx, w);
    CHECK_INT_EQ(idx[2], 0); /* tie 0 vs 3 */
    moe_topk_row(p, 4, 4, idx, w);
    CHECK_INT_EQ(idx[3], 3);
    CHECK_NEAR(w[3], 0.2, 1e-7);
    const float q[5] = {0.1f, 0.05f, 0.4f, 0.25f, 0.2f};
    moe_topk_row(q, 5, 1, idx, w);
    CHECK_INT_EQ(idx[0], 2);
    CHECK_NEAR(w[0], 0.4, 1e-7);
    moe_topk_row(q, 5, 3, idx, w);
    CHECK_INT_EQ(idx[0], 2);
    CHECK_INT_EQ(idx[1], 3);
    CHECK_INT_EQ(idx[2], 4);
    const float eq[3] = {0.5f, 0.5f, 0.5f};
    moe_topk_row(eq, 3, 2, idx, w);
    CHECK_INT_EQ(idx[0], 0);
    CHECK_INT_EQ(idx[1], 1);
}

static void test_gate(void)
{
    /* x = I (2 tokens, H = 2); W_g rows: e0 = [1, 0], e1 = [0, 1], e2 = [0.5, 0.5].
     * token 0 logits [1, 0, 0.5]; token 1 logits [0, 1, 0.5]. */
    const float x[4] = {1, 0, 0, 1};
    const float wg[6] = {1, 0, 0, 1, 0.5f, 0.5f};
    float logits[6];
    int32_t idx[4];
    float w[4];
    CHECK(moe_gate_forward(x, 2, 2, wg, 3, 2, false, NULL, logits, idx, w) == MOE_OK);
    /* softmax([1, 0, 0.5]) = [0.5064804, 0.1863237, 0.3071959] */
    CHECK_INT_EQ(idx[0], 0);
    CHECK_INT_EQ(idx[1], 2);
    CHECK_NEAR(w[0], 0.5064804, 1e-6);
    CHECK_NEAR(w[1], 0.3071959, 1e-6);
    CHECK_INT_EQ(idx[2], 1);
    CHECK_INT_EQ(idx[3], 2);
    CHECK(moe_gate_forward(x, 2, 2, wg, 3, 2, true, NULL, logits, idx, w) == MOE_OK);
    /* renormalised: 0.5064804 / 0.8136763 = 0.6224593 */
    CHECK_NEAR(w[0], 0.6224593, 1e-6);
    CHECK_NEAR(w[0] + w[1], 1.0, 1e-6);
    /* A bias of -ln(e+1) * s (routing_skew) favours low ids. */
    float bias[3];
    moe_weights_skew_bias(bias, 3, 2.0);
    CHECK_NEAR(bias[0], 0.0, 1e-7);
    CHECK_NEAR(bias[2], -2.0 * 1.0986123, 1e-5);
    CHECK(moe_gate_forward(x, 2, 2, wg, 3, 1, true, bias, logits, idx, w) == MOE_OK);
    /* token 1: [0, 1 - 1.386, 0.5 - 2.197] -> expert 0 wins now */
    CHECK_INT_EQ(idx[1], 0);
    CHECK_NEAR(w[1], 1.0, 1e-6);
}

int main(void)
{
    test_softmax();
    test_topk();
    test_gate();
    return moe_test_finish("test_router");
}
