/* make_checkpoint --dir DIR FAMILY DTYPE H F E K LAYERS SHARDS TOKENS [BREAK]
 * Writes a tiny Hugging Face checkpoint directory (see dir_main below).
 *
 * make_checkpoint OUT NAMING DTYPE H F E LAYERS FIRST_LAYER [TOKENS INPUT_OUT]
 * Writes a tiny MoE checkpoint with Hugging Face tensor names, as a real model has them:
 *   NAMING mixtral:  model.layers.L.block_sparse_moe.{gate,experts.e.w1,w3,w2}.weight
 *   NAMING deepseek: model.layers.L.mlp.{gate,experts.e.gate_proj,up_proj,down_proj}.weight
 * DTYPE f32 | bf16 | f16. Layers FIRST_LAYER..FIRST_LAYER+LAYERS-1 are MoE; a dense
 * layer-0 MLP and the embeddings are written too, so moed must skip tensors it does not
 * need. With TOKENS and INPUT_OUT, also writes an input file with tensor "input". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_model/safetensors.h"

static float *randn(size_t n, unsigned *state, float scale)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; v != NULL && i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        v[i] = ((float)(*state >> 8) / 8388608.0f - 1.0f) * scale;
    }
    return v;
}

/* ------------------------------------------------------------------------------------ */
/* --dir: a checkpoint directory of one family, written with the checkpoints' own layout: */
/* config.json with the family's keys, the family's tensor names, a dense layer 0 where the */
/* family has dense layers, attention tensors to be ignored, optional shards with          */
/* model.safetensors.index.json, FP8 e4m3 weights with 128x128 _scale_inv blocks.          */
/* BREAK (for bad-input tests) spoils one thing: no_scale, shape, index_file, index_tensor,  */
/* nan_scale (a NaN in the first expert's first FP8 _scale_inv), nan_fp8 (a NaN code, 0x7f,  */
/* in that FP8 weight), inf_weight (+inf at element 5 of expert 1's first projection),       */
/* mxfp4_nan (a 255, e8m0's NaN, in the first layer's gate_up_proj_scales, element 7),       */
/* mxfp4_big (254 there: 2^127, so its block's values of 2 and up overflow F32).             */
/* DTYPE mxfp4 (gpt_oss): the experts as MXFP4 U8 *_blocks [E, rows, in/32, 16] + *_scales    */
/* [E, rows, in/32] (random codes, scales 2^-7..2^0), biases BF16, quant_method mxfp4, as     */
/* the released checkpoint; the other tensors BF16.                                          */

typedef struct dtensor {
    char name[200];
    const char *dtype; /* "F32", "BF16", "F16", "F8_E4M3" */
    int ndim;
    int64_t shape[4];
    unsigned char *bytes;
    size_t len;
    int shard;
} dtensor_t;

static dtensor_t g_t[20000];
static int g_n;
static unsigned g_state = 4242;
static const char *g_break = ""; /* BREAK */
static int g_mxfp4;               /* DTYPE mxfp4: gpt-oss's experts as released */
static int g_broken;              /* the one value BREAK spoils is spoilt */

/* The value of e4m3 code c (0x7f/0xff are NaN: not asked for). */
static float e4m3_value(int c)
{
    int e = (c >> 3) & 0xf, m = c & 7;
    float x = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return (c & 0x80) ? -x : x;
}

static uint8_t f32_to_e4m3(float v)
{
    /* Nearest of the finite codes (ties: the smaller magnitude): the positive codes 0..126
     * ascend, so a binary search for |v|, then the sign. */
    float a = fabsf(v);
    int lo = 0, hi = 126;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (e4m3_value(mid) <= a) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    int best = a - e4m3_value(lo) <= e4m3_value(hi) - a ? lo : hi;
    return (uint8_t)(v < 0.0f && best != 0 ? best | 0x80 : best);
}

static void add_f(const char *name, const char *dtype, int ndim, const int64_t *shape,
                  const float *v, int shard)
{
    dtensor_t *t = &g_t[g_n++];
    size_t n = 1;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->shard = shard;
    size_t es = strcmp(dtype, "F32") == 0 ? 4 : 2;
    t->len = n * es;
    t->bytes = malloc(t->len + 1);
    for (size_t i = 0; i < n; i++) {
        if (es == 4) {
            memcpy(t->bytes + 4 * i, &v[i], 4);
        } else {
            uint16_t h = strcmp(dtype, "BF16") == 0 ? moe_f32_to_bf16(v[i]) : moe_f32_to_f16(v[i]);
            t->bytes[2 * i] = (unsigned char)(h & 0xff);
            t->bytes[2 * i + 1] = (unsigned char)(h >> 8);
        }
    }
}

