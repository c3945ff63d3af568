/* `moed plan --routing PATH`: the planner fed with a routing trace's expert counts
 * (moe_model/routing_trace.h) instead of a report's, on a base config that gives the model
 * (--config BASE.yaml, or the config of the moed report folder the trace lies in); and the
 * prediction, before and after, made by the rule the runtime dispatches with, so that a
 * replay of the trace under the planned config measures exactly what it says. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "planner/plan_int.h"
#include "compare/json_lookup.h"
#include "compare/rank_load.h"
#include "moe/file.h"

double plan_ratio(const plan_pred_t *x)
{
    return x->total > 0 && x->hosts > 0 ? (double)x->max * x->hosts / (double)x->total : 0.0;
}

static double pred_mean(const plan_pred_t *x)
{
    return x->hosts > 0 ? (double)x->total / x->hosts : 0.0;
}

/* ---- the base config ------------------------------------------------------------- */

/* One resolved value of the base into a JSON object, as summary.json's "config" holds it. */
static void base_value(void *ctx, const char *path, const char *value, bool quoted)
{
    json_t *v = quoted ? NULL : json_loads(value, JSON_DECODE_ANY, NULL);
    json_object_set_new((json_t *)ctx, path, v != NULL ? v : json_string(value));
}

/* A YAML config, resolved for --ranks as `mpirun -np N moed --config FILE` resolves it: its
 * placement there is the "before". Into p->old, and p->doc as a summary.json would hold it
 * (the writer of the planned config reads that). */
static moe_status_t base_yaml(plan_t *p, const char *path, moe_error_t *err)
{
    char *text = NULL;
    size_t len = 0;
    int world = p->a.ranks > 1 ? p->a.ranks : 1;
    moe_status_t st = moe_cfg_read_file(path, &text, &len, err);
    if (st == MOE_OK) {
        st = moe_cfg_parse(text, len, path, world, p->old, err);
    }
    free(text);
    if (st != MOE_OK) {
        return st; /* its message says why */
    }
    json_t *cfg = json_object(), *run = json_object();
    p->doc = json_object();
    if (cfg == NULL || run == NULL || p->doc == NULL) {
        json_decref(cfg);
        json_decref(run);
        return MOE_ERR_NO_MEMORY;
    }
    moe_cfg_each_value(p->old, base_value, cfg);
    json_object_set_new(run, "world_size", json_integer(world));
    json_object_set_new(p->doc, "config", cfg);
    json_object_set_new(p->doc, "run", run);
    p->base_world = world;
    snprintf(p->base, sizeof(p->base), "%s", path);
    return MOE_OK;
}

/* The moed report the trace lies in: its resolved config (summary.json), as `moed plan
 * REPORT_DIR` reads it, and where its experts ran (experts[], replicas[]) as the "before". */
static moe_status_t base_report(plan_t *p, const char *summary, moe_error_t *err)
{
    moe_status_t st = moe_json_load_file(summary, &p->doc, err);
    if (st == MOE_OK && strcmp(moe_json_str(moe_json_path(p->doc, "schema"), ""), "moed.summary")) {
        st = moe_error_set(err, MOE_ERR_INVALID_ARG, "%s is not a moed summary", summary);
    }
    if (st == MOE_OK) {
        st = plan_old_config(p, err);
    }
    if (st == MOE_OK) {
        p->base_world = p->old->world_size;
        p->base_report = true;
        int64_t moved = moe_rank_moved(p->doc, NULL);
        if (moved > 0) { /* its experts did not stay where experts[].rank puts them */
            snprintf(p->base, sizeof(p->base), "%s (the recording run's config; its online "
                     "rebalancing moved %" PRId64 " expert%s, so 'before' is the configured "
                     "placement, not where they ran after a move)", summary, moved,
                     moved == 1 ? "" : "s");
        } else {
            snprintf(p->base, sizeof(p->base), "%s (the recording run's config)", summary);
        }
    }
    return st;
}

/* --config BASE.yaml; else the folder the trace lies in when it is a moed report (its
 * summary.json) or holds a config.yaml; else a usage error: a trace has no model shape. */
