/* Reading a Hugging Face checkpoint directory (config.json, the index, the shards) and
 * single safetensors files: only the tensors a rank needs, converted to F32. */
#include "model/checkpoint.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe_model/safetensors.h"
#include "moe/file.h"
#include "model/family.h"

/* ------------------------------------------------------------------------------------ */
/* config.json                                                                            */

static bool path_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Load a JSON object from path: a missing file, one that is not a regular file (a FIFO is
 * refused, never waited on), a syntax error (line:column) and a non-object are each one
 * message naming the file. */
static moe_status_t json_load_object(const char *path, const char *what, json_t **out,
                                     moe_error_t *err)
{
    json_error_t je;
    const char *kind = NULL;
    int fd = moe_file_open_regular(path, &kind);
    if (fd < 0 && kind != NULL) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: is %s, not a regular file (%s)", path,
                             kind, what);
    }
    if (fd < 0 && errno == ENOENT) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: no such file (%s)", path, what);
    }
    if (fd < 0) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: cannot read (%s): %s", path, what,
                             strerror(errno));
    }
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
    if (root == NULL) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s:%d:%d: not valid JSON: %s", path, je.line,
                             je.column, je.text);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: the top level is not a JSON object",
                             path);
    }
    *out = root;
    return MOE_OK;
}

static void fact_add(moe_cfg_checkpoint_info_t *info, const char *path, const char *value,
                     const char *source)
{
    if (info->num_facts >= MOE_CFG_FACTS_MAX) {
        return; /* the table below adds fewer than MOE_CFG_FACTS_MAX facts */
    }
    moe_cfg_fact_t *f = &info->facts[info->num_facts++];
    snprintf(f->path, sizeof(f->path), "%s", path);
    snprintf(f->value, sizeof(f->value), "%s", value);
    snprintf(f->source, sizeof(f->source), "%s", source);
}

/* A scalar as YAML text; false for objects, arrays and over-long strings. */
static bool json_text(const json_t *v, char *buf, size_t n)
{
    if (json_is_integer(v)) {
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(buf, n, "%.17g", json_real_value(v));
    } else if (json_is_boolean(v)) {
        snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
    } else if (json_is_string(v) && json_string_length(v) < n) {
        snprintf(buf, n, "%s", json_string_value(v));
    } else {
        return false;
    }
    return true;
}

typedef struct info_ctx {
    moe_cfg_checkpoint_info_t *info;
    const json_t *root;
    const char *path;
    const moe_family_t *fam; /* once known: its optional keys' defaults */
    moe_error_t *err;
} info_ctx_t;

/* config.json key `key` as moed's `cfg_path`; absent (or null): def, or an error when def
 * is NULL. */
static moe_status_t fact_key(info_ctx_t *c, const char *cfg_path, const char *key,
                             const char *def)
{
    char text[40], src[96];
    const json_t *v = key != NULL ? json_object_get(c->root, key) : NULL;
    if (v == NULL || json_is_null(v)) {
        if (def == NULL) {
            return moe_error_set(c->err, MOE_ERR_WEIGHTS, "%s: no key '%s' (moed's %s needs it)",
                                 c->path, key, cfg_path);
        }
        snprintf(src, sizeof(src), "default of absent key '%s'", key != NULL ? key : "-");
        fact_add(c->info, cfg_path, def, src);
        return MOE_OK;
    }
    if (!json_text(v, text, sizeof(text))) {
        return moe_error_set(c->err, MOE_ERR_WEIGHTS, "%s: key '%s' is not a number, boolean "
                             "or short string", c->path, key);
    }
    snprintf(src, sizeof(src), "key '%s'", key);
    fact_add(c->info, cfg_path, text, src);
    return MOE_OK;
}

/* A JSON integer, or a real with an integral value (7168.0: a config written from floats;
 * transformers takes it as the integer). */
static bool json_as_int(const json_t *v, long long *out)
{
    if (json_is_integer(v)) {
        *out = (long long)json_integer_value(v);
        return true;
    }
    double d = json_is_real(v) ? json_real_value(v) : NAN;
    if (d == floor(d) && fabs(d) <= 9007199254740992.0) { /* 2^53: exact */
        *out = (long long)d;
        return true;
    }
    return false;
}

/* config.json's integer `key`; def where it is absent or null (int_keys_ok refused the
 * rest). */
static long long json_int_or(const json_t *root, const char *key, long long def)
{
    long long x;
    return json_as_int(json_object_get(root, key), &x) ? x : def;
}

/* The integer keys behind the layer rule and the shared experts' width: absent, null, an
 * integer or an integral real, and mlp_only_layers an array of such; anything else is an
 * error naming the key, not the family's default in its place (which would change the MoE
 * layers without a word). */
static moe_status_t int_keys_ok(const info_ctx_t *c, const moe_family_t *fam)
{
    const char *keys[] = {"num_hidden_layers", "decoder_sparse_step", "first_k_dense_replace",
                          "moe_layer_freq", "n_shared_experts", fam->key_ffn,
                          fam->key_shared_ffn};
    long long x;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const json_t *v = keys[i] != NULL ? json_object_get(c->root, keys[i]) : NULL;
        if (v != NULL && !json_is_null(v) && !json_as_int(v, &x)) {
            return moe_error_set(c->err, MOE_ERR_WEIGHTS, "%s: key '%s' must be an integer",
                                 c->path, keys[i]);
        }
    }
    const json_t *only = json_object_get(c->root, "mlp_only_layers");
    bool ok = only == NULL || json_is_null(only) || json_is_array(only);
    for (size_t i = 0; ok && json_is_array(only) && i < json_array_size(only); i++) {
        ok = json_as_int(json_array_get(only, i), &x);
    }
    return ok ? MOE_OK
              : moe_error_set(c->err, MOE_ERR_WEIGHTS, "%s: key 'mlp_only_layers' must be a "
                              "list of layer numbers (integers)", c->path);
}

