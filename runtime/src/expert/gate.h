/* The router of each model family (model/family.h: moe_route_kind_t), in F32 from F32
 * activations, the math of Hugging Face transformers' modeling files (which compute a BF16
 * model's Mixtral, Qwen and gpt-oss router logits in BF16 and DeepSeek's in F32: moed's F32
 * can choose differently from a BF16 transformers run on near-ties; docs/models.md):
 *   softmax      Mixtral, Qwen2-MoE, Qwen3-MoE (modeling_mixtral.py, modeling_qwen2_moe.py,
 *                modeling_qwen3_moe.py): softmax over E, top-k, optional renormalisation.
 *   deepseek_v2  modeling_deepseek_v2.py: softmax; greedy top-k, or group_limited_greedy
 *                (group score = its best expert, keep topk_group groups, others 0);
 *                weights * routed_scaling_factor (after an optional renormalisation with
 *                +1e-20, as V3 does; V2 checkpoints ship norm_topk_prob false).
 *   deepseek_v3  modeling_deepseek_v3.py (also Kimi-K2): sigmoid scores; choice = score +
 *                e_score_correction_bias (selection only); group score = sum of its best
 *                two choices; keep topk_group groups, others 0; top-k of the choices;
 *                weights = the scores (not the choices), optional renormalisation with
 *                +1e-20, times routed_scaling_factor.
 *   gpt_oss      modeling_gpt_oss.py: logits + router bias, top-k logits, softmax over k.
 * Ties go to the lower expert (or group) id everywhere. */
#ifndef MOE_EXPERT_GATE_H
#define MOE_EXPERT_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe/status.h"
#include "model/family.h"

typedef struct moe_router {
    moe_route_kind_t kind;
    int num_experts, top_k;
    bool renormalize;           /* Mixtral always; norm_topk_prob elsewhere */
    moe_topk_method_t topk_method;
    int n_group, topk_group;
    float scaling;              /* routed_scaling_factor (deepseek), else 1 */
    const float *logit_bias;    /* [E] added to the logits (gpt-oss router bias, routing_skew) */
    const float *select_bias;   /* [E] deepseek_v3 e_score_correction_bias, selection only */
} moe_router_t;

/* The router of cfg's family with this layer's biases (either may be NULL). */
void moe_router_init(moe_router_t *r, const moe_config_t *cfg, const float *logit_bias,
                     const float *select_bias);

/* In place: row[0..n) becomes softmax(row). Subtracts the max first so large logits do not
 * overflow. */
void moe_softmax_row(float *row, int n);

/* The k largest of probs[0..n): indices into idx[0..k), values into w[0..k), in
 * descending order of value; equal values go to the lower index first. k <= n. */
void moe_topk_row(const float *probs, int n, int k, int32_t *idx, float *w);

/* One token: logits[0..E) (overwritten with scores) to idx[0..k), w[0..k). */
void moe_route_row(const moe_router_t *r, float *logits, int32_t *idx, float *w);

/* Route T tokens: x [T,H], wg [E,H], logits scratch [T,E]; topk_idx, topk_w [T,k]. */
moe_status_t moe_gate_route(const moe_router_t *r, const float *x, int64_t tokens,
                            int64_t hidden, const float *wg, float *logits, int32_t *topk_idx,
                            float *topk_w);

/* The softmax router (Mixtral) with a logit bias: moe_gate_route with kind softmax. */
moe_status_t moe_gate_forward(const float *x, int64_t tokens, int64_t hidden, const float *wg,
                              int num_experts, int top_k, bool renormalize, const float *bias,
                              float *logits, int32_t *topk_idx, float *topk_w);

#endif /* MOE_EXPERT_GATE_H */
