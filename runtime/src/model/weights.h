/* Part model (runtime/src/model/): the weights and inputs: seeded random, or read from a
 * Hugging Face checkpoint directory or one safetensors file, one row per model family
 * (family.c). May include: base config (and the public headers in moe/). One file of each
 * part's folder opens with such a comment; tests/lint/parts.sh holds every part to its
 * list. */
/* Model weights of one rank: the gate (and its bias) and the shared experts of every layer
 * on routing ranks, and the experts this rank hosts; seeded-random, or read from a
 * checkpoint directory (model.checkpoint) or one safetensors file (model.weights).
 *
 * Tensor names are the family's (model/family.h), decoder layer cfg->layer_ids[l] for
 * moed layer l. gelu experts use w1/gate_proj and w2/down_proj only. gpt-oss's fused
 * gate_up_proj [E, H, 2F] (even columns gate, odd up) and down_proj [E, F, H] are read one
 * expert's slab at a time and stored like the others (W13 [2F, H], W2 [H, F]) with biases.
 * Each rank reads only its own tensors. */
#ifndef MOE_WEIGHTS_H
#define MOE_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe/status.h"
#include "model/checkpoint.h"

/* The blocked layout of an expert matrix W [N, K] (N outputs, K inputs) held as stored in
 * FP8 or MXFP4, the one oneDNN's BF16 matmul packs its weights into on avx512_core_bf16
 * ("BA16a64b2a"), so the small-batch kernels read both (expert/smallbatch.h):
 *   N padded to Np (a multiple of MOE_BLK_N = 64), K to Kp (of MOE_BLK_K = 32), with zeros;
 *   block (n / 64, k / 32) at element ((n / 64) * (Kp / 32) + k / 32) * 2048: all of one
 *   64-output column block's K in a row; inside, 16 rows of (k % 32) / 2 holding 64 outputs
 *   of 2 adjacent inputs each: + ((k % 32) / 2) * 128 + (n % 64) * 2 + k % 2.
 * FP8 e4m3: a byte an element. MXFP4 e2m1: a nibble an element, each row of 64 outputs x
 * 2 inputs (128 nibbles, 64 bytes) arranged for the kernels' decoding (moe_mx_byte): output
 * 16 g + L (g 0..3, L 0..15), input parity p in byte 4 L + 2 p + (g < 2), the low nibble for
 * even g: byte 4 L + 1 + 2 p holds outputs L and 16 + L, byte 4 L + 2 p outputs 32 + L and
 * 48 + L. So one 64-byte row decodes to four vectors of 16 outputs' input pairs by shifts
 * and a word table, outputs in order (expert/smallbatch.c).
 * Scales, one per output and block of `sk` inputs (FP8: the checkpoint's weight_block_size
 * input side, a multiple of 32, each output row taking its block row's scale; MXFP4: 32), in
 * the same column blocks: [Np / 64][ceil(Kp / sk)][64], FP8 as float (scale_inv), MXFP4 as
 * e8m0 bytes (2^(e - 127)); padding rows have scale 0 (FP8) or 127 (MXFP4). */
#define MOE_BLK_N 64
#define MOE_BLK_K 32
#define MOE_MXFP4_BLOCK 32

static inline int64_t moe_blk_pad(int64_t v, int64_t to)
{
    return (v + to - 1) / to * to;
}

/* Element (n, k)'s index in the blocked layout of a matrix of Kp (padded) inputs. */
static inline int64_t moe_blk_index(int64_t n, int64_t k, int64_t kp)
{
    return ((n / MOE_BLK_N) * (kp / MOE_BLK_K) + k / MOE_BLK_K) * (MOE_BLK_N * MOE_BLK_K) +
           (k % MOE_BLK_K) / 2 * (2 * MOE_BLK_N) + (n % MOE_BLK_N) * 2 + k % 2;
}

/* MXFP4: element (n, k)'s byte in the blocked layout of Kp (padded) inputs, and the shift
 * of its nibble in that byte (moe_mx_shift: 0 low, 4 high). */
static inline int64_t moe_mx_byte(int64_t n, int64_t k, int64_t kp)
{
    int64_t o = n % MOE_BLK_N;
    return moe_blk_index(n - o, k - k % 2, kp) / 2 + 4 * (o % 16) + 2 * (k % 2) + (o < 32);
}