/* An optional key of the family: config.json's value, else the family's default
 * (transformers' configuration class: model/family.c), else `otherwise`. */
static long long family_int(const info_ctx_t *c, const char *key, long long otherwise)
{
    const char *def = moe_family_default(c->fam, key);
    return json_int_or(c->root, key, def != NULL ? atoll(def) : otherwise);
}

/* " (default of absent key)" where config.json leaves `key` out (or null), for the layer
 * rule's text */
static const char *absent_note(const info_ctx_t *c, const char *key)
{
    const json_t *v = json_object_get(c->root, key);
    return v == NULL || json_is_null(v) ? " (default of absent key)" : "";
}

/* fact_key for an optional key of the family, its default the family's */
static moe_status_t family_key(info_ctx_t *c, const char *cfg_path, const char *key,
                               const char *otherwise)
{
    const char *def = moe_family_default(c->fam, key);
    return fact_key(c, cfg_path, key, def != NULL ? def : otherwise);
}

/* Which decoder layers are MoE, by the family's rule (transformers' decoder layer
 * constructors: modeling_qwen2_moe.py, modeling_deepseek_v3.py). */
static moe_status_t moe_layers(info_ctx_t *c, const moe_family_t *fam)
{
    moe_cfg_checkpoint_info_t *info = c->info;
    long long n = json_int_or(c->root, "num_hidden_layers", -1);
    if (n < 1 || n > MOE_MAX_LAYER_IDS) {
        return moe_error_set(c->err, MOE_ERR_WEIGHTS, "%s: key 'num_hidden_layers' must be an "
                             "integer in [1, %d]", c->path, MOE_MAX_LAYER_IDS);
    }
    info->num_hidden_layers = (int)n;
    long long step = family_int(c, "decoder_sparse_step", 1);
    long long first = family_int(c, "first_k_dense_replace", 0);
    long long freq = family_int(c, "moe_layer_freq", 1);
    const json_t *only = json_object_get(c->root, "mlp_only_layers");
    if (step < 1 || freq < 1 || first < 0) {
        return moe_error_set(c->err, MOE_ERR_WEIGHTS, "%s: decoder_sparse_step and "
                             "moe_layer_freq must be >= 1, first_k_dense_replace >= 0", c->path);
    }
    for (int l = 0; l < info->num_hidden_layers; l++) {
        bool moe = true;
        if (fam->layer_rule == MOE_LAYERS_SPARSE_STEP) {
            moe = (l + 1) % step == 0;
            for (size_t i = 0; json_is_array(only) && i < json_array_size(only); i++) {
                long long x = -1; /* int_keys_ok: every element an integer */
                moe = moe && !(json_as_int(json_array_get(only, i), &x) && x == l);
            }
        } else if (fam->layer_rule == MOE_LAYERS_DENSE_FIRST) {
            moe = l >= first && l % freq == 0;
        }
        info->is_moe[l] = moe;
    }
    if (fam->layer_rule == MOE_LAYERS_SPARSE_STEP) {
        snprintf(info->moe_rule, sizeof(info->moe_rule), "MoE where (layer + 1) %% "
                 "decoder_sparse_step %lld%s == 0 and the layer is not in mlp_only_layers",
                 step, absent_note(c, "decoder_sparse_step"));
    } else if (fam->layer_rule == MOE_LAYERS_DENSE_FIRST) {
        snprintf(info->moe_rule, sizeof(info->moe_rule), "MoE from first_k_dense_replace %lld%s "
                 "on, where layer %% moe_layer_freq %lld%s == 0", first,
                 absent_note(c, "first_k_dense_replace"), freq, absent_note(c, "moe_layer_freq"));
    } else {
        snprintf(info->moe_rule, sizeof(info->moe_rule), "every layer is MoE");
    }
    return MOE_OK;
}

