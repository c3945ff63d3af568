/* The model families moed runs exactly: one row per family, as llama.cpp's llama-arch.cpp
 * keeps one table per architecture. A row names the family's config.json keys, which
 * decoder layers are MoE, its routing, its shared experts and its tensor names; the
 * checkpoint reader, the weight loader and the gate read the row and never branch on a
 * family's name, so adding a family is adding a row (and a routing kind if it is new),
 * with its id in moe_config/config.h's moe_family_id_t and its name in the config's key table
 * (config/config.c: cfg_family_names, the one place the names are written; a row's name
 * is moe_cfg_family_name(row->id)).
 *
 * The math of each routing kind is Hugging Face transformers' own (the files are cited at
 * the gate, expert/gate.c). */
#ifndef MOE_MODEL_FAMILY_H
#define MOE_MODEL_FAMILY_H

#include <stdbool.h>

#include "moe_config/config.h"

/* How a family routes (expert/gate.h: moe_router_t). */
typedef enum {
    MOE_ROUTE_SOFTMAX = 0,     /* softmax, top-k, optional renormalisation (Mixtral, Qwen) */
    MOE_ROUTE_DEEPSEEK_V2 = 1, /* softmax, greedy or group-limited top-k, scaling */
    MOE_ROUTE_DEEPSEEK_V3 = 2, /* sigmoid, bias for selection, group top-2 sums, scaling */
    MOE_ROUTE_GPT_OSS = 3,     /* logits + router bias, top-k, softmax over the k */
} moe_route_kind_t;

typedef enum {
    MOE_SHARED_NONE = 0,
    MOE_SHARED_GATED = 1, /* Qwen2-MoE: shared_expert(x) * sigmoid(shared_expert_gate(x)) */
    MOE_SHARED_PLAIN = 2, /* DeepSeek: shared_experts(x), ffn = moe_intermediate * n_shared */
} moe_shared_kind_t;

/* Which decoder layers hold a MoE block. */
typedef enum {
    MOE_LAYERS_ALL = 0,         /* Mixtral, gpt-oss */
    MOE_LAYERS_SPARSE_STEP = 1, /* Qwen: (l + 1) % decoder_sparse_step == 0, l not in mlp_only_layers */
    MOE_LAYERS_DENSE_FIRST = 2, /* DeepSeek: l >= first_k_dense_replace, l % moe_layer_freq == 0 */
} moe_layer_rule_t;

/* An optional config.json key's value when the file leaves it out: the default of the
 * family's configuration class in transformers (configuration_<family>.py), so a trimmed
 * config.json routes as transformers would route it. */
typedef struct moe_family_default {
    const char *key, *value;
} moe_family_default_t;
#define MOE_FAMILY_DEFAULTS_MAX 10

typedef struct moe_family {
    moe_family_id_t id;         /* its name: moe_cfg_family_name(id) (moe_config/config.h) */
    const char *arch[2];        /* config.json "architectures" names (NULL-padded) */
    /* config.json keys; NULL where the family has none */
    const char *key_experts, *key_top_k, *key_top_k_alt, *key_ffn, *key_shared_ffn;
    moe_layer_rule_t layer_rule;
    moe_route_kind_t route;
    moe_shared_kind_t shared;
    const char *scoring_func;   /* required config.json scoring_func, NULL: not checked */
    /* Tensor names, printf patterns: %d is the decoder layer, then the expert. */
    const char *gate;           /* [E, H] */
    const char *gate_bias;      /* [E]: V3 e_score_correction_bias, gpt-oss router bias */
    const char *expert;         /* "...experts.%d.%s.weight" with proj_* below; NULL: fused */
    const char *proj_gate, *proj_up, *proj_down;
    const char *shared_expert;  /* "...shared_experts.%s.weight" with proj_* */
    const char *shared_gate;    /* [1, H] */
    /* gpt-oss fused experts, one tensor per layer */
    const char *fused_gate_up, *fused_gate_up_bias, *fused_down, *fused_down_bias;
    /* Optional keys' defaults ({NULL} ends the list, MOE_FAMILY_DEFAULTS_MAX at most);
     * transformers' defaults, but DeepSeek's moe_layer_freq, which only DeepSeek's own code
     * reads (models.md) */
    moe_family_default_t defaults[MOE_FAMILY_DEFAULTS_MAX];
    /* normalize_topk fixed by the family's code whatever config.json says (NULL: read
     * norm_topk_prob): Mixtral always renormalises */
    const char *normalize_topk_fixed;
} moe_family_t;

/* The row of a family, or of a config.json "architectures" entry (NULL when unknown). */
const moe_family_t *moe_family_get(moe_family_id_t id);
const moe_family_t *moe_family_by_arch(const char *arch);
/* "MixtralForCausalLM, Qwen2MoeForCausalLM, ..." for messages. */
void moe_family_list_arch(char *buf, size_t n);
/* The family's default for an absent config.json key (defaults above), or NULL when the
 * family has none (the key is required, or not the family's). */
const char *moe_family_default(const moe_family_t *fam, const char *key);
int moe_family_count(void);
const moe_family_t *moe_family_at(int i);

#endif /* MOE_MODEL_FAMILY_H */
