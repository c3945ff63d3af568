/* Softmax, top-k, the gate and every family's router against hand-computed values, and
 * gpt-oss's clamped SwiGLU expert. */
#include <stdint.h>
#include <string.h>

#include "expert/expert.h"
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

static moe_router_t router(moe_route_kind_t kind, int E, int k)
{
    return (moe_router_t){.kind = kind, .num_experts = E, .top_k = k, .n_group = 1,
                          .topk_group = 1, .scaling = 1.0f};
}

/* Qwen2/3-MoE: softmax, top-k, norm_topk_prob on or off. */
static void test_route_softmax(void)
{
    moe_router_t r = router(MOE_ROUTE_SOFTMAX, 3, 2);
    float row[3] = {1, 0, 0.5f}, w[2];
    int32_t idx[2];
    moe_route_row(&r, row, idx, w);
    CHECK_INT_EQ(idx[0], 0);
    CHECK_INT_EQ(idx[1], 2);
    CHECK_NEAR(w[0], 0.5064804, 1e-6);
    CHECK_NEAR(w[1], 0.3071959, 1e-6);
    r.renormalize = true;
    float row2[3] = {1, 0, 0.5f};
    moe_route_row(&r, row2, idx, w);
    CHECK_NEAR(w[0], 0.6224593, 1e-6);
}

/* DeepSeek-V2: greedy vs group_limited_greedy, routed_scaling_factor, no renormalisation. */
static void test_route_deepseek_v2(void)
{
    moe_router_t r = router(MOE_ROUTE_DEEPSEEK_V2, 4, 2);
    r.scaling = 1.5f;
    float row[4] = {1, 0, 0.5f, 2}, w[2];
    int32_t idx[2];
    moe_route_row(&r, row, idx, w);
    /* softmax [0.2130973, 0.0783941, 0.1292500, 0.5792585]: experts 3, 0, times 1.5 */
    CHECK_INT_EQ(idx[0], 3);
    CHECK_INT_EQ(idx[1], 0);
    CHECK_NEAR(w[0], 0.8688878, 1e-6);
    CHECK_NEAR(w[1], 0.3196460, 1e-6);
    /* Groups {0,1} {2,3}, one kept. Greedy would take 0 and 2 (2 ties 3: lower id); group
     * 0's best (expert 0) beats group 1's, so experts 0 and 1. */
    float g[4] = {2.0f, 1.9f, 1.95f, 1.95f};
    r = router(MOE_ROUTE_DEEPSEEK_V2, 4, 2);
    moe_route_row(&r, g, idx, w);
    CHECK_INT_EQ(idx[1], 2);
    float g2[4] = {2.0f, 1.9f, 1.95f, 1.95f};
    r.topk_method = MOE_TOPK_GROUP_LIMITED;
    r.n_group = 2;
    moe_route_row(&r, g2, idx, w);
    CHECK_INT_EQ(idx[0], 0);
    CHECK_INT_EQ(idx[1], 1);
    CHECK_NEAR(w[0], 0.2626536, 1e-6);
    CHECK_NEAR(w[1], 0.2376588, 1e-6);
}

/* DeepSeek-V3: sigmoid; the correction bias picks expert 2 (weak score) through its group
 * score (top-2 sum), but its weight is its score; renormalised (+1e-20), times 2.5. */
static void test_route_deepseek_v3(void)
{
    moe_router_t r = router(MOE_ROUTE_DEEPSEEK_V3, 6, 2);
    const float bias[6] = {0, 0, 3, 0, 0, 0};
    r.topk_method = MOE_TOPK_NOAUX_TC;
    r.n_group = 3;
    r.topk_group = 2;
    r.renormalize = true;
    r.scaling = 2.5f;
    r.select_bias = bias;
    float row[6] = {0, 1, -1, 2, 0.5f, 0.5f}, w[2];
    int32_t idx[2];
    /* scores .5 .7310586 .2689414 .8807971 .6224593 .6224593; group sums of the choices:
     * 1.2310586, 4.1497385, 1.2449187: groups 1 and 2 kept; choices 3.269, .881, .622 x2 */
    moe_route_row(&r, row, idx, w);
    CHECK_INT_EQ(idx[0], 2);
    CHECK_INT_EQ(idx[1], 3);
    CHECK_NEAR(w[0], 0.5847882, 1e-6);
    CHECK_NEAR(w[1], 1.9152118, 1e-6);
    CHECK_NEAR(row[1], 0.7310586, 1e-6); /* the row holds the scores, not the choices */
}

/* gpt-oss: logits + router bias, top-k logits, softmax over the k. */
static void test_route_gpt_oss(void)
{
    moe_router_t r = router(MOE_ROUTE_GPT_OSS, 4, 2);
    const float bias[4] = {0, -2.5f, 0, 0};
    r.logit_bias = bias;
    float row[4] = {1, 3, 2, 0}, w[2];
    int32_t idx[2];
    moe_route_row(&r, row, idx, w); /* [1, 0.5, 2, 0]: experts 2, 0; softmax([2, 1]) */
    CHECK_INT_EQ(idx[0], 2);
    CHECK_INT_EQ(idx[1], 0);
    CHECK_NEAR(w[0], 0.7310586, 1e-6);
    CHECK_NEAR(w[1], 0.2689414, 1e-6);
}

/* gpt-oss expert, H = F = 1: gate = 3x + 0.5 clamped at 7, up = -5x clamped to [-7, 7]
 * (second row: 5x + 0.5 and 4x), out = 0.25 (up + 1) g sigmoid(1.702 g) + 1. */
static void test_swiglu_oai(void)
{
    float w13[2] = {3, -5}, w2[1] = {0.25f}, b13[2] = {0.5f, 0}, b2[1] = {1};
    moe_expert_weights_t ew = {.id = 0, .w13 = w13, .w2 = w2, .b13 = b13, .b2 = b2, .limit = 7};
    float in[1] = {2}, out[1], scratch[2];
    CHECK(moe_expert_forward(&ew, MOE_ACT_SWIGLU_OAI, 1, 1, 1, in, out, scratch, 1) == MOE_OK);
    CHECK_NEAR(out[0], -8.7498471, 1e-4); /* g 6.5, up clamped to -7 */
    float w13b[2] = {5, 4};
    ew.w13 = w13b;
    CHECK(moe_expert_forward(&ew, MOE_ACT_SWIGLU_OAI, 1, 1, 1, in, out, scratch, 1) == MOE_OK);
    CHECK_NEAR(out[0], 14.9999063, 1e-4); /* g clamped to 7, up 8 clamped to 7 */
}

int main(void)
{
    test_softmax();
    test_topk();
    test_gate();
    test_route_softmax();
    test_route_deepseek_v2();
    test_route_deepseek_v3();
    test_route_gpt_oss();
    test_swiglu_oai();
    return moe_test_finish("test_router");
}