/* The family's routing and shared-expert keys. */
static moe_status_t family_facts(info_ctx_t *c, const moe_family_t *fam)
{
    moe_status_t st = MOE_OK;
    char text[40];
    if (fam->scoring_func != NULL) {
        const char *sf = json_string_value(json_object_get(c->root, "scoring_func"));
        if (sf != NULL && strcmp(sf, fam->scoring_func) != 0) {
            return moe_error_set(c->err, MOE_ERR_UNSUPPORTED, "%s: scoring_func '%s': moed runs "
                                 "%s with scoring_func '%s' only", c->path, sf,
                                 moe_cfg_family_name(fam->id), fam->scoring_func);
        }
    }
    if (fam->route == MOE_ROUTE_DEEPSEEK_V2 || fam->route == MOE_ROUTE_DEEPSEEK_V3) {
        st = family_key(c, "model.n_group", "n_group", "1");
        if (st == MOE_OK) {
            st = family_key(c, "model.topk_group", "topk_group", "1");
        }
        if (st == MOE_OK) {
            st = family_key(c, "model.routed_scaling_factor", "routed_scaling_factor", "1");
        }
        if (st == MOE_OK && fam->route == MOE_ROUTE_DEEPSEEK_V2) {
            st = family_key(c, "model.topk_method", "topk_method", "greedy");
        } else if (st == MOE_OK) { /* V3's code reads no topk_method */
            fact_add(c->info, "model.topk_method", "noaux_tc", "the family's routing");
        }
        long long ns = family_int(c, "n_shared_experts", 0);
        long long ffn = json_int_or(c->root, fam->key_ffn, 0);
        if (st == MOE_OK) {
            st = family_key(c, "model.n_shared_experts", "n_shared_experts", "0");
        }
        snprintf(text, sizeof(text), "%lld", ns * ffn);
        fact_add(c->info, "model.shared_ffn_dim", text, "moe_intermediate_size * n_shared_experts");
    } else if (fam->shared == MOE_SHARED_GATED) {
        long long sf = family_int(c, fam->key_shared_ffn, 0);
        fact_add(c->info, "model.n_shared_experts", sf > 0 ? "1" : "0",
                 "one shared expert when shared_expert_intermediate_size > 0");
        st = family_key(c, "model.shared_ffn_dim", fam->key_shared_ffn, "0");
    }
    if (st == MOE_OK && fam->route == MOE_ROUTE_GPT_OSS) {
        /* a swiglu_alpha key (the sigmoid's slope; transformers' GptOssExperts and moed's
         * activation fix it at 1.702, and the released configs carry none, but other
         * engines' configs of this activation do): another value is refused rather than
         * computed wrong (JSON's 1.702 is the C literal's double: strtod rounds alike) */
        const json_t *alpha = json_object_get(c->root, "swiglu_alpha");
        if (alpha != NULL && !json_is_null(alpha) && !json_is_number(alpha)) {
            return moe_error_set(c->err, MOE_ERR_UNSUPPORTED, "%s: swiglu_alpha is not a "
                                 "number", c->path);
        }
        if (alpha != NULL && json_is_number(alpha) && json_number_value(alpha) != 1.702) {
            return moe_error_set(c->err, MOE_ERR_UNSUPPORTED,
                                 "%s: swiglu_alpha %.17g: moed's gpt-oss activation has the "
                                 "released models' 1.702 fixed", c->path,
                                 json_number_value(alpha));
        }
        fact_add(c->info, "model.activation", "swiglu_oai", "architecture GptOssForCausalLM");
        st = family_key(c, "model.swiglu_limit", "swiglu_limit", "7");
    } else if (st == MOE_OK) {
        const char *act = json_string_value(json_object_get(c->root, "hidden_act"));
        if (act != NULL && strcmp(act, "silu") != 0) {
            return moe_error_set(c->err, MOE_ERR_UNSUPPORTED, "%s: hidden_act '%s': moed's "
                                 "experts are SwiGLU (silu)", c->path, act);
        }
        fact_add(c->info, "model.activation", "swiglu", "hidden_act silu");
        if (fam->normalize_topk_fixed != NULL) { /* transformers does not read the key */
            fact_add(c->info, "model.normalize_topk", fam->normalize_topk_fixed,
                     "the family's routing (norm_topk_prob not read)");
        } else {
            st = family_key(c, "model.normalize_topk", "norm_topk_prob", "false");
        }
    }
    return st;
}

static moe_status_t family_of(info_ctx_t *c, const moe_family_t **out)
{
    const json_t *arch = json_object_get(c->root, "architectures");
    const char *name = json_string_value(json_array_get(arch, 0));
    char list[512];
    moe_family_list_arch(list, sizeof(list));
    if (name == NULL) {
        return moe_error_set(c->err, MOE_ERR_WEIGHTS, "%s: no \"architectures\": [\"<name>\"] "
                             "(moed supports %s)", c->path, list);
    }
    const moe_family_t *fam = moe_family_by_arch(name);
    if (fam == NULL) {
        return moe_error_set(c->err, MOE_ERR_UNSUPPORTED, "%s: architecture '%s' is not "
                             "supported; moed supports %s", c->path, name, list);
    }
    *out = fam;
    return MOE_OK;
}

#define CK_LAYOUT "a Hugging Face checkpoint folder (config.json with model.safetensors, or " \
                  "model.safetensors.index.json and the shards it names)"

/* model.checkpoint names a folder: anything else is said as what it is, with the key that
 * takes it when there is one. */
static moe_status_t ckpt_dir_check(const char *dir, moe_error_t *err)
{
    struct stat sb;
    char tried[MOE_PATH_MAX + 64];
    if (stat(dir, &sb) != 0) {
        int e = errno;
        moe_path_tried(dir, tried, sizeof(tried));
        return moe_error_set(err, MOE_ERR_WEIGHTS, "model.checkpoint: '%s'%s: %s; %s is "
                             "expected", dir, tried, strerror(e), CK_LAYOUT);
    }
    if (S_ISDIR(sb.st_mode)) {
        return MOE_OK;
    }
    const char *base = strrchr(dir, '/') != NULL ? strrchr(dir, '/') + 1 : dir;
    size_t n = strlen(base), ext = strlen(".safetensors");
    const char *hint = "";
    if (strcmp(base, "config.json") == 0) {
        hint = "; name the folder that holds this config.json";
    } else if (n > ext && strcmp(base + n - ext, ".safetensors") == 0) {
        hint = "; one .safetensors file goes in model.weights instead";
    }
    return moe_error_set(err, MOE_ERR_WEIGHTS, "model.checkpoint: '%s' is %s, not a folder: %s "
                         "is expected%s", dir, moe_file_kind(sb.st_mode), CK_LAYOUT, hint);
}

/* quantization_config.quant_method: moed reads block FP8 (fp8: F8_E4M3 weights with
 * _scale_inv) and MXFP4 (mxfp4: gpt-oss's *_blocks with *_scales) itself; the check of each
 * tensor's dtype is where it is read. Another method (gptq, awq, bitsandbytes,
 * compressed-tensors, ...) stores tensors moed does not read: refused here, by name, rather
 * than as a missing tensor at load. */
