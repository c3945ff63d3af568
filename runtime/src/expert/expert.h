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
#include "moe_config/config.h"
#include "moe/status.h"

/* Element-wise loops (activations, BF16 narrowing and widening, the permutation and the
 * merge) are built -O3 and cloned for AVX-512 and AVX2, picked at load time: the build's
 * baseline is SSE2, 4 floats a vector. Not under ASan (its checks do not vectorize). */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define MOE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MOE_VECTOR_CLONES
#endif

/* Scratch floats the FFN needs for tile_rows rows. */
int64_t moe_expert_scratch_floats(moe_activation_t act, int64_t ffn, int64_t tile_rows);

/* out[n, H] = FFN(in[n, H]). scratch holds moe_expert_scratch_floats() floats. */
moe_status_t moe_expert_forward(const moe_expert_weights_t *w, moe_activation_t act,
                                int64_t hidden, int64_t ffn, int64_t rows, const float *in,
                                float *out, float *scratch, int64_t tile_rows);

/* h[rows, up_n] (the up projection, up_n = 2F or F for gelu) += b13, then the activation:
 * its result is packed in place into the first F columns of each row (stride up_n). */
void moe_expert_activate(const moe_expert_weights_t *w, moe_activation_t act, float *h,
                         int64_t rows, int64_t ffn);
/* BF16 compute: h[rows, up_n] is the up projection in BF16 (only read); out[rows, F]
 * (packed) = moe_expert_activate's result on the widened h, narrowed to BF16, in one pass. */
void moe_expert_activate_bf16(const moe_expert_weights_t *w, moe_activation_t act,
                              const uint16_t *h, int64_t rows, int64_t ffn, uint16_t *out);
/* The same, out's rows at stride ldo (>= F). */
void moe_expert_activate_bf16_ld(const moe_expert_weights_t *w, moe_activation_t act,
                                 const uint16_t *h, int64_t rows, int64_t ffn, uint16_t *out,
                                 int64_t ldo);
/* m[rows, n] += bias[0..n) on each row; nothing when bias is NULL. */
void moe_expert_add_bias(float *m, int64_t rows, int64_t n, const float *bias);


#endif /* MOE_EXPERT_H */
