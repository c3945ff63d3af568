/* A Hugging Face checkpoint directory: config.json (read through jansson into the config's
 * facts, moe_config/config.h) and the weights, in DIR/model.safetensors or in the shards that
 * DIR/model.safetensors.index.json's weight_map names. Also wraps a single .safetensors
 * file (model.weights) so the loader has one way to read tensors.
 *
 * Shards are opened only when a tensor of theirs is first read, and each tensor is read
 * with pread into its F32 destination, so a rank touches only its own tensors' bytes and
 * its resident memory follows its share of the model, not the checkpoint's size.
 * Dtypes: F32, BF16, F16, and F8_E4M3 with a `<name>_scale_inv` F32 tensor of block scales
 * (DeepSeek-V3: weight = fp8 * scale_inv[row / 128][col / 128]), all to F32 at load by
 * moe_ckpt_read; FP8 and MXFP4 expert weights also as stored (moe_ckpt_read_fp8,
 * moe_ckpt_read_mxfp4_slab). */
#ifndef MOE_MODEL_CHECKPOINT_H
#define MOE_MODEL_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe/status.h"

/* moe_cfg_checkpoint_fn: what DIR/config.json says. Bad input (missing file, bad JSON with
 * line and column, unsupported architecture, missing key) fails with a message naming the
 * file and key. */
moe_status_t moe_ckpt_read_info(const char *dir, moe_cfg_checkpoint_info_t *out,
                                moe_error_t *err);

typedef struct moe_ckpt moe_ckpt_t;

/* cfg->checkpoint (a directory) or else cfg->weights (one file). */
moe_status_t moe_ckpt_open(const moe_config_t *cfg, moe_ckpt_t **out, moe_error_t *err);
void moe_ckpt_close(moe_ckpt_t *ck); /* accepts NULL */

bool moe_ckpt_has(moe_ckpt_t *ck, const char *name);
/* Tensor `name` of exactly this shape into dst as F32. */
moe_status_t moe_ckpt_read(moe_ckpt_t *ck, const char *name, int ndim, const int64_t *shape,
                           float *dst, moe_error_t *err);
/* Slab `index` of the first dimension of tensor `name`, whose full shape must be `shape`
 * (ndim >= 2): prod(shape[1..]) floats into dst. F32/BF16/F16 only. */
moe_status_t moe_ckpt_read_slab(moe_ckpt_t *ck, const char *name, int ndim,
                                const int64_t *shape, int64_t index, float *dst,
                                moe_error_t *err);
/* The on-disk dtype name of tensor `name` ("BF16", "F8_E4M3"), without reading it. */
moe_status_t moe_ckpt_dtype_of(moe_ckpt_t *ck, const char *name, const char **dtype,
                               moe_error_t *err);
/* The on-disk dtypes read so far, "BF16" or "F8_E4M3+F32", for the report. */
const char *moe_ckpt_dtypes(const moe_ckpt_t *ck);
/* Where the weights come from, for messages: the directory or the file. */
const char *moe_ckpt_name(const moe_ckpt_t *ck);

/* FP8 e4m3 (1 sign, 4 exponent bits biased by 7, 3 mantissa bits; no infinities,
 * S.1111.111 is NaN) to F32. */
float moe_fp8_e4m3_to_f32(uint8_t b);

/* FP8 weight `name` [rows, cols] (F8_E4M3 with `<name>_scale_inv`) as stored: codes
 * [rows * cols] row-major, and its block scales [ceil(rows / b0)][ceil(cols / b1)] (b:
 * moe_ckpt_fp8_block). A tensor of another dtype, a NaN code or a non-finite value (code x
 * scale) is refused with a message naming the file, tensor and element. */
moe_status_t moe_ckpt_read_fp8(moe_ckpt_t *ck, const char *name, int64_t rows, int64_t cols,
                               uint8_t *codes, float *scales, moe_error_t *err);
/* The FP8 scale block (config.json's quantization_config.weight_block_size; 128 x 128). */
void moe_ckpt_fp8_block(const moe_ckpt_t *ck, int64_t block[2]);

/* MXFP4 (gpt-oss's release, transformers' integrations/mxfp4.py): a tensor NAME [E, R, C]
 * stored as NAME_blocks [E, R, C/32, 16] U8 (two e2m1 values a byte, the even element in the
 * low nibble) and NAME_scales [E, R, C/32] U8 (e8m0, 2^(s - 127), one per 32 values along C).
 * Note that gpt-oss's fused tensors so stored are [E, out, in] (gate_up_proj_blocks: [E, 2F,
 * H/32, 16], the gate and up rows interleaved), the transpose of their BF16 form. */
#define MOE_CKPT_MXFP4_BLOCK 32
/* NAME is not there but NAME_blocks is. */
bool moe_ckpt_is_mxfp4(moe_ckpt_t *ck, const char *name);
/* Slab `index` (an expert) of MXFP4 tensor NAME of logical shape[3] = {E, R, C}: blocks
 * [R * C / 2] bytes, scales [R * C / 32]. A scale of 255 (e8m0's NaN) is refused naming the
 * file, tensor and element. */
moe_status_t moe_ckpt_read_mxfp4_slab(moe_ckpt_t *ck, const char *name, const int64_t *shape,
                                      int64_t index, uint8_t *blocks, uint8_t *scales,
                                      moe_error_t *err);
/* The same slab dequantised to F32 [R, C] (value = e2m1 x 2^(s - 127)). */
moe_status_t moe_ckpt_read_mxfp4_f32(moe_ckpt_t *ck, const char *name, const int64_t *shape,
                                     int64_t index, float *dst, moe_error_t *err);
/* e2m1 nibble (sign, 2 exponent bits, 1 mantissa bit) and e8m0 byte (0xFF: NaN) to F32. */
float moe_mxfp4_value(uint8_t nibble);
float moe_e8m0_to_f32(uint8_t e);

#endif /* MOE_MODEL_CHECKPOINT_H */
