#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe/log.h"
#include "moe/stop.h"
#include "moe/safetensors.h"
#include "model/rng.h"

/* A load this large takes seconds (F32 generation ran at 50-200 MB/s per rank on a 2-core
 * machine): below it nothing is printed, so small jobs keep their output short. */
#define LOAD_REPORT_BYTES ((size_t)256 << 20)
/* At most one progress line this often, so a log stays readable (lines, not '\r'). */
#define LOAD_REPORT_NS 5000000000LL

/* Random tensors are filled this many values at a time, so progress moves within one
 * expert too (a Mixtral expert is 672 MiB: tens of seconds on a loaded machine). */
#define LOAD_PIECE_FLOATS ((size_t)16 << 20)

/* Progress of the expert weights of the rank that reports (rank 0). Every rank builds its
 * own experts at the same time and no rank waits for another here, so rank 0 can only tell
 * its own progress; the lines say so. When placement auto gives rank 0 experts, it gives it
 * as many as any rank, so its progress is the job's to within one expert. */
typedef struct load_progress {
    bool show;
    size_t done, total; /* expert bytes built / to build here */
    int64_t t0, last_ns;
} load_progress_t;

static double mib(size_t bytes)
{
    return (double)bytes / (double)(1 << 20);
}

/* "672 MiB" or "10.5 GiB". */
static const char *size_text(char *buf, size_t cap, size_t bytes)
{
    if (bytes < ((size_t)1 << 30)) {
        snprintf(buf, cap, "%.0f MiB", mib(bytes));
    } else {
        snprintf(buf, cap, "%.1f GiB", mib(bytes) / 1024.0);
    }
    return buf;
}

/* Largest expert count of any rank (world_size ranks), for the line rank 0 prints when it
 * hosts no experts itself. */
static int max_experts_per_rank(const moe_config_t *cfg)
{
    int most = 0;
    for (int r = 0; r < cfg->world_size; r++) {
        int n = moe_cfg_experts_of_rank(cfg, r, NULL);
        most = n > most ? n : most;
    }
    return most;
}

/* Say what rank 0 is about to build, and arm the progress lines when it is slow enough to
 * need them. */
static void progress_begin(const moe_config_t *cfg, int rank, bool random, size_t per_expert,
                           load_progress_t *p)
{
    memset(p, 0, sizeof(*p));
    int local = moe_cfg_experts_of_rank(cfg, rank, NULL);
    int L = (int)cfg->num_layers, E = (int)cfg->num_experts, most = max_experts_per_rank(cfg);
    const char *verb = random ? "generating" : "reading";
    const char *from = random ? "" : " from ";
    const char *file = random ? "" : cfg->weights;
    size_t bytes = per_expert * (size_t)local * (size_t)L;
    char sz[32];
    if (rank != 0 || per_expert * (size_t)most * (size_t)L < LOAD_REPORT_BYTES) {
        return;
    }
    if (local == 0) {
        MOE_INFO("weights: rank 0 hosts no experts; the expert ranks are %s theirs%s%s (up to %d "
                 "x %d layer%s, %s on one rank; F32, %.0f MiB per expert): no progress shown "
                 "from them",
                 verb, from, file, most, L, L == 1 ? "" : "s",
                 size_text(sz, sizeof(sz), per_expert * (size_t)most * (size_t)L),
                 mib(per_expert));
        return;
    }
    if (local == E && cfg->world_size <= 1) {
        MOE_INFO("weights: %s %d experts x %d layer%s%s%s (F32, %.0f MiB per expert, %s)", verb,
                 E, L, L == 1 ? "" : "s", from, file, mib(per_expert),
                 size_text(sz, sizeof(sz), bytes));
    } else {
        MOE_INFO("weights: rank 0 %s its %d of %d experts x %d layer%s%s%s (F32, %.0f MiB per "
                 "expert, %s); the other ranks build theirs at the same time, progress below "
                 "is rank 0's",
                 verb, local, E, L, L == 1 ? "" : "s", from, file, mib(per_expert),
                 size_text(sz, sizeof(sz), bytes));
    }
    p->show = true;
    p->total = bytes;
    p->t0 = moe_now_ns();
    p->last_ns = p->t0;
}

/* `bytes` more of this rank's experts built; a line at most every LOAD_REPORT_NS. */
static void progress_add(load_progress_t *p, size_t bytes)
{
    if (p == NULL || !p->show) {
        return;
    }
    p->done += bytes;
    int64_t now = moe_now_ns();
    if (p->done >= p->total || now - p->last_ns < LOAD_REPORT_NS) {
        return;
    }
    p->last_ns = now;
    char a[32], b[32];
    MOE_INFO("weights: %s of %s (%d%%), %.0f s", size_text(a, sizeof(a), p->done),
             size_text(b, sizeof(b), p->total), (int)(100.0 * (double)p->done / (double)p->total),
             (double)(now - p->t0) * 1e-9);
}

