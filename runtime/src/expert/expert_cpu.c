#include <math.h>
#include <string.h>

#include "expert/expert.h"
#include "expert/gemm.h"
#include "moe/bf16.h"

/* The activations are a large share of an expert's time next to BF16 GEMMs (libm's expf
 * is a scalar call: 15 ms per 512 x 3584 SwiGLU tile on Zen 4, about half the GEMMs'), so
 * the loops below use a branch-free exp the compiler vectorizes (this file is built with
 * -O3) and are cloned for AVX-512 and AVX2, picked at load time. */

/* e^x for x in [-87, 88] (clamped): 2^n * e^r with r = x - n ln2 in two parts and a degree-6
 * polynomial; relative error 2.4e-7 (libm: 1 ulp). A NaN is clamped too (to -87: the
 * callers' results stay NaN through their other operand), so the conversion of n to an
 * integer never sees a NaN (undefined behaviour; UBSan caught it). */
static inline float fast_expf(float x)
{
    x = x >= -87.0f ? x : -87.0f; /* a NaN fails the comparison */
    x = x <= 88.0f ? x : 88.0f;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &e, sizeof(scale));
    return p * scale;
}

int64_t moe_expert_scratch_floats(moe_activation_t act, int64_t ffn, int64_t tile_rows)
{
    return tile_rows * (act == MOE_ACT_GELU ? ffn : 2 * ffn);
}

/* h[r, 0:F] = silu(h[r, 0:F]) * h[r, F:2F], rows of stride 2F; result packed in place. */
MOE_VECTOR_CLONES static void swiglu_rows(float *h, int64_t rows, int64_t ffn)
{
    for (int64_t r = 0; r < rows; r++) {
        float *a = h + r * 2 * ffn;
        const float *b = a + ffn;
        for (int64_t i = 0; i < ffn; i++) {
            float v = a[i];
            a[i] = v / (1.0f + fast_expf(-v)) * b[i];
        }
    }
}

/* gpt-oss (transformers' modeling_gpt_oss.py GptOssExperts): gate = min(gate, limit),
 * up = clamp(up, -limit, limit), out = (up + 1) * gate * sigmoid(1.702 * gate); the gate
 * half was de-interleaved at load, so the layout is swiglu_rows'. */
MOE_VECTOR_CLONES static void swiglu_oai_rows(float *h, int64_t rows, int64_t ffn, float limit)
{
    const float alpha = 1.702f;
    for (int64_t r = 0; r < rows; r++) {
        float *a = h + r * 2 * ffn;
        const float *b = a + ffn;
        for (int64_t i = 0; i < ffn; i++) {
            float g = a[i] > limit ? limit : a[i]; /* a NaN stays NaN, as torch.clamp */
            float u = b[i] < -limit ? -limit : (b[i] > limit ? limit : b[i]);
            a[i] = (u + 1.0f) * (g / (1.0f + fast_expf(-alpha * g)));
        }
    }
}

static void gelu_rows(float *h, int64_t n)
{
    const float inv_sqrt2 = 0.70710678118654752f;
    for (int64_t i = 0; i < n; i++) {
        float v = h[i];
        h[i] = 0.5f * v * (1.0f + erff(v * inv_sqrt2));
    }
}

/* BF16 compute's activation in one pass over h, the up projection's BF16 output:
 * moe_expert_activate's F32 arithmetic on the widened values + b13 (the same operations),
 * each result narrowed to BF16 into out[r, 0:F]; h is only read. Blocks of ACT_BLOCK values
 * go through a buffer that stays in L1: GCC 12 vectorizes the activation loop and the
 * narrowing loop apart, not fused into one. One pass over a tile's 7 MB instead of three
 * (bias, activation, narrowing). */
enum { ACT_BLOCK = 256 };

MOE_VECTOR_CLONES static void swiglu_block(float *t, const uint16_t *a, const uint16_t *b,
                                           const float *ba, const float *bb, int64_t n)
{
    if (ba != NULL) {
        for (int64_t i = 0; i < n; i++) {
            float v = moe_bf16_to_f32(a[i]) + ba[i];
            t[i] = v / (1.0f + fast_expf(-v)) * (moe_bf16_to_f32(b[i]) + bb[i]);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float v = moe_bf16_to_f32(a[i]);
            t[i] = v / (1.0f + fast_expf(-v)) * moe_bf16_to_f32(b[i]);
        }
    }
}

MOE_VECTOR_CLONES static void swiglu_oai_block(float *t, const uint16_t *a, const uint16_t *b,
                                               const float *ba, const float *bb, int64_t n,
                                               float limit)
{
    const float alpha = 1.702f;
    for (int64_t i = 0; i < n; i++) {
        float gv = ba != NULL ? moe_bf16_to_f32(a[i]) + ba[i] : moe_bf16_to_f32(a[i]);
        float uv = ba != NULL ? moe_bf16_to_f32(b[i]) + bb[i] : moe_bf16_to_f32(b[i]);
        float g = gv > limit ? limit : gv;
        float u = uv < -limit ? -limit : (uv > limit ? limit : uv);
        t[i] = (u + 1.0f) * (g / (1.0f + fast_expf(-alpha * g)));
    }
}