static moe_status_t plan_trace_base(plan_t *p, moe_error_t *err)
{
    if (p->a.config != NULL) {
        return base_yaml(p, p->a.config, err);
    }
    char dir[sizeof(p->tr.path)], path[sizeof(p->tr.path) + 32];
    struct stat sb;
    snprintf(dir, sizeof(dir), "%s", p->tr.path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
    } else {
        snprintf(dir, sizeof(dir), ".");
    }
    moe_path_join(path, sizeof(path), dir, "summary.json");
    if (stat(path, &sb) == 0) {
        return base_report(p, path, err);
    }
    moe_path_join(path, sizeof(path), dir, "config.yaml");
    if (stat(path, &sb) == 0) {
        return base_yaml(p, path, err);
    }
    return moe_error_set(err, MOE_ERR_INVALID_ARG, "--routing %s: a trace has no model shape: "
                         "name the model's config with --config BASE.yaml (a moed report folder "
                         "holding the trace gives its own)", p->a.routing);
}

/* ---- the trace against the base ------------------------------------------------- */

/* "[0, 1, 5]", at most 16 ids then "...". */
static void ids_text(const int32_t *ids, int n, char *buf, size_t len)
{
    int w = snprintf(buf, len, "[");
    size_t pos = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < n && i <= 16 && pos < len; i++) {
        w = i == 16 ? snprintf(buf + pos, len - pos, ", ...")
                    : snprintf(buf + pos, len - pos, "%s%d", i ? ", " : "", (int)ids[i]);
        pos += w > 0 ? (size_t)w : 0;
    }
    if (pos < len) {
        snprintf(buf + pos, len - pos, "]");
    }
}

/* The trace's experts, top_k and layers are the base's; at least one step of rows. */
static moe_status_t trace_match(plan_t *p, moe_error_t *err)
{
    const moe_config_t *c = p->old;
    const moe_routing_trace_t *t = &p->tr;
    if (t->num_experts != c->num_experts || t->top_k != c->top_k) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the trace is of %d experts, top_k %d; "
                             "the base config %s has %lld experts, top_k %lld: they must be the "
                             "same (a trace of another model?)", t->path, t->num_experts,
                             t->top_k, p->base, (long long)c->num_experts, (long long)c->top_k);
    }
    const char *fam = moe_cfg_family_name(c->family); /* as the plan's replay would */
    if (!moe_routing_trace_fits_family(t, fam)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the trace is of a %s model; the base "
                             "config %s is model.family %s: its replay would refuse the trace "
                             "(its weights are %s's)", t->path, t->family, p->base, fam,
                             t->family);
    }
    p->trace_layer = calloc((size_t)p->L, sizeof(int));
    if (p->trace_layer == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    for (int l = 0; l < p->L; l++) {
        p->trace_layer[l] = moe_routing_trace_layer(t, c->layer_ids[l]);
        if (p->trace_layer[l] < 0) {
            char have[256], want[256];
            ids_text(t->layer_ids, t->num_layers, have, sizeof(have));
            ids_text(c->layer_ids, p->L, want, sizeof(want));
            return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the trace has no decoder layer "
                                 "%d, the base config %s's layer %d (the trace's layers: %s; "
                                 "the config's: %s)", t->path, (int)c->layer_ids[l], p->base,
                                 l, have, want);
        }
    }
    p->step_tokens = c->tokens_per_step;
    if (t->rows < p->step_tokens) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the trace has %" PRId64 " rows, "
                             "fewer than one step of the base config %s (workload.tokens_per_step "
                             "%" PRId64 ")", t->path, t->rows, p->base, p->step_tokens);
    }
    p->steps = (t->rows + p->step_tokens - 1) / p->step_tokens;
    /* runtime/src/layer/plan.c, moe_plan_capacity: the same expression */
    p->capacity = c->capacity_factor <= 0.0 ? 0 : (int64_t)ceil(c->capacity_factor *
                  (double)p->step_tokens * (int)c->top_k / (int)c->num_experts);
    return MOE_OK;
}