static moe_status_t quant_ok(const info_ctx_t *c)
{
    const json_t *qc = json_object_get(c->root, "quantization_config");
    const json_t *qm = json_object_get(qc, "quant_method");
    if (qc == NULL || json_is_null(qc) || qm == NULL || json_is_null(qm)) {
        return MOE_OK;
    }
    const char *m = json_string_value(qm);
    if (m != NULL && (strcmp(m, "fp8") == 0 || strcmp(m, "mxfp4") == 0)) {
        return MOE_OK;
    }
    char text[64] = "";
    if (!json_text(qm, text, sizeof(text))) {
        snprintf(text, sizeof(text), "(not a string)");
    }
    return moe_error_set(c->err, MOE_ERR_UNSUPPORTED, "%s: quantization_config.quant_method "
                         "'%s': moed reads unquantised weights (BF16, F16, F32), block FP8 "
                         "(fp8: DeepSeek-V3, Kimi-K2) and MXFP4 (mxfp4: gpt-oss); use the "
                         "model's BF16 release or dequantise it", c->path, text);
}

moe_status_t moe_ckpt_read_info(const char *dir, moe_cfg_checkpoint_info_t *out,
                                moe_error_t *err)
{
    memset(out, 0, sizeof(*out));
    moe_status_t st = ckpt_dir_check(dir, err);
    if (st != MOE_OK) {
        return st;
    }
    moe_path_join(out->config_path, sizeof(out->config_path), dir, "config.json");
    json_t *root = NULL;
    st = json_load_object(out->config_path, "a checkpoint directory needs it", &root, err);
    if (st != MOE_OK) {
        return st;
    }
    info_ctx_t c = {.info = out, .root = root, .path = out->config_path, .err = err};
    const moe_family_t *fam = NULL;
    st = family_of(&c, &fam);
    c.fam = fam;
    if (st == MOE_OK) {
        st = quant_ok(&c);
    }
    if (st == MOE_OK) {
        st = int_keys_ok(&c, fam);
    }
    if (st == MOE_OK) {
        fact_add(out, "model.family", moe_cfg_family_name(fam->id), "architectures");
        st = fact_key(&c, "model.hidden_dim", "hidden_size", NULL);
    }
    if (st == MOE_OK) {
        st = fact_key(&c, "model.num_experts", fam->key_experts, NULL);
    }
    if (st == MOE_OK) {
        const char *k = fam->key_top_k;
        if (json_object_get(root, k) == NULL && fam->key_top_k_alt != NULL) {
            k = fam->key_top_k_alt;
        }
        st = fact_key(&c, "model.top_k", k, NULL);
    }
    if (st == MOE_OK) {
        st = fact_key(&c, "model.ffn_dim", fam->key_ffn, NULL);
    }
    if (st == MOE_OK) {
        st = family_facts(&c, fam);
    }
    if (st == MOE_OK) {
        st = moe_layers(&c, fam);
    }
    json_decref(root);
    return st;
}

/* ------------------------------------------------------------------------------------ */
/* Tensors                                                                                */

#define CK_SHARDS_MAX 4096

struct moe_ckpt {
    char name[MOE_PATH_MAX];  /* the directory, or the single file */
    char index_path[MOE_PATH_MAX + 32]; /* name + "/model.safetensors.index.json" */
    json_t *index;            /* model.safetensors.index.json, NULL for one file */
    json_t *weight_map;       /* borrowed from index */
    int nfiles;
    char *files[CK_SHARDS_MAX];         /* paths */
    moe_st_file_t *st[CK_SHARDS_MAX];   /* opened on first use */
    int64_t block[2];                   /* FP8 scale block (weight_block_size) */
    char dtypes[64];
};

float moe_fp8_e4m3_to_f32(uint8_t b)
{
    int sign = b >> 7, exp = (b >> 3) & 0xF, mant = b & 0x7;
    float v;
    if (exp == 0xF && mant == 0x7) {
        return NAN;
    }
    if (exp == 0) {
        v = ldexpf((float)mant / 8.0f, -6);
    } else {
        v = ldexpf(1.0f + (float)mant / 8.0f, exp - 7);
    }
    return sign ? -v : v;
}

static moe_status_t ck_add_file(moe_ckpt_t *ck, const char *path, int *idx, moe_error_t *err)
{
    for (int i = 0; i < ck->nfiles; i++) {
        if (strcmp(ck->files[i], path) == 0) {
            *idx = i;
            return MOE_OK;
        }
    }
    if (ck->nfiles >= CK_SHARDS_MAX) {
        return moe_error_set(err, MOE_ERR_UNSUPPORTED, "%s: more than %d shards",
                             ck->index_path, CK_SHARDS_MAX);
    }
    ck->files[ck->nfiles] = strdup(path);
    if (ck->files[ck->nfiles] == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "out of memory");
    }
    *idx = ck->nfiles++;
    return MOE_OK;
}

/* An FP8 scale block's side at most (DeepSeek's is 128): no matrix dimension moed holds is
 * larger, and the scale shapes computed from it stay far from overflow. */
#define CK_FP8_BLOCK_MAX 65536

/* The FP8 block from config.json's quantization_config (128 x 128 when absent). */
static moe_status_t ck_quant(moe_ckpt_t *ck, const char *dir, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 16];
    json_t *root = NULL;
    ck->block[0] = ck->block[1] = 128;
    moe_path_join(path, sizeof(path), dir, "config.json");
    moe_status_t st = json_load_object(path, "a checkpoint directory needs it", &root, err);
    if (st != MOE_OK) {
        return st;
    }
    const json_t *bs = json_object_get(json_object_get(root, "quantization_config"),
                                       "weight_block_size");
    if (bs != NULL && !json_is_null(bs)) { /* null: the default, as an absent key */
        long long a = json_integer_value(json_array_get(bs, 0));
        long long b = json_integer_value(json_array_get(bs, 1));
        if (json_array_size(bs) != 2 || a < 1 || b < 1 || a > CK_FP8_BLOCK_MAX ||
            b > CK_FP8_BLOCK_MAX) {
            st = moe_error_set(err, MOE_ERR_WEIGHTS, "%s: quantization_config.weight_block_size "
                               "must be [rows, cols] of integers in [1, %d]", path,
                               CK_FP8_BLOCK_MAX);
        }
        ck->block[0] = a;
        ck->block[1] = b;
    }
    json_decref(root);
    return st;
}

