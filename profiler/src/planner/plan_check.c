/* `moed plan --check RUN_DIR`: a run of a config `moed plan --routing` wrote, replaying the
 * trace, against the plan's prediction. The prediction is in the config's comments (the
 * run's config.yaml is the text the run read); the run's tokens per expert rank come from
 * summary.json's experts[] and replicas[] rows (compare/rank_load.h), each layer's compute
 * time per rank beside them. Equal means the same counts: the run's busiest rank computed k
 * times the predicted tokens where the run computed k times the predicted total (k passes
 * over the trace), on as many expert ranks. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "planner/plan_int.h"
#include "moe/file.h"
#include "compare/json_lookup.h"
#include "compare/rank_load.h"

/* One layer: the prediction read back, the run's figures. */
typedef struct chk_layer {
    bool predicted;
    plan_pred_t pred, run;
    double ms_max, ms_mean; /* compute time per expert rank, ms over the recorded steps */
    bool tokens_unknown;    /* an expert rank's tokens are null: the run's side not known */
} chk_layer_t;

typedef struct chk {
    const char *dir;
    json_t *doc;
    int W, E, L;
    chk_layer_t *layers; /* [L] */
    char head[1024];     /* the plan's first line, "# moed plan --routing ..." */
    int64_t tokens, steps, step_tokens; /* what the prediction covers */
} chk_t;

/* The prediction lines plan_trace.c wrote (yaml_layer), from RUN_DIR/config.yaml. */
static moe_status_t chk_read_plan(chk_t *c, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 32], line[1024];
    moe_path_join(path, sizeof(path), c->dir, "config.yaml");
    const char *kind = NULL;
    FILE *f = moe_file_fopen_regular(path, "r", &kind); /* a FIFO would wait for a writer */
    if (f == NULL) {
        return kind != NULL ? moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: is %s, not a "
                                            "regular file", path, kind)
                            : moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: no config.yaml in "
                                            "the run's folder", c->dir);
    }
    int found = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        int l = -1, hb = 0, ha = 0;
        int64_t mb = 0, ma = 0, total = 0;
        double rb, ra, meanb, meana;
        if (strncmp(line, "# moed plan --routing ", 22) == 0 && c->head[0] == '\0') {
            snprintf(c->head, sizeof(c->head), "%s", line + 2);
            c->head[strcspn(c->head, "\n")] = '\0';
        }
        (void)sscanf(line, "# for the trace's %" SCNd64 " tokens in %" SCNd64 " steps of %"
                     SCNd64, &c->tokens, &c->steps, &c->step_tokens);
        if (sscanf(line, "#   layer %d: before %lf (max %" SCNd64 " / mean %lf on %d ranks), "
                   "after %lf (max %" SCNd64 " / mean %lf on %d ranks); %" SCNd64 " in all",
                   &l, &rb, &mb, &meanb, &hb, &ra, &ma, &meana, &ha, &total) == 10 &&
            l >= 0 && l < c->L && c->head[0] != '\0') {
            c->layers[l].predicted = true;
            c->layers[l].pred = (plan_pred_t){.max = ma, .total = total, .hosts = ha};
            found++;
        }
    }
    fclose(f);
    if (c->head[0] == '\0' || found == 0) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s holds no prediction of `moed plan "
                             "--routing` (run the config it wrote, its comments kept, then check "
                             "that run)", path);
    }
    return MOE_OK;
}