/* moe_rng_fill_uniform in pieces, reporting each: values depend only on their index, so the
 * pieces make the same tensor as one call. */
static void fill_reported(float *dst, size_t n, uint64_t seed, uint64_t stream, float scale,
                          load_progress_t *p)
{
    for (size_t off = 0; off < n && !moe_stop_requested(); off += LOAD_PIECE_FLOATS) {
        size_t k = n - off < LOAD_PIECE_FLOATS ? n - off : LOAD_PIECE_FLOATS;
        moe_rng_fill_uniform(dst + off, k, seed, stream, off, scale);
        progress_add(p, k * sizeof(float));
    }
}

static void progress_end(const load_progress_t *p, size_t bytes, moe_status_t st)
{
    if (p->show && st == MOE_OK) {
        char sz[32];
        MOE_INFO("weights: done, %s in %.1f s", size_text(sz, sizeof(sz), bytes),
                 (double)(moe_now_ns() - p->t0) * 1e-9);
    }
}

typedef struct names {
    const char *naming;
    const char *prefix; /* "model.layers.%d.block_sparse_moe" */
    const char *w1, *w3, *w2;
} names_t;

static const names_t k_mixtral = {"mixtral", "model.layers.%lld.block_sparse_moe", "w1", "w3",
                                  "w2"};
static const names_t k_deepseek = {"deepseek/qwen", "model.layers.%lld.mlp", "gate_proj",
                                   "up_proj", "down_proj"};

static void tensor_name(char *out, size_t cap, const names_t *nm, long long layer,
                        const char *suffix)
{
    char prefix[128];
    snprintf(prefix, sizeof(prefix), nm->prefix, layer);
    snprintf(out, cap, "%s.%s", prefix, suffix);
}

/* Which naming the checkpoint uses, from the gate tensor of the first MoE layer. */
static moe_status_t detect_naming(const moe_config_t *cfg, moe_st_file_t *f,
                                  const names_t **out, moe_error_t *err)
{
    char a[256], b[256];
    tensor_name(a, sizeof(a), &k_mixtral, (long long)cfg->first_layer, "gate.weight");
    tensor_name(b, sizeof(b), &k_deepseek, (long long)cfg->first_layer, "gate.weight");
    if (moe_st_find(f, a) != NULL) {
        *out = &k_mixtral;
    } else if (moe_st_find(f, b) != NULL) {
        *out = &k_deepseek;
    } else {
        return moe_error_set(err, MOE_ERR_WEIGHTS,
                             "%s: no MoE gate tensor for layer %lld: looked for '%s' (Mixtral) "
                             "and '%s' (DeepSeek/Qwen); check model.first_layer (now %lld)",
                             cfg->weights, (long long)cfg->first_layer, a, b,
                             (long long)cfg->first_layer);
    }
    return MOE_OK;
}

/* Read one [rows, cols] tensor, adding the config keys to a shape mismatch message. */
static moe_status_t read_matrix(moe_st_file_t *f, const char *name, int64_t rows, int64_t cols,
                                float *dst, moe_error_t *err)
{
    int64_t shape[2] = {rows, cols};
    bool present = moe_st_find(f, name) != NULL;
    moe_status_t st = moe_st_read_f32_shaped(f, name, 2, shape, dst, err);
    if (st == MOE_ERR_WEIGHTS && err != NULL) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof(err->msg) - n, "; check %s against the checkpoint",
                 present ? "model.hidden_dim, model.ffn_dim and model.num_experts"
                         : "model.num_layers, model.first_layer and model.num_experts");
    }
    return st;
}

static moe_status_t alloc_floats(float **p, size_t n, moe_error_t *err)
{
    *p = malloc(n * sizeof(float));
    if (*p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %zu MiB for weights",
                             n * sizeof(float) >> 20);
    }
    return MOE_OK;
}

static void random_expert(const moe_config_t *cfg, int layer, moe_expert_weights_t *ew,
                          load_progress_t *prog)
{
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    /* Uniform with unit-variance outputs for unit-variance inputs: a = sqrt(3 / fan_in). */
    float a_in = sqrtf(3.0f / (float)H), a_out = sqrtf(3.0f / (float)F);
    fill_reported(ew->w13, (size_t)(F * H), cfg->seed,
                  moe_rng_stream(MOE_RNG_W1, (uint64_t)layer, (uint64_t)ew->id), a_in, prog);
    if (cfg->activation == MOE_ACT_SWIGLU) {
        fill_reported(ew->w13 + F * H, (size_t)(F * H), cfg->seed,
                      moe_rng_stream(MOE_RNG_W3, (uint64_t)layer, (uint64_t)ew->id), a_in, prog);
    }
    fill_reported(ew->w2, (size_t)(H * F), cfg->seed,
                  moe_rng_stream(MOE_RNG_W2, (uint64_t)layer, (uint64_t)ew->id), a_out, prog);
}