/* A U8 tensor: MXFP4 blocks (random codes) or scales (lo..lo+7: 2^(lo-127) and up). */
static void add_u8(const char *name, int ndim, const int64_t *shape, int shard, int scales)
{
    dtensor_t *t = &g_t[g_n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = "U8";
    t->ndim = ndim;
    t->len = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->len *= (size_t)shape[i];
    }
    t->shard = shard;
    t->bytes = calloc(t->len, 1);
    for (size_t i = 0; i < t->len; i++) {
        g_state = g_state * 1664525u + 1013904223u;
        t->bytes[i] = (unsigned char)(scales ? 120 + (g_state >> 24) % 8 : (g_state >> 24));
    }
    if (scales && strcmp(g_break, "mxfp4_nan") == 0 && !g_broken && t->len > 7) {
        t->bytes[7] = 255;
        g_broken = 1;
    }
    if (scales && strcmp(g_break, "mxfp4_big") == 0 && !g_broken && t->len > 7) {
        t->bytes[7] = 254; /* 2^127: its block's values of 2 and up overflow F32 */
        g_broken = 1;
    }
}

/* A random tensor; fp8 weights (2-D, dtype "fp8") get an F32 _scale_inv beside them. */
static void add_rand(const char *name, const char *dtype, int ndim, const int64_t *shape,
                     float scale, int shard, int with_scale)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        n *= (size_t)shape[i];
    }
    float *v = randn(n, &g_state, scale);
    if (strcmp(g_break, "inf_weight") == 0 && !g_broken && strstr(name, ".experts.1.") != NULL &&
        n > 5) {
        v[5] = INFINITY;
        g_broken = 1;
    }
    if (strcmp(dtype, "fp8") != 0 || ndim != 2) {
        add_f(name, strcmp(dtype, "fp8") == 0 ? "BF16" : dtype, ndim, shape, v, shard);
        free(v);
        return;
    }
    int64_t R = shape[0], C = shape[1], br = (R + 127) / 128, bc = (C + 127) / 128;
    float *sc = calloc((size_t)(br * bc), sizeof(float));
    for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < C; c++) {
            float a = fabsf(v[r * C + c]) / 448.0f;
            float *s = &sc[(r / 128) * bc + c / 128];
            *s = a > *s ? a : *s;
        }
    }
    dtensor_t *t = &g_t[g_n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = "F8_E4M3";
    t->ndim = 2;
    t->shape[0] = R;
    t->shape[1] = C;
    t->shard = shard;
    t->len = (size_t)(R * C);
    t->bytes = malloc(t->len);
    for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < C; c++) {
            float s = sc[(r / 128) * bc + c / 128];
            t->bytes[r * C + c] = f32_to_e4m3(s > 0 ? v[r * C + c] / s : 0.0f);
        }
    }
    int spoil = strstr(name, ".experts.0.") != NULL && !g_broken;
    if (spoil && strcmp(g_break, "nan_fp8") == 0) {
        t->bytes[3] = 0x7f; /* e4m3fn's NaN */
        g_broken = 1;
    }
    if (spoil && strcmp(g_break, "nan_scale") == 0) {
        sc[0] = NAN;
        g_broken = 1;
    }
    if (with_scale) {
        char sname[200];
        int64_t ss[2] = {br, bc};
        snprintf(sname, sizeof(sname), "%s_scale_inv", name);
        add_f(sname, "F32", 2, ss, sc, shard);
    }
    free(sc);
    free(v);
}

