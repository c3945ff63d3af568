#include "expert/gate.h"

#include <math.h>
#include <stddef.h>

#include "expert/gemm.h"

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

moe_status_t moe_gate_forward(const float *x, int64_t tokens, int64_t hidden, const float *wg,
                              int num_experts, int top_k, bool renormalize, const float *bias,
                              float *logits, int32_t *topk_idx, float *topk_w)
{
    if (tokens == 0) {
        return MOE_OK;
    }
    moe_status_t st = moe_gemm_nt(tokens, num_experts, hidden, x, hidden, wg, hidden, 0.0f,
                                  logits, num_experts);
    if (st != MOE_OK) {
        return st;
    }
    for (int64_t t = 0; t < tokens; t++) {
        float *row = logits + t * num_experts;
        if (bias != NULL) {
            for (int e = 0; e < num_experts; e++) {
                row[e] += bias[e];
            }
        }
        moe_softmax_row(row, num_experts);
        int32_t *idx = topk_idx + t * top_k;
        float *w = topk_w + t * top_k;
        moe_topk_row(row, num_experts, top_k, idx, w);
        if (renormalize) {
            float s = 0.0f;
            for (int j = 0; j < top_k; j++) {
                s += w[j];
            }
            for (int j = 0; j < top_k; j++) {
                w[j] /= s;
            }
        }
    }
    return MOE_OK;
}