/* The run's tokens and compute time per expert rank of layer l. */
static moe_status_t chk_measure(chk_t *c, int l)
{
    double *load = calloc((size_t)c->W, sizeof(double)), *ms = calloc((size_t)c->W, sizeof(double));
    uint8_t *copies = calloc((size_t)c->W * c->E, 1);
    if (load == NULL || ms == NULL || copies == NULL) {
        free(load);
        free(ms);
        free(copies);
        return MOE_ERR_NO_MEMORY;
    }
    chk_layer_t *x = &c->layers[l];
    moe_rank_loads(c->doc, l, c->W, c->E, NULL, load, copies);
    moe_rank_times(c->doc, l, c->W, c->E, ms);
    moe_rank_load_stats(ms, copies, c->W, c->E, &x->ms_max, &x->ms_mean);
    for (int r = 0; r < c->W; r++) {
        bool any = false;
        for (int e = 0; e < c->E && !any; e++) {
            any = copies[(size_t)r * c->E + e] != 0;
        }
        if (any && !isfinite(load[r])) {
            x->tokens_unknown = true;
        } else if (any) {
            int64_t t = (int64_t)llround(load[r]);
            x->run.max = t > x->run.max ? t : x->run.max;
            x->run.total += t;
            x->run.hosts++;
            x->ms_max = isfinite(ms[r]) ? x->ms_max : NAN; /* a rank's time not known */
        }
    }
    free(load);
    free(ms);
    free(copies);
    return MOE_OK;
}

/* Layer l's verdict into buf; true when the run measured the prediction. */
static bool chk_verdict(const chk_layer_t *x, char *buf, size_t n)
{
    const plan_pred_t *p = &x->pred, *r = &x->run;
    if (x->tokens_unknown) {
        snprintf(buf, n, "UNKNOWN: an expert rank's tokens are null (summary.json experts[]"
                 ", replicas[]: a host not profiled or lost)");
        return false;
    }
    if (r->hosts != p->hosts) {
        snprintf(buf, n, "DIFFERS: %d expert ranks ran, the plan has %d (not the planned "
                 "placement?)", r->hosts, p->hosts);
        return false;
    }
    if (p->total <= 0 || r->total <= 0 || r->total % p->total != 0) {
        snprintf(buf, n, "OTHER TOKENS: %" PRId64 " computed, not a whole number of passes over "
                 "the predicted %" PRId64, r->total, p->total);
        return false;
    }
    int64_t k = r->total / p->total;
    if (r->max != k * p->max) {
        snprintf(buf, n, "DIFFERS: busiest rank %" PRId64 ", predicted %" PRId64 " x %" PRId64
                 " pass%s = %" PRId64, r->max, p->max, k, k == 1 ? "" : "es", k * p->max);
        return false;
    }
    snprintf(buf, n, "equal (busiest rank %" PRId64 " = %" PRId64 " x %" PRId64 " pass%s)",
             r->max, p->max, k, k == 1 ? "" : "es");
    return true;
}

static void chk_time(const chk_layer_t *x, double steps, char *buf, size_t n)
{
    if (isfinite(x->ms_max) && isfinite(x->ms_mean) && x->ms_mean > 0.0 && steps > 0) {
        snprintf(buf, n, "%.3f (busiest %.3f ms/step)", x->ms_max / x->ms_mean,
                 x->ms_max / steps);
    } else {
        snprintf(buf, n, "n/a (not every expert rank profiled)");
    }
}

/* summary.json's routing source in words ("routing": {"detail": "replayed FILE (...)"}), or
 * "" for a report without one. */
static const char *chk_routing(const json_t *doc)
{
    const json_t *r = json_object_get(doc, "routing");
    return moe_json_str(json_object_get(r, "detail"), moe_json_str(r, ""));
}

