#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/safetensors.h"
#include "layer/gate.h"
#include "model/rng.h"

typedef struct names {
    const char *naming;
    const char *prefix; /* "model.layers.%d.block_sparse_moe" */
    const char *w1, *w3, *w2;
} names_t;

static const names_t k_mixtral = {"mixtral", "model.layers.%lld.block_sparse_moe", "w1", "w3",
                                  "w2"};
static const names_t k_deepseek = {"deepseek/qwen", "model.layers.%lld.mlp", "gate_proj",
                                   "up_proj", "down_proj"};

static void tensor_name(char *out, size_t cap, const names_t *nm, long long layer,
                        const char *suffix)
{
    char prefix[128];
    snprintf(prefix, sizeof(prefix), nm->prefix, layer);
    snprintf(out, cap, "%s.%s", prefix, suffix);
}

/* Which naming the checkpoint uses, from the gate tensor of the first MoE layer. */
static moe_status_t detect_naming(const moe_config_t *cfg, moe_st_file_t *f,
                                  const names_t **out, moe_error_t *err)
{
    char a[256], b[256];
    tensor_name(a, sizeof(a), &k_mixtral, (long long)cfg->first_layer, "gate.weight");
    tensor_name(b, sizeof(b), &k_deepseek, (long long)cfg->first_layer, "gate.weight");
    if (moe_st_find(f, a) != NULL) {
        *out = &k_mixtral;
    } else if (moe_st_find(f, b) != NULL) {
        *out = &k_deepseek;
    } else {
        return moe_error_set(err, MOE_ERR_WEIGHTS,
                             "%s: no MoE gate tensor for layer %lld: looked for '%s' (Mixtral) "
                             "and '%s' (DeepSeek/Qwen); check model.first_layer (now %lld)",
                             cfg->weights, (long long)cfg->first_layer, a, b,
                             (long long)cfg->first_layer);
    }
    return MOE_OK;
}

/* Read one [rows, cols] tensor, adding the config keys to a shape mismatch message. */
static moe_status_t read_matrix(moe_st_file_t *f, const char *name, int64_t rows, int64_t cols,
                                float *dst, moe_error_t *err)
{
    int64_t shape[2] = {rows, cols};
    bool present = moe_st_find(f, name) != NULL;
    moe_status_t st = moe_st_read_f32_shaped(f, name, 2, shape, dst, err);
    if (st == MOE_ERR_WEIGHTS && err != NULL) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof(err->msg) - n, "; check %s against the checkpoint",
                 present ? "model.hidden_dim, model.ffn_dim and model.num_experts"
                         : "model.num_layers, model.first_layer and model.num_experts");
    }
    return st;
}

static moe_status_t alloc_floats(float **p, size_t n, moe_error_t *err)
{
    *p = malloc(n * sizeof(float));
    if (*p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %zu MiB for weights",
                             n * sizeof(float) >> 20);
    }
    return MOE_OK;
}

static void random_expert(const moe_config_t *cfg, int layer, moe_expert_weights_t *ew)
{
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    /* Uniform with unit-variance outputs for unit-variance inputs: a = sqrt(3 / fan_in). */
    float a_in = sqrtf(3.0f / (float)H), a_out = sqrtf(3.0f / (float)F);
    moe_rng_fill_uniform(ew->w13, (size_t)(F * H), cfg->seed,
                         moe_rng_stream(MOE_RNG_W1, (uint64_t)layer, (uint64_t)ew->id), 0, a_in);
    if (cfg->activation == MOE_ACT_SWIGLU) {
        moe_rng_fill_uniform(ew->w13 + F * H, (size_t)(F * H), cfg->seed,
                             moe_rng_stream(MOE_RNG_W3, (uint64_t)layer, (uint64_t)ew->id), 0,
                             a_in);
    }
    moe_rng_fill_uniform(ew->w2, (size_t)(H * F), cfg->seed,
                         moe_rng_stream(MOE_RNG_W2, (uint64_t)layer, (uint64_t)ew->id), 0, a_out);
}