static int write_shard(const char *path, int shard)
{
    size_t cap = 1 << 20, pos = 0;
    char *hdr = malloc(cap);
    uint64_t off = 0;
    pos += (size_t)snprintf(hdr + pos, cap - pos, "{");
    for (int i = 0; i < g_n; i++) {
        dtensor_t *t = &g_t[i];
        if (t->shard != shard) {
            continue;
        }
        pos += (size_t)snprintf(hdr + pos, cap - pos, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                off == 0 && pos == 1 ? "" : ",", t->name, t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            pos += (size_t)snprintf(hdr + pos, cap - pos, "%s%lld", d ? "," : "",
                                    (long long)t->shape[d]);
        }
        pos += (size_t)snprintf(hdr + pos, cap - pos, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)off, (unsigned long long)(off + t->len));
        off += t->len;
    }
    pos += (size_t)snprintf(hdr + pos, cap - pos, "}");
    while (pos % 8 != 0) {
        hdr[pos++] = ' ';
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        free(hdr);
        return 1;
    }
    unsigned char le[8];
    for (int b = 0; b < 8; b++) {
        le[b] = (unsigned char)((uint64_t)pos >> (8 * b));
    }
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, pos, f);
    for (int i = 0; i < g_n; i++) {
        if (g_t[i].shard == shard) {
            fwrite(g_t[i].bytes, 1, g_t[i].len, f);
        }
    }
    free(hdr);
    return fclose(f) == 0 ? 0 : 1;
}

typedef struct fam_spec {
    const char *family, *arch, *gate, *bias, *expert, *pg, *pu, *pd, *shared, *shared_gate;
    int dense_first; /* layer 0 is dense */
    int fused;       /* gpt-oss */
} fam_spec_t;

static const fam_spec_t k_specs[] = {
    {"mixtral", "MixtralForCausalLM", "model.layers.%d.block_sparse_moe.gate.weight", NULL,
     "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", "w1", "w3", "w2", NULL, NULL, 0, 0},
    {"qwen2_moe", "Qwen2MoeForCausalLM", "model.layers.%d.mlp.gate.weight", NULL,
     "model.layers.%d.mlp.experts.%d.%s.weight", "gate_proj", "up_proj", "down_proj",
     "model.layers.%d.mlp.shared_expert.%s.weight", "model.layers.%d.mlp.shared_expert_gate.weight",
     1, 0},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "model.layers.%d.mlp.gate.weight", NULL,
     "model.layers.%d.mlp.experts.%d.%s.weight", "gate_proj", "up_proj", "down_proj", NULL, NULL,
     1, 0},
    {"deepseek_v2", "DeepseekV2ForCausalLM", "model.layers.%d.mlp.gate.weight", NULL,
     "model.layers.%d.mlp.experts.%d.%s.weight", "gate_proj", "up_proj", "down_proj",
     "model.layers.%d.mlp.shared_experts.%s.weight", NULL, 1, 0},
    {"deepseek_v3", "DeepseekV3ForCausalLM", "model.layers.%d.mlp.gate.weight",
     "model.layers.%d.mlp.gate.e_score_correction_bias", "model.layers.%d.mlp.experts.%d.%s.weight",
     "gate_proj", "up_proj", "down_proj", "model.layers.%d.mlp.shared_experts.%s.weight", NULL, 1,
     0},
    {"gpt_oss", "GptOssForCausalLM", "model.layers.%d.mlp.router.weight",
     "model.layers.%d.mlp.router.bias", NULL, NULL, NULL, NULL, NULL, NULL, 0, 1},
};

static void write_config(FILE *f, const fam_spec_t *s, const char *dtype, int64_t H, int64_t F,
                         int64_t E, int64_t K, int L)
{
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
               "  \"hidden_size\": %lld,\n  \"num_hidden_layers\": %d,\n"
               "  \"num_experts_per_tok\": %lld,\n",
            s->arch, s->family, (long long)H, L, (long long)K);
    if (strcmp(s->family, "mixtral") == 0) {
        fprintf(f, "  \"num_local_experts\": %lld,\n  \"intermediate_size\": %lld,\n"
                   "  \"hidden_act\": \"silu\"\n}\n", (long long)E, (long long)F);
    } else if (strncmp(s->family, "qwen", 4) == 0) {
        int q2 = s->family[4] == '2';
        fprintf(f, "  \"num_experts\": %lld,\n  \"moe_intermediate_size\": %lld,\n"
                   "  \"intermediate_size\": %lld,\n  \"shared_expert_intermediate_size\": %lld,\n"
                   "  \"norm_topk_prob\": %s,\n  \"decoder_sparse_step\": 1,\n"
                   "  \"mlp_only_layers\": [0],\n  \"hidden_act\": \"silu\"\n}\n",
                (long long)E, (long long)F, (long long)(4 * F), (long long)(q2 ? 2 * F : 0),
                q2 ? "false" : "true");
    } else if (strncmp(s->family, "deepseek", 8) == 0) {
        int v3 = s->family[10] == '3';
        fprintf(f, "  \"n_routed_experts\": %lld,\n  \"moe_intermediate_size\": %lld,\n"
                   "  \"intermediate_size\": %lld,\n  \"n_shared_experts\": %d,\n"
                   "  \"first_k_dense_replace\": 1,\n  \"moe_layer_freq\": 1,\n"
                   "  \"topk_method\": \"%s\",\n  \"n_group\": 4,\n  \"topk_group\": 2,\n"
                   "  \"routed_scaling_factor\": %s,\n  \"norm_topk_prob\": %s,\n"
                   "  \"scoring_func\": \"%s\",\n  \"hidden_act\": \"silu\"%s\n}\n",
                (long long)E, (long long)F, (long long)(4 * F), v3 ? 1 : 2,
                v3 ? "noaux_tc" : "group_limited_greedy", v3 ? "2.5" : "1.5",
                v3 ? "true" : "false", v3 ? "sigmoid" : "softmax",
                strcmp(dtype, "fp8") == 0
                    ? ",\n  \"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": "
                      "\"e4m3\", \"weight_block_size\": [128, 128]}"
                    : "");
    } else {
        fprintf(f, "  \"num_local_experts\": %lld,\n  \"experts_per_token\": %lld,\n"
                   "  \"intermediate_size\": %lld,\n  \"swiglu_limit\": 7.0%s\n}\n",
                (long long)E, (long long)K, (long long)F,
                g_mxfp4 ? ",\n  \"quantization_config\": {\"quant_method\": \"mxfp4\", "
                          "\"modules_to_not_convert\": [\"model.layers.*.self_attn\", "
                          "\"model.layers.*.mlp.router\", \"model.embed_tokens\", \"lm_head\"]}"
                        : "");
    }
}