moe_status_t plan_trace_load(plan_t *p, moe_error_t *err)
{
    moe_status_t st = moe_routing_trace_open(p->a.routing, true, &p->tr, err);
    if (st == MOE_OK) {
        st = plan_trace_base(p, err);
    }
    if (st != MOE_OK) { /* bad input (exit 2), a file that cannot be read included */
        return st == MOE_ERR_NO_MEMORY ? st : MOE_ERR_INVALID_ARG;
    }
    p->E = (int)p->old->num_experts;
    p->L = (int)p->old->num_layers;
    st = trace_match(p, err);
    int64_t *counts = calloc((size_t)p->E, sizeof(int64_t));
    p->loads = calloc((size_t)p->L * p->E, sizeof(double));
    if (st == MOE_OK && (counts == NULL || p->loads == NULL)) {
        st = MOE_ERR_NO_MEMORY;
    }
    int64_t *cnt = calloc((size_t)p->E, sizeof(int64_t));
    st = st == MOE_OK && cnt == NULL ? MOE_ERR_NO_MEMORY : st;
    for (int l = 0; st == MOE_OK && l < p->L; l++) { /* every row once: the plan's loads */
        if (p->capacity > 0) {
            /* under a capacity limit what an expert's copies compute is its kept choices
             * (a copy adds nothing to an expert that drops tokens): counted step by step as
             * the prediction (sim_run) and the runtime keep them, as report mode takes
             * layers[].kept */
            int li = p->trace_layer[l], k = p->tr.top_k;
            int64_t T = p->step_tokens, R = p->tr.rows;
            memset(counts, 0, sizeof(int64_t) * (size_t)p->E);
            for (int64_t step = 0; step < p->steps; step++) {
                memset(cnt, 0, sizeof(int64_t) * (size_t)p->E);
                for (int64_t g = 0; g < T; g++) {
                    const int32_t *ids = moe_routing_trace_ids(&p->tr, li, (step * T + g) % R);
                    for (int c = 0; c < k; c++) {
                        counts[ids[c]] += cnt[ids[c]]++ < p->capacity;
                    }
                }
            }
        } else {
            moe_routing_trace_counts(&p->tr, p->trace_layer[l], 0, p->tr.rows, counts);
        }
        for (int e = 0; e < p->E; e++) {
            p->loads[(size_t)l * p->E + e] = (double)counts[e];
        }
    }
    free(counts);
    free(cnt);
    return st;
}

/* ---- the prediction -------------------------------------------------------------- */

/* Scratch for one placement of one layer: which ranks hold each expert, in rank order. */
typedef struct sim {
    int W, E;
    uint8_t *copies; /* [W * E] */
    int32_t *cr;     /* [E * W] the ranks of each expert's copies, ascending */
    int *ncopy;      /* [E] */
    int64_t *cnt;    /* [E] choices of each expert so far in the step */
    int64_t *load;   /* [W] */
} sim_t;

/* Tokens per rank of trace layer li over the trace's steps under s->copies, by the rule the
 * runtime dispatches with (runtime/src/layer/plan.c): a step is the next T rows (the last
 * step filled from the trace's start, as a replay cycles); an expert keeps its first
 * `capacity` choices of the step in token order (choice 0 of a token first), and a kept
 * choice of the step's token g goes to copy floor(g * n / T) of the expert's n copies, the
 * copies in rank order (the config's placement entries sorted by expert, then rank). */
static void sim_run(const plan_t *p, int li, sim_t *s, plan_pred_t *out)
{
    int E = s->E, W = s->W, k = p->tr.top_k;
    int64_t T = p->step_tokens, R = p->tr.rows;
    memset(s->ncopy, 0, sizeof(int) * (size_t)E);
    memset(s->load, 0, sizeof(int64_t) * (size_t)W);
    for (int r = 0; r < W; r++) {
        for (int e = 0; e < E; e++) {
            if (s->copies[(size_t)r * E + e]) {
                s->cr[(size_t)e * W + s->ncopy[e]++] = r;
            }
        }
    }
    for (int64_t step = 0; step < p->steps; step++) {
        memset(s->cnt, 0, sizeof(int64_t) * (size_t)E);
        for (int64_t g = 0; g < T; g++) {
            const int32_t *ids = moe_routing_trace_ids(&p->tr, li, (step * T + g) % R);
            for (int c = 0; c < k; c++) {
                int e = ids[c];
                int64_t n = s->ncopy[e];
                if ((p->capacity > 0 && s->cnt[e]++ >= p->capacity) || n == 0) {
                    continue;
                }
                int64_t j = n > 1 ? g * n / T : 0;
                s->load[s->cr[(size_t)e * W + (j < n ? j : n - 1)]]++;
            }
        }
    }
    *out = (plan_pred_t){0};
    for (int r = 0; r < W; r++) {
        bool any = false;
        for (int e = 0; e < E && !any; e++) {
            any = s->copies[(size_t)r * E + e] != 0;
        }
        if (any) {
            out->max = s->load[r] > out->max ? s->load[r] : out->max;
            out->total += s->load[r];
            out->hosts++;
        }
    }
}