static moe_status_t file_expert(const moe_config_t *cfg, moe_st_file_t *f, const names_t *nm,
                                int layer, moe_expert_weights_t *ew, moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    long long L = (long long)(cfg->first_layer + layer);
    char name[256], suffix[96];
    snprintf(suffix, sizeof(suffix), "experts.%d.%s.weight", ew->id, nm->w1);
    tensor_name(name, sizeof(name), nm, L, suffix);
    moe_status_t st = read_matrix(f, name, F, H, ew->w13, err);
    if (st == MOE_OK && cfg->activation == MOE_ACT_SWIGLU) {
        snprintf(suffix, sizeof(suffix), "experts.%d.%s.weight", ew->id, nm->w3);
        tensor_name(name, sizeof(name), nm, L, suffix);
        st = read_matrix(f, name, F, H, ew->w13 + F * H, err);
    }
    if (st == MOE_OK) {
        snprintf(suffix, sizeof(suffix), "experts.%d.%s.weight", ew->id, nm->w2);
        tensor_name(name, sizeof(name), nm, L, suffix);
        st = read_matrix(f, name, H, F, ew->w2, err);
    }
    return st;
}

static moe_status_t load_gate(const moe_config_t *cfg, moe_st_file_t *f, const names_t *nm,
                              int layer, float *gate, moe_error_t *err)
{
    int64_t E = cfg->num_experts, H = cfg->hidden_dim;
    if (f == NULL) {
        moe_rng_fill_uniform(gate, (size_t)(E * H), cfg->seed,
                             moe_rng_stream(MOE_RNG_GATE, (uint64_t)layer, 0), 0,
                             sqrtf(3.0f / (float)H));
        return MOE_OK;
    }
    char name[256];
    tensor_name(name, sizeof(name), nm, (long long)(cfg->first_layer + layer), "gate.weight");
    return read_matrix(f, name, E, H, gate, err);
}

static moe_status_t load_layer(const moe_config_t *cfg, moe_st_file_t *f, const names_t *nm,
                               int rank, bool routes, int layer, moe_layer_weights_t *lw,
                               moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    int64_t up_rows = cfg->activation == MOE_ACT_SWIGLU ? 2 * F : F;
    moe_status_t st = MOE_OK;
    if (routes) {
        st = alloc_floats(&lw->gate, (size_t)(cfg->num_experts * H), err);
        if (st == MOE_OK) {
            st = load_gate(cfg, f, nm, layer, lw->gate, err);
        }
    }
    int32_t ids[MOE_MAX_EXPERTS];
    int n = moe_cfg_experts_of_rank(cfg, rank, ids);
    lw->experts = calloc((size_t)(n > 0 ? n : 1), sizeof(*lw->experts));
    if (st == MOE_OK && lw->experts == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate expert table");
    }
    for (int i = 0; st == MOE_OK && i < n; i++) {
        moe_expert_weights_t *ew = &lw->experts[i];
        ew->id = ids[i];
        lw->num_local = i + 1;
        st = alloc_floats(&ew->w13, (size_t)(up_rows * H), err);
        if (st == MOE_OK) {
            st = alloc_floats(&ew->w2, (size_t)(H * F), err);
        }
        if (st == MOE_OK && f == NULL) {
            random_expert(cfg, layer, ew);
        } else if (st == MOE_OK) {
            st = file_expert(cfg, f, nm, layer, ew, err);
        }
    }
    return st;
}