/* The index: every weight_map value a plain file name in the directory. */
static moe_status_t ck_index(moe_ckpt_t *ck, moe_error_t *err)
{
    moe_status_t st = json_load_object(ck->index_path, "the shard index", &ck->index, err);
    if (st != MOE_OK) {
        return st;
    }
    ck->weight_map = json_object_get(ck->index, "weight_map");
    if (!json_is_object(ck->weight_map)) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: no \"weight_map\" object",
                             ck->index_path);
    }
    const char *key;
    json_t *v;
    json_object_foreach(ck->weight_map, key, v) {
        const char *file = json_string_value(v);
        char path[2 * MOE_PATH_MAX];
        int idx;
        if (file == NULL || file[0] == '\0' || strchr(file, '/') != NULL ||
            strcmp(file, "..") == 0) {
            return moe_error_set(err, MOE_ERR_FORMAT, "%s: weight_map entry '%.200s' is not a "
                                 "file name in the directory", ck->index_path, key);
        }
        moe_path_join(path, sizeof(path), ck->name, file);
        if ((st = ck_add_file(ck, path, &idx, err)) != MOE_OK) {
            return st;
        }
    }
    /* Every shard the index names must be there, even one this rank never reads: a missing
     * shard is a broken download, better said at once than by whichever rank needs it. */
    for (int i = 0; i < ck->nfiles; i++) {
        struct stat sb;
        if (stat(ck->files[i], &sb) != 0) {
            return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: names shard %s, which is not "
                                 "there", ck->index_path, ck->files[i]);
        }
        if (!S_ISREG(sb.st_mode)) { /* a FIFO would make its reader wait: refused now */
            return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: names shard %s, which is not a "
                                 "regular file (%s)", ck->index_path, ck->files[i],
                                 moe_file_kind(sb.st_mode));
        }
    }
    return MOE_OK;
}

static moe_status_t ck_open_dir(moe_ckpt_t *ck, const char *dir, moe_error_t *err)
{
    char single[MOE_PATH_MAX + 32];
    int idx;
    snprintf(ck->name, sizeof(ck->name), "%s", dir);
    moe_path_join(ck->index_path, sizeof(ck->index_path), dir, "model.safetensors.index.json");
    moe_path_join(single, sizeof(single), dir, "model.safetensors");
    moe_status_t st = ck_quant(ck, dir, err);
    if (st != MOE_OK) {
        return st;
    }
    if (path_exists(ck->index_path)) {
        return ck_index(ck, err); /* which refuses an index that is not a regular file */
    }
    if (!path_exists(single)) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: neither model.safetensors nor "
                             "model.safetensors.index.json is there", dir);
    }
    st = ck_add_file(ck, single, &idx, err);
    return st == MOE_OK ? moe_st_open(single, &ck->st[0], err) : st;
}

moe_status_t moe_ckpt_open(const moe_config_t *cfg, moe_ckpt_t **out, moe_error_t *err)
{
    moe_ckpt_t *ck = calloc(1, sizeof(*ck));
    moe_status_t st;
    int idx;
    if (ck == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "out of memory opening the weights");
    }
    if (strcmp(cfg->checkpoint, "none") != 0) {
        st = ck_open_dir(ck, cfg->checkpoint, err);
    } else {
        snprintf(ck->name, sizeof(ck->name), "%s", cfg->weights);
        ck->block[0] = ck->block[1] = 128;
        st = ck_add_file(ck, cfg->weights, &idx, err);
        if (st == MOE_OK) {
            st = moe_st_open(cfg->weights, &ck->st[0], err);
        }
    }
    if (st != MOE_OK) {
        moe_ckpt_close(ck);
        return st;
    }
    *out = ck;
    return MOE_OK;
}

void moe_ckpt_close(moe_ckpt_t *ck)
{
    if (ck == NULL) {
        return;
    }
    for (int i = 0; i < ck->nfiles; i++) {
        moe_st_close(ck->st[i]);
        free(ck->files[i]);
    }
    json_decref(ck->index);
    free(ck);
}

const char *moe_ckpt_name(const moe_ckpt_t *ck)
{
    return ck->name;
}

const char *moe_ckpt_dtypes(const moe_ckpt_t *ck)
{
    return ck->dtypes[0] != '\0' ? ck->dtypes : "-";
}

static void ck_note_dtype(moe_ckpt_t *ck, const char *dtype)
{
    size_t len = strlen(ck->dtypes), dl = strlen(dtype);
    for (const char *p = strstr(ck->dtypes, dtype); p != NULL; p = strstr(p + 1, dtype)) {
        if ((p == ck->dtypes || p[-1] == '+') && (p[dl] == '\0' || p[dl] == '+')) {
            return;
        }
    }
    snprintf(ck->dtypes + len, sizeof(ck->dtypes) - len, "%s%s", len > 0 ? "+" : "", dtype);
}

bool moe_ckpt_has(moe_ckpt_t *ck, const char *name)
{
    if (ck->index != NULL) {
        return json_object_get(ck->weight_map, name) != NULL;
    }
    return moe_st_find(ck->st[0], name) != NULL;
}

/* Tensor `name` is not in the checkpoint. */
static moe_status_t ck_missing(moe_ckpt_t *ck, const char *name, const char *where,
                               const char *what, moe_error_t *err)
{
    (void)ck;
    return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: %s '%.200s'", where, what, name);
}