/* Layer l's copies before: where the recording run's experts ran (a report's rows), or the
 * base config's placement resolved for its world. */
static moe_status_t sim_before(const plan_t *p, int l, sim_t *s, moe_error_t *err)
{
    memset(s->copies, 0, (size_t)s->W * s->E);
    if (p->base_report) {
        double *load = calloc((size_t)s->W, sizeof(double));
        int hosts = load != NULL ? moe_rank_loads(p->doc, l, s->W, s->E, NULL, load, s->copies)
                                 : -1;
        free(load);
        if (hosts <= 0) {
            return hosts < 0 ? MOE_ERR_NO_MEMORY
                             : moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: layer %d: the report "
                                             "says on no rank where its experts ran (summary.json "
                                             "experts[].rank)", p->base, l);
        }
        return MOE_OK;
    }
    int n = 0;
    const moe_cfg_replica_t *en = moe_cfg_layer_entries(p->old, l, &n);
    for (int i = 0; i < n; i++) {
        if (en[i].rank < s->W && en[i].expert < s->E) {
            s->copies[(size_t)en[i].rank * s->E + en[i].expert] = 1;
        }
    }
    return MOE_OK;
}

/* Layer l's copies after: the plan. */
static void sim_after(const plan_t *p, int l, sim_t *s)
{
    memset(s->copies, 0, (size_t)s->W * s->E);
    for (int j = 0; j < p->n; j++) {
        const uint8_t *h = p->host + ((size_t)l * p->n + j) * p->E;
        for (int e = 0; e < p->E; e++) {
            s->copies[(size_t)p->ranks[j] * s->E + e] = h[e];
        }
    }
}

moe_status_t plan_trace_predict(plan_t *p, moe_error_t *err)
{
    int W = p->base_world > p->a.ranks ? p->base_world : p->a.ranks;
    sim_t s = {.W = W, .E = p->E};
    s.copies = calloc((size_t)W * p->E, 1);
    s.cr = calloc((size_t)W * p->E, sizeof(int32_t));
    s.ncopy = calloc((size_t)p->E, sizeof(int));
    s.cnt = calloc((size_t)p->E, sizeof(int64_t));
    s.load = calloc((size_t)W, sizeof(int64_t));
    p->pb = calloc((size_t)p->L, sizeof(plan_pred_t));
    p->pa = calloc((size_t)p->L, sizeof(plan_pred_t));
    moe_status_t st = s.copies && s.cr && s.ncopy && s.cnt && s.load && p->pb && p->pa
                          ? MOE_OK : MOE_ERR_NO_MEMORY;
    double bmax = 0, bmean = 0, amax = 0, amean = 0;
    for (int l = 0; st == MOE_OK && l < p->L; l++) {
        st = sim_before(p, l, &s, err);
        if (st != MOE_OK) {
            break;
        }
        sim_run(p, p->trace_layer[l], &s, &p->pb[l]);
        sim_after(p, l, &s);
        sim_run(p, p->trace_layer[l], &s, &p->pa[l]);
        p->before[l] = plan_ratio(&p->pb[l]);
        p->after[l] = plan_ratio(&p->pa[l]);
        bmax += (double)p->pb[l].max;
        bmean += pred_mean(&p->pb[l]);
        amax += (double)p->pa[l].max;
        amean += pred_mean(&p->pa[l]);
    }
    p->before_all = bmean > 0 ? bmax / bmean : 0;
    p->after_all = amean > 0 ? amax / amean : 0;
    free(s.copies);
    free(s.cr);
    free(s.ncopy);
    free(s.cnt);
    free(s.load);
    return st;
}

/* ---- what is written and printed ------------------------------------------------- */

/* "the trace's 1536 tokens in 6 steps of 256": what the prediction covers. */
static void pred_scope(const plan_t *p, char *buf, size_t n)
{
    int64_t fill = p->steps * p->step_tokens - p->tr.rows;
    char cap[96] = "no capacity limit";
    if (p->capacity > 0) {
        snprintf(cap, sizeof(cap), "capacity %" PRId64 " per expert and step", p->capacity);
    }
    snprintf(buf, n, "the trace's %" PRId64 " tokens in %" PRId64 " steps of %" PRId64
             " (workload.tokens_per_step)%s%s; %s", p->tr.rows, p->steps, p->step_tokens,
             fill > 0 ? ", the last step filled with the first rows again, " : "",
             fill > 0 ? "as a replay cycles" : "", cap);
}

