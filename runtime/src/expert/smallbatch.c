/* The small-batch expert kernels (smallbatch.h): one function body per instruction set,
 * instantiated for each weight type and each count of rows a pass keeps in registers, so the
 * accumulators of a pass are registers; rows past that run as further passes over the same
 * 64-output column block, which they read again from L2 (a block is at most Kp x 64 weights:
 * 256 KiB in BF16 for 2048 inputs). The avx2 FP8 and MXFP4 kernels, with too few registers
 * for that, keep their rows' sums in L1 instead (A2_ROWS). */
#include "expert/smallbatch.h"

#include <string.h>

#include "expert/onednn.h"
#include "model/checkpoint.h"
#include "model/weights.h"
#include "moe/bf16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define SB_X86 1
#include <immintrin.h>
#endif

/* Rows a pass holds in registers, 4 column vectors of 16 outputs each: avx512_bf16 6 rows
 * (24 of the 32 registers), 5 for FP8 (its tables take 5); avx512 F32 5; avx2 BF16 4 rows x
 * 4 vectors of 8 outputs, half the column block at a time (one row: 8 vectors, the whole
 * block; avx2 FP8 and MXFP4: A2_ROWS, below). */
#define MR_BF16 6
#define MR_FP8 5
#define MR_MX 6
#define MR_F32 5
#define MR_AVX2 4
#define MR_MAX 6
/* Accumulator sets a pass uses at most (SB_U below) */
#define SB_U_MAX 2
/* The accumulators an MXFP4 pass may hold with its totals in registers (k512bf) */
#define SB_REGTOT_MAX 32

/* ------------------------------------------------------------------------------------ */
/* Scalar: the reference values, the dequantisation to F32                               */

static int64_t kpad(const moe_sb_matrix_t *w)
{
    return moe_blk_pad(w->k, MOE_BLK_K);
}

/* Scale blocks along the (padded) inputs. */
static int64_t kscales(const moe_sb_matrix_t *w)
{
    int64_t kp = kpad(w);
    return w->type == MOE_SB_BF16 ? 1 : (kp + w->sk - 1) / w->sk;
}

float moe_sb_value(const moe_sb_matrix_t *w, int64_t n, int64_t c)
{
    int64_t kp = kpad(w), i = moe_blk_index(n, c, kp);
    const uint8_t *b = w->codes;
    if (w->type == MOE_SB_BF16) {
        return moe_bf16_to_f32(((const uint16_t *)w->codes)[i]);
    }
    int64_t si = moe_blk_scale_index(n, c / w->sk, kscales(w));
    if (w->type == MOE_SB_FP8) {
        return moe_fp8_e4m3_to_f32(b[i]) * ((const float *)w->scales)[si];
    }
    uint8_t nib = moe_mx_get(b, n, c, kp);
    return moe_mxfp4_value(nib) * moe_e8m0_to_f32(((const uint8_t *)w->scales)[si]);
}

/* e8m0 as F32 for the scales the loader accepted (not 255): 2^(e - 127), 0 a subnormal. */
static inline float e8m0_f32(uint8_t e)
{
    uint32_t b = e != 0 ? (uint32_t)e << 23 : 0x00400000u;
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}

/* FP8 e4m3 code as F32, exactly: its 7 low bits under an F32 exponent (the value x 2^-120,
 * an F32 subnormal for the e4m3 subnormals), the sign, times 2^120. */
static inline float fp8_f32(uint8_t c)
{
    uint32_t b = ((uint32_t)(c & 0x80) << 24) | ((uint32_t)(c & 0x7f) << 20);
    float f;
    memcpy(&f, &b, sizeof(f));
    return f * 0x1p120f;
}

/* e2m1 nibbles as F32. */
static const float k_e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

#ifdef SB_X86
static int64_t a2_dequant_bf16(const moe_sb_matrix_t *w, float *dst, int64_t r0, int64_t r1);
#endif

void moe_sb_dequant_f32(const moe_sb_matrix_t *w, float *dst, int64_t r0, int64_t r1)
{
    const int64_t kp = kpad(w), kbn = kp / MOE_BLK_K, ks = kscales(w);
    const uint8_t *b = w->codes;
    const uint16_t *h = w->codes;
    int64_t kb0 = 0; /* K-blocks done by the vector code */
#ifdef SB_X86
    if (w->type == MOE_SB_BF16 && r0 % 8 == 0 && moe_sb_cpu_has(MOE_SB_AVX2)) {
        kb0 = a2_dequant_bf16(w, dst, r0, r1);
    }
#endif
    for (int64_t n = r0; n < r1; n++) {
        float *row = dst + (n - r0) * w->k;
        for (int64_t kb = kb0; kb < kbn; kb++) {
            /* the pair (k, k + 1) of row n: 128 elements after the one before */
            int64_t base = ((n / MOE_BLK_N) * kbn + kb) * (MOE_BLK_N * MOE_BLK_K) +
                           (n % MOE_BLK_N) * 2;
            int64_t si = w->type == MOE_SB_BF16 ? 0
                                                : moe_blk_scale_index(n, kb * MOE_BLK_K / w->sk, ks);
            float s = w->type == MOE_SB_FP8     ? ((const float *)w->scales)[si]
                      : w->type == MOE_SB_MXFP4 ? e8m0_f32(((const uint8_t *)w->scales)[si])
                                                : 1.0f;
            for (int64_t q = 0; q < MOE_BLK_K / 2; q++) {
                int64_t c = kb * MOE_BLK_K + 2 * q, i = base + q * 2 * MOE_BLK_N;
                float v0, v1;
                if (c >= w->k) {
                    break;
                }
                if (w->type == MOE_SB_BF16) {
                    v0 = moe_bf16_to_f32(h[i]);
                    v1 = moe_bf16_to_f32(h[i + 1]);
                } else if (w->type == MOE_SB_FP8) {
                    v0 = fp8_f32(b[i]) * s;
                    v1 = fp8_f32(b[i + 1]) * s;
                } else {
                    v0 = k_e2m1[moe_mx_get(b, n, c, kp)] * s;
                    v1 = k_e2m1[moe_mx_get(b, n, c + 1, kp)] * s;
                }
                row[c] = v0;
                if (c + 1 < w->k) {
                    row[c + 1] = v1;
                }
            }
        }
    }
}

void moe_sb_pack_bf16(const uint16_t *src, int64_t n, int64_t k, uint16_t *dst)
{
    const int64_t np = moe_blk_pad(n, MOE_BLK_N), kp = moe_blk_pad(k, MOE_BLK_K);
    memset(dst, 0, (size_t)(np * kp) * sizeof(uint16_t));
    /* A row's inputs in pairs, each pair one 32-bit word of its K-block (moe_blk_index: pair
     * q of K-block kb at kb's block + q x 2 x 64 + the row's place x 2): 3.4x the rate of
     * moe_blk_index a weight (4.3 GB/s against 1.26, an expert's W13 on one Zen 3 core) */
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *s = src + r * k;
        uint16_t *d = dst + moe_blk_index(r, 0, kp);
        for (int64_t kb = 0; kb * MOE_BLK_K < k; kb++) {
            const int64_t c0 = kb * MOE_BLK_K, nin = k - c0 < MOE_BLK_K ? k - c0 : MOE_BLK_K;
            uint16_t *db = d + kb * (MOE_BLK_N * MOE_BLK_K);
            for (int64_t q = 0; q < nin / 2; q++) {
                uint32_t v;
                memcpy(&v, s + c0 + 2 * q, sizeof v);
                memcpy(db + q * 2 * MOE_BLK_N, &v, sizeof v);
            }
            if (nin % 2 != 0) { /* k odd: the last input alone */
                db[nin / 2 * 2 * MOE_BLK_N] = s[k - 1];
            }
        }
    }
}

/* Column blocks [nb0, nb1) into BF16, one weight at a time. */
static void dequant_bf16_scalar(const moe_sb_matrix_t *w, uint16_t *dst, int64_t nb0,
                                int64_t nb1)
{
    int64_t kp = kpad(w);
    for (int64_t n = nb0 * MOE_BLK_N; n < nb1 * MOE_BLK_N; n++) {
        for (int64_t c = 0; c < kp; c++) {
            int64_t i = moe_blk_index(n, c, kp);
            dst[i] = n < w->n && c < w->k ? moe_f32_to_bf16(moe_sb_value(w, n, c)) : 0;
        }
    }
}

/* The m x 64 results of one column block (tile, rows of 64) into y. */
static void tile_out(const float *tile, int64_t m, int64_t n0, int64_t ncols, void *y,
                     int64_t ldy, bool y_bf16)
{
    for (int64_t r = 0; r < m; r++) {
        const float *t = tile + r * MOE_BLK_N;
        if (y_bf16) {
            moe_bf16_from_f32_n((uint16_t *)y + r * ldy + n0, t, (size_t)ncols);
        } else {
            memcpy((float *)y + r * ldy + n0, t, (size_t)ncols * sizeof(float));
        }
    }
}

#ifdef SB_X86

/* ------------------------------------------------------------------------------------ */
/* Constants                                                                             */

/* FP8 e4m3 codes 0..7 with a zero exponent (subnormals: m x 2^-9) as BF16 bits. */
static const uint16_t k_fp8_sub_bf16[32] = {0x0000, 0x3B00, 0x3B80, 0x3BC0,
                                            0x3C00, 0x3C20, 0x3C40, 0x3C60};
