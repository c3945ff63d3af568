/* The config's cross checks, once every key is known: top_k, the placement against the
 * model and the world, the ranks, model.checkpoint's config.json facts and model.layers,
 * each family's knobs, the rebalance, and moe_cfg_parse on top of the loader, the checks
 * and the placement (config_int.h lists the part's files). A failed check cites the node
 * that set the value (cfg_parse_t's marks), or config.json when that file set it. */
#include "moe_config/config.h"
#include "moe/hash.h"

#include "config/config_int.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* Cross checks, once every key is known                                                  */
/* ------------------------------------------------------------------------------------ */

/* The fact of model.checkpoint's config.json that set the key `path` (the YAML does not
 * give it), or NULL. */
static const moe_cfg_fact_t *ckpt_fact_of(const cfg_parse_t *p, const char *path)
{
    for (int i = 0; i < p->num_ckpt_facts; i++) {
        if (strcmp(p->ckpt_facts[i].path, path) == 0) {
            return &p->ckpt_facts[i];
        }
    }
    return NULL;
}

/* A check failed on the value of `path`: the YAML's error at its mark (exit 3) when the
 * YAML gives it; when config.json set it, that file's error (MOE_ERR_WEIGHTS, exit 4)
 * naming the key it came from; else the YAML's at mark `m`. */