static moe_status_t file_expert(const moe_config_t *cfg, moe_st_file_t *f, const names_t *nm,
                                int layer, moe_expert_weights_t *ew, load_progress_t *prog,
                                moe_error_t *err)
{
    size_t tensor_bytes = (size_t)(cfg->hidden_dim * cfg->ffn_dim) * sizeof(float);
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    long long L = (long long)(cfg->first_layer + layer);
    char name[256], suffix[96];
    snprintf(suffix, sizeof(suffix), "experts.%d.%s.weight", ew->id, nm->w1);
    tensor_name(name, sizeof(name), nm, L, suffix);
    moe_status_t st = read_matrix(f, name, F, H, ew->w13, err);
    if (st == MOE_OK && cfg->activation == MOE_ACT_SWIGLU) {
        progress_add(prog, tensor_bytes);
        snprintf(suffix, sizeof(suffix), "experts.%d.%s.weight", ew->id, nm->w3);
        tensor_name(name, sizeof(name), nm, L, suffix);
        st = read_matrix(f, name, F, H, ew->w13 + F * H, err);
    }
    if (st == MOE_OK) {
        progress_add(prog, tensor_bytes);
        snprintf(suffix, sizeof(suffix), "experts.%d.%s.weight", ew->id, nm->w2);
        tensor_name(name, sizeof(name), nm, L, suffix);
        st = read_matrix(f, name, H, F, ew->w2, err);
    }
    if (st == MOE_OK) {
        progress_add(prog, tensor_bytes);
    }
    return st;
}

static moe_status_t load_gate(const moe_config_t *cfg, moe_st_file_t *f, const names_t *nm,
                              int layer, float *gate, moe_error_t *err)
{
    int64_t E = cfg->num_experts, H = cfg->hidden_dim;
    if (f == NULL) {
        moe_rng_fill_uniform(gate, (size_t)(E * H), cfg->seed,
                             moe_rng_stream(MOE_RNG_GATE, (uint64_t)layer, 0), 0,
                             sqrtf(3.0f / (float)H));
        return MOE_OK;
    }
    char name[256];
    tensor_name(name, sizeof(name), nm, (long long)(cfg->first_layer + layer), "gate.weight");
    return read_matrix(f, name, E, H, gate, err);
}

static moe_status_t load_layer(const moe_config_t *cfg, moe_st_file_t *f, const names_t *nm,
                               int rank, bool routes, int layer, moe_layer_weights_t *lw,
                               load_progress_t *prog, moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    int64_t up_rows = cfg->activation == MOE_ACT_SWIGLU ? 2 * F : F;
    moe_status_t st = MOE_OK;
    if (routes) {
        st = alloc_floats(&lw->gate, (size_t)(cfg->num_experts * H), err);
        if (st == MOE_OK) {
            st = load_gate(cfg, f, nm, layer, lw->gate, err);
        }
    }
    int32_t ids[MOE_MAX_EXPERTS];
    int n = moe_cfg_experts_of_rank(cfg, rank, ids);
    lw->experts = calloc((size_t)(n > 0 ? n : 1), sizeof(*lw->experts));
    if (st == MOE_OK && lw->experts == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate expert table");
    }
    for (int i = 0; st == MOE_OK && i < n; i++) {
        moe_expert_weights_t *ew = &lw->experts[i];
        ew->id = ids[i];
        lw->num_local = i + 1;
        st = alloc_floats(&ew->w13, (size_t)(up_rows * H), err);
        if (st == MOE_OK) {
            st = alloc_floats(&ew->w2, (size_t)(H * F), err);
        }
        if (st == MOE_OK && f == NULL) {
            random_expert(cfg, layer, ew, prog);
        } else if (st == MOE_OK) {
            st = file_expert(cfg, f, nm, layer, ew, prog, err);
        }
        if (st == MOE_OK && moe_stop_requested()) {
            /* Ctrl-C while a large model builds: stop here, not after every expert */
            st = moe_error_set(err, MOE_ERR_INTERRUPTED, "stopped while building the weights");
        }
    }
    return st;
}