/* e2m1 nibbles as BF16 bits, twice (vpermw reads 5 index bits; the fifth is junk here). */
static const uint16_t k_e2m1_bf16[32] = {
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0,
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
/* FP8 e4m3 magnitudes (code & 0x7f) as BF16 bits, exact (subnormals too): high and low
 * bytes, for vpermi2b (VBMI); the code's sign bit is the high byte's. */
static const uint8_t k_fp8_hi[128] = {
    0x00, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C,
    0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D,
    0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E,
    0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F,
    0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
    0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41,
    0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42,
    0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43};
static const uint8_t k_fp8_lo[128] = {
    0x00, 0x00, 0x80, 0xC0, 0x00, 0x20, 0x40, 0x60, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0};
/* The VBMI decodings leave the outputs in another lane order; these put them back.
 * FP8: 64 codes (32 outputs x 2 inputs) give A (unpacklo: outputs 0-3, 8-11, 16-19, 24-27)
 * and B (unpackhi: 4-7, 12-15, 20-23, 28-31): outputs 0-15 and 16-31 from A and B. */
static const int32_t k_fp8_out0[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
static const int32_t k_fp8_out1[16] = {8,  9,  10, 11, 24, 25, 26, 27,
                                       12, 13, 14, 15, 28, 29, 30, 31};
/* MXFP4: the shifts that bring the nibbles of 16 outputs' even inputs to the low bits of
 * their 32-bit lanes, for the four groups of 16 outputs of a 64-byte row (moe_mx_byte); the
 * odd inputs' are 16 more. */
static const int k_mx_lane_shift[4] = {8, 12, 0, 4};

/* Where cvtne2ps puts the even (0..15) and odd (16..31) inputs, back in pairs. */
static const uint16_t k_pair_order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                          21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                          11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

/* F32 bits ((code & 0x7f) << 20, sign at 31) are the e4m3 value x 2^-120: times this. */
#define FP8_UNBIAS 0x1p120f

/* How far ahead the MXFP4 kernels fetch their codes (bytes: 64 rows of 64 bytes, four of a
 * column block's 1 KiB K-blocks; the last block's fetches fall past the codes, harmless: a
 * prefetch never faults). Without it a call of few rows reads and decodes by turns rather
 * than at once: fetched ahead, a 2-row call took 0.115-0.118 ms against 0.125-0.145 on one
 * core (docs/performance.md, "MXFP4 codes fetched ahead"). The BF16 and FP8 kernels
 * measured slower with it, so they fetch nothing. */
#define MX_PREFETCH 4096

#define SB_INLINE static inline __attribute__((always_inline))

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,fma,avx2")

/* ------------------------------------------------------------------------------------ */
/* AVX-512                                                                               */

/* 32 FP8 codes (16 outputs x 2 inputs, pairs adjacent) as BF16 pairs, exactly: a normal
 * code's exponent rebased (+120), a subnormal's (exponent 0) from a table, the sign. */
SB_INLINE __m512i fp8_to_bf16x32(const uint8_t *p, __m512i sub_tbl)
{
    const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)p));
    __m512i mag = _mm512_add_epi16(
        _mm512_slli_epi16(_mm512_and_si512(w, _mm512_set1_epi16(0x7F)), 4),
        _mm512_set1_epi16(0x3C00));
    const __mmask32 sub = _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x78));
    mag = _mm512_mask_permutexvar_epi16(mag, sub, w, sub_tbl);
    /* (w << 8) & 0x8000 | mag */
    return _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 8), mag,
                                     _mm512_set1_epi16((short)0x8000), 0xEC);
}

/* A 64-byte MXFP4 row (64 outputs x 2 inputs, moe_mx_byte) as four vectors of 16 outputs'
 * BF16 pairs, outputs in order: word i of the row (bytes 2i, 2i + 1) holds word i's nibble
 * of outputs 0-15 in bits 8-11, 16-31 in 12-15, 32-47 in 0-3, 48-63 in 4-7; shifted to the
 * low bits, the e2m1 table (vpermw reads 5 index bits, the fifth junk here). */
SB_INLINE void mx_row_vpermw(const uint8_t *p, __m512i tbl, __m512i *wv)
{
    const __m512i c = _mm512_loadu_si512(p);
    wv[0] = _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 8), tbl);
    wv[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 12), tbl);
    wv[2] = _mm512_permutexvar_epi16(c, tbl);
    wv[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 4), tbl);
}

/* VBMI: 64 FP8 codes (32 outputs x 2 inputs) as two vectors of BF16 pairs, exactly: both
 * bytes of each BF16 from 128-entry tables (vpermi2b reads the code's low 7 bits), the sign
 * bit into the high byte, the bytes into words. Outputs in k_fp8_out's order. */
SB_INLINE void fp8_vbmi(const uint8_t *p, __m512i thi0, __m512i thi1, __m512i tlo0,
                        __m512i tlo1, __m512i *a, __m512i *b)
{
    const __m512i c = _mm512_loadu_si512(p);
    const __m512i lo = _mm512_permutex2var_epi8(tlo0, c, tlo1);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(thi0, c, thi1), c,
                                                 _mm512_set1_epi8((char)0x80), 0xF8);
    *a = _mm512_unpacklo_epi8(lo, hi);
    *b = _mm512_unpackhi_epi8(lo, hi);
}

/* 16 e8m0 scales as F32 (0: 2^-127, a subnormal). */
SB_INLINE __m512 e8m0x16(const uint8_t *p)
{
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512i bits = _mm512_mask_mov_epi32(_mm512_slli_epi32(e, 23),
                                               _mm512_testn_epi32_mask(e, e),
                                               _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(bits);
}

/* 32 weights (16 outputs x 2 inputs) at element e0 as F32: the even inputs and the odd
 * ones, times sv (FP8, MXFP4). */
SB_INLINE void f32x32(int type, const void *codes, int64_t e0, __m512 sv, __m512 *ev,
                      __m512 *od)
{
    if (type == MOE_SB_BF16) {
        const __m512i v = _mm512_loadu_si512((const uint16_t *)codes + e0);
        *ev = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        *od = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
    } else if (type == MOE_SB_FP8) {
        const __m512i d = _mm512_cvtepu16_epi32(
            _mm256_loadu_si256((const __m256i *)((const uint8_t *)codes + e0)));
        const __m512i keep = _mm512_set1_epi32((int)0x87F00000u);
        const __m512 un = _mm512_set1_ps(FP8_UNBIAS);
        __m512i a = _mm512_and_si512(_mm512_srai_epi32(_mm512_slli_epi32(d, 24), 4), keep);
        __m512i b = _mm512_and_si512(_mm512_srai_epi32(_mm512_slli_epi32(d, 16), 4), keep);
        *ev = _mm512_mul_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), un), sv);
        *od = _mm512_mul_ps(_mm512_mul_ps(_mm512_castsi512_ps(b), un), sv);
    } else { /* e0: group (e0 % 128) / 32 of the 64-byte row at e0 / 128 (moe_mx_byte) */
        const __m512i d = _mm512_loadu_si512((const uint8_t *)codes + e0 / 128 * 64);
        const int sh = k_mx_lane_shift[e0 % 128 / 32];
        const __m512 lut = _mm512_loadu_ps(k_e2m1);
        *ev = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(d, sh), lut), sv);
        *od = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(d, sh + 16), lut), sv);
    }
}

/* The 16 scales of outputs n0..n0+15 for scale block s (FP8, MXFP4; 1 for BF16). */
SB_INLINE __m512 scale16(int type, const moe_sb_matrix_t *w, int64_t nb, int64_t ks,
                         int64_t s, int j)
{
    int64_t at = (nb * ks + s) * MOE_BLK_N + j * 16;
    if (type == MOE_SB_FP8) {
        return _mm512_loadu_ps((const float *)w->scales + at);
    }
    if (type == MOE_SB_MXFP4) {
        return e8m0x16((const uint8_t *)w->scales + at);
    }
    return _mm512_set1_ps(1.0f);
}

SB_INLINE __m512i bcast_pair(const uint16_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm512_set1_epi32(v);
}

/* The nw column vectors of pair row q of a 64-output block (element e: its first weight)
 * as BF16 pairs. */
SB_INLINE void bf_weights(int type, int vbmi, const int nw, const void *codes, int64_t e,
                          __m512i *wv, const __m512i *tb)
{
    const uint8_t *c8 = codes;
    if (type == MOE_SB_BF16) {
#pragma GCC unroll 4
        for (int j = 0; j < nw; j++) {
            wv[j] = _mm512_loadu_si512((const uint16_t *)codes + e + j * 32);
        }
    } else if (type == MOE_SB_MXFP4) { /* a whole row of the block (nw 4) */
        _mm_prefetch((const char *)((uintptr_t)(c8 + e / 2) + MX_PREFETCH), _MM_HINT_T0);
        mx_row_vpermw(c8 + e / 2, tb[4], wv);
    } else if (vbmi) {
#pragma GCC unroll 2
        for (int j = 0; j < nw; j += 2) {
            fp8_vbmi(c8 + e + j * 32, tb[0], tb[1], tb[2], tb[3], &wv[j], &wv[j + 1]);
        }
    } else {
#pragma GCC unroll 4
        for (int j = 0; j < nw; j++) {
            wv[j] = fp8_to_bf16x32(c8 + e + j * 32, tb[5]);
        }
    }
}

/* avx512_bf16: one column block nb of W times rows x[0..mr) (BF16, stride ldx) into tile
 * [mr][64] F32, in passes over groups of nw column vectors (16 outputs each). u sets of
 * accumulators take turns over the pair rows, so few rows still keep several vdpbf16ps in
 * flight (its latency is several cycles). The sums of each scale block go to the tile times
 * their scales; with VBMI (vbmi) the FP8 weights are decoded by byte tables, their outputs
 * put back in order there. MXFP4 rows decode whole (nw 4). */
