#include "expert/gate.h"

#include <math.h>
#include <stddef.h>

#include "expert/gemm.h"

void moe_router_init(moe_router_t *r, const moe_config_t *cfg, const float *logit_bias,
                     const float *select_bias)
{
    const moe_family_t *fam = moe_family_get(cfg->family);
    *r = (moe_router_t){
        .kind = fam != NULL ? fam->route : MOE_ROUTE_SOFTMAX,
        .num_experts = (int)cfg->num_experts,
        .top_k = (int)cfg->top_k,
        .renormalize = cfg->normalize_topk,
        .topk_method = cfg->topk_method,
        .n_group = (int)cfg->n_group,
        .topk_group = (int)cfg->topk_group,
        .scaling = (float)cfg->routed_scaling_factor,
        .logit_bias = logit_bias,
        .select_bias = select_bias,
    };
}

void moe_softmax_row(float *row, int n)
{
    float mx = row[0];
    for (int i = 1; i < n; i++) {
        mx = row[i] > mx ? row[i] : mx;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        row[i] = expf(row[i] - mx);
        sum += row[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) {
        row[i] *= inv;
    }
}

void moe_topk_row(const float *probs, int n, int k, int32_t *idx, float *w)
{
    /* Insertion into a sorted list of k: E is small (8..256) and k smaller, so this beats
     * a heap. Strict '>' keeps the earlier (lower) index ahead on ties. */
    int filled = 0;
    for (int e = 0; e < n; e++) {
        float v = probs[e];
        if (filled == k && !(v > w[k - 1])) {
            continue;
        }
        int pos = filled < k ? filled : k - 1;
        while (pos > 0 && v > w[pos - 1]) {
            w[pos] = w[pos - 1];
            idx[pos] = idx[pos - 1];
            pos--;
        }
        w[pos] = v;
        idx[pos] = e;
        if (filled < k) {
            filled++;
        }
    }
}

/* w /= sum(w) (+ eps: DeepSeek's 1e-20, 0 for the softmax families). */
static void renormalize(float *w, int k, float eps)
{
    float s = 0.0f;
    for (int j = 0; j < k; j++) {
        s += w[j];
    }
    s += eps;
    for (int j = 0; j < k; j++) {
        w[j] /= s;
    }
}

/* Group-limited selection: score each of n_group groups (its best choice, or the sum of its
 * best two), keep the topk_group best groups and set every other expert's choice to 0, as
 * transformers' masked_fill(~mask, 0.0) does. */
static void group_mask(const moe_router_t *r, float *choice, bool top2)
{
    int E = r->num_experts, G = r->n_group, per = E / G;
    float gscore[MOE_MAX_EXPERTS];
    int32_t gidx[MOE_MAX_EXPERTS];
    float gw[MOE_MAX_EXPERTS];
    bool keep[MOE_MAX_EXPERTS] = {false};
    for (int g = 0; g < G; g++) {
        int32_t bi[2];
        float bw[2];
        moe_topk_row(choice + g * per, per, top2 ? 2 : 1, bi, bw);
        gscore[g] = top2 ? bw[0] + bw[1] : bw[0];
    }
    moe_topk_row(gscore, G, r->topk_group, gidx, gw);
    for (int j = 0; j < r->topk_group; j++) {
        keep[gidx[j]] = true;
    }
    for (int e = 0; e < E; e++) {
        if (!keep[e / per]) {
            choice[e] = 0.0f;
        }
    }
}

static void route_deepseek(const moe_router_t *r, float *row, int32_t *idx, float *w)
{
    int E = r->num_experts, k = r->top_k;
    float choice[MOE_MAX_EXPERTS];
    bool v3 = r->kind == MOE_ROUTE_DEEPSEEK_V3;
    if (v3) {
        for (int e = 0; e < E; e++) {
            row[e] = 1.0f / (1.0f + expf(-row[e]));
            choice[e] = row[e] + (r->select_bias != NULL ? r->select_bias[e] : 0.0f);
        }
    } else {
        moe_softmax_row(row, E);
        for (int e = 0; e < E; e++) {
            choice[e] = row[e];
        }
    }
    if (r->topk_method != MOE_TOPK_GREEDY) {
        group_mask(r, choice, v3);
    }
    moe_topk_row(choice, E, k, idx, w);
    for (int j = 0; j < k; j++) {
        w[j] = row[idx[j]]; /* the scores; V2's masked choices equal them */
    }
    if (r->renormalize) {
        renormalize(w, k, 1e-20f);
    }
    for (int j = 0; j < k; j++) {
        w[j] *= r->scaling;
    }
}

void moe_route_row(const moe_router_t *r, float *row, int32_t *idx, float *w)
{
    int E = r->num_experts, k = r->top_k;
    if (r->logit_bias != NULL) {
        for (int e = 0; e < E; e++) {
            row[e] += r->logit_bias[e];
        }
    }
    switch (r->kind) {
    case MOE_ROUTE_DEEPSEEK_V2:
    case MOE_ROUTE_DEEPSEEK_V3:
        route_deepseek(r, row, idx, w);
        return;
    case MOE_ROUTE_GPT_OSS:
        moe_topk_row(row, E, k, idx, w);
        moe_softmax_row(w, k);
        return;
    case MOE_ROUTE_SOFTMAX:
        break;
    }
    moe_softmax_row(row, E);
    moe_topk_row(row, E, k, idx, w);
    if (r->renormalize) {
        renormalize(w, k, 0.0f);
    }
}

moe_status_t moe_gate_route(const moe_router_t *r, const float *x, int64_t tokens,
                            int64_t hidden, const float *wg, float *logits, int32_t *topk_idx,
                            float *topk_w)
{
    int E = r->num_experts, k = r->top_k;
    if (tokens == 0) {
        return MOE_OK;
    }
    moe_status_t st = moe_gemm_nt(tokens, E, hidden, x, hidden, wg, hidden, 0.0f, logits, E);
    if (st != MOE_OK) {
        return st;
    }
    for (int64_t t = 0; t < tokens; t++) {
        moe_route_row(r, logits + t * E, topk_idx + t * k, topk_w + t * k);
    }
    return MOE_OK;
}

moe_status_t moe_gate_forward(const float *x, int64_t tokens, int64_t hidden, const float *wg,
                              int num_experts, int top_k, bool renormalize, const float *bias,
                              float *logits, int32_t *topk_idx, float *topk_w)
{
    moe_router_t r = {.kind = MOE_ROUTE_SOFTMAX, .num_experts = num_experts, .top_k = top_k,
                      .renormalize = renormalize, .n_group = 1, .topk_group = 1,
                      .scaling = 1.0f, .logit_bias = bias};
    return moe_gate_route(&r, x, tokens, hidden, wg, logits, topk_idx, topk_w);
}
