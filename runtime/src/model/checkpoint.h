/* A Hugging Face checkpoint directory: config.json (read through jansson into the config's
 * facts, moe_config/config.h) and the weights, in DIR/model.safetensors or in the shards that
 * DIR/model.safetensors.index.json's weight_map names. Also wraps a single .safetensors
 * file (model.weights) so the loader has one way to read tensors.
 *
 * Shards are opened only when a tensor of theirs is first read, and each tensor is read
 * with pread into its F32 destination, so a rank touches only its own tensors' bytes and
 * its resident memory follows its share of the model, not the checkpoint's size.
 * Dtypes: F32, BF16, F16, and F8_E4M3 with a `<name>_scale_inv` F32 tensor of block scales
 * (DeepSeek-V3: weight = fp8 * scale_inv[row / 128][col / 128]), all to F32 at load. */
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

#endif /* MOE_MODEL_CHECKPOINT_H */