SB_INLINE void k512bf(int type, int vbmi, const int mr, const int nw, const int u,
                      const moe_sb_matrix_t *w, int64_t nb, const uint16_t *x, int64_t ldx,
                      float *tile)
{
    const int64_t kp = kpad(w), kbn = kp / MOE_BLK_K, ks = kscales(w);
    const int64_t kbs = type == MOE_SB_BF16 ? kbn : w->sk / MOE_BLK_K;
    const __m512i tb[6] = {
        _mm512_loadu_si512(k_fp8_hi), _mm512_loadu_si512(k_fp8_hi + 64),
        _mm512_loadu_si512(k_fp8_lo), _mm512_loadu_si512(k_fp8_lo + 64),
        _mm512_loadu_si512(k_e2m1_bf16),
        _mm512_loadu_si512(k_fp8_sub_bf16)};
    const bool reorder = vbmi && type == MOE_SB_FP8;
    /* MXFP4 scales every K-block (32 inputs): where the totals fit beside the block sums (1-4
     * rows) they stay in registers, one FMA a scale block, rather than in the tile (a load,
     * an FMA and a store). With one accumulator set from 2 rows on (SB_U) a call from memory
     * took 0.112-0.113 ms against 0.115-0.120 at 2 rows, 0.141-0.143 against 0.161-0.162 at
     * 3, 0.185-0.188 against 0.202 at 4 (one core; docs/performance.md, "MXFP4 totals in
     * registers"). FP8 (a scale every 4 K-blocks) measured the same either way and keeps the
     * tile. */
    const bool regtot = type == MOE_SB_MXFP4 && (u + 1) * mr * nw <= SB_REGTOT_MAX;
    for (int g = 0; g < 4 / nw; g++) {
        __m512 tot[MR_MAX][4];
#pragma GCC unroll 12
        for (int r = 0; regtot && r < mr; r++) {
#pragma GCC unroll 4
            for (int j = 0; j < nw; j++) {
                tot[r][j] = _mm512_setzero_ps(); /* set at s 0: for the compiler */
            }
        }
        for (int64_t s = 0; s < ks; s++) {
            __m512 acc[SB_U_MAX][MR_MAX][4];
#pragma GCC unroll 4
            for (int v = 0; v < u; v++) {
#pragma GCC unroll 12
                for (int r = 0; r < mr; r++) {
#pragma GCC unroll 4
                    for (int j = 0; j < nw; j++) {
                        acc[v][r][j] = _mm512_setzero_ps();
                    }
                }
            }
            int64_t kb1 = (s + 1) * kbs < kbn ? (s + 1) * kbs : kbn;
            for (int64_t kb = s * kbs; kb < kb1; kb++) {
                const int64_t e0 = (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K) + g * nw * 32;
                const uint16_t *xk = x + kb * MOE_BLK_K;
                for (int q0 = 0; q0 < MOE_BLK_K / 2; q0 += u) {
#pragma GCC unroll 4
                    for (int v = 0; v < u; v++) {
                        const int q = q0 + v;
                        __m512i wv[4];
                        bf_weights(type, vbmi, nw, w->codes, e0 + q * 2 * MOE_BLK_N, wv, tb);
#pragma GCC unroll 12
                        for (int r = 0; r < mr; r++) {
                            const __m512i xb = bcast_pair(xk + r * ldx + 2 * q);
#pragma GCC unroll 4
                            for (int j = 0; j < nw; j++) {
                                acc[v][r][j] = _mm512_dpbf16_ps(acc[v][r][j], (__m512bh)wv[j],
                                                                (__m512bh)xb);
                            }
                        }
                    }
                }
            }
#pragma GCC unroll 12
            for (int r = 0; r < mr; r++) {
#pragma GCC unroll 4
                for (int v = 1; v < u; v++) {
#pragma GCC unroll 4
                    for (int j = 0; j < nw; j++) {
                        acc[0][r][j] = _mm512_add_ps(acc[0][r][j], acc[v][r][j]);
                    }
                }
#pragma GCC unroll 2
                for (int j = 0; reorder && j < nw; j += 2) { /* the outputs back in order */
                    const __m512 a = acc[0][r][j], b = acc[0][r][j + 1];
                    acc[0][r][j] = _mm512_permutex2var_ps(a, _mm512_loadu_si512(k_fp8_out0), b);
                    acc[0][r][j + 1] = _mm512_permutex2var_ps(a, _mm512_loadu_si512(k_fp8_out1),
                                                              b);
                }
            }
#pragma GCC unroll 4
            for (int j = 0; j < nw; j++) {
                const __m512 sv = scale16(type, w, nb, ks, s, g * nw + j);
#pragma GCC unroll 12
                for (int r = 0; r < mr; r++) {
                    float *t = tile + r * MOE_BLK_N + (g * nw + j) * 16;
                    if (type == MOE_SB_BF16) {
                        _mm512_storeu_ps(t, acc[0][r][j]);
                        continue;
                    }
                    /* the total so far: in registers (regtot) or in the tile */
                    const __m512 v = s == 0 ? _mm512_mul_ps(acc[0][r][j], sv)
                                            : _mm512_fmadd_ps(acc[0][r][j], sv,
                                                              regtot ? tot[r][j]
                                                                     : _mm512_loadu_ps(t));
                    if (regtot) {
                        tot[r][j] = v;
                    } else {
                        _mm512_storeu_ps(t, v);
                    }
                }
            }
        }
#pragma GCC unroll 12
        for (int r = 0; regtot && r < mr; r++) {
#pragma GCC unroll 4
            for (int j = 0; j < nw; j++) {
                _mm512_storeu_ps(tile + r * MOE_BLK_N + (g * nw + j) * 16, tot[r][j]);
            }
        }
    }
}

/* avx512 (F32): one column block nb times rows x[0..mr) (F32) into tile [mr][64]; the
 * scale folded into the weights. Up to 2 rows the even and odd inputs go to accumulators
 * of their own (two FMA chains, not one twice as long). */
SB_INLINE void k512f(int type, const int mr, const moe_sb_matrix_t *w, int64_t nb,
                     const float *x, int64_t ldx, float *tile)
{
    const int64_t kp = kpad(w), kbn = kp / MOE_BLK_K, ks = kscales(w);
    const int64_t kbs = type == MOE_SB_BF16 ? kbn : w->sk / MOE_BLK_K;
    const int odd = mr <= 2 ? 1 : 0; /* the odd inputs' accumulator set */
    __m512 acc[2][MR_F32][4];
#pragma GCC unroll 2
    for (int v = 0; v <= odd; v++) {
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                acc[v][r][j] = _mm512_setzero_ps();
            }
        }
    }
    __m512 sv[4] = {_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f),
                    _mm512_set1_ps(1.0f)};
    for (int64_t kb = 0; kb < kbn; kb++) {
        const int64_t e0 = (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
        const float *xk = x + kb * MOE_BLK_K;
        if (type != MOE_SB_BF16 && kb % kbs == 0) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                sv[j] = scale16(type, w, nb, ks, kb / kbs, j);
            }
        }
        for (int q = 0; q < MOE_BLK_K / 2; q++) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m512 ev, od;
                f32x32(type, w->codes, e0 + q * 2 * MOE_BLK_N + j * 32, sv[j], &ev, &od);
#pragma GCC unroll 8
                for (int r = 0; r < mr; r++) {
                    const float *xr = xk + r * ldx + 2 * q;
                    acc[0][r][j] = _mm512_fmadd_ps(ev, _mm512_set1_ps(xr[0]), acc[0][r][j]);
                    acc[odd][r][j] = _mm512_fmadd_ps(od, _mm512_set1_ps(xr[1]),
                                                     acc[odd][r][j]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512 a = odd ? _mm512_add_ps(acc[0][r][j], acc[odd][r][j]) : acc[0][r][j];
            _mm512_storeu_ps(tile + r * MOE_BLK_N + j * 16, a);
        }
    }
}

/* Column blocks [nb0, nb1) of an FP8 or MXFP4 W into BF16 pairs, vectorised: each 32 weights
 * as F32 with the scale, rounded to BF16, back into pair order. */
