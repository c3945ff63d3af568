#include "model/family.h"

#include <stdio.h>
#include <string.h>

/* Tensor names are the checkpoints' own (Hugging Face transformers' modeling_<family>.py
 * module names). Kimi-K2 ships as DeepseekV3ForCausalLM and so is the deepseek_v3 row.
 * The defaults are those of transformers' configuration_<family>.py (MixtralConfig,
 * Qwen2MoeConfig, Qwen3MoeConfig, DeepseekV2Config, DeepseekV3Config, GptOssConfig): V2's
 * n_group and topk_group are None there (its greedy top-k reads neither), 1 here. */
static const moe_family_t k_families[] = {
    {.id = MOE_FAMILY_MIXTRAL, .arch = {"MixtralForCausalLM", NULL},
     .key_experts = "num_local_experts", .key_top_k = "num_experts_per_tok",
     .key_ffn = "intermediate_size", .layer_rule = MOE_LAYERS_ALL, .route = MOE_ROUTE_SOFTMAX,
     .gate = "model.layers.%d.block_sparse_moe.gate.weight",
     .expert = "model.layers.%d.block_sparse_moe.experts.%d.%s.weight",
     .proj_gate = "w1", .proj_up = "w3", .proj_down = "w2",
     .normalize_topk_fixed = "true"},
    {.id = MOE_FAMILY_QWEN2_MOE, .arch = {"Qwen2MoeForCausalLM", NULL},
     .key_experts = "num_experts", .key_top_k = "num_experts_per_tok",
     .key_ffn = "moe_intermediate_size", .key_shared_ffn = "shared_expert_intermediate_size",
     .layer_rule = MOE_LAYERS_SPARSE_STEP, .route = MOE_ROUTE_SOFTMAX,
     .gate = "model.layers.%d.mlp.gate.weight",
     .expert = "model.layers.%d.mlp.experts.%d.%s.weight", .proj_gate = "gate_proj",
     .proj_up = "up_proj", .proj_down = "down_proj",
     .shared = MOE_SHARED_GATED,
     .shared_expert = "model.layers.%d.mlp.shared_expert.%s.weight",
     .shared_gate = "model.layers.%d.mlp.shared_expert_gate.weight",
     .defaults = {{"shared_expert_intermediate_size", "5632"}, {"norm_topk_prob", "false"},
                  {"decoder_sparse_step", "1"}}},
    {.id = MOE_FAMILY_QWEN3_MOE, .arch = {"Qwen3MoeForCausalLM", NULL},
     .key_experts = "num_experts", .key_top_k = "num_experts_per_tok",
     .key_ffn = "moe_intermediate_size", .layer_rule = MOE_LAYERS_SPARSE_STEP,
     .route = MOE_ROUTE_SOFTMAX, .gate = "model.layers.%d.mlp.gate.weight",
     .expert = "model.layers.%d.mlp.experts.%d.%s.weight", .proj_gate = "gate_proj",
     .proj_up = "up_proj", .proj_down = "down_proj",
     .defaults = {{"norm_topk_prob", "false"}, {"decoder_sparse_step", "1"}}},
    {.id = MOE_FAMILY_DEEPSEEK_V2, .arch = {"DeepseekV2ForCausalLM", NULL},
     .key_experts = "n_routed_experts", .key_top_k = "num_experts_per_tok",
     .key_ffn = "moe_intermediate_size", .layer_rule = MOE_LAYERS_DENSE_FIRST,
     .route = MOE_ROUTE_DEEPSEEK_V2, .shared = MOE_SHARED_PLAIN, .scoring_func = "softmax",
     .gate = "model.layers.%d.mlp.gate.weight",
     .expert = "model.layers.%d.mlp.experts.%d.%s.weight", .proj_gate = "gate_proj",
     .proj_up = "up_proj", .proj_down = "down_proj",
     .shared_expert = "model.layers.%d.mlp.shared_experts.%s.weight",
     /* transformers' DeepseekV2Moe scales the top-k probabilities by routed_scaling_factor
      * and never renormalises: norm_topk_prob is not read (DeepSeek's own code renormalises
      * instead of scaling where it is true; the released V2 configs say false) */
     .normalize_topk_fixed = "false",
     .defaults = {{"n_group", "1"}, {"topk_group", "1"}, {"routed_scaling_factor", "1"},
                  {"topk_method", "greedy"}, {"n_shared_experts", "2"},
                  {"first_k_dense_replace", "0"}, {"moe_layer_freq", "1"}}},
    {.id = MOE_FAMILY_DEEPSEEK_V3, .arch = {"DeepseekV3ForCausalLM", NULL},
     .key_experts = "n_routed_experts", .key_top_k = "num_experts_per_tok",
     .key_ffn = "moe_intermediate_size", .layer_rule = MOE_LAYERS_DENSE_FIRST,
     .route = MOE_ROUTE_DEEPSEEK_V3, .scoring_func = "sigmoid",
     .gate = "model.layers.%d.mlp.gate.weight",
     .gate_bias = "model.layers.%d.mlp.gate.e_score_correction_bias",
     .expert = "model.layers.%d.mlp.experts.%d.%s.weight", .proj_gate = "gate_proj",
     .proj_up = "up_proj", .proj_down = "down_proj", .shared = MOE_SHARED_PLAIN,
     .shared_expert = "model.layers.%d.mlp.shared_experts.%s.weight",
     .defaults = {{"n_group", "8"}, {"topk_group", "4"}, {"routed_scaling_factor", "2.5"},
                  {"norm_topk_prob", "true"}, {"n_shared_experts", "1"},
                  {"first_k_dense_replace", "3"}, {"moe_layer_freq", "1"}}},
    {.id = MOE_FAMILY_GPT_OSS, .arch = {"GptOssForCausalLM", NULL},
     .key_experts = "num_local_experts", .key_top_k = "num_experts_per_tok",
     .key_top_k_alt = "experts_per_token", .key_ffn = "intermediate_size",
     .layer_rule = MOE_LAYERS_ALL, .route = MOE_ROUTE_GPT_OSS,
     .gate = "model.layers.%d.mlp.router.weight", .gate_bias = "model.layers.%d.mlp.router.bias",
     .fused_gate_up = "model.layers.%d.mlp.experts.gate_up_proj",
     .fused_gate_up_bias = "model.layers.%d.mlp.experts.gate_up_proj_bias",
     .fused_down = "model.layers.%d.mlp.experts.down_proj",
     .fused_down_bias = "model.layers.%d.mlp.experts.down_proj_bias",
     .defaults = {{"swiglu_limit", "7"}}},
};
#define NFAM ((int)(sizeof(k_families) / sizeof(k_families[0])))