moe_status_t moe_weights_load(const moe_config_t *cfg, int rank, bool routes, moe_weights_t *w,
                              moe_error_t *err)
{
    memset(w, 0, sizeof(*w));
    moe_st_file_t *f = NULL;
    const names_t *nm = NULL;
    moe_status_t st = MOE_OK;
    bool random = strcmp(cfg->weights, "random") == 0;
    if (!random) {
        st = moe_st_open(cfg->weights, &f, err);
        if (st == MOE_OK) {
            st = detect_naming(cfg, f, &nm, err);
        }
        if (st != MOE_OK) {
            goto out_close;
        }
    }
    w->naming = random ? "random" : nm->naming;
    w->num_layers = (int)cfg->num_layers;
    w->layers = calloc((size_t)w->num_layers, sizeof(*w->layers));
    if (w->layers == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate layer table");
        goto out_close;
    }
    for (int l = 0; l < w->num_layers && st == MOE_OK; l++) {
        st = load_layer(cfg, f, nm, rank, routes, l, &w->layers[l], err);
    }
    if (st == MOE_OK && random && cfg->routing_skew > 0.0) {
        st = alloc_floats(&w->gate_bias, (size_t)cfg->num_experts, err);
        if (st == MOE_OK) {
            moe_gate_skew_bias(w->gate_bias, (int)cfg->num_experts, cfg->routing_skew);
        }
    }
    int64_t up_rows = cfg->activation == MOE_ACT_SWIGLU ? 2 * cfg->ffn_dim : cfg->ffn_dim;
    w->bytes_per_expert = (size_t)((up_rows + cfg->ffn_dim) * cfg->hidden_dim) * sizeof(float);
    w->expert_bytes = w->bytes_per_expert * (size_t)moe_cfg_experts_of_rank(cfg, rank, NULL) *
                      (size_t)cfg->num_layers;
out_close:
    moe_st_close(f);
    if (st != MOE_OK) {
        moe_weights_destroy(w);
    }
    return st;
}

void moe_weights_destroy(moe_weights_t *w)
{
    if (w == NULL) {
        return;
    }
    for (int l = 0; w->layers != NULL && l < w->num_layers; l++) {
        moe_layer_weights_t *lw = &w->layers[l];
        free(lw->gate);
        for (int i = 0; lw->experts != NULL && i < lw->num_local; i++) {
            free(lw->experts[i].w13);
            free(lw->experts[i].w2);
        }
        free(lw->experts);
    }
    free(w->layers);
    free(w->gate_bias);
    memset(w, 0, sizeof(*w));
}

moe_status_t moe_input_load(const moe_config_t *cfg, int batch, int64_t first, int64_t count,
                            float *dst, moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, T = cfg->tokens_per_step;
    if (strcmp(cfg->input, "random") == 0) {
        /* Unit-variance uniform; batch b is an independent slice of one stream. */
        uint64_t start = ((uint64_t)batch * (uint64_t)T + (uint64_t)first) * (uint64_t)H;
        moe_rng_fill_uniform(dst, (size_t)(count * H), cfg->seed,
                             moe_rng_stream(MOE_RNG_INPUT, 0, 0), start, sqrtf(3.0f));
        return MOE_OK;
    }
    moe_st_file_t *f = NULL;
    float *all = NULL;
    moe_status_t st = moe_st_open(cfg->input, &f, err);
    if (st != MOE_OK) {
        return st;
    }
    const moe_st_tensor_info_t *ti = moe_st_find(f, "input");
    if (ti == NULL || ti->ndim != 2 || ti->shape[0] != T || ti->shape[1] != H) {
        st = moe_error_set(err, MOE_ERR_WEIGHTS,
                           "%s: workload.input needs tensor 'input' of shape [%lld, %lld] "
                           "(workload.tokens_per_step, model.hidden_dim); %s",
                           cfg->input, (long long)T, (long long)H,
                           ti == NULL ? "the file has no tensor 'input'"
                                      : "the file's 'input' has another shape");
        goto out;
    }
    st = alloc_floats(&all, (size_t)(T * H), err);
    if (st == MOE_OK) {
        st = moe_st_read_f32(f, "input", all, (size_t)(T * H), err);
    }
    if (st == MOE_OK) {
        memcpy(dst, all + first * H, (size_t)(count * H) * sizeof(float));
    }
out:
    free(all);
    moe_st_close(f);
    return st;
}