static void dequant_bf16_512(const moe_sb_matrix_t *w, uint16_t *dst, int64_t nb0, int64_t nb1)
{
    const int64_t kp = kpad(w), kbn = kp / MOE_BLK_K, ks = kscales(w);
    const int64_t kbs = w->sk / MOE_BLK_K;
    const __m512i order = _mm512_loadu_si512(k_pair_order);
    for (int64_t nb = nb0; nb < nb1; nb++) {
        for (int64_t kb = 0; kb < kbn; kb++) {
            const int64_t e0 = (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
            __m512 sv[4];
            for (int j = 0; j < 4; j++) {
                sv[j] = w->type == MOE_SB_FP8 ? scale16(MOE_SB_FP8, w, nb, ks, kb / kbs, j)
                                              : scale16(MOE_SB_MXFP4, w, nb, ks, kb / kbs, j);
            }
            for (int q = 0; q < MOE_BLK_K / 2; q++) {
                for (int j = 0; j < 4; j++) {
                    const int64_t e = e0 + q * 2 * MOE_BLK_N + j * 32;
                    __m512 ev, od;
                    if (w->type == MOE_SB_FP8) {
                        f32x32(MOE_SB_FP8, w->codes, e, sv[j], &ev, &od);
                    } else {
                        f32x32(MOE_SB_MXFP4, w->codes, e, sv[j], &ev, &od);
                    }
                    __m512i h = (__m512i)_mm512_cvtne2ps_pbh(od, ev);
                    _mm512_storeu_si512(dst + e, _mm512_permutexvar_epi16(order, h));
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------ */
/* The instantiations: [type][rows - 1] per instruction set                              */

typedef void (*blk_fn)(const moe_sb_matrix_t *w, int64_t nb, const void *x, int64_t ldx,
                       float *tile);

/* The accumulators a pass may hold: 24 registers, 20 for FP8 (its tables take 5); nw: the
 * column vectors a pass covers, all 4 of a block (its weights streamed in order: passes over
 * half a block, for more rows a decoding, ran slower at 8 rows: 0.72 against 0.46 ms an FP8
 * expert); u: accumulator sets, as many as fit, at most 2 (4 sets at one row, which fit, made
 * a call from memory 1.3x slower: BF16 0.46-0.50 against 0.36 ms, FP8 0.26-0.27 against
 * 0.19, one core, docs/performance.md); FP8 and MXFP4 from 2 rows one set, which their
 * decoding keeps busy enough (FP8 at 2 rows: 0.166 against 0.177 ms an expert from L3,
 * 0.182-0.183 against 0.187-0.191 from memory, one core; BF16 measured the same either way),
 * MXFP4's totals in registers beside the sums up to 4 rows (k512bf: 2 x 16 accumulators at 4
 * rows, faster than the tile) */
#define SB_ACC(T) ((T) == MOE_SB_FP8 ? 20 : 24)
#define SB_NW(T, R) 4
_Static_assert(SB_NW(MOE_SB_MXFP4, 1) == 4, "an MXFP4 row decodes to 4 vectors at once");
#define SB_U(T, R)                                                                           \
    ((T) != MOE_SB_BF16 && (R) > 1                 ? 1 /* FP8, MXFP4: one set from 2 rows */ \
     : SB_ACC(T) / ((R) * SB_NW(T, R)) >= SB_U_MAX ? SB_U_MAX                                \
                                                     : 1)
#define SB_BF(T, R)                                                                          \
    __attribute__((noinline)) static void bf_##T##_##R(const moe_sb_matrix_t *w, int64_t nb, \
                                                       const void *x, int64_t ldx,           \
                                                       float *tile)                          \
    {                                                                                        \
        k512bf(T, 0, R, SB_NW(T, R), SB_U(T, R), w, nb, x, ldx, tile);                          \
    }
#define SB_BFV(T, R)                                                                         \
    __attribute__((noinline)) static void bfv_##T##_##R(const moe_sb_matrix_t *w,            \
                                                        int64_t nb, const void *x,           \
                                                        int64_t ldx, float *tile)            \
    {                                                                                        \
        k512bf(T, 1, R, SB_NW(T, R), SB_U(T, R), w, nb, x, ldx, tile);                          \
    }
#define SB_F(T, R)                                                                           \
    __attribute__((noinline)) static void f_##T##_##R(const moe_sb_matrix_t *w, int64_t nb,  \
                                                      const void *x, int64_t ldx,            \
                                                      float *tile)                           \
    {                                                                                        \
        k512f(T, R, w, nb, x, ldx, tile);                                                    \
    }
#define SB_ROWS5(M, T) M(T, 1) M(T, 2) M(T, 3) M(T, 4) M(T, 5)
#define SB_ROWS6(M, T) SB_ROWS5(M, T) M(T, 6)

SB_ROWS6(SB_BF, 0)
SB_ROWS5(SB_BF, 1)
SB_ROWS6(SB_BF, 2)
SB_ROWS5(SB_BFV, 1)
SB_ROWS5(SB_F, 0)
SB_ROWS5(SB_F, 1)
SB_ROWS5(SB_F, 2)

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma") /* not the AVX-512 region's: an AVX2-only CPU runs these */

/* ------------------------------------------------------------------------------------ */
/* AVX2                                                                                  */

/* The two BF16 words of each 32-bit lane of v as F32: the low word (*lo, shifted up) and the
 * high one (*hi, masked). */
SB_INLINE void a2_words(__m256i v, __m256 *lo, __m256 *hi)
{
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* avx2, BF16 (F32): one column block nb times one row x (F32) into tile [64], 8 columns x 2
 * inputs a load (the words' high and low halves as the even and odd inputs' F32). */
SB_INLINE void k256bf(const moe_sb_matrix_t *w, int64_t nb, const float *x, float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        acc[g] = _mm256_setzero_ps();
    }
    for (int64_t kb = 0; kb < kbn; kb++) {
        const uint16_t *c = (const uint16_t *)w->codes + (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
        const float *xk = x + kb * MOE_BLK_K;
        for (int q = 0; q < MOE_BLK_K / 2; q++) {
            const __m256 xe = _mm256_set1_ps(xk[2 * q]), xo = _mm256_set1_ps(xk[2 * q + 1]);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                __m256 ev, od;
                a2_words(_mm256_loadu_si256((const __m256i *)(c + q * 2 * MOE_BLK_N + g * 16)),
                         &ev, &od);
                acc[g] = _mm256_fmadd_ps(ev, xe, acc[g]);
                acc[g] = _mm256_fmadd_ps(od, xo, acc[g]);
            }
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        _mm256_storeu_ps(tile + g * 8, acc[g]);
    }
}

/* The avx2 kernels for FP8 and MXFP4 codes take up to A2_ROWS rows a pass: each K-block of
 * a column block is decoded once, each half (16 input pairs x 32 outputs) to 16 x 8 vectors
 * of F32 (both halves 8 KiB, L1), and every row of the pass takes its products from there,
 * so the decoding is paid once a pass, not once a row (the kernel before them took one row a
 * pass and decoded again for each: 8 rows of an expert matrix 2.8-2.9x slower in FP8,
 * 4.9-5.6x in MXFP4, one Zen 3 core). FP8: each 16-bit word an output's two codes, each
 * code's sign and 7 bits put at the top of its word by a shift and a mask (the value x
 * 2^-120 as the upper half of an F32, fp8_f32), the words made F32 by a shift (even outputs)
 * or a mask (odd ones): a vector of 8 outputs of one input parity; the values go unscaled
 * into each row's sums of a scale block, those sums taking the block's scales once
 * (a2_fp8_total; the rows' inputs times 2^64 and the scales times 2^56 keep the products in
 * F32's normal range); a single row keeps its 64 sums in registers (k256fp8_1) with the same
 * arithmetic. MXFP4: two byte tables
 * (vpshufb) give the BF16 high and low bytes of the e2m1 values, interleaved to 16-bit lanes
 * and each 32-bit lane's two words made F32 by a shift or a mask (a2_mx4): a vector holds 4
 * outputs' even and odd inputs side by side, each row's sums keeping an output's two inputs
 * apart until the end; the e2m1 values go unscaled into a row's sums of the K-block, which
 * is one scale block, and those sums take the block's scales (powers of two) once
 * (a2_mx_total); one or two rows decode as they go, 8 sums in registers at a time
 * (k256mx_1, k256mx_2). Against the kernels before (FP8: two shifts a code in 32-bit lanes;
 * MXFP4: bytes widened by interleaving with zeros, a one-row call through the decoded
 * block; each value times its scale), an expert's W13 on one Zen 3 core, both files at -O3,
 * calls of each in turn: FP8 0.54x the time at 1 row, 0.65-0.87x at 2-16; MXFP4 0.64-0.66x
 * at 1-2 rows, 0.83-0.91x at 3-16. A row's
 * arithmetic is the same however many rows the pass has: its outputs do not depend on the
 * rows beside it. 32 rows a pass: their sums (16 KiB), the decoded block (8) and the rows'
 * inputs of a K-block (4; FP8 4 more, scaled) fill the 32 KiB L1; 32 rows took 0.91-0.93x
 * the time of two passes of 16. (Two rows a load of the decoded vectors, sharing its loads,
 * measured no faster.) */
#define A2_ROWS 32
/* FP8 calls of up to this many rows: moe_sb_gemm splits them into passes of 2-4 rows for
 * k256fp8_r (performance.md). */
#define A2_FP8_R 12

/* MXFP4: vector j = 4 s + 2 wv + u (0..7) lane l (0..7) of half h as a2_mx4 leaves it: its
 * output in the column block; its input's parity is l % 2, so lanes l and l + 1 (l even)
 * hold one output's even and odd inputs. It comes from byte 32 h + 16 (l / 4) + 8 wv +
 * 2 (l % 4) + u of the 64-byte row of 2 inputs, its low nibble for s 0: byte 4 L + e holds
 * output L + 16 g, input parity e / 2, g = (e % 2 ? 0 : 2) + s (moe_mx_byte). (FP8's
 * vectors are 8 even or 8 odd outputs, one input parity each: a2_fp8.) */
static inline int a2_lane(int h, int j, int l)
{
    int L = 8 * h + 4 * (l / 4) + 2 * (j / 2 % 2) + l % 4 / 2;
    return L + (j % 2 ? 0 : 32) + (j < 4 ? 0 : 16);
}

/* FP8: outputs 32 h + 16 u.. 32 h + 16 u + 15 of the 2-input row at element e0 (32 bytes:
 * each 16-bit word an output's even and odd codes), into f: the even outputs' even inputs,
 * their odd inputs, the odd outputs' even inputs, their odd inputs (vectors t = 2 u and
 * 2 u + 1 of half h, a2_fp8_out), each value x 2^-120 (fp8_f32; a2_fp8_x and a2_fp8_total
 * take the 2^120 back): each code's sign and 7 bits go to the top of its word (an
 * arithmetic shift, a mask), the words made F32 by a shift or a mask. */
SB_INLINE void a2_fp8(const void *codes, int64_t e0, int h, int u, __m256 *f)
{
    const __m256i keep = _mm256_set1_epi16((short)0x87F0);
    const __m256i v = _mm256_loadu_si256(
        (const __m256i *)((const uint8_t *)codes + e0 + 64 * h + 32 * u));
    const __m256i ev = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(v, 8), 4), keep);
    const __m256i od = _mm256_and_si256(_mm256_srai_epi16(v, 4), keep);
    a2_words(ev, &f[0], &f[2]);
    a2_words(od, &f[1], &f[3]);
}

/* FP8: a row's 64 outputs from its sums t [half][vector t][lane k] (a2_fp8): vector t of
 * half h holds outputs 32 h + 16 (t / 2) + 2 k + t % 2. */
SB_INLINE void a2_fp8_out(const float *t, float *tile)
{
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) { /* outputs 16 g.. */
        const __m256 a = _mm256_loadu_ps(t + 16 * g), b = _mm256_loadu_ps(t + 16 * g + 8);
        const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_storeu_ps(tile + 16 * g, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(tile + 16 * g + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}

/* MXFP4: vectors 4 s.. 4 s + 3 of half h of the 2-input row at element e0 (s 0: the low
 * nibbles, 1: the high), the e2m1 values as F32: two byte tables (vpshufb) give the BF16
 * high and low bytes, interleaved to 16-bit lanes (vector 2 wv + u: wv the low or high 8
 * bytes of each 16) and each 32-bit lane's two words made F32 (a2_words: u 0 the low, 1 the
 * high). */
SB_INLINE void a2_mx4(const void *codes, int64_t e0, int h, int s, __m256 *f)
{
    /* BF16 of the e2m1 codes 0..15 (+-0, 0.5, 1, 1.5, 2, 3, 4, 6): high bytes, low bytes */
#define A2_HI 0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, -0x80, -0x41, -0x41, -0x41, \
              -0x40, -0x40, -0x40, -0x40
#define A2_LO 0x00, 0x00, -0x80, -0x40, 0x00, 0x40, -0x80, -0x40, 0x00, 0x00, -0x80, -0x40, \
              0x00, 0x40, -0x80, -0x40
    const __m256i thi = _mm256_setr_epi8(A2_HI, A2_HI), tlo = _mm256_setr_epi8(A2_LO, A2_LO);
#undef A2_HI
#undef A2_LO
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256(
        (const __m256i *)((const uint8_t *)codes + (uint64_t)e0 / 2 + 32 * h));
    const __m256i n = _mm256_and_si256(s ? _mm256_srli_epi16(v, 4) : v, low);
    const __m256i hb = _mm256_shuffle_epi8(thi, n), lb = _mm256_shuffle_epi8(tlo, n);
    a2_words(_mm256_unpacklo_epi8(lb, hb), &f[0], &f[1]);
    a2_words(_mm256_unpackhi_epi8(lb, hb), &f[2], &f[3]);
}

/* Half h of the 2-input row at element e0: 8 vectors of F32 values without their scales
 * (the rows' sums of a scale block take them: a2_fp8_total, a2_mx_total). */
SB_INLINE void a2_decode(int type, const void *codes, int64_t e0, int h, __m256 *f)
{
    if (type == MOE_SB_FP8) {
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            a2_fp8(codes, e0, h, u, f + 4 * u);
        }
        return;
    }
#pragma GCC unroll 2
    for (int s = 0; s < 2; s++) {
        a2_mx4(codes, e0, h, s, f + 4 * s);
    }
}

/* A row's inputs 2 q, 2 q + 1 in the lanes' order, for the even vectors (*xa) and the odd
 * ones (*xb): FP8 all even inputs, all odd inputs; MXFP4 (even, odd, even, odd, ...) both. */
SB_INLINE void a2_x(int type, const float *x, __m256 *xa, __m256 *xb)
{
    if (type == MOE_SB_FP8) {
        *xa = _mm256_broadcast_ss(x);
        *xb = _mm256_broadcast_ss(x + 1);
        return;
    }
    *xa = *xb = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)(const void *)x));
}

