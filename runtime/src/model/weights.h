/* Part model (runtime/src/model/): the weights and inputs: seeded random or read from
 * safetensors checkpoints. May include: base config (and the public headers in moe/). One
 * file of each part's folder opens with such a comment; tests/lint/parts.sh holds every
 * part to its list. */
/* Model weights of one rank: the gate of every layer (on routing ranks) and the experts
 * this rank hosts, seeded-random or read from a safetensors checkpoint.
 *
 * Checkpoint names (layer L = model.first_layer + moed layer):
 *   Mixtral:        model.layers.L.block_sparse_moe.gate.weight [E, H]
 *                   model.layers.L.block_sparse_moe.experts.e.{w1,w3}.weight [F, H], w2 [H, F]
 *   DeepSeek/Qwen:  model.layers.L.mlp.gate.weight [E, H]
 *                   model.layers.L.mlp.experts.e.{gate_proj,up_proj}.weight [F, H],
 *                   down_proj [H, F]
 * gelu experts use w1/gate_proj and w2/down_proj only. Each rank reads only its tensors. */
#ifndef MOE_WEIGHTS_H
#define MOE_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe/config.h"
#include "moe/status.h"

/* One expert's F32 weights on the host (see expert/expert.h for the FFN they feed). */
typedef struct moe_expert_weights {
    int32_t id;
    float *w13; /* [2F, H] swiglu (W1 and W3 stacked), [F, H] gelu */
    float *w2;  /* [H, F] */
} moe_expert_weights_t;

typedef struct moe_layer_weights {
    float *gate;                   /* [E, H] on routing ranks, else NULL */
    int num_local;                 /* experts hosted here */
    moe_expert_weights_t *experts; /* [num_local], ids ascending */
} moe_layer_weights_t;

typedef struct moe_weights {
    int num_layers;
    moe_layer_weights_t *layers;
    float *gate_bias;        /* [E] routing_skew log-prior, NULL when none */
    size_t bytes_per_expert; /* F32 bytes of one expert's weights */
    size_t expert_bytes;     /* all experts hosted here, all layers */
    const char *naming;      /* "random", "mixtral" or "deepseek/qwen" */
} moe_weights_t;

/* Load what `rank` needs. routes: whether this rank runs the gate. On error fills err with
 * a message naming the file and tensor; *w is then empty (safe to destroy). */
moe_status_t moe_weights_load(const moe_config_t *cfg, int rank, bool routes, moe_weights_t *w,
                              moe_error_t *err);
void moe_weights_destroy(moe_weights_t *w); /* accepts NULL and an empty struct */

/* Zipf-like log-prior for workload.routing_skew s: bias[e] = -s * ln(e + 1), added to the
 * gate's logits, so softmax multiplies expert e's probability by (e+1)^-s before
 * normalising: expert 0 is the most popular. */
void moe_weights_skew_bias(float *bias, int num_experts, double skew);

/* Input tokens [count, H] starting at global token `first` of batch `batch`: seeded random
 * (every batch different), or rows of tensor "input" of workload.input. */
moe_status_t moe_input_load(const moe_config_t *cfg, int batch, int64_t first, int64_t count,
                            float *dst, moe_error_t *err);

#endif /* MOE_WEIGHTS_H */
