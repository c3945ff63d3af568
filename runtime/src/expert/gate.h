/* The router: logits = x W_g^T, softmax over experts, top-k with ties broken by the lower
 * expert id, optional renormalisation of the k weights. */
#ifndef MOE_EXPERT_GATE_H
#define MOE_EXPERT_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "moe/status.h"

/* In place: row[0..n) becomes softmax(row). Subtracts the max first so large logits do not
 * overflow. */
void moe_softmax_row(float *row, int n);

/* The k largest of probs[0..n): indices into idx[0..k), values into w[0..k), in
 * descending order of value; equal values go to the lower index first. k <= n. */
void moe_topk_row(const float *probs, int n, int k, int32_t *idx, float *w);

/* Route T tokens: x [T,H], wg [E,H], bias [E] added to the logits (NULL for none),
 * logits scratch [T,E]. Writes topk_idx [T,k] and topk_w [T,k]. */
moe_status_t moe_gate_forward(const float *x, int64_t tokens, int64_t hidden, const float *wg,
                              int num_experts, int top_k, bool renormalize, const float *bias,
                              float *logits, int32_t *topk_idx, float *topk_w);

#endif /* MOE_EXPERT_GATE_H */