static moe_status_t key_fail(cfg_parse_t *p, const char *path, moe_cfg_mark_t m,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static moe_status_t key_fail(cfg_parse_t *p, const char *path, moe_cfg_mark_t m,
                             const char *fmt, ...)
{
    char msg[MOE_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    const moe_cfg_fact_t *f = cfg_key_given(p, path) ? NULL : ckpt_fact_of(p, path);
    if (f == NULL) {
        moe_status_t st = cfg_failv(p, MOE_ERR_CONFIG, cfg_key_given(p, path) ?
                                    cfg_val_mark_of(p, path) : m, fmt, ap);
        va_end(ap);
        return st;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return moe_error_set(p->err, MOE_ERR_WEIGHTS, "%s: %s (%s is this file's %s %s)",
                         p->ckpt_path, msg, path, f->source, f->value);
}

static moe_status_t check_top_k(cfg_parse_t *p)
{
    const moe_config_t *c = &p->cfg;
    if (c->top_k <= c->num_experts) {
        return MOE_OK;
    }
    const moe_cfg_fact_t *fk =
        cfg_key_given(p, "model.top_k") ? NULL : ckpt_fact_of(p, "model.top_k");
    if (fk != NULL) { /* the checkpoint contradicts itself: the YAML cannot fix that */
        const moe_cfg_fact_t *fe = ckpt_fact_of(p, "model.num_experts");
        return moe_error_set(p->err, MOE_ERR_WEIGHTS, "%s: %s %s is more than %s %lld "
                             "(moed's model.top_k and model.num_experts): a token cannot "
                             "choose more experts than a layer has; check the file",
                             p->ckpt_path, fk->source, fk->value,
                             fe != NULL ? fe->source : "model.num_experts",
                             (long long)c->num_experts);
    }
    moe_cfg_mark_t m = cfg_val_mark_of(p, "model.top_k");
    if (m.line == 0) {
        m = cfg_val_mark_of(p, "model.num_experts"); /* top_k is the default: num_experts shrank */
    }
    return cfg_fail(p, m,
                    "model.top_k: %lld is more than model.num_experts (%lld); set top_k to at "
                    "most %lld or add experts",
                    (long long)c->top_k, (long long)c->num_experts, (long long)c->num_experts);
}

/* "the job has 3 ranks (0..2)" */
static void world_text(char *buf, size_t n, int world)
{
    snprintf(buf, n, "the job has %d rank%s (0..%d)", world, world == 1 ? "" : "s", world - 1);
}

static const char *set_path(int set)
{
    return set == 0 ? "placement.experts" : "placement.layers";
}

/* A rank holds one copy of an expert: the same id twice under one rank is a mistake. */
static moe_status_t check_twice_on_rank(cfg_parse_t *p)
{
    for (int i = 1; i < p->num_ent; i++) {
        const moe_cfg_replica_t *a = &p->ent[i - 1].r, *b = &p->ent[i].r;
        if (a->set == b->set && a->expert == b->expert && a->rank == b->rank) {
            char where[48] = "";
            if (b->set > 0) {
                snprintf(where, sizeof(where), " of layer %d", b->set - 1);
            }
            return cfg_fail(p, p->ent[i].mark,
                            "%s: expert %d is listed twice under rank %d%s (first at line %d); "
                            "a rank holds one copy of an expert (replicas go on other ranks)",
                            set_path(b->set), b->expert, (int)b->rank, where,
                            p->ent[i - 1].mark.line);
        }
    }
    return MOE_OK;
}

/* Explicit expert ids must name experts of the model: report the first such id in the file. */
static moe_status_t check_expert_ids(cfg_parse_t *p)
{
    int64_t ne = p->cfg.num_experts;
    int bad = -1;
    for (int i = 0; i < p->num_ent; i++) {
        if (p->ent[i].r.expert >= ne &&
            (bad < 0 || cfg_mark_before(p->ent[i].mark, p->ent[bad].mark))) {
            bad = i;
        }
    }
    if (bad < 0) {
        return MOE_OK;
    }
    return cfg_fail(p, p->ent[bad].mark,
                    "%s: expert %d does not exist: model.num_experts is %lld (ids 0..%lld)",
                    set_path(p->ent[bad].r.set), p->ent[bad].r.expert, (long long)ne,
                    (long long)ne - 1);
}

/* placement.layers names moed layers 0..num_layers-1. */
static moe_status_t check_layer_keys(cfg_parse_t *p)
{
    int64_t nl = p->cfg.num_layers;
    for (int64_t l = nl; l < MOE_MAX_LAYER_IDS; l++) {
        if (p->pl_layer_mark[l].line > 0) {
            return cfg_fail(p, p->pl_layer_mark[l],
                            "placement.layers: layer %lld does not exist: the run has %lld MoE "
                            "layers (0..%lld)", (long long)l, (long long)nl, (long long)nl - 1);
        }
    }
    return MOE_OK;
}

/* Rank keys beyond the world: report the first in the file. */
static moe_status_t check_placement_ranks(cfg_parse_t *p, int world)
{
    char wt[64];
    int bad = -1;
    moe_cfg_mark_t bm = {0, 0};
    for (int r = world; r < MOE_MAX_RANKS; r++) {
        bool listed = p->rank_mark[r].line > 0;
        if (listed && (bad < 0 || cfg_mark_before(p->rank_mark[r], bm))) {
            bad = r;
            bm = p->rank_mark[r];
        }
    }
    const char *path = "placement.experts";
    for (int i = 0; i < p->num_ent; i++) { /* layers' maps: cite the first id under it */
        const cfg_entry_t *x = &p->ent[i];
        if (x->r.set > 0 && x->r.rank >= world && (bad < 0 || cfg_mark_before(x->mark, bm))) {
            bad = x->r.rank;
            bm = x->mark;
            path = "placement.layers";
        }
    }
    if (bad < 0) {
        return MOE_OK;
    }
    world_text(wt, sizeof(wt), world);
    if (strcmp(path, "placement.layers") == 0) { /* a layer's placement has no 'auto' */
        return cfg_fail(p, bm,
                        "%s: rank %d does not exist: %s; list the layer's experts only under "
                        "ranks that exist, or leave the layer out (it then follows "
                        "placement.experts)", path, bad, wt);
    }
    return cfg_fail(p, bm,
                    "%s: rank %d does not exist: %s; list experts only under ranks that exist, "
                    "or use 'auto'", path, bad, wt);
}

/* Every expert needs a rank in set `set` (entries sorted); list the ones without (the list
 * is cut to fit one line). */
static moe_status_t check_set_covered(cfg_parse_t *p, int set, moe_cfg_mark_t m)
{
    char ids[512], where[48] = "";
    size_t pos = 0;
    int missing = 0, i = 0;
    int64_t ne = p->cfg.num_experts;
    ids[0] = '\0';
    while (i < p->num_ent && p->ent[i].r.set < set) {
        i++;
    }
    for (int64_t e = 0; e < ne; e++) {
        bool has = i < p->num_ent && p->ent[i].r.set == set && p->ent[i].r.expert == e;
        while (i < p->num_ent && p->ent[i].r.set == set && p->ent[i].r.expert == e) {
            i++;
        }
        if (!has) {
            if (missing < 32) {
                cfg_buf_add(ids, sizeof(ids), &pos, "%s%lld", missing == 0 ? "" : " ",
                            (long long)e);
            }
            missing++;
        }
    }
    if (missing == 0) {
        return MOE_OK;
    }
    if (missing > 32) {
        cfg_buf_add(ids, sizeof(ids), &pos, " ... (%d in all)", missing);
    }
    if (set > 0) {
        snprintf(where, sizeof(where), "layer %d: ", set - 1);
    }
    return cfg_fail(p, m,
                    "%s: %s%s %s %s assigned to no rank; each of the %lld experts (0..%lld) "
                    "needs at least one rank", set_path(set), where,
                    missing == 1 ? "expert" : "experts", ids, missing == 1 ? "is" : "are",
                    (long long)ne, (long long)ne - 1);
}

static moe_status_t check_experts_covered(cfg_parse_t *p)
{
    moe_status_t st = MOE_OK;
    if (!p->cfg.placement_auto) {
        st = check_set_covered(p, 0, cfg_val_mark_of(p, "placement.experts"));
    }
    for (int l = 0; st == MOE_OK && l < MOE_MAX_LAYER_IDS; l++) {
        if (p->pl_layer_mark[l].line > 0) {
            st = check_set_covered(p, l + 1, p->pl_layer_mark[l]);
        }
    }
    return st;
}

/* The CUDA back-end uploads every layer's experts as one (layer x local count) table and
 * has not been run with copies split between ranks: refuse what it was not built for
 * rather than run it wrong. */
static moe_status_t check_placement_cuda(cfg_parse_t *p)
{
    if (p->cfg.device != MOE_DEVICE_CUDA) {
        return MOE_OK;
    }
    if (p->cfg.copies != MOE_COPIES_REPLICAS) {
        return cfg_fail(p, cfg_val_mark_of(p, "placement.copies"), "placement.copies: %s "
                        "runs on runtime.device: cpu only (the GPU back-end holds one copy of "
                        "each expert); use placement.copies: replicas",
                        p->cfg.copies == MOE_COPIES_COLUMNS ? "columns" : "balance");
    }
    for (int l = 0; l < MOE_MAX_LAYER_IDS; l++) {
        if (p->pl_layer_mark[l].line > 0) {
            return cfg_fail(p, cfg_val_mark_of(p, "placement.layers"), "placement.layers: not "
                            "supported with runtime.device: cuda yet (the GPU back-end holds "
                            "the same experts in every layer); use runtime.device: cpu, or one "
                            "placement.experts for every layer");
        }
    }
    for (int i = 1; i < p->num_ent; i++) {
        const moe_cfg_replica_t *a = &p->ent[i - 1].r, *b = &p->ent[i].r;
        if (a->set == 0 && b->set == 0 && a->expert == b->expert) {
            return cfg_fail(p, p->ent[i].mark, "placement.experts: expert %d is listed under "
                            "ranks %d and %d: replicas are not supported with runtime.device: "
                            "cuda yet; use runtime.device: cpu, or give each expert one rank",
                            (int)b->expert, (int)a->rank, (int)b->rank);
        }
    }
    return MOE_OK;
}

static moe_status_t check_placement(cfg_parse_t *p, int world)
{
    qsort(p->ent, (size_t)p->num_ent, sizeof(p->ent[0]), cfg_entry_cmp);
    moe_status_t st = check_twice_on_rank(p);
    if (st == MOE_OK) {
        st = check_expert_ids(p);
    }
    if (st == MOE_OK) {
        st = check_layer_keys(p);
    }
    if (st == MOE_OK && world > 1) { /* one rank hosts everything: rank keys don't matter */
        st = check_placement_ranks(p, world);
    }
    if (st == MOE_OK) {
        st = check_experts_covered(p);
    }
    if (st == MOE_OK && world > 1) {
        st = check_placement_cuda(p);
    }
    return st;
}

/* master_rank and profiled_ranks must exist; with one rank both are moot (see header). */
static moe_status_t check_ranks(cfg_parse_t *p, int world)
{
    char wt[64];
    const moe_config_t *c = &p->cfg;
    if (world == 1) {
        return MOE_OK;
    }
    world_text(wt, sizeof(wt), world);
    if (c->master_rank >= world) {
        return cfg_fail(p, cfg_val_mark_of(p, "placement.master_rank"),
                        "placement.master_rank: rank %lld does not exist: %s",
                        (long long)c->master_rank, wt);
    }
    for (int i = 0; !c->prof_all_ranks && i < c->prof_num_ranks; i++) {
        int32_t r = c->prof_ranks[i];
        if (r >= world) {
            return cfg_fail(p, p->prof_rank_mark[r],
                            "profiler.profiled_ranks: rank %d does not exist: %s", (int)r, wt);
        }
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* model.checkpoint, model.layers and the family's knobs                                  */
/* ------------------------------------------------------------------------------------ */

static moe_cfg_checkpoint_fn cfg_checkpoint_reader;

void moe_cfg_set_checkpoint_reader(moe_cfg_checkpoint_fn fn)
{
    cfg_checkpoint_reader = fn;
}

static moe_cfg_input_rows_fn cfg_input_reader;
static int64_t cfg_steps_override = -1;

void moe_cfg_set_steps_override(int64_t steps)
{
    cfg_steps_override = steps;
}

void moe_cfg_set_input_reader(moe_cfg_input_rows_fn fn)
{
    cfg_input_reader = fn;
}

/* workload.tokens_per_step left out with an input file: the file's row count (moe_config/config.h
 * moe_cfg_set_input_reader); within the key's range, else the default stays and the load
 * says what the file has. */
static void input_tokens(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    const cfg_key_t *k = cfg_key_by_path("workload.tokens_per_step");
    int64_t rows = 0;
    moe_error_t ignored;
    moe_error_clear(&ignored);
    if (cfg_input_reader == NULL || k == NULL || cfg_key_given(p, k->path) ||
        strcmp(c->input, "random") == 0 ||
        cfg_input_reader(c->input, &rows, &ignored) != MOE_OK) {
        return;
    }
    if (rows >= k->imin && rows <= k->imax) {
        c->tokens_per_step = rows;
    }
}

/* A checkpoint problem is bad input (exit 4), not a config error: MOE_ERR_WEIGHTS. */
static moe_status_t ckpt_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static moe_status_t ckpt_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    moe_status_t st = cfg_failv(p, MOE_ERR_WEIGHTS, m, fmt, ap);
    va_end(ap);
    return st;
}

/* One value of config.json: set it, or check the YAML's own value agrees. Both sides go
 * through the key's parser, so "7168" and 7168.0 compare as the same number. */
static moe_status_t fact_apply(cfg_parse_t *p, const moe_cfg_checkpoint_info_t *info,
                               const moe_cfg_fact_t *f, moe_config_t *scratch)
{
    char why[MOE_ERROR_MSG_MAX / 2], mine[64];
    const cfg_key_t *k = cfg_key_by_path(f->path);
    if (k == NULL) {
        return moe_error_set(p->err, MOE_ERR_INTERNAL, "checkpoint fact for unknown key %s",
                             f->path);
    }
    memcpy(scratch, &p->cfg, sizeof(*scratch));
    if (!cfg_key_set_text(k, f->value, strlen(f->value), scratch, (cfg_why_t){why, sizeof(why)})) {
        return moe_error_set(p->err, MOE_ERR_WEIGHTS, "%s: %s: %s (moed's %s)",
                             info->config_path, f->source, why, k->path);
    }
    if (!cfg_key_given(p, k->path)) {
        memcpy((char *)&p->cfg + k->offset, (const char *)scratch + k->offset, k->size);
        snprintf(p->ckpt_path, sizeof(p->ckpt_path), "%s", info->config_path);
        if (p->num_ckpt_facts < MOE_CFG_FACTS_MAX) {
            p->ckpt_facts[p->num_ckpt_facts++] = *f;
        }
        return MOE_OK;
    }
    if (memcmp((const char *)&p->cfg + k->offset, (const char *)scratch + k->offset, k->size) ==
        0) {
        return MOE_OK;
    }
    cfg_key_value(k, &p->cfg, mine, sizeof(mine));
    return ckpt_fail(p, cfg_val_mark_of(p, k->path), "%s: %s contradicts %s (%s %s); remove the "
                     "key or make it agree", k->path, mine, info->config_path, f->source,
                     f->value);
}

/* model.layers against the checkpoint's MoE layers; 'all' takes every one of them. */
static moe_status_t ckpt_layers(cfg_parse_t *p, const moe_cfg_checkpoint_info_t *info)
{
    moe_config_t *c = &p->cfg;
    if (c->num_layer_ids == 0) {
        for (int l = 0; l < info->num_hidden_layers && l < MOE_MAX_LAYER_IDS; l++) {
            if (info->is_moe[l]) {
                c->layer_ids[c->num_layer_ids++] = l;
            }
        }
        if (c->num_layer_ids == 0) {
            return ckpt_fail(p, cfg_val_mark_of(p, "model.checkpoint"), "%s: no decoder layer is "
                             "MoE (%s)", info->config_path, info->moe_rule);
        }
        return MOE_OK;
    }
    for (int i = 0; i < c->num_layer_ids; i++) {
        int l = c->layer_ids[i];
        if (l >= info->num_hidden_layers) {
            return ckpt_fail(p, p->layer_mark[i], "model.layers: layer %d is out of range: %s "
                             "has num_hidden_layers %d (layers 0..%d)", l, info->config_path,
                             info->num_hidden_layers, info->num_hidden_layers - 1);
        }
        if (!info->is_moe[l]) {
            return ckpt_fail(p, p->layer_mark[i], "model.layers: layer %d is a dense layer, "
                             "not MoE (%s: %s)", l, info->config_path, info->moe_rule);
        }
    }
    return MOE_OK;
}

static moe_status_t ckpt_apply(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    moe_cfg_mark_t m = cfg_val_mark_of(p, "model.checkpoint");
    if (cfg_checkpoint_reader == NULL) {
        return cfg_fail(p, m, "model.checkpoint: this program reads no checkpoints");
    }
    if (strcmp(c->weights, "random") != 0 || cfg_key_given(p, "model.first_layer")) {
        return cfg_fail(p, m, "model.checkpoint replaces model.weights and model.first_layer "
                        "(use model.layers to pick layers): remove those keys");
    }
    moe_cfg_checkpoint_info_t *info = calloc(1, sizeof(*info));
    moe_config_t *scratch = calloc(1, sizeof(*scratch));
    moe_status_t st = MOE_OK;
    if (info == NULL || scratch == NULL) {
        st = moe_error_set(p->err, MOE_ERR_NO_MEMORY, "%s: out of memory", p->src);
        goto out;
    }
    st = cfg_checkpoint_reader(c->checkpoint, info, p->err);
    for (int i = 0; st == MOE_OK && i < info->num_facts; i++) {
        st = fact_apply(p, info, &info->facts[i], scratch);
    }
    if (st == MOE_OK) {
        st = ckpt_layers(p, info);
    }
out:
    free(scratch);
    free(info);
    return st;
}

/* layer_ids and num_layers agree: a checkpoint's MoE layers, model.layers, or
 * first_layer + l for model.num_layers layers. */
static moe_status_t resolve_layers(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    bool ckpt = strcmp(c->checkpoint, "none") != 0;
    moe_status_t st = ckpt ? ckpt_apply(p) : MOE_OK;
    if (st != MOE_OK) {
        return st;
    }
    if (c->num_layer_ids == 0) {
        if (c->first_layer + c->num_layers > MOE_MAX_LAYER_IDS) {
            return cfg_fail(p, cfg_val_mark_of(p, "model.first_layer"), "model.first_layer + "
                            "model.num_layers passes moed's limit of %d layers",
                            MOE_MAX_LAYER_IDS);
        }
        for (int64_t l = 0; l < c->num_layers; l++) {
            c->layer_ids[l] = (int32_t)(c->first_layer + l);
        }
        return MOE_OK;
    }
    if (!ckpt && cfg_key_given(p, "model.first_layer")) {
        return cfg_fail(p, cfg_val_mark_of(p, "model.layers"), "model.layers and model.first_layer "
                        "both pick layers: keep one");
    }
    if (cfg_key_given(p, "model.num_layers") && c->num_layers != c->num_layer_ids) {
        return (ckpt ? ckpt_fail : cfg_fail)(p, cfg_val_mark_of(p, "model.num_layers"),
                        "model.num_layers: %lld, but %d layer%s run (model.layers%s): remove "
                        "model.num_layers", (long long)c->num_layers, c->num_layer_ids,
                        c->num_layer_ids == 1 ? "" : "s", ckpt ? " or the checkpoint's MoE "
                        "layers" : "");
    }
    c->num_layers = c->num_layer_ids;
    return MOE_OK;
}

/* Knobs that only some families have, and their bounds against the model's sizes. */
static moe_status_t check_family(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    moe_family_id_t fam = c->family;
    const char *name = moe_cfg_family_name(fam);
    moe_cfg_mark_t fm = cfg_val_mark_of(p, "model.family");
    bool deepseek = fam == MOE_FAMILY_DEEPSEEK_V2 || fam == MOE_FAMILY_DEEPSEEK_V3;
    if (fam == MOE_FAMILY_GPT_OSS && !cfg_key_given(p, "model.activation")) {
        c->activation = MOE_ACT_SWIGLU_OAI;
    }
    if ((fam == MOE_FAMILY_GPT_OSS) != (c->activation == MOE_ACT_SWIGLU_OAI) ||
        (fam != MOE_FAMILY_MIXTRAL && c->activation == MOE_ACT_GELU)) {
        return cfg_fail(p, cfg_val_mark_of(p, "model.activation"), "model.activation: %s does not "
                        "go with model.family %s (gpt_oss: swiglu_oai; mixtral: swiglu or gelu; "
                        "others: swiglu)", cfg_activation_names[c->activation], name);
    }
    if (fam == MOE_FAMILY_DEEPSEEK_V3 && !cfg_key_given(p, "model.topk_method")) {
        c->topk_method = MOE_TOPK_NOAUX_TC;
    }
    if ((fam == MOE_FAMILY_DEEPSEEK_V3) != (c->topk_method == MOE_TOPK_NOAUX_TC) ||
        (!deepseek && c->topk_method != MOE_TOPK_GREEDY)) {
        return cfg_fail(p, cfg_val_mark_of(p, "model.topk_method"), "model.topk_method: %s does "
                        "not go with model.family %s (deepseek_v2: greedy or "
                        "group_limited_greedy; deepseek_v3: noaux_tc; others: greedy)",
                        cfg_topk_method_names[c->topk_method], name);
    }
    bool shared_ok = deepseek || (fam == MOE_FAMILY_QWEN2_MOE && c->n_shared_experts <= 1);
    if (c->n_shared_experts > 0 && !shared_ok) {
        return key_fail(p, "model.n_shared_experts", fm, "model.n_shared_experts: "
                        "%lld, but model.family %s has %s", (long long)c->n_shared_experts,
                        name, fam == MOE_FAMILY_QWEN2_MOE ? "at most one shared expert"
                                                          : "no shared experts");
    }
    bool grouped = c->topk_method != MOE_TOPK_GREEDY;
    if (grouped && (c->num_experts % c->n_group != 0 || c->topk_group > c->n_group ||
                    c->top_k > c->topk_group * (c->num_experts / c->n_group) ||
                    (fam == MOE_FAMILY_DEEPSEEK_V3 && c->num_experts / c->n_group < 2))) {
        return key_fail(p, "model.n_group", fm,
                        "model.n_group %lld / model.topk_group %lld: the %lld experts must split "
                        "into n_group equal groups (of at least 2 for deepseek_v3), topk_group "
                        "<= n_group, and the kept groups must hold top_k %lld experts",
                        (long long)c->n_group, (long long)c->topk_group,
                        (long long)c->num_experts, (long long)c->top_k);
    }
    if (fam != MOE_FAMILY_MIXTRAL && c->device == MOE_DEVICE_CUDA) {
        return cfg_fail(p, cfg_val_mark_of(p, "runtime.device"), "runtime.device: cuda runs "
                        "model.family mixtral only for now (the GPU back-end has no %s routing "
                        "or shared experts yet); use runtime.device: cpu", name);
    }
    return MOE_OK;
}

/* Online rebalancing moves host copies of the weights: the CPU back-end only; the extra
 * copies must fit apart on the expert ranks, and every layer's set in the placement table. */
static moe_status_t check_rebalance(cfg_parse_t *p, int world)
{
    const moe_config_t *c = &p->cfg;
    if (c->rebalance_every == 0) {
        return MOE_OK;
    }
    moe_cfg_mark_t m = cfg_val_mark_of(p, "runtime.rebalance_every");
    if (c->device == MOE_DEVICE_CUDA) {
        return cfg_fail(p, m, "runtime.rebalance_every: %lld, but online rebalancing runs on "
                        "runtime.device: cpu only (the GPU back-end holds its own copy of the "
                        "weights); use runtime.device: cpu or runtime.rebalance_every: 0",
                        (long long)c->rebalance_every);
    }
    int hosts = world - (c->routing == MOE_ROUTING_MASTER && world > 1 ? 1 : 0);
    int64_t E = c->num_experts, R = c->redundant_experts;
    if (world > 1 && R > E * (hosts - 1)) {
        return cfg_fail(p, cfg_val_mark_of(p, "runtime.redundant_experts"),
                        "runtime.redundant_experts: %lld extra copies do not fit apart on %d "
                        "expert rank%s (at most %lld: one copy of an expert per rank)",
                        (long long)R, hosts, hosts == 1 ? "" : "s", (long long)(E * (hosts - 1)));
    }
    if (E + c->num_layers * (E + R) > MOE_MAX_REPLICA_ENTRIES) {
        return cfg_fail(p, m, "runtime.rebalance_every: %lld layers x (%lld experts + %lld "
                        "copies) exceed the placement table (%d entries)",
                        (long long)c->num_layers, (long long)E, (long long)R,
                        MOE_MAX_REPLICA_ENTRIES);
    }
    return MOE_OK;
}

/* runtime.step_timeout_s: 0 turns the watchdog off; a bound under 1 s would fire on any
 * wait (a step, the start-up) and is shorter than the 1 s the watchdog then waits for the
 * ranks' answers to its pings (base/watchdog.c), so it is refused. */
#define CFG_STEP_TIMEOUT_MIN_S 1.0
static moe_status_t check_step_timeout(cfg_parse_t *p)
{
    double t = p->cfg.step_timeout_s;
    if (t > 0 && t < CFG_STEP_TIMEOUT_MIN_S) {
        return cfg_fail(p, cfg_val_mark_of(p, "runtime.step_timeout_s"),
                        "runtime.step_timeout_s: %g is below the watchdog's minimum of %g s "
                        "(0 turns the watchdog off)", t, CFG_STEP_TIMEOUT_MIN_S);
    }
    return MOE_OK;
}

/* A control token anyone could guess is no token: at least MOE_CFG_TOKEN_MIN bytes. A
 * report's config.yaml ("<redacted>") parses again: the live endpoint takes it as none. */
static moe_status_t check_control_token(cfg_parse_t *p)
{
    const char *t = p->cfg.prof_control_token;
    size_t n = strlen(t);
    if (strcmp(t, "none") == 0 || strcmp(t, "<redacted>") == 0 || n >= MOE_CFG_TOKEN_MIN) {
        return MOE_OK;
    }
    return cfg_fail(p, cfg_val_mark_of(p, "profiler.control_token"),
                    "profiler.control_token: %zu byte%s; a control token needs at least %d "
                    "(e.g. `openssl rand -hex 16`), or none", n, n == 1 ? "" : "s",
                    MOE_CFG_TOKEN_MIN);
}

/* Steps the profiler records over `steps` (0: no end) by its schedule (warm-up, windows of
 * measurement_steps every measurement + wait steps, every sampling_rate-th step of a
 * window, `repeat` windows; the profiler's moe_prof_schedule), or -1 when neither the run
 * nor the windows end. */
int64_t moe_cfg_recorded_steps(const moe_config_t *c)
{
    int64_t period = c->prof_measurement_steps + c->prof_wait_steps, total = 0;
    int64_t per_window = (c->prof_measurement_steps + c->prof_sampling_rate - 1) /
                         c->prof_sampling_rate;
    if (c->steps == 0 && c->prof_repeat == 0) {
        return -1;
    }
    for (int64_t w = 0; c->prof_repeat == 0 || w < c->prof_repeat; w++) {
        int64_t first = c->prof_warmup_steps + w * period;
        if (c->steps > 0 && first >= c->steps) {
            break;
        }
        int64_t in = c->prof_measurement_steps;
        if (c->steps > 0 && c->steps - first < in) {
            in = c->steps - first;
        }
        total += in >= c->prof_measurement_steps ? per_window
                                                 : (in + c->prof_sampling_rate - 1) /
                                                       c->prof_sampling_rate;
    }
    return total;
}

/* Routing traces: recorded and replayed on the CPU back-end (the GPU's router weights stay
 * on the device); a recording has a bound on its steps and fits profiler.routing_max_mb. */
static moe_status_t check_routing(cfg_parse_t *p)
{
    const moe_config_t *c = &p->cfg;
    bool replay = strcmp(c->routing_trace, "none") != 0;
    if (c->device == MOE_DEVICE_CUDA && (replay || c->prof_record_routing)) {
        const char *key = replay ? "workload.routing" : "profiler.record_routing";
        return cfg_fail(p, cfg_val_mark_of(p, key), "%s: routing traces are recorded and "
                        "replayed with runtime.device: cpu only (the CUDA back-end keeps the "
                        "routing on the GPU); use runtime.device: cpu", key);
    }
    if (replay && c->routing_skew > 0) {
        return cfg_fail(p, cfg_val_mark_of(p, "workload.routing_skew"),
                        "workload.routing_skew: %g biases the gate, but workload.routing "
                        "replays a trace instead of running the gate; leave one out",
                        c->routing_skew);
    }
    if (!c->prof_record_routing || !c->prof_enabled) {
        return MOE_OK;
    }
    moe_cfg_mark_t m = cfg_val_mark_of(p, "profiler.record_routing");
    int64_t steps = moe_cfg_recorded_steps(c);
    const char *by = cfg_steps_override == 0 ? " (--steps 0)" : " (workload.steps: 0)";
    char of[48] = "";
    if (cfg_steps_override > 0) {
        snprintf(of, sizeof(of), " (of --steps %lld)", (long long)cfg_steps_override);
    }
    if (steps < 0) {
        return cfg_fail(p, m, "profiler.record_routing: the run has no end%s and records "
                        "windows without end (profiler.repeat: 0); bound one of them so the "
                        "recording is bounded", by);
    }
    double mb = (double)steps * (double)c->tokens_per_step * (double)c->num_layers *
                (double)c->top_k * 8.0 / (1024.0 * 1024.0);
    if (mb > (double)c->prof_routing_max_mb) {
        return cfg_fail(p, m, "profiler.record_routing: %lld recorded steps%s x %lld tokens "
                        "x %lld layers x top-%lld x 8 bytes = %.1f MiB, more than "
                        "profiler.routing_max_mb (%lld); record fewer steps "
                        "(profiler.measurement_steps, profiler.repeat) or raise the bound",
                        (long long)steps, of, (long long)c->tokens_per_step,
                        (long long)c->num_layers, (long long)c->top_k, mb,
                        (long long)c->prof_routing_max_mb);
    }
    return MOE_OK;
}

/* runtime.dedup: true is the CPU back-end's; the CUDA one sends a row per (token, expert). */
static moe_status_t check_dedup(cfg_parse_t *p)
{
    if (p->cfg.device == MOE_DEVICE_CUDA && p->cfg.dedup == MOE_DEDUP_ON) {
        return cfg_fail(p, cfg_val_mark_of(p, "runtime.dedup"), "runtime.dedup: true, but the "
                        "CUDA back-end sends one row per (token, expert) and sums them on the "
                        "routing rank (one row per (token, rank) runs on runtime.device: cpu "
                        "only); use runtime.dedup: auto or false");
    }
    return MOE_OK;
}

/* placement.copies on the resolved placement. balance: no online rebalancing (both move
 * tokens between copies). columns: the CPU back-end's one row per (token, rank) (the
 * expert rank sums its shares, the merge adds the ranks' rows), no online rebalancing (it
 * moves whole experts), every expert of every set split alike, and
 * shares of a whole number of 32-column blocks (the blocked layout's input block, so FP8
 * and MXFP4 shares cut no scale block of 32; FP8's own scale blocks are checked at load). */
#define CFG_COLUMN_BLOCK 32
static moe_status_t check_copies(cfg_parse_t *p, int world)
{
    const moe_config_t *c = &p->cfg;
    if (c->copies == MOE_COPIES_BALANCE && c->rebalance_every > 0) {
        return cfg_fail(p, cfg_val_mark_of(p, "runtime.rebalance_every"),
                        "runtime.rebalance_every: %lld, but placement.copies: balance already "
                        "picks a copy of each expert every step (online rebalancing moves "
                        "experts between ranks and splits tokens by position); use one or the "
                        "other", (long long)c->rebalance_every);
    }
    if (c->copies != MOE_COPIES_COLUMNS || world == 1) {
        return MOE_OK;
    }
    moe_cfg_mark_t m = cfg_val_mark_of(p, "placement.copies");
    if (!moe_cfg_dedup(c)) {
        return cfg_fail(p, cfg_val_mark_of(p, "runtime.dedup"), "runtime.dedup: false, but "
                        "placement.copies: columns needs one row per (token, rank): each "
                        "expert rank sums its column shares and the merge adds the ranks' rows; "
                        "use runtime.dedup: auto or true");
    }
    if (c->rebalance_every > 0) {
        return cfg_fail(p, cfg_val_mark_of(p, "runtime.rebalance_every"),
                        "runtime.rebalance_every: %lld, but placement.copies: columns splits "
                        "every expert and online rebalancing moves whole experts; use one or "
                        "the other", (long long)c->rebalance_every);
    }
    int n = c->column_shares;
    bool set0_used = false; /* placement.experts is moot when every layer has its own set */
    for (int l = 0; l < c->num_layers && l < MOE_MAX_LAYER_IDS; l++) {
        set0_used |= !c->layer_own[l];
    }
    for (int i = 0; i < c->num_replicas;) {
        if (c->replicas[i].set == 0 && !set0_used) {
            i++;
            continue;
        }
        int j = i;
        while (j < c->num_replicas && c->replicas[j].set == c->replicas[i].set &&
               c->replicas[j].expert == c->replicas[i].expert) {
            j++;
        }
        if (j - i != n) {
            int set = c->replicas[i].set;
            char where[64] = "placement.experts";
            if (set > 0) {
                snprintf(where, sizeof(where), "placement.layers' layer %d", set - 1);
            }
            return cfg_fail(p, m, "placement.copies: columns, but expert %d is on %d rank%s in "
                            "%s and expert 0 of the first layer on %d: every expert is split "
                            "into the same number of column shares", (int)c->replicas[i].expert,
                            j - i, j - i == 1 ? "" : "s", where, n);
        }
        i = j;
    }
    if (n > 1 && (c->ffn_dim % n != 0 || (c->ffn_dim / n) % CFG_COLUMN_BLOCK != 0)) {
        char ok[96] = "none: use placement.copies: replicas";
        moe_cfg_share_counts(c->ffn_dim, CFG_COLUMN_BLOCK, ok, sizeof(ok));
        return cfg_fail(p, m, "placement.copies: columns splits model.ffn_dim %lld into %d "
                        "shares: each must be a whole multiple of %d columns (%lld / %d is "
                        "not); copies of an expert that work: %s", (long long)c->ffn_dim, n,
                        CFG_COLUMN_BLOCK, (long long)c->ffn_dim, n, ok);
    }
    return MOE_OK;
}

/* Auto placement with placement.copies columns or balance puts every expert on every
 * expert rank: those entries (and the written placement.layers ones) must fit the
 * placement table, checked before they are made. */
static moe_status_t check_copies_room(cfg_parse_t *p, int world)
{
    const moe_config_t *c = &p->cfg;
    if (c->copies == MOE_COPIES_REPLICAS || !c->placement_auto || world == 1) {
        return MOE_OK;
    }
    int64_t hosts = world - (c->routing == MOE_ROUTING_MASTER ? 1 : 0), written = 0;
    for (int i = 0; i < p->num_ent; i++) {
        written += p->ent[i].r.set > 0;
    }
    if (written + c->num_experts * hosts > MOE_MAX_REPLICA_ENTRIES) {
        return cfg_fail(p, cfg_val_mark_of(p, "placement.copies"), "placement.copies: %s with "
                        "placement.experts: auto puts %lld experts on each of %lld expert ranks: "
                        "%lld (expert, rank) entries, more than moed's %d; write the placement "
                        "(fewer ranks a copy) or use placement.copies: replicas",
                        c->copies == MOE_COPIES_COLUMNS ? "columns" : "balance",
                        (long long)c->num_experts, (long long)hosts,
                        (long long)(written + c->num_experts * hosts), MOE_MAX_REPLICA_ENTRIES);
    }
    return MOE_OK;
}

static moe_status_t parse_checks(cfg_parse_t *p, int world)
{
    input_tokens(p);
    moe_status_t st = check_step_timeout(p);
    if (st == MOE_OK) {
        st = resolve_layers(p);
    }
    if (st == MOE_OK) {
        st = check_family(p);
    }
    if (st == MOE_OK) {
        st = check_top_k(p);
    }
    if (st == MOE_OK) {
        st = check_placement(p, world);
    }
    if (st == MOE_OK) {
        st = check_ranks(p, world);
    }
    if (st == MOE_OK) {
        st = check_rebalance(p, world);
    }
    if (st == MOE_OK) {
        st = check_control_token(p);
    }
    if (st == MOE_OK) {
        st = check_routing(p);
    }
    if (st == MOE_OK) {
        st = check_dedup(p);
    }
    if (st == MOE_OK) {
        st = check_copies_room(p, world);
    }
    return st;
}

char *moe_cfg_redacted_text(const moe_config_t *cfg, const char *text, size_t len,
                            size_t *out_len)
{
    static const char red[] = "\"<redacted>\"";
    int64_t a = cfg->token_span[0], b = cfg->token_span[1];
    if (text == NULL || moe_hash64(text, len) != cfg->text_hash || a < 0 || b < a ||
        (size_t)b > len) {
        return NULL;
    }
    /* a block scalar's span takes its line break: the next key keeps its own line */
    bool nl = b > a && text[b - 1] == '\n';
    size_t n = b > a ? len - (size_t)(b - a) + (sizeof(red) - 1) + nl : len;
    char *out = malloc(n + 1);
    if (out == NULL) {
        return NULL;
    }
    if (b > a) {
        memcpy(out, text, (size_t)a);
        memcpy(out + a, red, sizeof(red) - 1);
        size_t at = (size_t)a + sizeof(red) - 1;
        if (nl) {
            out[at++] = '\n';
        }
        memcpy(out + at, text + b, len - (size_t)b);
    } else {
        memcpy(out, text, len);
    }
    out[n] = '\0';
    *out_len = n;
    return out;
}

/* ------------------------------------------------------------------------------------ */
/* moe_cfg_parse: the loader, the checks, then the placement                            */
/* ------------------------------------------------------------------------------------ */

moe_status_t moe_cfg_parse(const char *text, size_t len, const char *source_name,
                           int world_size, moe_config_t *cfg, moe_error_t *err)
{
    const char *src = source_name != NULL ? source_name : "<config>";
    const unsigned char *bytes = (const unsigned char *)(text != NULL ? text : "");
    moe_status_t st;
    if (cfg == NULL || (text == NULL && len > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: moe_cfg_parse: no text or no config",
                             src);
    }
    if (world_size < 1 || world_size > MOE_MAX_RANKS) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG,
                             "%s: world size %d is out of range [1, %d]", src, world_size,
                             MOE_MAX_RANKS);
    }
    cfg_parse_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory parsing the config", src);
    }
    p->src = src;
    p->err = err;
    p->text = (const char *)bytes;
    p->len = len;
    moe_cfg_defaults(&p->cfg);
    st = cfg_yaml_precheck(p, bytes, len);
    if (st == MOE_OK) {
        st = cfg_yaml_load(p, bytes, len);
    }
    if (st == MOE_OK && cfg_steps_override >= 0) {
        p->cfg.steps = cfg_steps_override; /* 0: no end, as workload.steps: 0 */
    }
    if (st == MOE_OK) {
        st = parse_checks(p, world_size);
    }
    if (st == MOE_OK) {
        cfg_placement_resolve(p, world_size);
        st = check_copies(p, world_size);
    }
    if (st == MOE_OK) {
        snprintf(p->cfg.source_name, sizeof(p->cfg.source_name), "%s", src);
        p->cfg.text_hash = moe_hash64(bytes, len);
        p->cfg.weights_mark = cfg_val_mark_of(p, "model.weights");
        p->cfg.input_mark = cfg_val_mark_of(p, "workload.input");
        p->cfg.routing_mark = cfg_val_mark_of(p, "workload.routing");
        p->cfg.world_size = world_size;
        memcpy(cfg, &p->cfg, sizeof(*cfg)); /* the caller's struct changes only on success */
    }
    free(p);
    return st;
}

