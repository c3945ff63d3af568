/* make_checkpoint OUT NAMING DTYPE H F E LAYERS FIRST_LAYER [TOKENS INPUT_OUT]
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

#include "moe/safetensors.h"

static float *randn(size_t n, unsigned *state, float scale)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; v != NULL && i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        v[i] = ((float)(*state >> 8) / 8388608.0f - 1.0f) * scale;
    }
    return v;
}

int main(int argc, char **argv)
{
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
