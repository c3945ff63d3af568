/* BF16 compute's one-pass activation (moe_expert_activate_bf16, on the up projection's BF16
 * values) against the F32 path's (moe_expert_activate on the same values widened, then each
 * result narrowed to BF16): the same bits for every activation, with and without biases, on
 * rows whose width is not a multiple of the vector or block length, over values from -100
 * to 100 (exp's clamps), a NaN and a negative zero. */
#include <math.h>
#include <stdlib.h>

#include "expert/expert.h"
#include "moe/bf16.h"
#include "test_util.h"

enum { ROWS = 5, FFN = 300 }; /* 300: a block of 256 and a tail of 44 */

static float value(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65535.0f - 0.5f) * 200.0f;
}

/* Returns how many of ROWS x FFN outputs differ in their bits from the reference's. */
static int mismatches(moe_activation_t act, bool bias)
{
    int up_n = act == MOE_ACT_GELU ? FFN : 2 * FFN, bad = 0;
    uint16_t *h = malloc(sizeof(uint16_t) * ROWS * up_n);
    float *ref = malloc(sizeof(float) * ROWS * up_n);
    float *b13 = malloc(sizeof(float) * up_n);
    uint16_t *out = malloc(sizeof(uint16_t) * ROWS * FFN);
    unsigned s = 17u + (unsigned)act * 3u + bias;
    for (int i = 0; i < ROWS * up_n; i++) {
        h[i] = moe_f32_to_bf16(value(&s));
    }
    h[7] = moe_f32_to_bf16(NAN);
    h[8] = 0x8000; /* -0 */
    for (int i = 0; i < ROWS * up_n; i++) {
        ref[i] = moe_bf16_to_f32(h[i]);
    }
    for (int i = 0; i < up_n; i++) {
        b13[i] = value(&s) * 0.01f;
    }
    moe_expert_weights_t w = {.b13 = bias ? b13 : NULL, .limit = 7.0f};
    moe_expert_activate(&w, act, ref, ROWS, FFN);
    moe_expert_activate_bf16(&w, act, h, ROWS, FFN, out);
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < FFN; i++) {
            bad += out[r * FFN + i] != moe_f32_to_bf16(ref[r * up_n + i]);
        }
    }
    free(h);
    free(ref);
    free(b13);
    free(out);
    return bad;
}

int main(void)
{
    moe_activation_t acts[] = {MOE_ACT_SWIGLU, MOE_ACT_SWIGLU_OAI, MOE_ACT_GELU};
    for (int a = 0; a < 3; a++) {
        CHECK_INT_EQ(mismatches(acts[a], false), 0);
        CHECK_INT_EQ(mismatches(acts[a], true), 0);
    }
    /* gpt-oss's clamp passes a NaN gate on, as torch.clamp does (it once became the
     * limit, 7, and the output finite): h[0..FFN) is the gate half of row 0 */
    float oai[2 * 4] = {NAN, 9.0f, -1.0f, 2.0f, 0.5f, NAN, 0.5f, 20.0f};
    moe_expert_weights_t w = {.limit = 7.0f};
    moe_expert_activate(&w, MOE_ACT_SWIGLU_OAI, oai, 1, 4);
    CHECK(isnan(oai[0]));                       /* NaN gate */
    CHECK(isnan(oai[1]));                       /* NaN up */
    CHECK(fabsf(oai[2] - (0.5f + 1.0f) * (-1.0f / (1.0f + expf(1.702f)))) < 1e-5f);
    CHECK(fabsf(oai[3] - (7.0f + 1.0f) * (2.0f / (1.0f + expf(-3.404f)))) < 1e-4f); /* up 20 -> 7 */
    /* the narrowing itself: nearest even, and a NaN stays a NaN */
    CHECK_INT_EQ(moe_f32_to_bf16(1.0f), 0x3f80);
    CHECK_INT_EQ(moe_f32_to_bf16(1.00390625f), 0x3f80); /* halfway, down to even */
    CHECK_INT_EQ(moe_f32_to_bf16(1.01171875f), 0x3f82); /* halfway, up to even */
    CHECK(isnan(moe_bf16_to_f32(moe_f32_to_bf16(NAN))));
    return moe_test_finish("test_activation");
}