static int chk_report(chk_t *c, FILE *out)
{
    int equal = 0, shown = 0;
    double pmx = 0, pmean = 0, rmx = 0, rmean = 0;
    char verdict[256], time[96];
    fprintf(out, "moed plan --check %s\n  plan: %s\n", c->dir, c->head);
    if (c->steps > 0) {
        fprintf(out, "  predicted for %" PRId64 " tokens in %" PRId64 " steps of %" PRId64
                "; the run: %.0f recorded steps of %.0f tokens\n", c->tokens, c->steps,
                c->step_tokens, moe_json_num(moe_json_path(c->doc, "run.recorded_steps"), 0),
                moe_json_num(moe_json_path(c->doc, "run.tokens_per_step"), 0));
    }
    if (chk_routing(c->doc)[0] != '\0') {
        fprintf(out, "  routing of the run: %s\n", chk_routing(c->doc));
    }
    fprintf(out, "tokens per expert rank, max/mean (the run's from summary.json experts[] and "
            "replicas[]), and\nbeside it each expert rank's expert compute time, max/mean, with "
            "the busiest rank's ms per\nrecorded step:\n"
            "  %-7s %9s %9s   %-52s %s\n", "layer", "predicted", "run", "tokens", "time");
    for (int l = 0; l < c->L; l++) {
        chk_layer_t *x = &c->layers[l];
        if (!x->predicted) {
            continue;
        }
        shown++;
        equal += chk_verdict(x, verdict, sizeof(verdict)) ? 1 : 0;
        chk_time(x, moe_json_num(moe_json_path(c->doc, "run.recorded_steps"), 0), time,
                 sizeof(time));
        char run[16] = "n/a";
        if (!x->tokens_unknown) {
            snprintf(run, sizeof(run), "%.3f", plan_ratio(&x->run));
        }
        fprintf(out, "  %-7d %9.3f %9s   %-52s %s\n", l, plan_ratio(&x->pred), run, verdict,
                time);
        pmx += (double)x->pred.max;
        pmean += x->pred.hosts > 0 ? (double)x->pred.total / x->pred.hosts : 0.0;
        rmx += x->tokens_unknown ? NAN : (double)x->run.max; /* unknown: overall n/a */
        rmean += x->run.hosts > 0 ? (double)x->run.total / x->run.hosts : 0.0;
    }
    char run_all[16] = "n/a";
    if (isfinite(rmx)) {
        snprintf(run_all, sizeof(run_all), "%.3f", rmean > 0 ? rmx / rmean : 0.0);
    }
    fprintf(out, "  %-7s %9.3f %9s   (sum over layers of the busiest rank's tokens / sum "
            "of the means)\n", "overall", pmean > 0 ? pmx / pmean : 0.0, run_all);
    if (equal == shown) {
        fprintf(out, "result: the run measured what the plan predicted, in all %d layers\n",
                shown);
        return PLAN_OK;
    }
    fprintf(out, "result: %d of %d layers differ from the prediction\n", shown - equal, shown);
    return PLAN_RUNTIME;
}

static moe_status_t chk_load(chk_t *c, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 32];
    moe_path_join(path, sizeof(path), c->dir, "summary.json");
    moe_status_t st = plan_summary_load(c->dir, &c->doc, err);
    if (st != MOE_OK) {
        return st;
    }
    c->W = (int)moe_json_num(moe_json_path(c->doc, "run.world_size"), 0);
    c->E = (int)moe_json_num(moe_json_path(c->doc, "run.num_experts"), 0);
    c->L = (int)moe_json_num(moe_json_path(c->doc, "run.num_layers"), 0);
    if (c->W < 1 || c->W > MOE_MAX_RANKS || c->E < 1 || c->E > MOE_MAX_EXPERTS || c->L < 1 ||
        c->L > MOE_MAX_LAYER_IDS) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: summary.json's run shape is missing "
                             "or out of range", path);
    }
    if (moe_json_num(moe_json_path(c->doc, "run.recorded_steps"), 0) <= 0) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the run recorded no step: nothing "
                             "to check", c->dir);
    }
    c->layers = calloc((size_t)c->L, sizeof(chk_layer_t));
    return c->layers != NULL ? chk_read_plan(c, err) : MOE_ERR_NO_MEMORY;
}

int plan_check_main(const plan_args_t *a, FILE *out)
{
    chk_t c = {.dir = a->check};
    moe_error_t err = {0};
    moe_status_t st = chk_load(&c, &err);
    for (int l = 0; st == MOE_OK && l < c.L; l++) {
        st = c.layers[l].predicted ? chk_measure(&c, l) : MOE_OK;
    }
    int rc = PLAN_OK;
    if (st == MOE_OK) {
        rc = chk_report(&c, out);
    } else {
        fprintf(stderr, "moed plan: error: %s\n", err.msg[0] ? err.msg : moe_status_string(st));
        rc = st == MOE_ERR_IO || st == MOE_ERR_NO_MEMORY ? PLAN_RUNTIME : PLAN_USAGE;
    }
    json_decref(c.doc);
    free(c.layers);
    return rc;
}
