/* The CPU back-end's expert FFN per call: the small-batch kernels (expert/smallbatch.h) for
 * calls of few rows, the GEMM libraries for the others, and the FFN of weights held as
 * stored (FP8, MXFP4) or in BF16 for F32 compute (a CPU without native BF16), whose large
 * calls first dequantise the matrix (BF16 compute: into oneDNN's packed layout, then its
 * matmul; F32 compute: panels of rows, BF16 the whole matrix, into F32, then the build's
 * BLAS).
 *
 * The switch point: a call of at most `rows` rows (moe_expert_small_rows) takes the
 * kernels: runtime.small_batch_rows, or (-1) the point measured for the weights' type and
 * compute type on the machines of docs/performance.md (tests/bench/bench_decode_kernel.sh
 * measures it on the machine it runs on): constants, so every rank and every run picks the
 * same path for the same call. BF16 weights in BF16 compute take the kernels only where
 * oneDNN's packed layout is the blocked one the kernels read (moe_onednn_packed_blocked);
 * in F32 compute moed lays them out itself (moe_expert_cpu_pack).
 *
 * Threads: with runtime.threads > 1 the threads split the output columns (blocks of 64), so
 * each core streams its own share of the weights (OpenMP, the pool oneDNN uses). */
#ifndef MOE_EXPERT_SMALL_H
#define MOE_EXPERT_SMALL_H

#include <stdbool.h>
#include <stdint.h>

#include "expert/onednn.h"
#include "expert/smallbatch.h"
#include "model/weights.h"
#include "moe_config/config.h"
#include "moe/status.h"

typedef struct moe_expert_small moe_expert_small_t;

/* The switch point measured for weights of type `type` (BF16, FP8, MXFP4) on kernels
 * `isa` (0 for MOE_SB_NONE). */
int64_t moe_expert_small_default_rows(moe_sb_type_t type, moe_sb_isa_t isa);

/* What moe_expert_small_create will pick for a rank holding its experts as `store` and
 * computing in `compute`: the kernels' ISA and switch point (BF16 weights: oneDNN's packed
 * layout probed with a context of the run's shapes), for the first line. */
void moe_expert_small_plan(const moe_config_t *cfg, moe_dtype_t store, moe_num_dtype_t compute,
                           moe_sb_isa_t *isa, int64_t *rows);

/* The context of one rank's experts (`w`, computed in `compute`): kernels, switch point,
 * scratch for tile_rows rows (the back-end's tile), dequantisation panels for FP8 / MXFP4
 * (and BF16 in F32 compute: one matrix).
 * o: BF16 compute's oneDNN context (the packed layouts), else NULL. Fails on allocation, or
 * for FP8 / MXFP4 in BF16 where oneDNN's packed layout is not the blocked one. */
moe_status_t moe_expert_small_create(const moe_config_t *cfg, const moe_weights_t *w,
                                     moe_num_dtype_t compute, moe_onednn_t *o,
                                     int64_t tile_rows, moe_expert_small_t **out,
                                     moe_error_t *err);
void moe_expert_small_destroy(moe_expert_small_t *s); /* accepts NULL */

/* Rows at most that a call runs on the small-batch kernels (0: none), and their ISA. */
int64_t moe_expert_small_rows(const moe_expert_small_t *s);
moe_sb_isa_t moe_expert_small_isa(const moe_expert_small_t *s);

/* BF16 compute: out[rows, H] (F32) = FFN(in[rows, H] BF16), rows <= MOE_BF16_TILE_ROWS,
 * in rows at stride H. On the GEMM path the bucket's rows past `rows` are read and written
 * as moe_expert_forward_bf16 does (h, a: its scratch); the kernels touch `rows` rows. */
moe_status_t moe_expert_small_forward_bf16(moe_expert_small_t *s, moe_onednn_t *o,
                                           const moe_expert_weights_t *w, moe_activation_t act,
                                           int64_t hidden, int64_t ffn, int64_t rows,
                                           const uint16_t *in, uint16_t *h, uint16_t *a,
                                           float *out, moe_error_t *err);

/* F32 compute: out[rows, H] = FFN(in[rows, H]) for rows <= the tile; scratch as for
 * moe_expert_forward. F32-held weights (no kernels for them here) go to moe_expert_forward. */
moe_status_t moe_expert_small_forward_f32(moe_expert_small_t *s, const moe_expert_weights_t *w,
                                          moe_activation_t act, int64_t hidden, int64_t ffn,
                                          int64_t rows, const float *in, float *out,
                                          float *scratch, int64_t tile_rows, moe_error_t *err);

/* Calls and rows so far on the kernels ([0]) and on the GEMM libraries ([1]). */
void moe_expert_small_counts(const moe_expert_small_t *s, int64_t calls[2], int64_t rows[2]);

#endif /* MOE_EXPERT_SMALL_H */