/* The file holding tensor `name` (opened now if it was not) and its entry. */
static moe_status_t ck_locate(moe_ckpt_t *ck, const char *name, moe_st_file_t **f,
                              const moe_st_tensor_info_t **ti, moe_error_t *err)
{
    int idx = 0;
    if (ck->index != NULL) {
        const char *file = json_string_value(json_object_get(ck->weight_map, name));
        char path[2 * MOE_PATH_MAX];
        if (file == NULL) {
            return ck_missing(ck, name, ck->index_path, "the index names no tensor", err);
        }
        moe_path_join(path, sizeof(path), ck->name, file);
        moe_status_t st = ck_add_file(ck, path, &idx, err); /* finds the one listed at open */
        if (st == MOE_OK && ck->st[idx] == NULL) {
            st = moe_st_open(path, &ck->st[idx], err);
        }
        if (st != MOE_OK) {
            return st;
        }
    }
    *f = ck->st[idx];
    *ti = moe_st_find(*f, name);
    if (*ti == NULL && ck->index == NULL) {
        return ck_missing(ck, name, ck->files[idx], "no tensor", err);
    }
    if (*ti == NULL) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: no tensor '%.200s' although the index "
                             "puts it there", ck->files[idx], name);
    }
    return MOE_OK;
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && pos < n; i++) {
        int w = snprintf(buf + pos, n - pos, "%s%lld", i == 0 ? "[" : ", ", (long long)shape[i]);
        pos += w > 0 ? (size_t)w : 0;
    }
    if (pos < n) {
        snprintf(buf + pos, n - pos, "%s", ndim == 0 ? "[]" : "]");
    }
}

static void ck_tensor_file(const moe_ckpt_t *ck, const char *name, char *buf, size_t n);

/* The tensor's shape against the one its config wants; a mismatch names its shard. */
static moe_status_t ck_shape_check(const moe_ckpt_t *ck, const moe_st_tensor_info_t *ti,
                                   int ndim, const int64_t *shape, moe_error_t *err)
{
    bool same = ti->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) {
        same = ti->shape[i] == shape[i];
    }
    if (same) {
        return MOE_OK;
    }
    char have[128], want[128], file[2 * MOE_PATH_MAX];
    shape_text(have, sizeof(have), ti->ndim, ti->shape);
    shape_text(want, sizeof(want), ndim, shape);
    ck_tensor_file(ck, ti->name, file, sizeof(file));
    return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' has shape %s but %s was "
                         "expected from %s's config", file, ti->name, have, want, ck->name);
}

/* The file name of tensor `name` for messages: DIR/SHARD with an index, else the file. */
static void ck_tensor_file(const moe_ckpt_t *ck, const char *name, char *buf, size_t n)
{
    const char *file = ck->index != NULL
                           ? json_string_value(json_object_get(ck->weight_map, name))
                           : NULL;
    if (file != NULL) {
        moe_path_join(buf, n, ck->name, file);
    } else {
        snprintf(buf, n, "%s", ck->files[0]);
    }
}

/* weight [R, C] F8_E4M3 (in file f) with name_scale_inv [ceil(R/b0), ceil(C/b1)] F32, as
 * stored: raw [R * C] codes, scale [ceil(R/b0) * ceil(C/b1)]. Refuses, naming the shard,
 * tensor, element, code and scale, a NaN code (0x7f, 0xff) or an element whose value (code
 * times scale) is not finite. */
static moe_status_t ck_read_fp8_raw(moe_ckpt_t *ck, moe_st_file_t *f, const char *name,
                                    const int64_t *shape, uint8_t *raw, float *scale,
                                    moe_error_t *err)
{
    char sname[512];
    int64_t R = shape[0], C = shape[1], b0 = ck->block[0], b1 = ck->block[1];
    int64_t sshape[2] = {(R + b0 - 1) / b0, (C + b1 - 1) / b1};
    moe_st_file_t *sf = NULL;
    const moe_st_tensor_info_t *sti = NULL;
    snprintf(sname, sizeof(sname), "%s_scale_inv", name);
    if (!moe_ckpt_has(ck, sname)) { /* with an index, the index is what lacks it */
        char file[2 * MOE_PATH_MAX];
        ck_tensor_file(ck, name, file, sizeof(file));
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: FP8 weight '%.200s' has no scale "
                             "tensor '%.200s'%s", ck->index != NULL ? ck->index_path : file,
                             name, sname, ck->index != NULL ? " in the index" : "");
    }
    moe_status_t st = ck_locate(ck, sname, &sf, &sti, err);
    if (st == MOE_OK) {
        st = ck_shape_check(ck, sti, 2, sshape, err);
    }
    if (st == MOE_OK) {
        st = moe_st_read_f32_shaped(sf, sname, 2, sshape, scale, err);
    }
    if (st == MOE_OK) {
        st = moe_st_read_raw(f, name, raw, (size_t)(R * C), err);
    }
    int64_t bad = -1; /* the first element that is NaN (code 0x7f/0xff) or overflows */
    float badv = 0.0f;
    for (int64_t r = 0; st == MOE_OK && bad < 0 && r < R; r++) {
        const float *srow = scale + (r / b0) * sshape[1];
        for (int64_t c = 0; c < C; c++) {
            float v = moe_fp8_e4m3_to_f32(raw[r * C + c]) * srow[c / b1];
            if (!isfinite(v)) {
                bad = r * C + c;
                badv = v;
                break;
            }
        }
    }
    if (st == MOE_OK && bad >= 0) {
        char file[2 * MOE_PATH_MAX];
        ck_tensor_file(ck, name, file, sizeof(file));
        st = moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' (F8_E4M3) holds %s "
                           "at element %lld (code 0x%02x, scale %g): moed refuses weights that "
                           "are not finite", file, name, isnan(badv) ? "NaN" : "inf",
                           (long long)bad, raw[bad],
                           (double)scale[(bad / C / b0) * sshape[1] + bad % C / b1]);
    }
    return st;
}