moe_status_t moe_weights_load(const moe_config_t *cfg, int rank, bool routes, moe_weights_t *w,
                              moe_error_t *err)
{
    memset(w, 0, sizeof(*w));
    moe_st_file_t *f = NULL;
    const names_t *nm = NULL;
    moe_status_t st = MOE_OK;
    bool random = strcmp(cfg->weights, "random") == 0;
    int64_t up_rows = cfg->activation == MOE_ACT_SWIGLU ? 2 * cfg->ffn_dim : cfg->ffn_dim;
    size_t per_expert = (size_t)((up_rows + cfg->ffn_dim) * cfg->hidden_dim) * sizeof(float);
    size_t local_bytes = per_expert * (size_t)moe_cfg_experts_of_rank(cfg, rank, NULL) *
                         (size_t)cfg->num_layers;
    if (!random) {
        st = moe_st_open(cfg->weights, &f, err);
        if (st == MOE_OK) {
            st = detect_naming(cfg, f, &nm, err);
        }
        if (st != MOE_OK) {
            goto out_close;
        }
    }
    w->naming = random ? "random" : nm->naming;
    w->num_layers = (int)cfg->num_layers;
    w->layers = calloc((size_t)w->num_layers, sizeof(*w->layers));
    if (w->layers == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate layer table");
        goto out_close;
    }
    load_progress_t prog;
    progress_begin(cfg, rank, random, per_expert, &prog);
    for (int l = 0; l < w->num_layers && st == MOE_OK; l++) {
        st = load_layer(cfg, f, nm, rank, routes, l, &w->layers[l], &prog, err);
    }
    progress_end(&prog, local_bytes, st);
    if (st == MOE_OK && random && cfg->routing_skew > 0.0) {
        st = alloc_floats(&w->gate_bias, (size_t)cfg->num_experts, err);
        if (st == MOE_OK) {
            moe_weights_skew_bias(w->gate_bias, (int)cfg->num_experts, cfg->routing_skew);
        }
    }
    w->bytes_per_expert = per_expert;
    w->expert_bytes = local_bytes;
out_close:
    moe_st_close(f);
    if (st != MOE_OK) {
        moe_weights_destroy(w);
    }
    return st;
}

void moe_weights_destroy(moe_weights_t *w)
{
    if (w == NULL) {
        return;
    }
    for (int l = 0; w->layers != NULL && l < w->num_layers; l++) {
        moe_layer_weights_t *lw = &w->layers[l];
        free(lw->gate);
        for (int i = 0; lw->experts != NULL && i < lw->num_local; i++) {
            free(lw->experts[i].w13);
            free(lw->experts[i].w2);
        }
        free(lw->experts);
    }
    free(w->layers);
    free(w->gate_bias);
    memset(w, 0, sizeof(*w));
}

moe_status_t moe_input_load(const moe_config_t *cfg, int batch, int64_t first, int64_t count,
                            float *dst, moe_error_t *err)
{
    int64_t H = cfg->hidden_dim, T = cfg->tokens_per_step;
    if (strcmp(cfg->input, "random") == 0) {
        /* Unit-variance uniform; batch b is an independent slice of one stream. */
        uint64_t start = ((uint64_t)batch * (uint64_t)T + (uint64_t)first) * (uint64_t)H;
        moe_rng_fill_uniform(dst, (size_t)(count * H), cfg->seed,
                             moe_rng_stream(MOE_RNG_INPUT, 0, 0), start, sqrtf(3.0f));
        return MOE_OK;
    }
    moe_st_file_t *f = NULL;
    float *all = NULL;
    moe_status_t st = moe_st_open(cfg->input, &f, err);
    if (st != MOE_OK) {
        return st;
    }
    const moe_st_tensor_info_t *ti = moe_st_find(f, "input");
    if (ti == NULL || ti->ndim != 2 || ti->shape[0] != T || ti->shape[1] != H) {
        st = moe_error_set(err, MOE_ERR_WEIGHTS,
                           "%s: workload.input needs tensor 'input' of shape [%lld, %lld] "
                           "(workload.tokens_per_step, model.hidden_dim); %s",
                           cfg->input, (long long)T, (long long)H,
                           ti == NULL ? "the file has no tensor 'input'"
                                      : "the file's 'input' has another shape");
        goto out;
    }
    st = alloc_floats(&all, (size_t)(T * H), err);
    if (st == MOE_OK) {
        st = moe_st_read_f32(f, "input", all, (size_t)(T * H), err);
    }
    if (st == MOE_OK) {
        memcpy(dst, all + first * H, (size_t)(count * H) * sizeof(float));
    }
out:
    free(all);
    moe_st_close(f);
    return st;
}

void moe_weights_skew_bias(float *bias, int num_experts, double skew)
{
    for (int e = 0; e < num_experts; e++) {
        bias[e] = (float)(-skew * log((double)e + 1.0));
    }
}