/* t[i] = f32(h[i]) (+ bias[i]) */
MOE_VECTOR_CLONES static void widen_block(float *t, const uint16_t *h, const float *bias,
                                          int64_t n)
{
    for (int64_t i = 0; bias != NULL && i < n; i++) {
        t[i] = moe_bf16_to_f32(h[i]) + bias[i];
    }
    for (int64_t i = 0; bias == NULL && i < n; i++) {
        t[i] = moe_bf16_to_f32(h[i]);
    }
}

/* o[i] = bf16(t[i]): a block of the activations' results. */
MOE_VECTOR_CLONES static void narrow_block(uint16_t *o, const float *t, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        o[i] = moe_f32_to_bf16(t[i]);
    }
}

void moe_expert_activate_bf16(const moe_expert_weights_t *w, moe_activation_t act,
                              const uint16_t *h, int64_t rows, int64_t ffn, uint16_t *out)
{
    moe_expert_activate_bf16_ld(w, act, h, rows, ffn, out, ffn);
}

void moe_expert_activate_bf16_ld(const moe_expert_weights_t *w, moe_activation_t act,
                                 const uint16_t *h, int64_t rows, int64_t ffn, uint16_t *out,
                                 int64_t ldo)
{
    float t[ACT_BLOCK];
    const float *b13 = w->b13;
    bool swiglu = act == MOE_ACT_SWIGLU || act == MOE_ACT_SWIGLU_OAI;
    int64_t ld = swiglu ? 2 * ffn : ffn;
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *a = h + r * ld, *b = a + ffn;
        for (int64_t i = 0; i < ffn; i += ACT_BLOCK) {
            int64_t n = ffn - i < ACT_BLOCK ? ffn - i : ACT_BLOCK;
            const float *ba = b13 != NULL ? b13 + i : NULL;
            const float *bb = b13 != NULL && swiglu ? b13 + ffn + i : NULL;
            if (act == MOE_ACT_SWIGLU) {
                swiglu_block(t, a + i, b + i, ba, bb, n);
            } else if (act == MOE_ACT_SWIGLU_OAI) {
                swiglu_oai_block(t, a + i, b + i, ba, bb, n, w->limit);
            } else {
                widen_block(t, a + i, ba, n);
                gelu_rows(t, n);
            }
            narrow_block(out + r * ldo + i, t, n);
        }
    }
}

/* rows of width n at stride ld += bias[0..n). */
static void add_bias(float *m, int64_t rows, int64_t n, int64_t ld, const float *bias)
{
    for (int64_t r = 0; bias != NULL && r < rows; r++) {
        for (int64_t i = 0; i < n; i++) {
            m[r * ld + i] += bias[i];
        }
    }
}

void moe_expert_activate(const moe_expert_weights_t *w, moe_activation_t act, float *h,
                         int64_t rows, int64_t ffn)
{
    int64_t up_n = act == MOE_ACT_GELU ? ffn : 2 * ffn;
    add_bias(h, rows, up_n, up_n, w->b13);
    if (act == MOE_ACT_SWIGLU) {
        swiglu_rows(h, rows, ffn);
    } else if (act == MOE_ACT_SWIGLU_OAI) {
        swiglu_oai_rows(h, rows, ffn, w->limit);
    } else {
        gelu_rows(h, rows * ffn);
    }
}

void moe_expert_add_bias(float *m, int64_t rows, int64_t n, const float *bias)
{
    add_bias(m, rows, n, n, bias);
}

moe_status_t moe_expert_forward(const moe_expert_weights_t *w, moe_activation_t act,
                                int64_t hidden, int64_t ffn, int64_t rows, const float *in,
                                float *out, float *scratch, int64_t tile_rows)
{
    int64_t up_n = act == MOE_ACT_GELU ? ffn : 2 * ffn;
    for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
        int64_t m = rows - r0 < tile_rows ? rows - r0 : tile_rows;
        const float *x = in + r0 * hidden;
        moe_status_t st = moe_gemm_nt(m, up_n, hidden, x, hidden, w->w13, hidden, 0.0f,
                                      scratch, up_n);
        if (st != MOE_OK) {
            return st;
        }
        moe_expert_activate(w, act, scratch, m, ffn);
        /* The activated rows sit at stride up_n (the gate half, packed in place). */
        st = moe_gemm_nt(m, hidden, ffn, scratch, up_n, w->w2, ffn, 0.0f, out + r0 * hidden,
                         hidden);
        if (st != MOE_OK) {
            return st;
        }
        add_bias(out + r0 * hidden, m, hidden, hidden, w->b2);
    }
    return MOE_OK;
}