/* weight [R, C] F8_E4M3 with name_scale_inv, dequantised to F32 (value = code x scale). */
static moe_status_t ck_read_fp8(moe_ckpt_t *ck, moe_st_file_t *f, const char *name,
                                const int64_t *shape, float *dst, moe_error_t *err)
{
    int64_t R = shape[0], C = shape[1], b0 = ck->block[0], b1 = ck->block[1];
    int64_t sc = (C + b1 - 1) / b1;
    float *scale = malloc((size_t)(((R + b0 - 1) / b0) * sc) * sizeof(float));
    uint8_t *raw = malloc((size_t)(R * C));
    moe_status_t st = scale == NULL || raw == NULL
                          ? moe_error_set(err, MOE_ERR_NO_MEMORY, "out of memory for FP8")
                          : ck_read_fp8_raw(ck, f, name, shape, raw, scale, err);
    for (int64_t r = 0; st == MOE_OK && r < R; r++) {
        for (int64_t c = 0; c < C; c++) {
            dst[r * C + c] = moe_fp8_e4m3_to_f32(raw[r * C + c]) * scale[(r / b0) * sc + c / b1];
        }
    }
    free(raw);
    free(scale);
    return st;
}

/* The file and header entry of tensor `name`, which must have shape[ndim]. */
static moe_status_t ck_find_shaped(moe_ckpt_t *ck, const char *name, int ndim,
                                   const int64_t *shape, moe_st_file_t **f,
                                   const moe_st_tensor_info_t **ti, moe_error_t *err)
{
    moe_status_t st = ck_locate(ck, name, f, ti, err);
    return st == MOE_OK ? ck_shape_check(ck, *ti, ndim, shape, err) : st;
}

moe_status_t moe_ckpt_read(moe_ckpt_t *ck, const char *name, int ndim, const int64_t *shape,
                           float *dst, moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    const moe_st_tensor_info_t *ti = NULL;
    moe_status_t st = ck_find_shaped(ck, name, ndim, shape, &f, &ti, err);
    if (st != MOE_OK) {
        return st;
    }
    if (strcmp(ti->dtype_name, "F8_E4M3") == 0 && ndim == 2) {
        st = ck_read_fp8(ck, f, name, shape, dst, err);
    } else {
        st = moe_st_read_f32_shaped(f, name, ndim, shape, dst, err);
    }
    if (st == MOE_OK) {
        ck_note_dtype(ck, ti->dtype_name);
    }
    return st;
}

moe_status_t moe_ckpt_dtype_of(moe_ckpt_t *ck, const char *name, const char **dtype,
                               moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    const moe_st_tensor_info_t *ti = NULL;
    moe_status_t st = ck_locate(ck, name, &f, &ti, err);
    if (st == MOE_OK) {
        *dtype = ti->dtype_name;
    }
    return st;
}

moe_status_t moe_ckpt_read_slab(moe_ckpt_t *ck, const char *name, int ndim,
                                const int64_t *shape, int64_t index, float *dst,
                                moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    const moe_st_tensor_info_t *ti = NULL;
    moe_status_t st = ck_find_shaped(ck, name, ndim, shape, &f, &ti, err);
    if (st != MOE_OK) {
        return st;
    }
    uint64_t slab = 1;
    for (int i = 1; i < ndim; i++) {
        slab *= (uint64_t)shape[i];
    }
    st = moe_st_read_f32_range(f, name, (uint64_t)index * slab, (size_t)slab, dst, err);
    if (st == MOE_OK) {
        ck_note_dtype(ck, ti->dtype_name);
    }
    return st;
}

moe_status_t moe_ckpt_read_fp8(moe_ckpt_t *ck, const char *name, int64_t rows, int64_t cols,
                               uint8_t *codes, float *scales, moe_error_t *err)
{
    moe_st_file_t *f = NULL;
    const moe_st_tensor_info_t *ti = NULL;
    int64_t shape[2] = {rows, cols};
    moe_status_t st = ck_find_shaped(ck, name, 2, shape, &f, &ti, err);
    if (st == MOE_OK && strcmp(ti->dtype_name, "F8_E4M3") != 0) {
        char file[2 * MOE_PATH_MAX];
        ck_tensor_file(ck, name, file, sizeof(file));
        st = moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' is %s, but this rank "
                           "holds its experts in FP8 as stored (the first expert tensor is "
                           "F8_E4M3): the checkpoint mixes types; set model.dtype: bf16",
                           file, name, ti->dtype_name);
    }
    if (st == MOE_OK) {
        st = ck_read_fp8_raw(ck, f, name, shape, codes, scales, err);
    }
    if (st == MOE_OK) {
        ck_note_dtype(ck, "F8_E4M3");
    }
    return st;
}

void moe_ckpt_fp8_block(const moe_ckpt_t *ck, int64_t block[2])
{
    block[0] = ck->block[0];
    block[1] = ck->block[1];
}

bool moe_ckpt_is_mxfp4(moe_ckpt_t *ck, const char *name)
{
    char blocks[512];
    snprintf(blocks, sizeof(blocks), "%s_blocks", name);
    return !moe_ckpt_has(ck, name) && moe_ckpt_has(ck, blocks);
}

float moe_mxfp4_value(uint8_t nibble)
{
    /* OCP MX v1.0, FP4 E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no inf/NaN */
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (nibble & 8) ? -mag[nibble & 7] : mag[nibble & 7];
}

float moe_e8m0_to_f32(uint8_t e)
{
    return e == 255 ? NAN : ldexpf(1.0f, (int)e - 127); /* OCP MX v1.0 E8M0: 0xFF is NaN */
}