/* FP8: the rows' inputs times FP8_X (exact, as the sums' factor FP8_S = 2^120 / FP8_X is):
 * a code's value x 2^-120 times an input would fall under F32's normal range (2^-126) for
 * inputs under about 2^-6, its bits lost; times 2^64 only for inputs under 2^-61, and the
 * inputs overflow only from 2^64. */
#define FP8_X 0x1p64f
#define FP8_S 0x1p56f

/* FP8: K-block inputs x (32) times FP8_X into xs. */
SB_INLINE void a2_fp8_x(const float *x, float *xs)
{
#pragma GCC unroll 4
    for (int i = 0; i < MOE_BLK_K; i += 8) {
        _mm256_store_ps(xs + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(FP8_X)));
    }
}

/* FP8: the column block's 64 scales of the scale block holding K-block kb, in the order of
 * a2_fp8's lanes (each 16 outputs' even ones, then their odd ones), times FP8_S where every
 * one stays in F32's range (returns true: a power of two, exact; a2_fp8_total then takes
 * one multiply, not two). */
static bool a2_fp8_scales(const moe_sb_matrix_t *w, int64_t nb, int64_t kb, float *sv)
{
    const float *s = (const float *)w->scales +
                     (nb * kscales(w) + kb / (w->sk / MOE_BLK_K)) * MOE_BLK_N;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 v[8], in = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < 8; i++) { /* (a NaN compares false: not folded) */
        v[i] = _mm256_loadu_ps(s + 8 * i);
        in = _mm256_and_ps(in, _mm256_cmp_ps(_mm256_and_ps(v[i], absmask),
                                             _mm256_set1_ps(0x1p72f), _CMP_LT_OQ));
    }
    const bool fold = _mm256_movemask_ps(in) == 0xFF;
    const __m256 by = _mm256_set1_ps(fold ? FP8_S : 1.0f);
    for (int g = 0; g < 4; g++) {
        const __m256 lo = _mm256_mul_ps(v[2 * g], by), hi = _mm256_mul_ps(v[2 * g + 1], by);
        const __m256 ev = _mm256_shuffle_ps(lo, hi, 0x88), od = _mm256_shuffle_ps(lo, hi, 0xDD);
        _mm256_storeu_ps(sv + 16 * g,
                         _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
        _mm256_storeu_ps(sv + 16 * g + 8,
                         _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
    }
    return fold;
}

/* FP8: one row's sums b (nv vectors from vector 0 of half h: sv and t there too) over a scale
 * block into its totals t, times the block's scales sv (a2_fp8_scales; not `fold`ed: the
 * sums times FP8_S first). */
SB_INLINE void a2_fp8_total(const __m256 *b, int nv, const float *sv, bool fold, float *t)
{
#pragma GCC unroll 8
    for (int j = 0; j < nv; j++) {
        const __m256 a = fold ? b[j] : _mm256_mul_ps(b[j], _mm256_set1_ps(FP8_S));
        _mm256_store_ps(t + 8 * j, _mm256_fmadd_ps(a, _mm256_loadu_ps(sv + 8 * j),
                                                   _mm256_load_ps(t + 8 * j)));
    }
}

/* MXFP4: both halves' 64 lane scales (e8m0 as F32) of K-block kb, sv[h][8 j + l] that of
 * a2_lane (h, j, l): vector j = 4 s + 2 wv + u of half h holds outputs o, o, o + 1, o + 1,
 * o + 4, o + 4, o + 5, o + 5 (o = 8 h + 2 wv + 16 s + (u ? 0 : 32)): an unpack of the 64 as
 * F32 in order with itself (the lane-by-lane lookup before them, a byte load and a branch a
 * lane, took about a third of the kernel's time in a 1-token run: 11.7 ms a step against
 * 7.5, one Zen 3). */
static void a2_mx_scales(const moe_sb_matrix_t *w, int64_t nb, int64_t kb, float (*sv)[64])
{
    const uint8_t *e = (const uint8_t *)w->scales + (nb * kscales(w) + kb) * MOE_BLK_N;
    __m256 g[8]; /* outputs 8 i.. as F32: 2^(e - 127), e = 0 the subnormal 2^-127 */
    for (int i = 0; i < 8; i++) {
        const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(e + 8 * i)));
        const __m256i z = _mm256_and_si256(_mm256_cmpeq_epi32(d, _mm256_setzero_si256()),
                                           _mm256_set1_epi32(0x00400000));
        g[i] = _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(d, 23), z));
    }
    for (int j = 0; j < 8; j++) {
        const int si = j / 4, wv = j / 2 % 2, u = j % 2;
        for (int h = 0; h < 2; h++) {
            const __m256 o = g[h + 2 * si + 4 * (1 - u)];
            _mm256_storeu_ps(sv[h] + 8 * j,
                             wv ? _mm256_unpackhi_ps(o, o) : _mm256_unpacklo_ps(o, o));
        }
    }
}

/* FP8: 8 outputs' sum a, the even input's product (values ev, input xe) then the odd one's
 * (the old one-row kernel's order). */
SB_INLINE __m256 a2_fp8_fma(__m256 ev, __m256 od, __m256 xe, __m256 xo, __m256 a)
{
    return _mm256_fmadd_ps(od, xo, _mm256_fmadd_ps(ev, xe, a));
}

/* One row's sums of half h over one decoded row of codes f (inputs xa, xb: a2_x), into a:
 * FP8 4 vectors of 8 outputs (a2_fp8_fma); MXFP4 8 vectors, each output's two inputs in two
 * lanes. */
SB_INLINE void a2_fma(int type, const __m256 *f, __m256 xa, __m256 xb, __m256 *a)
{
    if (type == MOE_SB_FP8) {
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            a[t] = a2_fp8_fma(f[2 * t], f[2 * t + 1], xa, xb, a[t]);
        }
        return;
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        a[j] = _mm256_fmadd_ps(f[j], xa, a[j]);
    }
}

/* FP8: fetch into L1 pair row q (2 lines) of the K-block after next of K-block blk, on into
 * the next column block, not past the matrix's last K-block (nblk: a2_blocks). */
SB_INLINE int64_t a2_blocks(const moe_sb_matrix_t *w)
{
    return moe_blk_pad(w->n, MOE_BLK_N) / MOE_BLK_N * (kpad(w) / MOE_BLK_K);
}

SB_INLINE void a2_fp8_ahead(const moe_sb_matrix_t *w, int64_t blk, int64_t nblk, int q)
{
    if (blk + 2 < nblk) {
        const char *ahead =
            (const char *)w->codes + (blk + 2) * (MOE_BLK_N * MOE_BLK_K) + q * 2 * MOE_BLK_N;
        _mm_prefetch(ahead, _MM_HINT_T0);
        _mm_prefetch(ahead + 64, _MM_HINT_T0);
    }
}

/* avx2, FP8, one row: column block nb times row x into tile [64], the 64 outputs' sums of a
 * scale block in 8 registers, each vector used as it is decoded: the arithmetic of k256q's
 * passes (the same bits), without their store and load of the decoded block (through it a
 * single row took 1.2x the time: the median of 40 calls in turn, one Zen 3 core). (Two rows
 * this way, a half at a time, were tried and left out.) */
SB_INLINE void k256fp8_1(const moe_sb_matrix_t *w, int64_t nb, const float *x, float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K, kbs = w->sk / MOE_BLK_K, nblk = a2_blocks(w);
    float sv[64];
    float xs[MOE_BLK_K] __attribute__((aligned(32)));
    float tot[64] __attribute__((aligned(32)));
    bool fold = true;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        acc[g] = _mm256_setzero_ps();
    }
    memset(tot, 0, sizeof(tot));
    for (int64_t kb = 0; kb < kbn; kb++) {
        const int64_t blk = nb * kbn + kb, e0 = blk * (MOE_BLK_N * MOE_BLK_K);
        if (kb % kbs == 0) {
            fold = a2_fp8_scales(w, nb, kb, sv);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                acc[g] = _mm256_setzero_ps();
            }
        }
        a2_fp8_x(x + kb * MOE_BLK_K, xs);
        for (int q = 0; q < MOE_BLK_K / 2; q++) {
            /* 0.77-0.81x the time of no fetch (an expert's W13 from memory, one Zen 3 core;
             * one to twelve K-blocks ahead 0.76-0.95x; BF16's and MXFP4's one-row kernels
             * gained nothing from it) */
            a2_fp8_ahead(w, blk, nblk, q);
            const __m256 xe = _mm256_broadcast_ss(xs + 2 * q);
            const __m256 xo = _mm256_broadcast_ss(xs + 2 * q + 1);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) { /* half g / 2, vectors t = 2 (g % 2) and t + 1 */
                __m256 f[4];
                a2_fp8(w->codes, e0 + q * 2 * MOE_BLK_N, g / 2, g % 2, f);
                acc[2 * g] = a2_fp8_fma(f[0], f[1], xe, xo, acc[2 * g]);
                acc[2 * g + 1] = a2_fp8_fma(f[2], f[3], xe, xo, acc[2 * g + 1]);
            }
        }
        if (kb % kbs == kbs - 1 || kb == kbn - 1) {
            a2_fp8_total(acc, 8, sv, fold, tot);
        }
    }
    a2_fp8_out(tot, tile);
}