static inline int moe_mx_shift(int64_t n)
{
    return (int)(n % MOE_BLK_N / 16 % 2) * 4;
}

/* MXFP4: element (n, k) of q (blocked, Kp inputs): its nibble, and setting it. */
static inline uint8_t moe_mx_get(const uint8_t *q, int64_t n, int64_t k, int64_t kp)
{
    return (uint8_t)((q[moe_mx_byte(n, k, kp)] >> moe_mx_shift(n)) & 0xF);
}

static inline void moe_mx_put(uint8_t *q, int64_t n, int64_t k, int64_t kp, uint8_t nib)
{
    uint8_t *b = q + moe_mx_byte(n, k, kp);
    int sh = moe_mx_shift(n);
    *b = (uint8_t)((*b & ~(0xF << sh)) | ((nib & 0xF) << sh));
}

/* Scale (n, k / sk)'s index in the blocked scale layout (ks = ceil(Kp / sk) blocks). */
static inline int64_t moe_blk_scale_index(int64_t n, int64_t kblock, int64_t ks)
{
    return ((n / MOE_BLK_N) * ks + kblock) * MOE_BLK_N + n % MOE_BLK_N;
}

/* One expert's weights on the host (see expert/expert.h for the FFN they feed), held as
 * moe_weights_t.store says: F32 in w13/w2, or BF16 in w13_bf16/w2_bf16 (same layouts), which
 * the CPU back-end later reorders into its GEMM's layout (w13_packed/w2_packed, freeing the
 * plain ones: expert/backend.h moe_expert_cpu_pack), or FP8 / MXFP4 as the checkpoint
 * stores them, in the blocked layout above (w13_q/w2_q with scales w13_s/w2_s). Exactly one
 * of the four pairs is set, except with online rebalancing in BF16: the plain BF16 pair
 * stays beside the packed one (it is what moves to another rank). */
typedef struct moe_expert_weights {
    int32_t id;
    float *w13; /* [2F, H] swiglu (W1 and W3 stacked), [F, H] gelu */
    float *w2;  /* [H, F] */
    uint16_t *w13_bf16, *w2_bf16; /* BF16, as w13 and w2 */
    void *w13_packed, *w2_packed; /* BF16 packed: oneDNN's layout (BF16 compute) or the
                                   * blocked one below (F32 compute); free() frees them */
    uint8_t *w13_q, *w2_q; /* FP8 / MXFP4 codes, blocked ([2F or F, H] and [H, F]) */
    void *w13_s, *w2_s;    /* their scales, blocked: float (FP8) or e8m0 bytes (MXFP4) */
    size_t q_pooled;       /* > 0: those four are one piece of this many bytes from w13_q
                            * on, carved from one region (moe_weights_quant_arena): */
    bool q_owner;          /* the FFN's own (free(w13_q) frees it), else its layer's
                            * q_arena (not freed alone: its pages are given back) */
    void *q_region;        /* the region the piece is from, of q_region_bytes */
    size_t q_region_bytes; /* (moe_release_pages keeps its huge pages whole) */
    float *b13; /* [2F] gpt-oss gate then up bias, else NULL */
    float *b2;  /* [H] gpt-oss down bias, else NULL */
    float limit; /* gpt-oss swiglu_limit (MOE_ACT_SWIGLU_OAI) */
} moe_expert_weights_t;

typedef struct moe_layer_weights {
    float *gate;                   /* [E, H] on routing ranks, else NULL */
    float *gate_bias;              /* [E] gpt-oss router bias / V3 e_score_correction_bias */
    bool has_shared;               /* shared experts (on routing ranks) */
    moe_expert_weights_t shared;   /* [2Fs, H], [H, Fs] (id -1): all shared experts as one */
    float *shared_gate;            /* [H] Qwen2-MoE shared_expert_gate, else NULL */
    int num_local;                 /* experts hosted here */
    moe_expert_weights_t *experts; /* [num_local], ids ascending */
    void *q_arena;                 /* FP8 / MXFP4: the experts loaded here, one region
                                    * (moe_weights_quant_arena), else NULL */
} moe_layer_weights_t;