static void add_ffn(const char *pattern, int l, int e, const fam_spec_t *s, const char *dt,
                    int64_t H, int64_t F, int shard, int with_scale, int bad_shape)
{
    char name[200];
    const char *proj[3] = {s->pg, s->pu, s->pd};
    for (int w = 0; w < 3; w++) {
        if (e >= 0) {
            snprintf(name, sizeof(name), pattern, l, e, proj[w]);
        } else {
            snprintf(name, sizeof(name), pattern, l, proj[w]);
        }
        int64_t sh[2] = {w == 2 ? H : F + bad_shape, w == 2 ? F : H};
        add_rand(name, dt, 2, sh, w == 2 ? sqrtf(3.0f / (float)F) : sqrtf(3.0f / (float)H),
                 shard, with_scale);
        bad_shape = 0;
    }
}

static void add_layer(const fam_spec_t *s, const char *dt, int l, int64_t H, int64_t F,
                      int64_t E, int shard, const char *brk)
{
    char name[200];
    int64_t gsh[2] = {E, H}, b[1] = {E};
    snprintf(name, sizeof(name), "model.layers.%d.self_attn.q_proj.weight", l);
    add_rand(name, "F32", 2, (int64_t[]){H, H}, 0.1f, shard, 1); /* ignored */
    snprintf(name, sizeof(name), s->gate, l);
    add_rand(name, "F32", 2, gsh, sqrtf(3.0f / (float)H), shard, 1);
    if (s->bias != NULL) {
        snprintf(name, sizeof(name), s->bias, l);
        add_rand(name, "F32", 1, b, s->fused ? 0.5f : 0.1f, shard, 1);
    }
    if (s->fused) {
        int64_t gu[3] = {E, H, 2 * F}, gub[2] = {E, 2 * F}, dn[3] = {E, F, H}, dnb[2] = {E, H};
        if (g_mxfp4) { /* [E, rows, blocks of 32, 16 bytes], scales per block */
            const char *p[2] = {"gate_up_proj", "down_proj"};
            for (int w = 0; w < 2; w++) {
                int64_t rows = w == 0 ? 2 * F : H, nb = ((w == 0 ? H : F) + 31) / 32;
                snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%s_blocks", l, p[w]);
                add_u8(name, 4, (int64_t[]){E, rows, nb, 16}, shard, 0);
                snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%s_scales", l, p[w]);
                add_u8(name, 3, (int64_t[]){E, rows, nb}, shard, 1);
                snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%s_bias", l, p[w]);
                add_rand(name, dt, 2, w == 0 ? gub : dnb, 0.1f, shard, 1);
            }
            return;
        }
        snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.gate_up_proj", l);
        add_rand(name, dt, 3, gu, sqrtf(3.0f / (float)H), shard, 1);
        snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
        add_rand(name, dt, 2, gub, 0.1f, shard, 1);
        snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.down_proj", l);
        add_rand(name, dt, 3, dn, sqrtf(3.0f / (float)F), shard, 1);
        snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.down_proj_bias", l);
        add_rand(name, dt, 2, dnb, 0.1f, shard, 1);
        return;
    }
    int no_scale = strcmp(brk, "no_scale") == 0, bad = strcmp(brk, "shape") == 0;
    for (int e = 0; e < E; e++) {
        add_ffn(s->expert, l, e, s, dt, H, F, shard, !(no_scale && e == 0), bad && e == 0);
    }
    if (s->shared != NULL) {
        int64_t Fs = strncmp(s->family, "qwen2", 5) == 0 ? 2 * F : (s->family[10] == '3' ? F : 2 * F);
        add_ffn(s->shared, l, -1, s, dt, H, Fs, shard, 1, 0);
    }
    if (s->shared_gate != NULL) {
        snprintf(name, sizeof(name), s->shared_gate, l);
        add_rand(name, "F32", 2, (int64_t[]){1, H}, sqrtf(3.0f / (float)H), shard, 1);
    }
}