int moe_family_count(void)
{
    return NFAM;
}

const moe_family_t *moe_family_at(int i)
{
    return i >= 0 && i < NFAM ? &k_families[i] : NULL;
}

const moe_family_t *moe_family_get(moe_family_id_t id)
{
    for (int i = 0; i < NFAM; i++) {
        if (k_families[i].id == id) {
            return &k_families[i];
        }
    }
    return NULL;
}

const moe_family_t *moe_family_by_arch(const char *arch)
{
    for (int i = 0; i < NFAM; i++) {
        for (int a = 0; a < 2 && k_families[i].arch[a] != NULL; a++) {
            if (strcmp(k_families[i].arch[a], arch) == 0) {
                return &k_families[i];
            }
        }
    }
    return NULL;
}

const char *moe_family_default(const moe_family_t *fam, const char *key)
{
    for (int i = 0; key != NULL && i < MOE_FAMILY_DEFAULTS_MAX && fam->defaults[i].key != NULL;
         i++) {
        if (strcmp(fam->defaults[i].key, key) == 0) {
            return fam->defaults[i].value;
        }
    }
    return NULL;
}

void moe_family_list_arch(char *buf, size_t n)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (int i = 0; i < NFAM && pos < n; i++) {
        for (int a = 0; a < 2 && k_families[i].arch[a] != NULL && pos < n; a++) {
            int w = snprintf(buf + pos, n - pos, "%s%s", pos == 0 ? "" : ", ",
                             k_families[i].arch[a]);
            pos += w > 0 ? (size_t)w : 0;
        }
    }
}