typedef struct moe_weights {
    int num_layers;
    moe_layer_weights_t *layers;
    float *gate_bias;        /* [E] routing_skew log-prior, NULL when none */
    moe_dtype_t value;       /* the experts' values: F32, BF16 (rounded to it), F16 (cuda),
                              * FP8 or MXFP4 (a checkpoint's, model.dtype auto, on the CPU) */
    moe_dtype_t store;       /* how the host holds them: F32, BF16, FP8 or MXFP4 (gates
                              * and biases stay F32) */
    moe_dtype_t shared_store; /* how a routing rank holds its shared experts: F32, BF16 (in
                               * oneDNN's packed layout once the CPU back-end packed them)
                               * or FP8 as stored; F32 where there are none */
    moe_num_dtype_t shared_compute; /* their compute type (the engine sets it) */
    int64_t fp8_block[2];    /* FP8: the scale block (weight_block_size: outputs, inputs) */
    moe_num_dtype_t compute; /* resolved runtime.compute_dtype (the engine sets it) */
    moe_num_dtype_t wire;    /* resolved runtime.wire_dtype (the engine sets it) */
    size_t bytes_per_expert; /* bytes of one expert's weights as held */
    size_t expert_bytes;     /* all experts hosted here, all layers */
    size_t routing_bytes;    /* gates, biases and shared experts held here, all layers */
    int64_t shared_ffn;      /* inner width of the shared expert, 0 = none */
    char naming[96];         /* "mixtral", "deepseek_v3 (random)": the tensor names used */
    char dtype[64];          /* on-disk dtypes read ("BF16", "F8_E4M3+F32"), "random" */
} moe_weights_t;

/* The experts' value type for model.dtype on `rank`: the type asked, or for auto the
 * checkpoint's type of this rank's first expert tensor (FP8 e4m3 and MXFP4 as stored on the
 * CPU, BF16 on cuda), F32 for random weights or a rank without experts. F16 on the CPU is
 * F32 (converted exactly at load). */
moe_status_t moe_weights_value_dtype(const moe_config_t *cfg, int rank, moe_dtype_t *out,
                                     moe_error_t *err);

/* The shared experts' value type for model.dtype: the type asked (F16: F32), or for auto the
 * checkpoint's type of the first layer's shared gate projection (FP8 e4m3 as stored on the
 * CPU, BF16 on cuda); F32 for random weights under auto, or a family without shared experts.
 * The caller picks how they are held from it (engine.c: as the experts would be). */
moe_status_t moe_weights_shared_dtype(const moe_config_t *cfg, moe_dtype_t *out,
                                      moe_error_t *err);

/* The name of how weights are held, as messages say it: BF16, FP8, MXFP4, else F32. */
const char *moe_weights_held_name(moe_dtype_t held);

/* placement.copies: columns with FP8 experts held as stored: each column share must keep
 * the checkpoint's scale blocks (its weight_block_size) whole; MOE_ERR_UNSUPPORTED, naming
 * the share counts that would, where it does not. Checked at load and before the run. */
moe_status_t moe_weights_check_fp8_shares(const moe_config_t *cfg, const moe_ckpt_t *ck,
                                          moe_error_t *err);

/* Load what `rank` needs. routes: whether this rank runs the gate. value: the experts' type
 * as moe_weights_value_dtype resolved it (recorded; the GPU stores them in it); store:
 * MOE_DTYPE_BF16 holds them in w13_bf16/w2_bf16 (rounded), MOE_DTYPE_FP8 / MOE_DTYPE_MXFP4
 * as the checkpoint stores them (w13_q/w2_q, blocked), else F32 — rounded to BF16 when
 * model.dtype is bf16, so F32 compute sees the values BF16 compute would. shared_store: the
 * same for a routing rank's shared experts (F32, BF16 or FP8; F32 for anything else, and
 * for FP8 with random weights). experts_store: how the expert ranks hold theirs (what rank
 * 0's load line says when it hosts none). On error fills err with a message naming the file
 * and tensor; *w is then empty (safe to destroy). */
moe_status_t moe_weights_load(const moe_config_t *cfg, int rank, bool routes, moe_dtype_t value,
                              moe_dtype_t store, moe_dtype_t experts_store,
                              moe_dtype_t shared_store, moe_weights_t *w, moe_error_t *err);
