/* BF16 experts on the CPU: which compute and held types a run gets, the weights' one-time
 * reorder into oneDNN's layout (BF16 compute) or moed's blocked one (F32 compute), and one
 * expert's FFN over a tile of BF16 rows (expert_bf16.h). */
#include "expert/expert_bf16.h"

#include <stdlib.h>
#include <string.h>

#include "expert/expert.h"
#include "expert/smallbatch.h"
#include "moe/mem.h"
#include "moe/watchdog.h"

static const char *num_name(moe_num_dtype_t d)
{
    return d == MOE_NUM_BF16 ? "bf16" : d == MOE_NUM_F32 ? "f32" : "auto";
}

/* On cuda the GEMMs run in the storage type (model.dtype), so compute follows it. */
static moe_status_t cuda_compute_dtype(const moe_config_t *cfg, moe_dtype_t value,
                                       moe_num_dtype_t *out, moe_error_t *err)
{
    moe_num_dtype_t d = value == MOE_DTYPE_F32 ? MOE_NUM_F32 : MOE_NUM_BF16;
    if (cfg->compute_dtype != MOE_NUM_AUTO && cfg->compute_dtype != d) {
        return moe_error_set(err, MOE_ERR_CONFIG,
                             "runtime.compute_dtype: %s, but on cuda the GEMMs run in "
                             "model.dtype (%s here); set model.dtype instead, or auto",
                             num_name(cfg->compute_dtype),
                             value == MOE_DTYPE_F32 ? "f32" : "16-bit");
    }
    *out = d;
    return MOE_OK;
}

moe_status_t moe_expert_compute_dtype(const moe_config_t *cfg, moe_dtype_t value,
                                      moe_num_dtype_t *out, moe_error_t *err)
{
    if (cfg->device == MOE_DEVICE_CUDA) {
        return cuda_compute_dtype(cfg, value, out, err);
    }
    bool native = moe_cpu_bf16_native();
    if (cfg->compute_dtype == MOE_NUM_BF16 && !native) {
        return moe_error_set(err, MOE_ERR_CONFIG,
                             "runtime.compute_dtype: bf16, but %s; use auto (f32 here) or f32",
                             moe_cpu_bf16_why());
    }
    if (cfg->compute_dtype == MOE_NUM_AUTO) {
        bool low = value == MOE_DTYPE_BF16 || value == MOE_DTYPE_FP8 || value == MOE_DTYPE_MXFP4;
        *out = low && native ? MOE_NUM_BF16 : MOE_NUM_F32;
    } else {
        *out = cfg->compute_dtype;
    }
    return MOE_OK;
}

moe_dtype_t moe_expert_held_dtype(const moe_config_t *cfg, moe_num_dtype_t compute,
                                  moe_dtype_t value)
{
    if (cfg->device == MOE_DEVICE_CUDA || value == MOE_DTYPE_FP8 || value == MOE_DTYPE_MXFP4) {
        return value;
    }
    if (compute == MOE_NUM_BF16) {
        return MOE_DTYPE_BF16;
    }
    /* F32 compute of BF16 values: held as BF16 where the F32 kernels read them, which is
     * where the CPU lacks native BF16 (with it, runtime.compute_dtype: f32 keeps F32) */
    bool kernels = moe_sb_isa(false) != MOE_SB_NONE;
    return value == MOE_DTYPE_BF16 && kernels && !moe_cpu_bf16_native() ? MOE_DTYPE_BF16
                                                                        : MOE_DTYPE_F32;
}

moe_status_t moe_expert_shared_types(const moe_config_t *cfg, bool routes, moe_dtype_t *held,
                                     moe_num_dtype_t *compute, moe_error_t *err)
{
    moe_dtype_t value = MOE_DTYPE_F32;
    *held = MOE_DTYPE_F32;
    *compute = MOE_NUM_F32;
    if (!routes || cfg->device == MOE_DEVICE_CUDA) {
        return MOE_OK;
    }
    moe_status_t st = moe_weights_shared_dtype(cfg, &value, err);
    if (st != MOE_OK || value == MOE_DTYPE_F32) {
        return st;
    }
    st = moe_expert_compute_dtype(cfg, value, compute, err);
    *held = moe_expert_held_dtype(cfg, *compute, value); /* FP8 as stored, BF16 as the experts */
    return st;
}

static int64_t up_cols(const moe_config_t *cfg)
{
    int64_t F = moe_cfg_expert_ffn(cfg);
    return cfg->activation == MOE_ACT_GELU ? F : 2 * F;
}

/* m [n, k] row-major BF16 into moed's blocked layout (moe_sb_pack_bf16); *out malloc'd
 * (free() frees it). */
static moe_status_t block_bf16(const uint16_t *m, int64_t n, int64_t k, void **out,
                               moe_error_t *err)
{
    size_t bytes = (size_t)(moe_blk_pad(n, MOE_BLK_N) * moe_blk_pad(k, MOE_BLK_K)) * 2;
    uint16_t *b = moe_alloc_large(bytes); /* huge pages where the kernel gives them */
    if (b == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %zu bytes for an "
                             "expert's BF16 weights in the kernels' layout", bytes);
    }
    moe_sb_pack_bf16(m, n, k, b);
    *out = b;
    return MOE_OK;
}