/* avx2, FP8, R rows (3..4; 2: k256fp8_2) of column block nb into tile [R][64]: k256fp8_1's arithmetic (the
 * same bits), a K-block (2 KiB, read in order, the one after next fetched ahead) a quarter of
 * its outputs at a time (16: one 32-byte load decoded to four vectors), the R rows' sums of
 * those outputs in registers over the K-block, in bs between K-blocks, each scale block's sums
 * into the totals at its end. The decoding is paid once for the R rows and the sums never
 * leave the registers within a K-block (k256q stores the decoded block to L1 and reads it
 * again for each row). */
SB_INLINE void k256fp8_r(const moe_sb_matrix_t *w, int64_t nb, int R, const float *x,
                         int64_t ldx, float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K, kbs = w->sk / MOE_BLK_K;
    float sv[64];
    float xs[4][MOE_BLK_K] __attribute__((aligned(32)));
    float tot[4][64] __attribute__((aligned(32)));
    __m256 bs[4][8];
    bool fold = true;
    memset(tot, 0, sizeof(tot));
    for (int64_t kb = 0; kb < kbn; kb++) {
        const int64_t e0 = (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
        if (kb % kbs == 0) {
            fold = a2_fp8_scales(w, nb, kb, sv);
            for (int r = 0; r < R; r++) {
                for (int j = 0; j < 8; j++) {
                    bs[r][j] = _mm256_setzero_ps();
                }
            }
        }
        for (int r = 0; r < R; r++) {
            a2_fp8_x(x + r * ldx + kb * MOE_BLK_K, xs[r]);
        }
        for (int g = 0; g < 4; g++) { /* half g / 2, vectors t = 2 (g % 2) and t + 1 */
            __m256 acc[4][2];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                acc[r][0] = bs[r][2 * g];
                acc[r][1] = bs[r][2 * g + 1];
            }
            for (int q = 0; q < MOE_BLK_K / 2; q++) {
                if (g == 0 && kb + 2 < kbn) { /* the K-block after next, 2 lines a pair */
                    const char *ahead = (const char *)w->codes + e0 + q * 2 * MOE_BLK_N +
                                        2 * MOE_BLK_N * MOE_BLK_K;
                    _mm_prefetch(ahead, _MM_HINT_T0);
                    _mm_prefetch(ahead + 64, _MM_HINT_T0);
                }
                __m256 f[4];
                a2_fp8(w->codes, e0 + q * 2 * MOE_BLK_N, g / 2, g % 2, f);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const __m256 xe = _mm256_broadcast_ss(xs[r] + 2 * q);
                    const __m256 xo = _mm256_broadcast_ss(xs[r] + 2 * q + 1);
                    acc[r][0] = a2_fp8_fma(f[0], f[1], xe, xo, acc[r][0]);
                    acc[r][1] = a2_fp8_fma(f[2], f[3], xe, xo, acc[r][1]);
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                bs[r][2 * g] = acc[r][0];
                bs[r][2 * g + 1] = acc[r][1];
            }
        }
        if (kb % kbs == kbs - 1 || kb == kbn - 1) {
            for (int r = 0; r < R; r++) {
                a2_fp8_total(bs[r], 8, sv, fold, tot[r]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        a2_fp8_out(tot[r], tile + r * MOE_BLK_N);
    }
}

/* avx2, FP8, two rows: as k256fp8_r (the same bits), a half of a K-block's outputs at a time
 * (two loads, each decoded to four vectors), so the two rows keep 8 chains of FMAs where a
 * quarter gives them 4 (each chain's two FMAs a pair of inputs wait on each other), and the
 * K-block after next fetched on into the next column block (a2_fp8_ahead): 0.87-0.92x k256fp8_r's time at 2
 * rows (an expert's W13 from memory, 32 in turn, one Zen 3 core, A/B in one program). */
SB_INLINE void k256fp8_2(const moe_sb_matrix_t *w, int64_t nb, const float *x, int64_t ldx,
                         float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K, kbs = w->sk / MOE_BLK_K, nblk = a2_blocks(w);
    float sv[64];
    float xs[2][MOE_BLK_K] __attribute__((aligned(32)));
    float tot[2][64] __attribute__((aligned(32)));
    __m256 bs[2][8];
    bool fold = true;
    memset(tot, 0, sizeof(tot));
    for (int64_t kb = 0; kb < kbn; kb++) {
        const int64_t blk = nb * kbn + kb, e0 = blk * (MOE_BLK_N * MOE_BLK_K);
        if (kb % kbs == 0) {
            fold = a2_fp8_scales(w, nb, kb, sv);
            for (int r = 0; r < 2; r++) {
                for (int j = 0; j < 8; j++) {
                    bs[r][j] = _mm256_setzero_ps();
                }
            }
        }
        for (int r = 0; r < 2; r++) {
            a2_fp8_x(x + r * ldx + kb * MOE_BLK_K, xs[r]);
        }
        for (int h = 0; h < 2; h++) { /* half h: vectors 4 h.. 4 h + 3 of bs */
            __m256 acc[2][4];
#pragma GCC unroll 2
            for (int r = 0; r < 2; r++) {
                for (int j = 0; j < 4; j++) {
                    acc[r][j] = bs[r][4 * h + j];
                }
            }
            for (int q = 0; q < MOE_BLK_K / 2; q++) {
                if (h == 0) {
                    a2_fp8_ahead(w, blk, nblk, q);
                }
                const __m256 xe0 = _mm256_broadcast_ss(xs[0] + 2 * q);
                const __m256 xo0 = _mm256_broadcast_ss(xs[0] + 2 * q + 1);
                const __m256 xe1 = _mm256_broadcast_ss(xs[1] + 2 * q);
                const __m256 xo1 = _mm256_broadcast_ss(xs[1] + 2 * q + 1);
#pragma GCC unroll 2
                for (int u = 0; u < 2; u++) {
                    __m256 f[4];
                    a2_fp8(w->codes, e0 + q * 2 * MOE_BLK_N, h, u, f);
                    acc[0][2 * u] = a2_fp8_fma(f[0], f[1], xe0, xo0, acc[0][2 * u]);
                    acc[0][2 * u + 1] = a2_fp8_fma(f[2], f[3], xe0, xo0, acc[0][2 * u + 1]);
                    acc[1][2 * u] = a2_fp8_fma(f[0], f[1], xe1, xo1, acc[1][2 * u]);
                    acc[1][2 * u + 1] = a2_fp8_fma(f[2], f[3], xe1, xo1, acc[1][2 * u + 1]);
                }
            }
#pragma GCC unroll 2
            for (int r = 0; r < 2; r++) {
                for (int j = 0; j < 4; j++) {
                    bs[r][4 * h + j] = acc[r][j];
                }
            }
        }
        if (kb % kbs == kbs - 1 || kb == kbn - 1) {
            for (int r = 0; r < 2; r++) {
                a2_fp8_total(bs[r], 8, sv, fold, tot[r]);
            }
        }
    }
    for (int r = 0; r < 2; r++) {
        a2_fp8_out(tot[r], tile + r * MOE_BLK_N);
    }
}

/* MXFP4: one row's sums b (nv vectors of half h, a2_fma) over a K-block into its totals t,
 * times the block's lane scales sv (a2_mx_scales): each K-block is one scale block, whose
 * scale (a power of two) multiplies the block's sum once rather than each of its values. */
SB_INLINE void a2_mx_total(const __m256 *b, int nv, const float *sv, float *t)
{
#pragma GCC unroll 8
    for (int j = 0; j < nv; j++) {
        _mm256_store_ps(t + 8 * j, _mm256_fmadd_ps(b[j], _mm256_loadu_ps(sv + 8 * j),
                                                   _mm256_load_ps(t + 8 * j)));
    }
}

/* MXFP4: a row's 64 outputs from its totals t [half][vector j][lane l] (a2_lane): each output
 * its even inputs' total plus its odd's (lanes l and l + 1). */
SB_INLINE void a2_mx_out(const float *t, float *tile)
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m256 v = _mm256_load_ps(t + 64 * h + 8 * j);
            float s[8];
            _mm256_storeu_ps(s, _mm256_add_ps(v, _mm256_permute_ps(v, 0xB1)));
#pragma GCC unroll 4
            for (int l = 0; l < 8; l += 2) {
                tile[a2_lane(h, j, l)] = s[l];
            }
        }
    }
}

/* avx2, MXFP4, one row: column block nb times row x into tile [64], each K-block's sums in
 * registers, decoded as they are used (no store and load of a decoded block): the arithmetic
 * of k256q's passes (the same bits); both halves' 4 sums of one nibble at a time, 8 chains of
 * FMAs (4 chains, a half at a time, would wait on the FMAs' latency). */
SB_INLINE void k256mx_1(const moe_sb_matrix_t *w, int64_t nb, const float *x, float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K;
    float sv[2][64];
    float tot[2][64] __attribute__((aligned(32)));
    memset(tot, 0, sizeof(tot));
    for (int64_t kb = 0; kb < kbn; kb++) {
        const int64_t e0 = (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
        const float *xk = x + kb * MOE_BLK_K;
        a2_mx_scales(w, nb, kb, sv);
        for (int s = 0; s < 2; s++) { /* both halves' 4 sums at a time: 8 chains */
            __m256 b[2][4];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                b[j / 4][j % 4] = _mm256_setzero_ps();
            }
            for (int q = 0; q < MOE_BLK_K / 2; q++) {
                __m256 xa, xb;
                a2_x(MOE_SB_MXFP4, xk + 2 * q, &xa, &xb);
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    __m256 f[4];
                    a2_mx4(w->codes, e0 + q * 2 * MOE_BLK_N, h, s, f);
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        b[h][j] = _mm256_fmadd_ps(f[j], xa, b[h][j]);
                    }
                }
            }
            for (int h = 0; h < 2; h++) {
                a2_mx_total(b[h], 4, sv[h] + 32 * s, tot[h] + 32 * s);
            }
        }
    }
    a2_mx_out(tot[0], tile);
}

/* avx2, MXFP4, two rows (x, stride ldx): as k256mx_1, each half's 4 sums of both rows at a
 * time (8 chains), each decoded vector used by both rows. */