void moe_weights_destroy(moe_weights_t *w); /* accepts NULL and an empty struct */

/* The inner width of a layer's shared experts (all n_shared_experts as one FFN), 0 without. */
int64_t moe_weights_shared_ffn(const moe_config_t *cfg);

/* What moe_weights_load will hold, before anything is loaded: one expert's weights held as
 * `store` (F32, BF16, FP8 with 128-input scale blocks, MXFP4: bytes_per_expert), and a
 * routing rank's gates, biases and shared experts (held as shared_store) over all layers
 * (routing_bytes). In double: a config's product may pass 2^64. */
void moe_weights_bytes(const moe_config_t *cfg, moe_dtype_t store, moe_dtype_t shared_store,
                       double *per_expert,
                       double *routing);

/* One expert's buffers (model.ffn_dim, the activation's shapes, biases for swiglu_oai),
 * uninitialised, held as `store` says (F32 in w13/w2, BF16 in w13_bf16/w2_bf16, FP8 or
 * MXFP4 in w13_q/w2_q with scales, sk: FP8's scale block inputs), for weights that arrive
 * from another rank (online rebalancing); free with moe_weights_expert_free (accepts NULL
 * and a zeroed struct). */
moe_status_t moe_weights_expert_alloc(const moe_config_t *cfg, int32_t id, moe_dtype_t store,
                                      int64_t sk, moe_expert_weights_t *ew, moe_error_t *err);
/* Bytes of an expert held as FP8 or MXFP4 (sk as above): bytes[0..3] = w13_q, w13_s, w2_q,
 * w2_s. */
void moe_weights_quant_bytes(const moe_config_t *cfg, moe_dtype_t store, int64_t sk,
                             size_t bytes[4]);
void moe_weights_expert_free(moe_expert_weights_t *ew);
/* n experts' FP8 / MXFP4 codes and scales (the shapes moe_weights_quant_bytes gives) carved
 * from one region, *arena (moe_alloc_large; free() frees it, after the experts are freed):
 * each expert's four pieces in a row (q_pooled their bytes), codes zero, padding scales as
 * the layout says; biases are the caller's. The loader holds a layer's experts so: one
 * buffer of one expert's matrix (MXFP4: 1.6 and 0.8 MB) stays under 2 MiB and got no huge
 * page, and the small-batch kernels then missed the TLB on every 4 KiB page (MXFP4 at one
 * row 0.126-0.159 against 0.092-0.109 ms an expert: docs/performance.md). NULL *arena for
 * n 0. */
moe_status_t moe_weights_quant_arena(const moe_config_t *cfg, moe_dtype_t store, int64_t sk,
                                     int n, moe_expert_weights_t *ew, void **arena,
                                     moe_error_t *err);

/* FP8 or MXFP4 held as stored, how they are scaled, for messages: "128x128 block scales"
 * (the checkpoint's weight_block_size) or "e2m1, e8m0 scales per 32 values". */
void moe_weights_quant_note(const moe_config_t *cfg, moe_dtype_t held, char *buf, size_t n);

/* Zipf-like log-prior for workload.routing_skew s: bias[e] = -s * ln(e + 1), added to the
 * gate's logits, so softmax multiplies expert e's probability by (e+1)^-s before
 * normalising: expert 0 is the most popular. */
void moe_weights_skew_bias(float *bias, int num_experts, double skew);

/* Input tokens [count, H] starting at global token `first` of batch `batch`: seeded random
 * (every batch different), or rows of tensor "input" of workload.input. */
moe_status_t moe_input_load(const moe_config_t *cfg, int batch, int64_t first, int64_t count,
                            float *dst, moe_error_t *err);

/* workload.input (unless random) opens and its tensor 'input' is [tokens_per_step,
 * hidden_dim]: the header only (the checks before the run). */
moe_status_t moe_input_check(const moe_config_t *cfg, moe_error_t *err);
/* The rows of workload.input's 2-D tensor 'input', from the file's header (the config
 * loader's default for workload.tokens_per_step: moe_cfg_set_input_reader). */
moe_status_t moe_input_rows(const char *path, int64_t *rows, moe_error_t *err);

#endif /* MOE_WEIGHTS_H */