/* NAME_blocks [E, R, C/32, 16] U8 and NAME_scales [E, R, C/32] U8 (shape = E, R, C). */
static moe_status_t ck_mxfp4_find(moe_ckpt_t *ck, const char *name, const int64_t *shape,
                                  char *bname, char *sname, size_t n, moe_st_file_t **bf,
                                  moe_st_file_t **sf, moe_error_t *err)
{
    const moe_st_tensor_info_t *bt = NULL, *stt = NULL;
    int64_t E = shape[0], R = shape[1], C = shape[2];
    snprintf(bname, n, "%s_blocks", name);
    snprintf(sname, n, "%s_scales", name);
    if (C % MOE_CKPT_MXFP4_BLOCK != 0) {
        return moe_error_set(err, MOE_ERR_WEIGHTS, "%s: MXFP4 tensor '%.200s' has %lld inputs, "
                             "not a multiple of its %d-value scale blocks", ck->name, name,
                             (long long)C, MOE_CKPT_MXFP4_BLOCK);
    }
    int64_t bshape[4] = {E, R, C / MOE_CKPT_MXFP4_BLOCK, MOE_CKPT_MXFP4_BLOCK / 2};
    moe_status_t st = ck_find_shaped(ck, bname, 4, bshape, bf, &bt, err);
    if (st == MOE_OK) {
        st = ck_find_shaped(ck, sname, 3, bshape, sf, &stt, err);
    }
    const moe_st_tensor_info_t *bad = st != MOE_OK                          ? NULL
                                      : strcmp(bt->dtype_name, "U8") != 0  ? bt
                                      : strcmp(stt->dtype_name, "U8") != 0 ? stt
                                                                           : NULL;
    if (bad != NULL) {
        char file[2 * MOE_PATH_MAX];
        ck_tensor_file(ck, bad->name, file, sizeof(file));
        st = moe_error_set(err, MOE_ERR_WEIGHTS, "%s: MXFP4 tensor '%.200s' is %s; its "
                           "_blocks and _scales are U8", file, bad->name, bad->dtype_name);
    }
    return st;
}

moe_status_t moe_ckpt_read_mxfp4_slab(moe_ckpt_t *ck, const char *name, const int64_t *shape,
                                      int64_t index, uint8_t *blocks, uint8_t *scales,
                                      moe_error_t *err)
{
    char bname[512], sname[512];
    moe_st_file_t *bf = NULL, *sf = NULL;
    int64_t R = shape[1], C = shape[2], nb = R * C / 2, ns = R * C / MOE_CKPT_MXFP4_BLOCK;
    moe_status_t st = ck_mxfp4_find(ck, name, shape, bname, sname, sizeof(bname), &bf, &sf, err);
    if (st == MOE_OK) {
        st = moe_st_read_raw_range(bf, bname, (uint64_t)(index * nb), blocks, (size_t)nb, err);
    }
    if (st == MOE_OK) {
        st = moe_st_read_raw_range(sf, sname, (uint64_t)(index * ns), scales, (size_t)ns, err);
    }
    for (int64_t i = 0; st == MOE_OK && i < ns; i++) {
        char file[2 * MOE_PATH_MAX];
        if (scales[i] == 255) {
            ck_tensor_file(ck, sname, file, sizeof(file));
            st = moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' (U8, e8m0) holds NaN "
                               "(255) at element %lld: moed refuses weights that are not "
                               "finite", file, sname, (long long)(index * ns + i));
        } else if (scales[i] >= 253) { /* 2^126 and up: 2 x 2^127 or 4 x 2^126 is past F32 */
            const uint8_t *b = blocks + i * (MOE_CKPT_MXFP4_BLOCK / 2);
            float big = 0.0f;
            for (int j = 0; j < MOE_CKPT_MXFP4_BLOCK / 2; j++) {
                big = fmaxf(big, fmaxf(fabsf(moe_mxfp4_value(b[j] & 0xF)),
                                       fabsf(moe_mxfp4_value(b[j] >> 4))));
            }
            if ((double)big * ldexp(1.0, scales[i] - 127) > FLT_MAX) {
                ck_tensor_file(ck, sname, file, sizeof(file));
                st = moe_error_set(err, MOE_ERR_WEIGHTS, "%s: tensor '%.200s' (U8, e8m0) scale "
                                   "%d (2^%d) at element %lld makes its block's %g overflow "
                                   "F32: moed refuses weights that are not finite", file,
                                   sname, scales[i], scales[i] - 127,
                                   (long long)(index * ns + i), (double)big);
            }
        }
    }
    if (st == MOE_OK) {
        ck_note_dtype(ck, "MXFP4");
    }
    return st;
}

moe_status_t moe_ckpt_read_mxfp4_f32(moe_ckpt_t *ck, const char *name, const int64_t *shape,
                                     int64_t index, float *dst, moe_error_t *err)
{
    int64_t R = shape[1], C = shape[2];
    uint8_t *blocks = malloc((size_t)(R * C / 2) + 1);
    uint8_t *scales = malloc((size_t)(R * C / MOE_CKPT_MXFP4_BLOCK) + 1);
    moe_status_t st = blocks == NULL || scales == NULL
                          ? moe_error_set(err, MOE_ERR_NO_MEMORY, "out of memory for MXFP4")
                          : moe_ckpt_read_mxfp4_slab(ck, name, shape, index, blocks, scales, err);
    /* transformers' convert_moe_packed_tensors: the low nibble is the even element */
    for (int64_t i = 0; st == MOE_OK && i < R * C / 2; i++) {
        float s = moe_e8m0_to_f32(scales[i * 2 / MOE_CKPT_MXFP4_BLOCK]);
        dst[2 * i] = moe_mxfp4_value(blocks[i] & 0xF) * s;
        dst[2 * i + 1] = moe_mxfp4_value(blocks[i] >> 4) * s;
    }
    free(blocks);
    free(scales);
    return st;
}