static void yaml_layer(const plan_t *p, int l, FILE *f)
{
    const plan_pred_t *b = &p->pb[l], *a = &p->pa[l];
    /* plan_check.c reads this line back: keep the two in step */
    fprintf(f, "#   layer %d: before %.3f (max %" PRId64 " / mean %.3f on %d ranks), after %.3f "
            "(max %" PRId64 " / mean %.3f on %d ranks); %" PRId64 " in all\n", l, p->before[l],
            b->max, pred_mean(b), b->hosts, p->after[l], a->max, pred_mean(a), a->hosts,
            a->total);
}

void plan_trace_yaml_head(const plan_t *p, FILE *f)
{
    char scope[320];
    pred_scope(p, scope, sizeof(scope));
    fputs("# moed plan --routing ", f);
    plan_comment_text(f, p->a.routing);
    fprintf(f, " --ranks %d --redundant %d", p->a.ranks, p->a.redundant);
    if (p->a.slots > 0) {
        fprintf(f, " --slots %d", p->a.slots);
    }
    fputs(p->a.hostfile ? " --hostfile " : "", f);
    plan_comment_text(f, p->a.hostfile ? p->a.hostfile : "");
    fputs("\n# trace: ", f);
    plan_comment_text(f, p->tr.path);
    fputs(" (", f);
    plan_comment_text(f, p->tr.source[0] ? p->tr.source : "no source named");
    fprintf(f, "; %d layers, %d experts, top_k %d)\n# base config: ", p->tr.num_layers,
            p->tr.num_experts, p->tr.top_k);
    plan_comment_text(f, p->base);
    fputc('\n', f);
    fprintf(f, "# predicted tokens per expert rank (a token once per expert it chose), max/mean "
            "(1.00 = balanced),\n# for %s;\n# an expert's tokens split between its copies as "
            "the runtime splits them: a replay of these\n# tokens under this config measures "
            "exactly these figures (moed plan --check RUN_DIR compares).\n# overall = sum over "
            "layers of the busiest rank's tokens / sum of the mean tokens:\n#   overall: before "
            "%.3f, after %.3f\n", scope, p->before_all, p->after_all);
    for (int l = 0; l < p->L; l++) {
        yaml_layer(p, l, f);
    }
}

void plan_trace_print(const plan_t *p, FILE *out)
{
    char scope[320];
    pred_scope(p, scope, sizeof(scope));
    fprintf(out, "moed plan: %d experts x %d layers onto %d expert ranks of %d, %d extra copies "
            "per layer%s\n  trace: %s (%s)\n  base config: %s\n", p->E, p->L, p->n, p->a.ranks,
            p->a.redundant, p->a.hostfile ? " (nodes first, from the hostfile)" : "", p->tr.path,
            p->tr.source[0] ? p->tr.source : "no source named", p->base);
    fprintf(out, "predicted tokens per expert rank, max/mean (1.00 = balanced),\n  for %s;\n"
            "  replicas split as the runtime splits them (overall: the sum over layers of the "
            "busiest\n  rank's tokens over the sum of the means, as a step pays it):\n", scope);
    for (int l = 0; l < p->L; l++) {
        const plan_pred_t *b = &p->pb[l], *a = &p->pa[l];
        fprintf(out, "  layer %-4d before %.3f (max %" PRId64 " / mean %.3f)  after %.3f (max %"
                PRId64 " / mean %.3f)\n", l, p->before[l], b->max, pred_mean(b), p->after[l],
                a->max, pred_mean(a));
    }
    fprintf(out, "  overall    before %.3f  after %.3f\n", p->before_all, p->after_all);
    if (p->old->rebalance_every > 0) {
        fprintf(out, "  note: the base sets runtime.rebalance_every %lld: experts move during "
                "such a run, so it measures\n  other loads than these\n",
                (long long)p->old->rebalance_every);
    }
}

void plan_trace_free(plan_t *p)
{
    moe_routing_trace_free(&p->tr);
    free(p->trace_layer);
    free(p->pb);
    free(p->pa);
}
