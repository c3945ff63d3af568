/* One expert's FFN on the CPU, as GEMMs through the build's BLAS.
 *   swiglu: out = W2 (silu(W1 x) * W3 x)   W1 and W3 stored stacked as W13 [2F, H]
 *   gelu:   out = W2 gelu(W1 x)            W13 holds W1 only [F, H]
 *   swiglu_oai (gpt-oss): h = W13 x + b13; out = W2 ((clamp(up) + 1) * g * sigmoid(1.702 g))
 *           + b2 with g = min(gate, limit) (w->b13, w->b2, w->limit)
 * Rows are processed in tiles of at most `tile_rows` so the hidden scratch stays bounded
 * for any batch. */
#ifndef MOE_EXPERT_H
#define MOE_EXPERT_H

#include <stdint.h>

#include "model/weights.h"
#include "moe/config.h"
#include "moe/status.h"

/* Scratch floats the FFN needs for tile_rows rows. */
int64_t moe_expert_scratch_floats(moe_activation_t act, int64_t ffn, int64_t tile_rows);

/* out[n, H] = FFN(in[n, H]). scratch holds moe_expert_scratch_floats() floats. */
moe_status_t moe_expert_forward(const moe_expert_weights_t *w, moe_activation_t act,
                                int64_t hidden, int64_t ffn, int64_t rows, const float *in,
                                float *out, float *scratch, int64_t tile_rows);

/* FLOPs of the FFN over `rows` rows (GEMMs only: 2*M*N*K each). */
double moe_expert_flops(moe_activation_t act, int64_t hidden, int64_t ffn, int64_t rows);

#endif /* MOE_EXPERT_H */