/* One FFN of inner width F (up: its W13's outputs) into oneDNN's layout (o: a context of its
 * width) or, o NULL, moed's blocked one; the plain copies freed unless keep_plain. */
static moe_status_t pack_ffn(moe_onednn_t *o, moe_expert_weights_t *ew, int64_t H, int64_t F,
                             int64_t up, bool keep_plain, moe_error_t *err)
{
    moe_status_t st = o != NULL
                          ? moe_onednn_pack(o, MOE_ONEDNN_UP, ew->w13_bf16, &ew->w13_packed, err)
                          : block_bf16(ew->w13_bf16, up, H, &ew->w13_packed, err);
    if (st == MOE_OK) {
        st = o != NULL
                 ? moe_onednn_pack(o, MOE_ONEDNN_DOWN, ew->w2_bf16, &ew->w2_packed, err)
                 : block_bf16(ew->w2_bf16, H, F, &ew->w2_packed, err);
    }
    if (st == MOE_OK && !keep_plain) {
        free(ew->w13_bf16);
        free(ew->w2_bf16);
        ew->w13_bf16 = ew->w2_bf16 = NULL;
    }
    return st;
}

/* A routing rank's shared experts held in BF16 into the layout their compute reads
 * (w->shared_compute: BF16 oneDNN's, a context of their width; F32 moed's blocked one), the
 * plain copies freed. */
static moe_status_t pack_shared(const moe_config_t *cfg, moe_weights_t *w, moe_error_t *err)
{
    int64_t Fs = w->shared_ffn, up = cfg->activation == MOE_ACT_GELU ? Fs : 2 * Fs;
    bool dnn = w->shared_compute == MOE_NUM_BF16;
    moe_onednn_t *o = NULL;
    moe_status_t st = dnn ? moe_onednn_create(cfg->hidden_dim, up, Fs, MOE_BF16_TILE_ROWS,
                                              (int)cfg->threads, &o, err)
                          : MOE_OK;
    for (int l = 0; st == MOE_OK && l < w->num_layers; l++) {
        moe_expert_weights_t *ew = &w->layers[l].shared;
        if (w->layers[l].has_shared && ew->w13_bf16 != NULL) {
            st = pack_ffn(o, ew, cfg->hidden_dim, Fs, up, false, err);
        }
    }
    moe_onednn_destroy(o);
    return st;
}

/* Every local expert held in BF16 into the layout its compute reads (w->compute: BF16
 * oneDNN's, a context of the experts' width; F32 moed's blocked one). */
static moe_status_t pack_experts(const moe_config_t *cfg, moe_weights_t *w, moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, F = moe_cfg_expert_ffn(cfg), up = up_cols(cfg);
    bool dnn = w->compute == MOE_NUM_BF16;
    moe_onednn_t *o = NULL;
    moe_status_t st = dnn ? moe_onednn_create(H, up, F, MOE_BF16_TILE_ROWS, (int)cfg->threads,
                                              &o, err)
                          : MOE_OK;
    for (int l = 0; st == MOE_OK && l < w->num_layers; l++) {
        moe_layer_weights_t *lw = &w->layers[l];
        for (int i = 0; st == MOE_OK && i < lw->num_local; i++) {
            moe_expert_weights_t *ew = &lw->experts[i];
            if (ew->w13_packed != NULL || ew->w13_bf16 == NULL) {
                continue; /* packed before (online rebalancing packs what arrived) */
            }
            /* the plain copies go as soon as the packed ones exist; online rebalancing
             * keeps them: they are what moves to another rank */
            st = pack_ffn(o, ew, H, F, up, cfg->rebalance_every != 0, err);
            /* load progress: the watchdog sees a rank that packs as busy, not hung; the
             * expert's real bf16 bytes (GELU: two matrices, SwiGLU: three) */
            moe_watchdog_progress((up + F) * H * 2);
        }
    }
    moe_onednn_destroy(o);
    return st;
}

moe_status_t moe_expert_cpu_pack(const moe_config_t *cfg, moe_weights_t *w, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    if (w->store == MOE_DTYPE_BF16) { /* FP8, MXFP4 held as stored: the kernels read them so */
        st = pack_experts(cfg, w, err);
    }
    /* the shared experts by their own compute type: a master of master routing hosts no
     * experts (its compute F32) but may hold BF16 shared experts for BF16 compute */
    if (st == MOE_OK && w->shared_store == MOE_DTYPE_BF16) {
        st = pack_shared(cfg, w, err);
    }
    return st;
}

moe_status_t moe_expert_forward_bf16(moe_onednn_t *o, const moe_expert_weights_t *w,
                                     moe_activation_t act, int64_t hidden, int64_t ffn,
                                     int64_t rows, const uint16_t *in, uint16_t *h, uint16_t *a,
                                     float *out, moe_error_t *err)
{
    moe_status_t st = moe_onednn_gemm(o, MOE_ONEDNN_UP, rows, in, w->w13_packed, h, err);
    if (st != MOE_OK) {
        return st;
    }
    /* The activation in F32 on the widened BF16 up projection, narrowed to BF16 for the
     * down projection. */
    moe_expert_activate_bf16(w, act, h, rows, ffn, a);
    st = moe_onednn_gemm(o, MOE_ONEDNN_DOWN, rows, a, w->w2_packed, out, err);
    if (st == MOE_OK) {
        moe_expert_add_bias(out, rows, hidden, w->b2);
    }
    return st;
}