static int write_index(const char *dir, int shards, const char *brk)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        return 1;
    }
    fprintf(f, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int i = 0; i < g_n; i++) {
        int file = g_t[i].shard + 1;
        if (strcmp(brk, "index_file") == 0 && i == g_n - 1) {
            file = 99; /* a shard that is not there */
        }
        if (strcmp(brk, "index_tensor") == 0 &&
            strcmp(g_t[i].name, "model.layers.1.mlp.gate.weight") == 0) {
            file = g_t[i].shard == 0 ? 2 : 1; /* the wrong shard */
        }
        fprintf(f, "%s\n  \"%s\": \"model-%05d-of-%05d.safetensors\"", i ? "," : "",
                g_t[i].name, file, shards);
    }
    fprintf(f, "\n}}\n");
    return fclose(f) == 0 ? 0 : 1;
}

/* The input [T, H] F32, as DIR/input.safetensors. */
static int write_input(const char *dir, int64_t T, int64_t H)
{
    char path[1200];
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/input.safetensors", dir);
    float *x = randn((size_t)(T * H), &g_state, 1.0f);
    moe_st_out_tensor_t in = {"input", MOE_ST_F32, 2, {T, H}, x};
    int rc = moe_st_write(path, &in, 1, &err) == MOE_OK ? 0 : 1;
    free(x);
    return rc;
}