SB_INLINE void k256mx_2(const moe_sb_matrix_t *w, int64_t nb, const float *x, int64_t ldx,
                        float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K;
    float sv[2][64];
    float tot[2][2][64] __attribute__((aligned(32)));
    memset(tot, 0, sizeof(tot));
    for (int64_t kb = 0; kb < kbn; kb++) {
        const int64_t e0 = (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
        const float *xk = x + kb * MOE_BLK_K;
        a2_mx_scales(w, nb, kb, sv);
        for (int h = 0; h < 2; h++) {
            for (int s = 0; s < 2; s++) {
                __m256 b[2][4];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    b[j / 4][j % 4] = _mm256_setzero_ps();
                }
                for (int q = 0; q < MOE_BLK_K / 2; q++) {
                    __m256 xa[2], xb, f[4];
                    a2_x(MOE_SB_MXFP4, xk + 2 * q, &xa[0], &xb);
                    a2_x(MOE_SB_MXFP4, xk + ldx + 2 * q, &xa[1], &xb);
                    a2_mx4(w->codes, e0 + q * 2 * MOE_BLK_N, h, s, f);
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++) {
                        b[j / 4][j % 4] = _mm256_fmadd_ps(f[j % 4], xa[j / 4], b[j / 4][j % 4]);
                    }
                }
                for (int r = 0; r < 2; r++) {
                    a2_mx_total(b[r], 4, sv[h] + 32 * s, tot[r][h] + 32 * s);
                }
            }
        }
    }
    a2_mx_out(tot[0][0], tile);
    a2_mx_out(tot[1][0], tile + MOE_BLK_N);
}

/* avx2, FP8 and MXFP4: column block nb times rows (1..A2_ROWS) rows of x (F32, stride ldx)
 * into tile [rows][64]. */
SB_INLINE void k256q(int type, const moe_sb_matrix_t *w, int64_t nb, int64_t rows,
                     const float *x, int64_t ldx, float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K;
    const int64_t kbs = type == MOE_SB_FP8 ? w->sk / MOE_BLK_K : 1;
    /* each row's totals, [row][half][vector x 8]; FP8 (4 vectors a half) its scale block's
     * sums after them */
    float acc[A2_ROWS][2][64] __attribute__((aligned(32)));
    float xs[A2_ROWS][MOE_BLK_K] __attribute__((aligned(32))); /* FP8: a2_fp8_x */
    float sv[2][64]; /* FP8: sv[0] the block's 64; MXFP4: each half's lanes' */
    bool fold = true;
    __m256 wb[2][MOE_BLK_K / 2][8];
    memset(acc, 0, sizeof(acc[0]) * (size_t)rows);
    for (int64_t kb = 0; kb < kbn; kb++) {
        const int64_t e0 = (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
        const float *xk = x + kb * MOE_BLK_K;
        const bool first = kb % kbs == 0, last = kb % kbs == kbs - 1 || kb == kbn - 1;
        if (type == MOE_SB_FP8) {
            if (first) {
                fold = a2_fp8_scales(w, nb, kb, sv[0]);
            }
            for (int64_t r = 0; r < rows; r++) {
                a2_fp8_x(xk + r * ldx, xs[r]);
            }
        } else {
            a2_mx_scales(w, nb, kb, sv);
        }
        /* both halves of a row of codes at once: the codes are read in order (an FP8 row's
         * halves are two cache lines) */
        for (int q = 0; q < MOE_BLK_K / 2; q++) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                a2_decode(type, w->codes, e0 + q * 2 * MOE_BLK_N, h, wb[h][q]);
            }
        }
        if (type == MOE_SB_FP8) { /* a row's both halves at once: 8 chains of FMAs (a
                                   * half's 4, two FMAs a link, would wait on each other);
                                   * two rows' half at once, 8 chains and a load for both,
                                   * tried and left out */
            for (int64_t r = 0; r < rows; r++) {
                __m256 a[2][4];
                for (int j = 0; j < 8; j++) {
                    a[j / 4][j % 4] = first ? _mm256_setzero_ps()
                                            : _mm256_load_ps(acc[r][j / 4] + 32 + 8 * (j % 4));
                }
                for (int q = 0; q < MOE_BLK_K / 2; q++) {
                    __m256 xa, xb;
                    a2_x(type, xs[r] + 2 * q, &xa, &xb);
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        a2_fma(type, wb[h][q], xa, xb, a[h]);
                    }
                }
                for (int h = 0; h < 2; h++) {
                    if (last) {
                        a2_fp8_total(a[h], 4, sv[0] + 32 * h, fold, acc[r][h]);
                        continue;
                    }
                    for (int j = 0; j < 4; j++) {
                        _mm256_store_ps(acc[r][h] + 32 + 8 * j, a[h][j]);
                    }
                }
            }
            continue;
        }
        for (int h = 0; h < 2; h++) { /* MXFP4: a half's 8 sums, 8 chains */
            for (int64_t r = 0; r < rows; r++) {
                __m256 a[8];
                for (int j = 0; j < 8; j++) {
                    a[j] = _mm256_setzero_ps();
                }
                for (int q = 0; q < MOE_BLK_K / 2; q++) {
                    __m256 xa, xb;
                    a2_x(type, xk + r * ldx + 2 * q, &xa, &xb);
                    a2_fma(type, wb[h][q], xa, xb, a);
                }
                a2_mx_total(a, 8, sv[h], acc[r][h]);
            }
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        if (type == MOE_SB_MXFP4) {
            a2_mx_out(acc[r][0], tile + r * MOE_BLK_N);
            continue;
        }
        float t[64];
        for (int h = 0; h < 2; h++) { /* sum t of half h: a2_fp8_out's vector t */
            memcpy(t + 32 * h, acc[r][h], 32 * sizeof(float));
        }
        a2_fp8_out(t, tile + r * MOE_BLK_N);
    }
}

/* avx2, BF16 (F32): R rows (2..4) of one column block into tile [R][64]. A K-block (32
 * inputs x 64 outputs, 4 KiB: read from memory in order, the one after next fetched ahead)
 * is taken a half of its outputs at a time (32: two 64-byte lines of each 2-input row), each
 * load widened to two vectors serving the R rows' 2 FMAs each, the R x 4 sums in registers
 * over the half K-block and in the tile between: 8-16 chains of FMAs (a chain's two FMAs a
 * pair of inputs wait on each other, so the quarters before, R x 2 chains, left 2 rows bound
 * by the FMAs' latency). Each output's FMAs come in k256bf's order (even input, odd input,
 * pair by pair), so a row's values are the same bits whatever the rows beside it. Against
 * the quarters (an expert's W13 from memory, 32 in turn, one Zen 3 core, A/B in one
 * program): 0.77-0.85x the time at 2 rows, 0.78-0.86x at 3, 0.87-0.95x at 4. (Quarters over
 * the whole column block, the sums in registers throughout, read the weights in four
 * strided streams: 2 rows took 1.46 ms an expert, 2.5x one row's.) */
SB_INLINE void k256bf_r(const moe_sb_matrix_t *w, int64_t nb, int R, const float *x,
                        int64_t ldx, float *tile)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K;
    memset(tile, 0, (size_t)R * MOE_BLK_N * sizeof(float));
    for (int64_t kb = 0; kb < kbn; kb++) {
        const uint16_t *cb = (const uint16_t *)w->codes + (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K);
        const float *xk = x + kb * MOE_BLK_K;
        for (int o = 0; o < MOE_BLK_N; o += 32) {
            const uint16_t *c = cb + 2 * o;
            __m256 a[4][4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    a[r][g] = _mm256_loadu_ps(tile + r * MOE_BLK_N + o + 8 * g);
                }
            }
            for (int q = 0; q < MOE_BLK_K / 2; q++) {
                if (o == 0 && kb + 2 < kbn) { /* the K-block after next, 4 lines a pair */
                    const char *ahead = (const char *)(c + q * 2 * MOE_BLK_N) +
                                        2 * MOE_BLK_N * MOE_BLK_K * sizeof(uint16_t);
                    _mm_prefetch(ahead, _MM_HINT_T0);
                    _mm_prefetch(ahead + 64, _MM_HINT_T0);
                    _mm_prefetch(ahead + 128, _MM_HINT_T0);
                    _mm_prefetch(ahead + 192, _MM_HINT_T0);
                }
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    __m256 e, od;
                    a2_words(_mm256_loadu_si256((const __m256i *)(c + q * 2 * MOE_BLK_N + 16 * g)),
                             &e, &od);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) {
                        const float *xr = xk + r * ldx + 2 * q;
                        a[r][g] = _mm256_fmadd_ps(e, _mm256_broadcast_ss(xr), a[r][g]);
                        a[r][g] = _mm256_fmadd_ps(od, _mm256_broadcast_ss(xr + 1), a[r][g]);
                    }
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    _mm256_storeu_ps(tile + r * MOE_BLK_N + o + 8 * g, a[r][g]);
                }
            }
        }
    }
}

/* avx2, BF16: rows (1..MR_AVX2) of column block nb into tile (rows of 64). */
__attribute__((noinline)) static void a2_bf(const moe_sb_matrix_t *w, int64_t nb,
                                            int64_t rows, const float *x, int64_t ldx,
                                            float *tile)
{
    switch (rows) {
    case 1: k256bf(w, nb, x, tile); break;
    case 2: k256bf_r(w, nb, 2, x, ldx, tile); break;
    case 3: k256bf_r(w, nb, 3, x, ldx, tile); break;
    default: k256bf_r(w, nb, 4, x, ldx, tile); break;
    }
}
#define SB_AVX2Q(T)                                                                          \
    __attribute__((noinline)) static void a2q_##T(const moe_sb_matrix_t *w, int64_t nb,      \
                                                  int64_t rows, const float *x, int64_t ldx, \
                                                  float *tile)                               \
    {                                                                                        \
        if ((T) == MOE_SB_FP8 && rows == 1) {                                                \
            k256fp8_1(w, nb, x, tile);                                                       \
            return;                                                                          \
        }                                                                                    \
        if ((T) == MOE_SB_FP8 && rows <= 4) { /* moe_sb_gemm's passes of 2-4 rows */       \
            switch (rows) {                                                                  \
            case 2: k256fp8_2(w, nb, x, ldx, tile); break;                                   \
            case 3: k256fp8_r(w, nb, 3, x, ldx, tile); break;                                \
            default: k256fp8_r(w, nb, 4, x, ldx, tile); break;                               \
            }                                                                                \
            return;                                                                          \
        }                                                                                    \
        if ((T) == MOE_SB_MXFP4 && rows == 1) {                                              \
            k256mx_1(w, nb, x, tile);                                                        \
            return;                                                                          \
        }                                                                                    \
        if ((T) == MOE_SB_MXFP4 && rows == 2) {                                              \
            k256mx_2(w, nb, x, ldx, tile);                                                   \
            return;                                                                          \
        }                                                                                    \
        k256q(T, w, nb, rows, x, ldx, tile);                                                 \
    }
