/* The small-batch expert kernels: y = x W^T for an expert call of few rows (decode: 1 to a
 * few tens), streaming each weight byte once for all of a call's rows (a GEMM library tuned
 * for large M reads them again per block of rows, and packs the rows first). The weights
 * are in the blocked layout of model/weights.h: BF16 (oneDNN's packed layout: the BF16
 * experts' w13_packed; for F32 compute laid out by moe_sb_pack_bf16), FP8 e4m3 and MXFP4 e2m1 held as the checkpoint stores them,
 * dequantised in registers tile by tile (value = code x its scale), F32 accumulation:
 *   avx512_bf16  the rows in BF16, the weights as BF16 pairs into vdpbf16ps (FP8 and e2m1
 *                values are exact in BF16); FP8's and MXFP4's scales multiply the F32 sums
 *                of each scale block (one scale per output and block of inputs); with VBMI
 *                (avx512_bf16+vbmi) the FP8 codes are decoded by byte tables (vpermi2b):
 *                2.5 instructions a vector of 32 weights against 8; the e2m1 nibbles, laid
 *                out for it (model/weights.h), by shifts and a word table (vpermw): 1.75
 *   avx512       AVX-512F: the rows in F32, the weights widened to F32 with the scale
 *                folded in, FMAs
 *   avx2         AVX2 + FMA: the rows in F32, the weights widened to F32 on 8-lane
 *                vectors, each K-block decoded once for up to 32 rows; the scales multiply
 *                each scale block's F32 sums
 * Each is compiled for its ISA (target attributes) and picked at run time (moe_sb_isa).
 * Also the dequantisation of whole matrices for the large calls, which go to the GEMM
 * libraries (expert/expert_small.h picks per call). */
#ifndef MOE_EXPERT_SMALLBATCH_H
#define MOE_EXPERT_SMALLBATCH_H

#include <stdbool.h>
#include <stdint.h>

/* The weights' type. */
typedef enum { MOE_SB_BF16 = 0, MOE_SB_FP8 = 1, MOE_SB_MXFP4 = 2, MOE_SB_TYPES = 3 } moe_sb_type_t;

/* The kernels' instruction sets, weakest first. */
typedef enum {
    MOE_SB_NONE = 0,
    MOE_SB_AVX2 = 1,
    MOE_SB_AVX512 = 2,
    MOE_SB_AVX512_BF16 = 3,
    MOE_SB_AVX512_BF16_VBMI = 4, /* FP8 decoded by byte tables (vpermi2b) */
} moe_sb_isa_t;

/* A matrix W [n, k] (n outputs, k inputs) in the blocked layout. */
typedef struct moe_sb_matrix {
    moe_sb_type_t type;
    const void *codes;  /* BF16 words, FP8 bytes or MXFP4 nibble pairs */
    const void *scales; /* FP8: float, MXFP4: e8m0 bytes (blocked); BF16: NULL */
    int64_t n, k;       /* logical sizes; padded to 64 and 32 in memory */
    int64_t sk;         /* inputs per scale: FP8's block (a multiple of 32), MXFP4 32 */
} moe_sb_matrix_t;

/* Whether this CPU runs `isa`'s kernels. */
bool moe_sb_cpu_has(moe_sb_isa_t isa);
/* The best kernels for compute in BF16 (avx512_bf16+vbmi, avx512_bf16, else none) or F32
 * (avx512, avx2 or none) on this CPU. */
moe_sb_isa_t moe_sb_isa(bool bf16);
/* "avx512_bf16", "avx512", "avx2", "none". */
const char *moe_sb_isa_name(moe_sb_isa_t isa);

/* y[r, j] = sum_k x[r, k] W[j, k] for the m rows r and the outputs j in column blocks
 * [nb0, nb1) (64 outputs each; the last block stops at n). x: m rows at stride ldx (in
 * elements), each holding the padded inputs moe_blk_pad(k, 32), finite (zero past k: the
 * padding weights are zero); BF16 for the avx512_bf16 kernels, F32 for the others. y: F32, or
 * BF16 (y_bf16, rounded to nearest even), rows at stride ldy; y[r, j] for j outside the
 * blocks is left alone. isa must be one moe_sb_cpu_has accepts (not MOE_SB_NONE). */
void moe_sb_gemm(moe_sb_isa_t isa, const moe_sb_matrix_t *w, int64_t m, const void *x,
                 int64_t ldx, void *y, int64_t ldy, bool y_bf16, int64_t nb0, int64_t nb1);

/* Column blocks [nb0, nb1) of W (FP8 or MXFP4) dequantised to BF16 (rounded to nearest
 * even) into dst, the same blocked layout (indexing the whole matrix): what oneDNN's BF16
 * matmul takes as packed weights. isa MOE_SB_AVX512_BF16 vectorised, any other scalar. */
void moe_sb_dequant_bf16(moe_sb_isa_t isa, const moe_sb_matrix_t *w, uint16_t *dst,
                         int64_t nb0, int64_t nb1);

/* src [n, k] row-major BF16 into dst in the blocked layout (moe_blk_pad(n, 64) x
 * moe_blk_pad(k, 32) words, the padding zero): BF16 weights for F32 compute where the CPU
 * lacks native BF16 (oneDNN packs them for BF16 compute). */
void moe_sb_pack_bf16(const uint16_t *src, int64_t n, int64_t k, uint16_t *dst);

/* Rows [r0, r1) of W (any type) dequantised to F32 row-major: dst[(r - r0) * k + c]. */
void moe_sb_dequant_f32(const moe_sb_matrix_t *w, float *dst, int64_t r0, int64_t r1);

/* One weight (n, c) of W as F32 (the reference the kernels are tested against). */
float moe_sb_value(const moe_sb_matrix_t *w, int64_t n, int64_t c);

#endif /* MOE_EXPERT_SMALLBATCH_H */