static int dir_main(int argc, char **argv)
{
    if (argc != 12 && argc != 13) {
        fprintf(stderr, "usage: make_checkpoint --dir DIR FAMILY f32|bf16|f16|fp8|mxfp4 H F E K "
                        "LAYERS SHARDS TOKENS [no_scale|shape|index_file|index_tensor|nan_scale|"
                        "nan_fp8|inf_weight|mxfp4_nan|mxfp4_big]\n");
        return 2;
    }
    const char *dir = argv[2], *brk = argc == 13 ? argv[12] : "";
    g_break = brk;
    const fam_spec_t *s = NULL;
    for (size_t i = 0; i < sizeof(k_specs) / sizeof(k_specs[0]); i++) {
        s = strcmp(k_specs[i].family, argv[3]) == 0 ? &k_specs[i] : s;
    }
    g_mxfp4 = strcmp(argv[4], "mxfp4") == 0;
    const char *dt = strcmp(argv[4], "bf16") == 0 || g_mxfp4 ? "BF16"
                     : strcmp(argv[4], "f16") == 0 ? "F16"
                     : strcmp(argv[4], "fp8") == 0 ? "fp8" : "F32";
    int64_t H = atoll(argv[5]), F = atoll(argv[6]), E = atoll(argv[7]), K = atoll(argv[8]);
    int L = atoi(argv[9]), shards = atoi(argv[10]);
    int64_t T = atoll(argv[11]);
    char path[1200];
    if (s == NULL || shards < 1) {
        fprintf(stderr, "make_checkpoint: unknown family %s\n", argv[3]);
        return 2;
    }
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    write_config(f, s, argv[4], H, F, E, K, L);
    fclose(f);
    add_rand("model.embed_tokens.weight", "F32", 2, (int64_t[]){16, H}, 1.0f, 0, 1);
    for (int l = 0; l < L; l++) {
        if (l == 0 && s->dense_first) {
            const char *p[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int w = 0; w < 3; w++) {
                char name[200];
                snprintf(name, sizeof(name), "model.layers.0.mlp.%s.weight", p[w]);
                add_rand(name, "F32", 2, (int64_t[]){w == 2 ? H : 4 * F, w == 2 ? 4 * F : H}, 0.1f,
                         0, 1);
            }
            continue;
        }
        add_layer(s, dt, l, H, F, E, l % shards, brk);
    }
    int rc = 0;
    for (int sh = 0; sh < shards && rc == 0; sh++) {
        if (shards == 1) {
            snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        } else {
            snprintf(path, sizeof(path), "%s/model-%05d-of-%05d.safetensors", dir, sh + 1, shards);
        }
        rc = write_shard(path, sh);
    }
    if (rc == 0 && shards > 1) {
        rc = write_index(dir, shards, brk);
    }
    if (rc == 0) {
        rc = write_input(dir, T, H);
    }
    for (int i = 0; i < g_n; i++) {
        free(g_t[i].bytes);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--dir") == 0) {
        return dir_main(argc, argv);
    }
    if (argc != 9 && argc != 11) {
        fprintf(stderr, "usage: make_checkpoint OUT mixtral|deepseek f32|bf16|f16 H F E LAYERS "
                        "FIRST_LAYER [TOKENS INPUT_OUT]\n");
        return 2;
    }
    const char *out = argv[1];
    int mixtral = strcmp(argv[2], "mixtral") == 0;
    moe_st_dtype_t dt = strcmp(argv[3], "bf16") == 0 ? MOE_ST_BF16
                        : strcmp(argv[3], "f16") == 0 ? MOE_ST_F16 : MOE_ST_F32;
    int64_t H = atoll(argv[4]), F = atoll(argv[5]), E = atoll(argv[6]);
    int layers = atoi(argv[7]), first = atoi(argv[8]);
    int max_t = 2 + layers * (int)(1 + 3 * E);
    moe_st_out_tensor_t *t = calloc((size_t)max_t, sizeof(*t));
    char (*names)[128] = calloc((size_t)max_t, sizeof(*names));
    unsigned state = 12345;
    int n = 0;
    /* Not MoE: must be ignored by moed. */
    snprintf(names[n], 128, "model.embed_tokens.weight");
    t[n] = (moe_st_out_tensor_t){names[n], dt, 2, {16, H}, randn((size_t)(16 * H), &state, 1.0f)};
    n++;
    const char *pre = mixtral ? "block_sparse_moe" : "mlp";
    const char *w1 = mixtral ? "w1" : "gate_proj", *w3 = mixtral ? "w3" : "up_proj",
               *w2 = mixtral ? "w2" : "down_proj";
    float sh = sqrtf(3.0f / (float)H), sf = sqrtf(3.0f / (float)F);
    for (int l = first; l < first + layers; l++) {
        snprintf(names[n], 128, "model.layers.%d.%s.gate.weight", l, pre);
        t[n] = (moe_st_out_tensor_t){names[n], dt, 2, {E, H}, randn((size_t)(E * H), &state, sh)};
        n++;
        for (int e = 0; e < E; e++) {
            const char *which[3] = {w1, w3, w2};
            for (int w = 0; w < 3; w++) {
                snprintf(names[n], 128, "model.layers.%d.%s.experts.%d.%s.weight", l, pre, e,
                         which[w]);
                int64_t r = w == 2 ? H : F, c = w == 2 ? F : H;
                t[n] = (moe_st_out_tensor_t){names[n], dt, 2, {r, c},
                                             randn((size_t)(r * c), &state, w == 2 ? sf : sh)};
                n++;
            }
        }
    }
    moe_error_t err;
    int rc = moe_st_write(out, t, n, &err) == MOE_OK ? 0 : 1;
    if (rc != 0) {
        fprintf(stderr, "make_checkpoint: %s\n", err.msg);
    }
    if (rc == 0 && argc == 11) {
        int64_t T = atoll(argv[9]);
        float *x = randn((size_t)(T * H), &state, 1.7f);
        moe_st_out_tensor_t in = {"input", MOE_ST_F32, 2, {T, H}, x};
        rc = moe_st_write(argv[10], &in, 1, &err) == MOE_OK ? 0 : 1;
        if (rc != 0) {
            fprintf(stderr, "make_checkpoint: %s\n", err.msg);
        }
        free(x);
    }
    for (int i = 0; i < n; i++) {
        free((void *)t[i].data);
    }
    free(t);
    free(names);
    return rc;
}