SB_AVX2Q(1)
SB_AVX2Q(2)

/* avx2, BF16: rows [r0, r1) of W (r0 a multiple of 64) into F32 row-major (dst[(n - r0) k +
 * c]) for the K-blocks that lie wholly inside k; the partial last one is left to the scalar
 * loop. Eight outputs' 32-bit lanes (two inputs each) of eight rows q of a block, transposed
 * (8 x 8), are eight outputs' 16 inputs. */
__attribute__((noinline)) static int64_t a2_dequant_bf16(const moe_sb_matrix_t *w, float *dst,
                                                         int64_t r0, int64_t r1)
{
    const int64_t kbn = kpad(w) / MOE_BLK_K, full = w->k / MOE_BLK_K;
    const uint32_t *u = w->codes;
    for (int64_t n0 = r0; n0 < r1; n0 += 8) {
        const int64_t nb = n0 / MOE_BLK_N, g = n0 % MOE_BLK_N;
        const int rows = r1 - n0 < 8 ? (int)(r1 - n0) : 8;
        for (int64_t kb = 0; kb < full; kb++) {
            const uint32_t *blk = u + (nb * kbn + kb) * (MOE_BLK_N * MOE_BLK_K / 2) + g;
            for (int h = 0; h < 2; h++) { /* q 8 h.. 8 h + 7: inputs 16 h.. 16 h + 15 */
                __m256i v[8], t[8];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) {
                    v[i] = _mm256_loadu_si256((const __m256i *)(blk + (8 * h + i) * MOE_BLK_N));
                }
                /* 8 x 8 transpose of 32-bit lanes: t[j] lane i = v[i] lane j */
#pragma GCC unroll 4
                for (int i = 0; i < 8; i += 2) {
                    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
                    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
                }
#pragma GCC unroll 2
                for (int i = 0; i < 8; i += 4) {
                    v[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
                    v[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
                    v[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
                    v[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
                }
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    t[i] = _mm256_permute2x128_si256(v[i], v[i + 4], 0x20);
                    t[i + 4] = _mm256_permute2x128_si256(v[i], v[i + 4], 0x31);
                }
                for (int j = 0; j < rows; j++) { /* output n0 + j: t[j] */
                    __m256 lo, hi;
                    a2_words(t[j], &lo, &hi);
                    const __m256 a = _mm256_unpacklo_ps(lo, hi), b = _mm256_unpackhi_ps(lo, hi);
                    float *row = dst + (n0 + j - r0) * w->k + kb * MOE_BLK_K + 16 * h;
                    _mm256_storeu_ps(row, _mm256_permute2f128_ps(a, b, 0x20));
                    _mm256_storeu_ps(row + 8, _mm256_permute2f128_ps(a, b, 0x31));
                }
            }
        }
    }
    return full;
}

#pragma GCC pop_options

_Static_assert(MOE_SB_BF16 == 0 && MOE_SB_FP8 == 1 && MOE_SB_MXFP4 == 2, "instantiation order");

/* [vbmi][type][rows - 1] */
static const blk_fn k_bf[2][MOE_SB_TYPES][MR_MAX] = {
    {{bf_0_1, bf_0_2, bf_0_3, bf_0_4, bf_0_5, bf_0_6},
     {bf_1_1, bf_1_2, bf_1_3, bf_1_4, bf_1_5},
     {bf_2_1, bf_2_2, bf_2_3, bf_2_4, bf_2_5, bf_2_6}},
    {{bf_0_1, bf_0_2, bf_0_3, bf_0_4, bf_0_5, bf_0_6},
     {bfv_1_1, bfv_1_2, bfv_1_3, bfv_1_4, bfv_1_5},
     {bf_2_1, bf_2_2, bf_2_3, bf_2_4, bf_2_5, bf_2_6}}}; /* MXFP4: no VBMI (vpermw) */
/* Rows a pass of the avx512_bf16 kernels holds, per weight type. */
static const int k_bf_rows[MOE_SB_TYPES] = {MR_BF16, MR_FP8, MR_MX};
static const blk_fn k_f[MOE_SB_TYPES][MR_F32] = {{f_0_1, f_0_2, f_0_3, f_0_4, f_0_5},
                                                 {f_1_1, f_1_2, f_1_3, f_1_4, f_1_5},
                                                 {f_2_1, f_2_2, f_2_3, f_2_4, f_2_5}};

#endif /* SB_X86 */

/* ------------------------------------------------------------------------------------ */
/* Dispatch                                                                              */

bool moe_sb_cpu_has(moe_sb_isa_t isa)
{
#ifdef SB_X86
    switch (isa) {
    case MOE_SB_AVX512_BF16_VBMI:
        return moe_sb_cpu_has(MOE_SB_AVX512_BF16) && __builtin_cpu_supports("avx512vbmi");
    case MOE_SB_AVX512_BF16:
        /* MOED_CPU_NO_BF16 makes the CPU count as one without BF16 (onednn.h); every
         * extension the bf_* kernels' code holds (objdump: BF16, BW, DQ+VL), checked here
         * rather than through oneDNN's own notion of a BF16 core */
        return moe_cpu_bf16_native() && __builtin_cpu_supports("avx512bf16") &&
               moe_sb_cpu_has(MOE_SB_AVX512);
    case MOE_SB_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    case MOE_SB_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default:
        return false;
    }
#else
    (void)isa;
    return false;
#endif
}

moe_sb_isa_t moe_sb_isa(bool bf16)
{
    if (bf16) {
        return moe_sb_cpu_has(MOE_SB_AVX512_BF16_VBMI) ? MOE_SB_AVX512_BF16_VBMI
               : moe_sb_cpu_has(MOE_SB_AVX512_BF16)    ? MOE_SB_AVX512_BF16
                                                       : MOE_SB_NONE;
    }
    return moe_sb_cpu_has(MOE_SB_AVX512) ? MOE_SB_AVX512
           : moe_sb_cpu_has(MOE_SB_AVX2) ? MOE_SB_AVX2
                                         : MOE_SB_NONE;
}

const char *moe_sb_isa_name(moe_sb_isa_t isa)
{
    switch (isa) {
    case MOE_SB_AVX512_BF16_VBMI: return "avx512_bf16+vbmi";
    case MOE_SB_AVX512_BF16: return "avx512_bf16";
    case MOE_SB_AVX512: return "avx512";
    case MOE_SB_AVX2: return "avx2";
    default: return "none";
    }
}

void moe_sb_gemm(moe_sb_isa_t isa, const moe_sb_matrix_t *w, int64_t m, const void *x,
                 int64_t ldx, void *y, int64_t ldy, bool y_bf16, int64_t nb0, int64_t nb1)
{
#ifdef SB_X86
    if (isa == MOE_SB_NONE) { /* the callers never ask so (expert_small.c): nothing runs */
        return;
    }
    bool bf = isa == MOE_SB_AVX512_BF16 || isa == MOE_SB_AVX512_BF16_VBMI;
    int mr = bf ? k_bf_rows[w->type] : isa == MOE_SB_AVX512 ? MR_F32 : MR_AVX2;
    size_t xsz = bf ? sizeof(uint16_t) : sizeof(float);
    bool a2q = isa == MOE_SB_AVX2 && w->type != MOE_SB_BF16;
    mr = a2q ? (w->type == MOE_SB_FP8 && m <= A2_FP8_R ? 4 : A2_ROWS) : mr;
    float tile[A2_ROWS * MOE_BLK_N];
    /* passes of equal size (+-1): 8 rows are 4 + 4, not 6 + 2 */
    int64_t passes = (m + mr - 1) / mr;
    for (int64_t nb = nb0; nb < nb1; nb++) {
        int64_t n0 = nb * MOE_BLK_N, ncols = w->n - n0 < MOE_BLK_N ? w->n - n0 : MOE_BLK_N;
        for (int64_t p = 0; p < passes; p++) {
            int64_t r0 = m * p / passes, rows = m * (p + 1) / passes - r0;
            const void *xp = (const char *)x + (size_t)(r0 * ldx) * xsz;
            if (bf) {
                k_bf[isa == MOE_SB_AVX512_BF16_VBMI][w->type][rows - 1](w, nb, xp, ldx, tile);
            } else if (isa == MOE_SB_AVX512) {
                k_f[w->type][rows - 1](w, nb, xp, ldx, tile);
            } else if (a2q) {
                (w->type == MOE_SB_FP8 ? a2q_1 : a2q_2)(w, nb, rows, (const float *)xp, ldx,
                                                        tile);
            } else {
                a2_bf(w, nb, rows, (const float *)xp, ldx, tile);
            }
            void *yp = (char *)y + (size_t)(r0 * ldy) * (y_bf16 ? sizeof(uint16_t)
                                                                : sizeof(float));
            tile_out(tile, rows, n0, ncols, yp, ldy, y_bf16);
        }
    }
#else
    (void)isa, (void)w, (void)m, (void)x, (void)ldx, (void)y, (void)ldy, (void)y_bf16;
    (void)nb0, (void)nb1;
#endif
}

void moe_sb_dequant_bf16(moe_sb_isa_t isa, const moe_sb_matrix_t *w, uint16_t *dst,
                         int64_t nb0, int64_t nb1)
{
#ifdef SB_X86
    if ((isa == MOE_SB_AVX512_BF16 || isa == MOE_SB_AVX512_BF16_VBMI) &&
        w->type != MOE_SB_BF16) {
        dequant_bf16_512(w, dst, nb0, nb1);
        return;
    }
#endif
    (void)isa;
    dequant_bf16_scalar(w, dst, nb0, nb1);
}
