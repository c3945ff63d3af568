/* Unit tests for rank 0's merge (gather/merge.c): the router's per-expert counts, and the
 * step's wait split into idle (by the rank waited for), designed wait and exchange, on
 * records built by hand whose truth is known: a combine, a balanced pair, the dispatch, the
 * wait for the master's next dispatch (also over two windows); the step's and each layer's
 * latency percentiles over known durations. Split from test_report.c,
 * which tests the report writers on a merged profile. */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gather/balance.h"
#include "gather/gather.h"
#include "report/report.h"
#include "report_fixture.h"
#include "report_util.h"
#include "compare/json_lookup.h"
#include <jansson.h>
#include "test_util.h"

/* Demand of expert e of layer l in the merge test's routing record; 30 kept at most. */
static uint64_t mt_demand(int l, int e)
{
    return 10 * (uint64_t)(e + 1) + (uint64_t)l;
}

static uint64_t mt_kept(int l, int e)
{
    return mt_demand(l, e) < 30 ? mt_demand(l, e) : 30;
}

/* Records of ranks 0 (routes, no experts) and 2 (experts 4-7); rank 1 (experts 0-3) is not
 * profiled. */
static bool mt_records(moe_prof_record_t *recs)
{
    static const int local[3] = {0, 0, 4};
    for (int k = 0; k < 3; k += 2) {
        moe_prof_record_t *rec = &recs[k];
        if (moe_prof_record_alloc(rec, 3, 2, 8, local[k]) != MOE_OK) {
            return false;
        }
        rec->rank = k;
        rec->flags = MOE_PROF_FLAG_FINAL | MOE_PROF_FLAG_WINDOW_END;
        rec->steps_recorded = 4;
        for (int i = 0; i < local[k]; i++) {
            rec->local_ids[i] = 4 + i;
            for (int l = 0; l < 2; l++) {
                moe_rec_expert_t *x = &rec->experts[l * local[k] + i];
                moe_hist_reset(&x->hist);
                moe_hist_add(&x->hist, 2000000);
                x->tokens = mt_kept(l, 4 + i);
                x->calls = 4;
                x->flops = 1e9;
            }
        }
        for (int i = 0; k == 0 && i < 2 * 8; i++) {
            rec->demand[i] = mt_demand(i / 8, i % 8);
            rec->kept[i] = mt_kept(i / 8, i % 8);
            rec->dropped[i] = rec->demand[i] - rec->kept[i];
        }
    }
    return true;
}

/* Lines of metrics.csv.part in the one run folder under root/merged (-1: none). */
static int part_rows(const char *root)
{
    char dir[MOE_PATH_MAX], path[MOE_PATH_MAX + 300];
    snprintf(dir, sizeof(dir), "%s/merged", root);
    DIR *d = opendir(dir);
    struct dirent *e = NULL;
    int lines = -1;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s/metrics.csv.part", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            continue;
        }
        lines = 0;
        for (int c = fgetc(f); c != EOF; c = fgetc(f)) {
            lines += c == '\n';
        }
        fclose(f);
    }
    if (d != NULL) {
        closedir(d);
    }
    return lines;
}

/* fx's config: 8 experts top-2 over 2 layers, `routing` (master or symmetric), capacity
 * 1.0, the given profiled_ranks, reports under ROOT/DIR; parsed for 3 ranks. */
static void mt_config_placed(fixture_t *fx, const char *root, const char *routing,
                             const char *experts, const char *profiled, const char *dir)
{
    memset(fx, 0, sizeof(*fx));
    snprintf(fx->yaml, sizeof(fx->yaml),
             "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: 8\n  top_k: 2\n"
             "  num_layers: 2\n  capacity_factor: 1.0\nplacement:\n  master_rank: 0\n"
             "  experts: %s\nruntime:\n  routing: %s\nworkload:\n  tokens_per_step: 64\n"
             "  steps: 6\nprofiler:\n  enabled: true\n  profiled_ranks: %s\n"
             "  warmup_steps: 2\n  output_dir: %s/%s\n",
             experts, routing, profiled, root, dir);
    moe_error_t err;
    CHECK_INT_EQ(moe_cfg_parse(fx->yaml, strlen(fx->yaml), "m.yaml", 3, &fx->cfg, &err), MOE_OK);
}

/* The same with placement.experts auto. */
static void mt_config(fixture_t *fx, const char *root, const char *routing, const char *profiled,
                      const char *dir)
{
    mt_config_placed(fx, root, routing, "auto", profiled, dir);
}

/* The merged report of a run of `steps` steps of config text `yaml` (NULL if m is). */
static moe_report_t *mt_finish(moe_merge_t *m, const char *yaml, int64_t steps)
{
    moe_prof_run_t run = {steps, steps, 1.0, yaml, strlen(yaml), false, 1.0, NULL, false, 0};
    moe_prof_static_t info;
    memset(&info, 0, sizeof(info));
    info.transport = "mpi";
    info.blas = "openblas";
    info.device = "cpu";
    info.chunks = 1;
    return m != NULL ? moe_merge_finish(m, &run, &info) : NULL;
}

/* Removes r's summary files and folder, then ROOT/DIR. */
static void mt_remove(const moe_report_t *r, const char *root, const char *dir)
{
    char path[MOE_PATH_MAX + 32];
    if (r != NULL) {
        static const char *const files[3] = {"summary.txt", "summary.json", "metrics.csv"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", r->run_dir, files[i]);
            unlink(path);
        }
        rmdir(r->run_dir);
    }
    snprintf(path, sizeof(path), "%s/%s", root, dir);
    rmdir(path);
}

/* Experts of a rank outside profiled_ranks: their tokens are the router's count, marked as
 * such in summary.txt and summary.json, their latency unknown ("-", null), not 0. */
static void test_merge_router(const char *root)
{
    fixture_t fx;
    mt_config(&fx, root, "master", "[0, 2]", "merged");
    moe_error_t err;
    moe_error_clear(&err);
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    moe_prof_record_t recs[3];
    memset(recs, 0, sizeof(recs));
    moe_merge_t *m = moe_merge_create(&fx.cfg, 3, hosts);
    bool have[3] = {true, false, true};
    CHECK(m != NULL && mt_records(recs));
    /* two expert calls of rank 2 for metrics.csv */
    moe_rec_metric_t calls[2] = {{.step = 3, .layer = 0, .local = 0, .tokens = 5, .ns = 1000},
                                 {.step = 3, .layer = 1, .local = 1, .tokens = 7, .ns = 2000}};
    recs[2].metrics = calls;
    recs[2].num_metrics = 2;
    CHECK_INT_EQ(m != NULL ? moe_merge_window(m, recs, have, 0, &err) : -1, MOE_OK);
    /* the window's rows are on disk once it is merged, before the end (a rank 0 lost now
     * leaves them in metrics.csv.part; they once waited for 64 KiB of rows) */
    CHECK_INT_EQ(part_rows(root), 3);
    recs[2].metrics = NULL;
    recs[2].num_metrics = 0;
    moe_report_t *r = mt_finish(m, fx.yaml, 6);
    for (int i = 0; r != NULL && i < 2 * 8; i++) {
        const moe_rep_expert_t *x = &r->experts[i];
        CHECK_INT_EQ(x->router_count, x->expert < 4);     /* rank 1's experts */
        CHECK_INT_EQ(x->tokens, mt_kept(i / 8, i % 8)); /* both: what was kept */
        CHECK_INT_EQ(x->calls, x->expert < 4 ? 0 : 4);
    }
    CHECK(r != NULL && !r->partial);
    CHECK_INT_EQ(r != NULL ? moe_report_write_summary(r, &err) : -1, MOE_OK);
    CHECK_INT_EQ(r != NULL ? moe_report_write_json(r, &err) : -1, MOE_OK);
    char *t = r != NULL ? slurp(r->run_dir, "summary.txt", NULL) : NULL;
    /* layer 0 expert 0: demand 10, all kept; rank 1's row: unknown calls and latency */
    CHECK_STR_CONTAINS(t, "      0       0     1  h1            10          10           0        -"
                          "          -          -          -          -          -         -"
                          "  (router's count)\n");
    CHECK_STR_CONTAINS(t, "      0       4     2  h2            50          30          20        4"
                          "      2.");
    CHECK_INT_EQ(count_substr(t, "(router's count)\n"), 2 * 4);
    free(t);
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    snprintf(path, sizeof(path), "%s/summary.json", r != NULL ? r->run_dir : "");
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    CHECK(json_is_true(moe_json_path(doc, "experts.1.router_count")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "experts.1.tokens"), -1), 20, 0);
    CHECK(json_is_null(moe_json_path(doc, "experts.1.latency_ms.p50")));
    CHECK(json_is_null(moe_json_path(doc, "experts.1.calls")));
    CHECK(json_is_false(moe_json_path(doc, "experts.5.router_count")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "experts.5.latency_ms.p50"), -1), 2.0, 0.2);
    json_decref(doc);
    mt_remove(r, root, "merged");
    moe_merge_destroy(m);
    moe_prof_record_free(&recs[0]);
    moe_prof_record_free(&recs[2]);
}

/* The routing rank not profiled (profiled_ranks: [1, 2], master routing): nobody counted
 * demand or drops, so they are unknown (null, "-"), not 0; kept and the balance come from
 * the rows the expert ranks computed, not from zeros that read "perfectly even". */
static void test_merge_unrouted(const char *root)
{
    fixture_t fx;
    mt_config(&fx, root, "master", "[1, 2]", "unrouted");
    moe_error_t err;
    moe_error_clear(&err);
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    moe_prof_record_t recs[3];
    memset(recs, 0, sizeof(recs));
    bool have[3] = {false, true, true}, ok = true;
    for (int k = 1; k < 3; k++) { /* rank k hosts experts 4k-4 .. 4k-1 */
        moe_prof_record_t *rec = &recs[k];
        ok = ok && moe_prof_record_alloc(rec, 3, 2, 8, 4) == MOE_OK;
        rec->rank = k;
        rec->flags = MOE_PROF_FLAG_FINAL | MOE_PROF_FLAG_WINDOW_END;
        rec->steps_recorded = 4;
        for (int i = 0; ok && i < 4; i++) {
            rec->local_ids[i] = 4 * (k - 1) + i;
            for (int l = 0; l < 2; l++) {
                moe_rec_expert_t *x = &rec->experts[l * 4 + i];
                moe_hist_reset(&x->hist);
                moe_hist_add(&x->hist, 2000000);
                x->tokens = mt_kept(l, 4 * (k - 1) + i);
                x->calls = 4;
                x->flops = 1e9;
            }
        }
    }
    moe_merge_t *m = moe_merge_create(&fx.cfg, 3, hosts);
    CHECK(m != NULL && ok);
    CHECK_INT_EQ(m != NULL && ok ? moe_merge_window(m, recs, have, 0, &err) : -1, MOE_OK);
    moe_report_t *r = mt_finish(m, fx.yaml, 6);
    uint64_t kept[8];
    for (int e = 0; e < 8; e++) {
        kept[e] = mt_kept(0, e);
    }
    moe_balance_t want;
    moe_balance_compute(kept, 8, &want);
    CHECK(want.gini > 0.01); /* uneven: a 0 would be wrong */
    const moe_rep_layer_t *y = r != NULL ? &r->layers[0] : NULL;
    CHECK(y != NULL && y->demand_unknown && !y->kept_unknown);
    for (int e = 0; y != NULL && e < 8; e++) {
        CHECK_INT_EQ(y->kept[e], kept[e]);
    }
    CHECK_NEAR(y != NULL ? y->gini : -1, want.gini, 1e-12);
    CHECK_NEAR(y != NULL ? y->max_mean : -1, want.max_mean, 1e-12);
    CHECK_INT_EQ(r != NULL ? moe_report_write_summary(r, &err) : -1, MOE_OK);
    CHECK_INT_EQ(r != NULL ? moe_report_write_json(r, &err) : -1, MOE_OK);
    char *t = r != NULL ? slurp(r->run_dir, "summary.txt", NULL) : NULL;
    char row[160]; /* layer 0: demand and dropped "-", kept and its balance known */
    snprintf(row, sizeof(row), "      0             -           210           -  %7.3f  %7.3f",
             want.gini, want.cv);
    CHECK_STR_CONTAINS(t, row);
    /* layer 0 expert 0, rank 1's: demand "-", 10 tokens, dropped "-" */
    CHECK_STR_CONTAINS(t, "      0       0     1  h1             -          10           -"
                          "        4");
    free(t);
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    snprintf(path, sizeof(path), "%s/summary.json", r != NULL ? r->run_dir : "");
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    CHECK(json_is_null(moe_json_path(doc, "layers.0.demand_total")));
    CHECK(json_is_null(moe_json_path(doc, "layers.0.dropped_total")));
    CHECK(json_is_null(moe_json_path(doc, "layers.0.demand.3")));
    CHECK(json_is_null(moe_json_path(doc, "layers.0.dropped.3")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "layers.0.kept_total"), -1), 210, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "layers.0.kept.3"), -1), 30, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "layers.0.gini"), -1), want.gini, 1e-6);
    json_decref(doc);
    mt_remove(r, root, "unrouted");
    moe_merge_destroy(m);
    moe_prof_record_free(&recs[1]);
    moe_prof_record_free(&recs[2]);
}

/* Rank k's record under cfg's placement: each expert it hosts computed mt_kept rows in 4
 * calls of 2 ms; a routing rank (`routes`) also counted mt_demand choices of every expert
 * (its own tokens' choices, in symmetric routing). */
static bool mt_rank_record(moe_prof_record_t *rec, const moe_config_t *cfg, int k, bool routes)
{
    int32_t ids[8];
    int n = moe_cfg_experts_of_rank(cfg, k, ids);
    if (n > 8 || moe_prof_record_alloc(rec, 3, 2, 8, n) != MOE_OK) {
        return false;
    }
    rec->rank = k;
    rec->flags = MOE_PROF_FLAG_FINAL | MOE_PROF_FLAG_WINDOW_END;
    rec->steps_recorded = 4;
    for (int i = 0; i < n; i++) {
        rec->local_ids[i] = ids[i];
        for (int l = 0; l < 2; l++) {
            moe_rec_expert_t *x = &rec->experts[l * n + i];
            moe_hist_reset(&x->hist);
            moe_hist_add(&x->hist, 2000000);
            x->tokens = mt_kept(l, ids[i]);
            x->calls = 4;
            x->flops = 1e9;
        }
    }
    for (int i = 0; routes && i < 2 * 8; i++) {
        rec->demand[i] = mt_demand(i / 8, i % 8);
        rec->kept[i] = mt_kept(i / 8, i % 8);
        rec->dropped[i] = rec->demand[i] - rec->kept[i];
    }
    return true;
}

/* The merged report of `profiled` ranks' records (the others have none), written as
 * summary.txt and summary.json; their text into *txt and the JSON into *doc. */
static moe_report_t *mt_merge_subset(moe_merge_t *m, const fixture_t *fx, const bool *have,
                                     int lost, char **txt, json_t **doc)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_prof_record_t recs[3];
    memset(recs, 0, sizeof(recs));
    bool ok = m != NULL, symmetric = fx->cfg.routing == MOE_ROUTING_SYMMETRIC;
    for (int k = 0; k < 3; k++) {
        ok = ok && (!have[k] || mt_rank_record(&recs[k], &fx->cfg, k, symmetric || k == 0));
    }
    for (int k = 0; ok && k < 3; k++) { /* each of 2 copies computes half its expert's rows */
        for (int i = 0; have[k] && i < 2 * recs[k].num_local; i++) {
            int32_t on[8];
            int e = recs[k].local_ids[i % recs[k].num_local];
            int copies = moe_cfg_replicas_of(&fx->cfg, i / recs[k].num_local, e, on);
            recs[k].experts[i].tokens /= copies > 1 ? 2 : 1;
        }
    }
    CHECK(ok);
    CHECK_INT_EQ(ok ? moe_merge_window(m, recs, have, 0, &err) : -1, MOE_OK);
    for (int k = 0; k < 3; k++) {
        moe_prof_record_free(&recs[k]);
    }
    if (ok && lost >= 0) { /* its records came, its last part did not */
        moe_merge_note_missing(m, lost, "lost: does not answer");
    }
    moe_report_t *r = ok ? mt_finish(m, fx->yaml, 6) : NULL;
    CHECK_INT_EQ(r != NULL ? moe_report_write_summary(r, &err) : -1, MOE_OK);
    CHECK_INT_EQ(r != NULL ? moe_report_write_json(r, &err) : -1, MOE_OK);
    *txt = r != NULL ? slurp(r->run_dir, "summary.txt", NULL) : NULL;
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", r != NULL ? r->run_dir : "");
    *doc = NULL;
    CHECK_INT_EQ(moe_json_load_file(path, doc, &err), MOE_OK);
    return r;
}

/* One merge of a subset of the 3 ranks (hosts h0-h2) of a config (mt_config_placed's) and
 * what it wrote, under ROOT/NAME, for a test. */
typedef struct mt_subset {
    fixture_t fx;
    moe_merge_t *m;
    moe_report_t *r;
    char *txt;    /* summary.txt */
    json_t *doc;  /* summary.json */
    const char *root, *name;
} mt_subset_t;

/* have[3]: whose records came; lost: a rank whose last part did not (-1: none). */
static void mt_subset_open(mt_subset_t *s, const char *root, const char *routing,
                           const char *experts, const char *profiled, const char *name,
                           const bool *have, int lost)
{
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    mt_config_placed(&s->fx, root, routing, experts, profiled, name);
    s->root = root;
    s->name = name;
    s->m = moe_merge_create(&s->fx.cfg, 3, hosts);
    s->txt = NULL;
    s->doc = NULL;
    s->r = mt_merge_subset(s->m, &s->fx, have, lost, &s->txt, &s->doc);
}

static void mt_subset_close(mt_subset_t *s)
{
    free(s->txt);
    json_decref(s->doc);
    mt_remove(s->r, s->root, s->name);
    moe_merge_destroy(s->m);
}

/* Symmetric routing (every rank routes its own tokens) with rank 1 not profiled: ranks 0
 * and 2 counted only their own tokens' choices, so their sum is not the layer's demand,
 * kept or dropped, and not rank 1's experts' tokens either. All of them are unknown (null,
 * "-"), never a partial sum shown as the whole; the experts ranks 0 and 2 host keep their
 * own rows. */
static void test_merge_symmetric_subset(const char *root)
{
    bool have[3] = {true, false, true};
    mt_subset_t sub;
    mt_subset_open(&sub, root, "symmetric", "auto", "[0, 2]", "symmetric", have, -1);
    moe_report_t *r = sub.r;
    char *t = sub.txt;
    json_t *doc = sub.doc;
    CHECK(r != NULL && !r->partial);
    CHECK(json_is_null(moe_json_path(doc, "layers.0.demand_total")));
    CHECK(json_is_null(moe_json_path(doc, "layers.0.kept_total")));
    CHECK(json_is_null(moe_json_path(doc, "layers.0.dropped_total")));
    CHECK(json_is_null(moe_json_path(doc, "layers.1.demand.7")));
    CHECK(json_is_null(moe_json_path(doc, "layers.1.dropped.7")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "routing.layers_with_choices"), -1), 0, 0);
    /* the run's totals of unknown counts: null, not 0 */
    CHECK(json_is_null(moe_json_path(doc, "routing.choices")));
    CHECK(json_is_null(moe_json_path(doc, "findings.demand_total")));
    CHECK(json_is_null(moe_json_path(doc, "findings.dropped_total")));
    CHECK(json_is_null(moe_json_path(doc, "findings.hot_demand")));
    CHECK(json_is_null(moe_json_path(doc, "findings.hot_dropped")));
    CHECK(json_is_null(moe_json_path(doc, "findings.drop_share")));
    int32_t ids[8];
    int n1 = moe_cfg_experts_of_rank(&sub.fx.cfg, 1, ids);
    CHECK(n1 > 0);
    for (int i = 0; r != NULL && i < 2 * 8; i++) {
        const moe_rep_expert_t *x = &r->experts[i];
        char key[64];
        snprintf(key, sizeof(key), "experts.%d.tokens", i);
        if (x->rank == 1) { /* no whole count of its rows: ranks 0 and 2 saw a part */
            CHECK(json_is_null(moe_json_path(doc, key)));
            CHECK(!x->router_count);
        } else {
            CHECK_NEAR(moe_json_num(moe_json_path(doc, key), -1), mt_kept(x->layer, x->expert), 0);
        }
    }
    /* layer 0: demand, kept, dropped and the balance unknown */
    CHECK_STR_CONTAINS(t, "      0             -             -           -        -        -"
                          "         -         -\n");
    char row[160]; /* rank 1's first expert of layer 0: demand, tokens and dropped "-" */
    snprintf(row, sizeof(row), "      0  %6d     1  h1             -           -           -",
             n1 > 0 ? ids[0] : -1);
    CHECK_STR_CONTAINS(t, row);
    mt_subset_close(&sub);
}

/* Symmetric routing, every rank profiled, rank 2 lost after its records of the window came
 * (the end's last part never did): its counts cover fewer steps than the others', so the
 * layers' demand, kept and dropped are unknown, and so are rank 2's experts' tokens: a lost
 * rank's records are not whole, as a missing one's are not. */
static void test_merge_symmetric_lost(const char *root)
{
    bool have[3] = {true, true, true};
    mt_subset_t sub;
    mt_subset_open(&sub, root, "symmetric", "auto", "[0, 1, 2]", "symmetric_lost", have, 2);
    CHECK(sub.r != NULL && sub.r->partial);
    CHECK(json_is_null(moe_json_path(sub.doc, "layers.0.demand_total")));
    CHECK(json_is_null(moe_json_path(sub.doc, "layers.0.demand.0")));
    CHECK(json_is_null(moe_json_path(sub.doc, "routing.choices")));
    /* an expert on rank 2 (its hosts by auto placement: the last third) */
    int e = -1;
    for (int i = 0; sub.r != NULL && i < sub.r->num_experts; i++) {
        e = e < 0 && sub.r->experts[i].rank == 2 ? i : e;
    }
    char key[64];
    snprintf(key, sizeof(key), "experts.%d.tokens", e);
    CHECK(e >= 0 && json_is_null(moe_json_path(sub.doc, key)));
    snprintf(key, sizeof(key), "experts.%d.calls", e);
    CHECK(e >= 0 && json_is_null(moe_json_path(sub.doc, key)));
    mt_subset_close(&sub);
}

/* Master routing, only rank 2 profiled: no routing rank counted the choices, and rank 1
 * (experts 0-3) sent nothing, so those experts' tokens are unknown (null, "-"), not 0. */
static void test_merge_unrouted_host_missing(const char *root)
{
    bool have[3] = {false, false, true};
    mt_subset_t sub;
    mt_subset_open(&sub, root, "master", "auto", "[2]", "unrouted_host", have, -1);
    char *t = sub.txt;
    json_t *doc = sub.doc;
    CHECK(json_is_null(moe_json_path(doc, "experts.1.tokens"))); /* layer 0 expert 1, rank 1 */
    CHECK(json_is_false(moe_json_path(doc, "experts.1.router_count")));
    CHECK(json_is_null(moe_json_path(doc, "layers.1.tokens.2")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "experts.5.tokens"), -1), mt_kept(0, 5), 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "layers.1.tokens.6"), -1), mt_kept(1, 6), 0);
    /* layer 0 expert 1: demand, tokens and dropped "-", calls unknown too */
    CHECK_STR_CONTAINS(t, "      0       1     1  h1             -           -           -"
                          "        -");
    /* no hottest by tokens: each layer's mean would be over rank 2's experts alone */
    CHECK(t != NULL && strstr(t, "Hottest expert:") == NULL);
    mt_subset_close(&sub);
}

/* Master routing, expert 4 copied on ranks 1 and 2, rank 2 not profiled: expert 4's row
 * (host: rank 1, its lowest) summed rank 1's half of its rows and showed it as its tokens,
 * unmarked, with rank 1's calls and flops. Now a copy's host missing is read as the host
 * missing: the router's count of its kept choices, marked, calls and latency unknown. */
static void test_merge_copy_host_missing(const char *root)
{
    bool have[3] = {true, true, false};
    mt_subset_t sub;
    mt_subset_open(&sub, root, "master", "{1: [0, 1, 2, 3, 4], 2: [4, 5, 6, 7]}", "[0, 1]",
                   "copy_host", have, -1);
    moe_report_t *r = sub.r;
    char *t = sub.txt;
    json_t *doc = sub.doc;
    CHECK(r != NULL && r->experts[4].rank == 1 && r->num_replicas == 4);
    CHECK(json_is_true(moe_json_path(doc, "experts.4.router_count")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "experts.4.tokens"), -1), mt_kept(0, 4), 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "layers.0.tokens.4"), -1), mt_kept(0, 4), 0);
    CHECK(json_is_null(moe_json_path(doc, "experts.4.calls")));
    CHECK(json_is_null(moe_json_path(doc, "experts.4.flops")));
    CHECK(json_is_null(moe_json_path(doc, "experts.4.latency_ms.p50")));
    /* an expert whose every host sent records keeps its own rows */
    CHECK(json_is_false(moe_json_path(doc, "experts.3.router_count")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "experts.3.tokens"), -1), mt_kept(0, 3), 0);
    char row[160]; /* layer 0 expert 4: the router's count, calls "-", marked */
    snprintf(row, sizeof(row), "      0       4     1  h1    %10" PRIu64 "  %10" PRIu64
             "  %10" PRIu64 "        -", mt_demand(0, 4), mt_kept(0, 4),
             mt_demand(0, 4) - mt_kept(0, 4));
    CHECK_STR_CONTAINS(t, row);
    mt_subset_close(&sub);
}

/* The wait tests' job: 3 ranks, master routing; rank 0 routes and hosts no experts, ranks
 * 1 and 2 host experts 0-3 and 4-7. One recorded step of one layer. */
/* Two recorded steps in a row (one exchange each, num_layers 1), every phase's begin and
 * end given per rank on rank 0's clock: [exchange][rank]. */
typedef struct wt_seq {
    double disp_b[2][3], disp_e[2][3], comb_b[2][3], comb_e[2][3];
} wt_seq_t;

typedef struct wt_case {
    const char *name;
    double disp_us[3], comb_us[3]; /* arrivals on rank 0's clock */
    double compute_us[3];          /* gate (rank 0) or expert (ranks 1, 2) per step */
    const wt_seq_t *seq;           /* set: two steps as given, not disp_us / comb_us */
    bool router_missing;           /* rank 0's records not merged (not profiled) */
} wt_case_t;

#define WT_STEP_US 2000.0
#define WT_TAIL_US 50.0 /* every phase ends this long after the last arrival */

static double wt_last(const double *a)
{
    return fmax(a[0], fmax(a[1], a[2]));
}

/* Rank k's record for case c; rank 2's clock runs 1 ms ahead of rank 0's, so arrivals
 * must be aligned before they are compared. */
static bool wt_record(moe_prof_record_t *rec, const wt_case_t *c, int k)
{
    int local = k == 0 ? 0 : 4;
    if (moe_prof_record_alloc(rec, 3, 1, 8, local) != MOE_OK) {
        return false;
    }
    int n = c->seq != NULL ? 2 : 1;
    rec->exchanges = calloc((size_t)n, sizeof(*rec->exchanges));
    if (rec->exchanges == NULL) {
        return false;
    }
    rec->num_exchanges = n;
    rec->rank = k;
    rec->flags = MOE_PROF_FLAG_FINAL | MOE_PROF_FLAG_WINDOW_END;
    rec->steps_recorded = n;
    rec->clock_offset_ns = k == 2 ? 1e6 : 0.0;
    int64_t off = (int64_t)rec->clock_offset_ns;
    double phase[MOE_PHASE_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        moe_rec_exchange_t *x = &rec->exchanges[i];
        const wt_seq_t *q = c->seq;
        x->step = 1 + i;
        x->dispatch_begin_ns = (int64_t)((q ? q->disp_b[i][k] : c->disp_us[k]) * 1e3) + off;
        x->dispatch_end_ns =
            (int64_t)((q ? q->disp_e[i][k] : wt_last(c->disp_us) + WT_TAIL_US) * 1e3) + off;
        x->combine_begin_ns = (int64_t)((q ? q->comb_b[i][k] : c->comb_us[k]) * 1e3) + off;
        x->combine_end_ns =
            (int64_t)((q ? q->comb_e[i][k] : wt_last(c->comb_us) + WT_TAIL_US) * 1e3) + off;
        phase[MOE_PHASE_DISPATCH] += (double)(x->dispatch_end_ns - x->dispatch_begin_ns);
        phase[MOE_PHASE_COMBINE] += (double)(x->combine_end_ns - x->combine_begin_ns);
    }
    phase[MOE_PHASE_STEP] = n * WT_STEP_US * 1e3;
    phase[k == 0 ? MOE_PHASE_GATE : MOE_PHASE_EXPERT] = n * c->compute_us[k] * 1e3;
    for (int p = 0; p < MOE_PHASE_COUNT; p++) { /* sums over the steps; min, max per step */
        rec->phase_sum[p] = phase[p];
        rec->phase_min[p] = rec->phase_max[p] = phase[p] / n;
    }
    for (int i = 0; i < local; i++) {
        rec->local_ids[i] = 4 * (k - 1) + i;
        moe_hist_reset(&rec->experts[i].hist);
    }
    for (int e = 0; k == 0 && e < 8; e++) { /* the router's counts: the headline needs some */
        rec->demand[e] = rec->kept[e] = 10 + (uint64_t)e;
    }
    return true;
}

typedef struct wt_run {
    moe_config_t cfg;
    char yaml[512];
    moe_merge_t *m;
    moe_prof_record_t recs[3];
    moe_report_t *r;
    json_t *doc;
    char *headline, *summary;
} wt_run_t;

/* Merge case c's records, write summary.txt and summary.json, read them back. */
static bool wt_run(wt_run_t *w, const char *root, const wt_case_t *c)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->yaml, sizeof(w->yaml),
             "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: 8\n  top_k: 2\n"
             "  num_layers: 1\nplacement:\n  master_rank: 0\n  experts: auto\n"
             "workload:\n  tokens_per_step: 64\n  steps: 2\nprofiler:\n  enabled: true\n"
             "  warmup_steps: 1\n  output_dir: %s/waits\n",
             root);
    moe_error_t err;
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    const bool have[3] = {!c->router_missing, true, true};
    if (moe_cfg_parse(w->yaml, strlen(w->yaml), "w.yaml", 3, &w->cfg, &err) != MOE_OK ||
        (w->m = moe_merge_create(&w->cfg, 3, hosts)) == NULL) {
        return false;
    }
    for (int k = 0; k < 3; k++) {
        if (!wt_record(&w->recs[k], c, k)) {
            return false;
        }
    }
    if (moe_merge_window(w->m, w->recs, have, 0, &err) != MOE_OK) {
        return false;
    }
    w->r = mt_finish(w->m, w->yaml, 2);
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", w->r->run_dir);
    if (moe_report_write_summary(w->r, &err) != MOE_OK ||
        moe_report_write_json(w->r, &err) != MOE_OK ||
        moe_report_write_html(w->r, &err) != MOE_OK ||
        moe_json_load_file(path, &w->doc, &err) != MOE_OK) {
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
        return false;
    }
    w->headline = headline_of(w->r);
    w->summary = slurp(w->r->run_dir, "summary.txt", NULL);
    return w->headline != NULL && w->summary != NULL;
}

static void wt_done(wt_run_t *w, const char *root)
{
    if (w->r != NULL) {
        static const char *const files[4] = {"summary.txt", "summary.json", "report.html",
                                             "metrics.csv"};
        char path[MOE_PATH_MAX + 32];
        for (int i = 0; i < 4; i++) {
            snprintf(path, sizeof(path), "%s/%s", w->r->run_dir, files[i]);
            unlink(path);
        }
        rmdir(w->r->run_dir);
        snprintf(path, sizeof(path), "%s/waits", root);
        rmdir(path);
    }
    json_decref(w->doc);
    free(w->headline);
    free(w->summary);
    moe_merge_destroy(w->m);
    for (int k = 0; k < 3; k++) {
        moe_prof_record_free(&w->recs[k]);
    }
}

/* ms per step of one rank's figure in summary.json. */
static double wt_ms(const wt_run_t *w, int k, const char *what)
{
    char path[96];
    snprintf(path, sizeof(path), "ranks.%d.per_step_ms.%s", k, what);
    return moe_json_num(moe_json_path(w->doc, path), NAN);
}

/* Combine: the routing rank (no experts) waits for the expert ranks by design; the part of
 * its wait past their mean arrival, and every expert rank's wait for a slower expert rank,
 * is imbalance. A straggler only from 1.10x. */
static void test_merge_waits_combine(const char *root)
{
    static const wt_case_t cases[2] = {
        {"combine 1.05x", {0, 0, 0}, {0, 100, 300}, {100, 950, 1050}, NULL, false},
        {"combine 1.5x", {0, 0, 0}, {0, 100, 300}, {100, 500, 1500}, NULL, false},
    };
    for (int i = 0; i < 2; i++) {
        wt_run_t w;
        bool ok = wt_run(&w, root, &cases[i]);
        CHECK(ok);
        if (!ok) {
            wt_done(&w, root);
            continue;
        }
        CHECK(w.r->ranks[0].num_local == 0 && w.r->ranks[0].routes);
        CHECK(w.r->ranks[1].num_local == 4 && !w.r->ranks[1].routes);
        CHECK_NEAR(wt_ms(&w, 0, "structural_wait"), 0.200, 1e-9);
        CHECK_NEAR(wt_ms(&w, 0, "idle"), 0.100, 1e-9);
        CHECK_NEAR(wt_ms(&w, 1, "structural_wait"), 0.0, 1e-9);
        CHECK_NEAR(wt_ms(&w, 1, "idle"), 0.200, 1e-9);
        CHECK_NEAR(wt_ms(&w, 2, "structural_wait"), 0.0, 1e-9);
        CHECK_NEAR(wt_ms(&w, 2, "idle"), 0.0, 1e-9);
        for (int k = 0; k < 3; k++) { /* moving bytes: 50 us of each phase */
            CHECK_NEAR(wt_ms(&w, k, "exchange"), 0.100, 1e-9);
        }
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.0.share_of_step.structural_wait"), -1),
                   0.1, 1e-12);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_share"), -1),
                   (0.1 + 0.2) / 2.0 / 3.0, 1e-9);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.structural_wait_share"), -1),
                   0.2 / 2.0 / 3.0, 1e-9); /* summary.json keeps 10 digits */
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.straggler_threshold"), -1), 1.1,
                   1e-12);
        CHECK_STR_CONTAINS(w.headline, "; exchange: 5.0% of step time moving bytes, 5.0% waiting "
                                       "for slower ranks (most: rank 1 waiting for rank 2, 10.0% "
                                       "of its step; routing rank's designed wait: 3.3%, not "
                                       "imbalance)\n");
        /* every idle is a wait for rank 2, the last to arrive */
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.0.idle_waiting_for_ms.2"), -1),
                   0.100, 1e-9);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.1.idle_waiting_for_ms.2"), -1),
                   0.200, 1e-9);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.1.idle_waiting_for_ms.0"), -1),
                   0.0, 1e-9);
        CHECK_STR_CONTAINS(w.summary, "  rank 0 waited for rank 2 0.100 ms (5.0%)\n"
                                      "  rank 1 waited for rank 2 0.200 ms (10.0%)\n");
        CHECK_STR_CONTAINS(w.summary, "  * Exchange: 5.0% of step time goes to moving bytes and "
                                      "5.0% to waiting in the exchange for slower ranks (load "
                                      "imbalance); the routing rank's designed wait, not "
                                      "imbalance, is 3.3%");
        if (i == 0) {
            CHECK(json_is_null(moe_json_path(w.doc, "findings.straggler_rank")));
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.straggler_ratio"), -1), 1.05,
                       1e-9);
            CHECK_STR_CONTAINS(w.headline, "; no straggler (ranks with experts within 1.05x of "
                                           "their mean expert time; named from 1.10x);");
            CHECK_STR_CONTAINS(w.summary, "  * Straggler: no straggler (ranks with experts within "
                                          "1.05x of their mean expert time; named from 1.10x).\n");
        } else {
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.straggler_rank"), -1), 2, 0);
            CHECK_STR_CONTAINS(w.headline, "; straggler: rank 2, 1.50x the mean expert time of "
                                           "the ranks with experts (named from 1.10x);");
            CHECK_STR_CONTAINS(w.summary, "  * Straggler rank: rank 2 (h2) spends 1.500 ms per "
                                          "step in its experts, 1.50x the mean of the ranks with "
                                          "experts (a straggler is named from 1.10x).\n");
        }
        wt_done(&w, root);
    }
}

/* Balanced: the expert ranks arrive together; all of the routing rank's wait is by design,
 * nothing is imbalance, no straggler; every writer shows the designed wait apart. */
static void test_merge_waits_balanced(const char *root)
{
    static const wt_case_t c = {"balanced", {0, 0, 0}, {0, 200, 200}, {100, 1000, 1000}, NULL,
                                false};
    wt_run_t w;
    bool ok = wt_run(&w, root, &c);
    CHECK(ok);
    if (ok) {
        CHECK_NEAR(wt_ms(&w, 0, "structural_wait"), 0.200, 1e-9);
        for (int k = 0; k < 3; k++) {
            CHECK_NEAR(wt_ms(&w, k, "idle"), 0.0, 1e-9);
        }
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_share"), -1), 0.0, 1e-12);
        CHECK(json_is_null(moe_json_path(w.doc, "findings.straggler_rank")));
        CHECK_STR_CONTAINS(w.headline, "; no straggler (ranks with experts within 1.00x of their "
                                       "mean expert time; named from 1.10x); exchange: 5.0% of "
                                       "step time moving bytes, 0.0% waiting for slower ranks "
                                       "(routing rank's designed wait: 3.3%, not imbalance)\n");
        /* summary.txt's table: rank 0's 0.200 ms designed wait, 10% of its step */
        CHECK_STR_CONTAINS(w.summary, "designed ms      %\n");
        CHECK_STR_CONTAINS(w.summary, "  0.000   0.0%        0.200  10.0%\n");
        char *h = slurp(w.r->run_dir, "report.html", NULL);
        CHECK_STR_CONTAINS(h, "<title>rank 0 designed wait: 0.200 ms per step (10.0% of the "
                              "step)</title>");
        CHECK_STR_CONTAINS(h, ">designed wait</text>");
        free(h);
    }
    wt_done(&w, root);
}

/* Dispatch: an expert-only rank (routes nothing) waits for the routing rank's gate by
 * design; waiting past the router's arrival for a slower expert rank is imbalance, and so
 * is the router's own wait for an expert rank. */
static void test_merge_waits_dispatch(const char *root)
{
    static const wt_case_t cases[2] = {
        {"dispatch early", {500, 0, 100}, {0, 0, 0}, {100, 1000, 1000}, NULL, false},
        {"dispatch late", {300, 0, 500}, {0, 0, 0}, {100, 1000, 1000}, NULL, false},
    };
    /* [case][rank]: structural, idle (ms per step) */
    static const double want[2][3][2] = {
        {{0.0, 0.0}, {0.500, 0.0}, {0.400, 0.0}},
        {{0.0, 0.200}, {0.300, 0.200}, {0.0, 0.0}},
    };
    for (int i = 0; i < 2; i++) {
        wt_run_t w;
        bool ok = wt_run(&w, root, &cases[i]);
        CHECK(ok);
        for (int k = 0; ok && k < 3; k++) {
            CHECK_NEAR(wt_ms(&w, k, "structural_wait"), want[i][k][0], 1e-9);
            CHECK_NEAR(wt_ms(&w, k, "idle"), want[i][k][1], 1e-9);
            CHECK_NEAR(wt_ms(&w, k, "exchange"), 0.100, 1e-9);
        }
        wt_done(&w, root);
    }
}

/* An expert rank's wait for the master's next dispatch while the master still waits for a
 * slower expert rank's rows is imbalance, booked against that rank (it was all booked as
 * the routing rank's designed wait); the master's merge and gate after the last rows are
 * back stay designed. Truth by construction: rank 1 computes 1500 us, rank 2 1000 us, so a
 * balanced placement would save rank 2 exactly 500 us a step; a balanced pair (10 us apart
 * from noise) books only those 10 us. Rank 0 routes (gate 100 us, merge 100 us), hosts no
 * experts; rank 2's clock runs 1 ms ahead. */
static void test_merge_waits_next_dispatch(const char *root)
{
    /* [exchange][rank 0, 1, 2]: step 1's combine, then step 2's dispatch */
    static const wt_seq_t skew = {
        .disp_b = {{0, 0, 0}, {1800, 1600, 1100}},
        .disp_e = {{50, 50, 50}, {1850, 1850, 1850}},
        .comb_b = {{50, 1550, 1050}, {3000, 3000, 3000}},
        .comb_e = {{1600, 1600, 1100}, {3050, 3050, 3050}},
    };
    static const wt_seq_t even = {
        .disp_b = {{0, 0, 0}, {1410, 1110, 1100}},
        .disp_e = {{50, 50, 50}, {1460, 1460, 1460}},
        .comb_b = {{50, 1060, 1050}, {3000, 3000, 3000}},
        .comb_e = {{1110, 1110, 1100}, {3050, 3050, 3050}},
    };
    static const wt_case_t cases[2] = {
        {"next dispatch 1.5x", {0}, {0}, {100, 1500, 1000}, &skew, false},
        {"next dispatch balanced", {0}, {0}, {100, 1000, 1000}, &even, false},
    };
    /* [case][rank]: idle, designed (ms per step over the 2 steps) and idle for rank 1 */
    static const double want[2][3][3] = {
        /* rank 2: 50 us in the combine + 450 us of the next dispatch for rank 1 (was 50
         * idle, 700 designed); 250 designed = rank 1's rows' travel + merge + gate */
        {{0.125, 0.625, 0.125}, {0.0, 0.100, 0.0}, {0.250, 0.125, 0.250}},
        /* rank 2: the 10 us in the combine only; 310 us designed (rows back, merge, gate) */
        {{0.0025, 0.5025, 0.0025}, {0.0, 0.150, 0.0}, {0.005, 0.155, 0.005}},
    };
    for (int i = 0; i < 2; i++) {
        wt_run_t w;
        bool ok = wt_run(&w, root, &cases[i]);
        CHECK(ok);
        for (int k = 0; ok && k < 3; k++) {
            char path[96];
            snprintf(path, sizeof(path), "ranks.%d.idle_waiting_for_ms.1", k);
            CHECK_NEAR(wt_ms(&w, k, "idle"), want[i][k][0], 1e-9);
            CHECK_NEAR(wt_ms(&w, k, "structural_wait"), want[i][k][1], 1e-9);
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, path), -1), want[i][k][2], 1e-9);
            for (int j = 0; j < 3; j++) { /* a rank's idle: all of it for rank 1 */
                snprintf(path, sizeof(path), "ranks.%d.idle_waiting_for_ms.%d", k, j);
                CHECK_NEAR(moe_json_num(moe_json_path(w.doc, path), -1),
                           j == 1 ? want[i][k][2] : 0.0, 1e-9);
            }
        }
        if (ok && i == 0) {
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_most_rank"), -1), 2, 0);
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_most_waiting_for"), -1),
                       1, 0);
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_most_share"), -1),
                       0.125, 1e-9);
            CHECK_STR_CONTAINS(w.headline, "waiting for slower ranks (most: rank 2 waiting for "
                                           "rank 1, 12.5% of its step; routing rank's designed "
                                           "wait: ");
            CHECK_STR_CONTAINS(w.summary, "  rank 2 waited for rank 1 0.250 ms (12.5%)\n");
            CHECK_STR_CONTAINS(w.summary, "  * Most imbalance: rank 2 (h2) waited 12.5% of its "
                                          "step for rank 1 (h1).\n");
            char *h = slurp(w.r->run_dir, "report.html", NULL); /* the same words, hosts too */
            CHECK_STR_CONTAINS(h, "<li><b>Most imbalance:</b> rank 2 (h2) waited <b>12.5%</b> "
                                  "of its step for rank 1 (h1).</li>");
            free(h);
        }
        wt_done(&w, root);
    }
}

/* The same skewed pair of steps merged as two windows of one step each: the second
 * window's first dispatch looks back at the first window's last combine, so rank 2's wait
 * for rank 1 is the same 500 us (it was designed when a window's first exchange had
 * nothing to look back at). A window after a gap (step 3 missing) does not look back. */
static void test_merge_waits_windows(const char *root)
{
    static const wt_seq_t skew = {
        .disp_b = {{0, 0, 0}, {1800, 1600, 1100}},
        .disp_e = {{50, 50, 50}, {1850, 1850, 1850}},
        .comb_b = {{50, 1550, 1050}, {3000, 3000, 3000}},
        .comb_e = {{1600, 1600, 1100}, {3050, 3050, 3050}},
    };
    static const wt_case_t c = {"two windows", {0}, {0}, {100, 1500, 1000}, &skew, false};
    for (int gap = 0; gap < 2; gap++) {
        wt_run_t w;
        memset(&w, 0, sizeof(w));
        snprintf(w.yaml, sizeof(w.yaml),
                 "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: 8\n  top_k: 2\n"
                 "  num_layers: 1\nplacement:\n  master_rank: 0\n  experts: auto\n"
                 "workload:\n  tokens_per_step: 64\n  steps: 2\nprofiler:\n  enabled: true\n"
                 "  warmup_steps: 1\n  output_dir: %s/waits\n",
                 root);
        moe_error_t err;
        static const char hosts[3][64] = {"h0", "h1", "h2"};
        static const bool have[3] = {true, true, true};
        bool ok = moe_cfg_parse(w.yaml, strlen(w.yaml), "w.yaml", 3, &w.cfg, &err) == MOE_OK &&
                  (w.m = moe_merge_create(&w.cfg, 3, hosts)) != NULL;
        for (int k = 0; ok && k < 3; k++) {
            ok = wt_record(&w.recs[k], &c, k);
        }
        moe_rec_exchange_t second[3];
        for (int k = 0; ok && k < 3; k++) { /* window 1: step 1's exchange only */
            second[k] = w.recs[k].exchanges[1];
            second[k].step += gap; /* gap: window 2 is step 3, not step 2 */
            w.recs[k].num_exchanges = 1;
        }
        ok = ok && moe_merge_window(w.m, w.recs, have, 0, &err) == MOE_OK;
        for (int k = 0; ok && k < 3; k++) { /* window 2: step 2's (or 3's) */
            w.recs[k].exchanges[0] = second[k];
        }
        ok = ok && moe_merge_window(w.m, w.recs, have, 0, &err) == MOE_OK;
        moe_prof_run_t run = {2, 2, 1.0, w.yaml, strlen(w.yaml), false, 1.0, NULL, false, 0};
        moe_prof_static_t info;
        memset(&info, 0, sizeof(info));
        w.r = ok ? moe_merge_finish(w.m, &run, &info) : NULL;
        CHECK(w.r != NULL);
        if (w.r != NULL) {
            const moe_rep_rank_t *k2 = &w.r->ranks[2];
            double idle = gap ? 50e3 : 500e3, designed = gap ? 700e3 : 250e3;
            CHECK_NEAR(k2->idle_ns, idle, 1e-3);
            CHECK_NEAR(k2->structural_wait_ns, designed, 1e-3);
            CHECK_NEAR(w.r->idle_for_ns[2 * 3 + 1], idle, 1e-3);
        }
        wt_done(&w, root);
    }
}

/* ---- latency percentiles ------------------------------------------------------------ */

/* The latency test's job: 3 ranks, 2 layers, LT_STEPS recorded steps. Rank k's time of step
 * i is (i + 1) ms, plus 0.25 ms on rank 2 for odd i (the slowest rank sets the step's
 * latency); layer 0 takes (100 - i) ms on rank 1 and half that elsewhere; layer 1 takes 3 ms
 * on every rank, but 40 ms on rank 2 in step 37 and 60 ms in step 71 (its tail). Rank 1's
 * experts are busy 2 ms a step in all. */
#define LT_STEPS 100

static int64_t lt_step_ns(int k, int i)
{
    return (int64_t)(i + 1) * 1000000 + (k == 2 && i % 2 == 1 ? 250000 : 0);
}

static int64_t lt_layer_ns(int k, int i, int l)
{
    if (l == 0) {
        return (int64_t)(100 - i) * (k == 1 ? 1000000 : 500000);
    }
    return k == 2 && i == 37 ? 40000000 : k == 2 && i == 71 ? 60000000 : 3000000;
}

static bool lt_record(moe_prof_record_t *rec, int k, int64_t first_step)
{
    int local = k == 0 ? 0 : 4;
    if (moe_prof_record_alloc(rec, 3, 2, 8, local) != MOE_OK) {
        return false;
    }
    rec->steps = calloc(LT_STEPS, sizeof(*rec->steps));
    rec->layer_lat = calloc(2 * LT_STEPS, sizeof(*rec->layer_lat));
    if (rec->steps == NULL || rec->layer_lat == NULL) {
        return false;
    }
    rec->rank = k;
    rec->flags = MOE_PROF_FLAG_FINAL | MOE_PROF_FLAG_WINDOW_END;
    rec->steps_recorded = rec->num_steps = LT_STEPS;
    rec->num_layer_lat = 2 * LT_STEPS;
    for (int i = 0; i < LT_STEPS; i++) {
        rec->steps[i].step = first_step + i;
        rec->steps[i].phase_ns[MOE_PHASE_STEP] = lt_step_ns(k, i);
        rec->phase_sum[MOE_PHASE_STEP] += (double)lt_step_ns(k, i);
        for (int l = 0; l < 2; l++) {
            rec->layer_lat[2 * i + l] = (moe_rec_lat_t){
                .step = first_step + i, .layer = l, .ns = lt_layer_ns(k, i, l)};
        }
    }
    for (int i = 0; i < local; i++) {
        rec->local_ids[i] = 4 * (k - 1) + i;
        for (int l = 0; l < 2; l++) { /* rank 1: 2 ms of expert calls a step */
            moe_hist_reset(&rec->experts[l * local + i].hist);
            for (int s = 0; k == 1 && s < LT_STEPS; s++) {
                moe_hist_add(&rec->experts[l * local + i].hist, 250000);
            }
        }
    }
    return true;
}

/* The nearest-rank percentile q of v[n] (sorted here). */
static double lt_truth(int64_t *v, int n, double q)
{
    for (int i = 1; i < n; i++) { /* insertion sort: n is small */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    }
    int rank = (int)ceil(q * n);
    return (double)v[(rank < 1 ? 1 : rank) - 1];
}

/* Merge the latency test's two windows (the second's rank 2 names other steps) under
 * `routing`; the report in w->r, or false. */
static bool lt_merge_have(wt_run_t *w, const char *root, const char *routing, const bool *have)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->yaml, sizeof(w->yaml),
             "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: 8\n  top_k: 2\n"
             "  num_layers: 2\nplacement:\n  master_rank: 0\n  experts: auto\n"
             "runtime:\n  routing: %s\nworkload:\n  tokens_per_step: 8\n  steps: 201\n"
             "profiler:\n  enabled: true\n  warmup_steps: 1\n  output_dir: %s/waits\n",
             routing, root);
    moe_error_t err;
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    if (moe_cfg_parse(w->yaml, strlen(w->yaml), "l.yaml", 3, &w->cfg, &err) != MOE_OK ||
        (w->m = moe_merge_create(&w->cfg, 3, hosts)) == NULL) {
        return false;
    }
    for (int win = 0; win < 2; win++) {
        for (int k = 0; k < 3; k++) {
            moe_prof_record_free(&w->recs[k]);
            if (have[k] && !lt_record(&w->recs[k], k, win == 0 ? 1 : k == 2 ? 1001 : 101)) {
                return false;
            }
        }
        if (moe_merge_window(w->m, w->recs, have, 0, &err) != MOE_OK) {
            return false;
        }
    }
    w->r = mt_finish(w->m, w->yaml, 201);
    return w->r != NULL;
}

/* The same with every rank's records. */
static bool lt_merge(wt_run_t *w, const char *root, const char *routing)
{
    static const bool have[3] = {true, true, true};
    return lt_merge_have(w, root, routing, have);
}

/* w's report written (summary.txt, summary.json) and summary.json read back into w->doc. */
static void lt_write(wt_run_t *w)
{
    moe_error_t err;
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", w->r->run_dir);
    CHECK_INT_EQ(moe_report_write_summary(w->r, &err), MOE_OK);
    CHECK_INT_EQ(moe_report_write_json(w->r, &err), MOE_OK);
    CHECK_INT_EQ(moe_json_load_file(path, &w->doc, &err), MOE_OK);
}

/* The percentiles of h (`samples` of them: v[LT_STEPS] once or twice over) against the
 * nearest-rank truth of v, within 1/32. */
static void lt_check(const moe_hist_t *h, int64_t *v, uint64_t samples)
{
    static const double qs[3] = {0.5, 0.9, 0.99};
    CHECK_INT_EQ(h->count, samples);
    for (int q = 0; q < 3; q++) {
        double want = lt_truth(v, LT_STEPS, qs[q]);
        CHECK_NEAR(moe_hist_quantile(h, qs[q]), want, want / 32.0);
    }
}

/* The step's and each layer's percentiles: in symmetric routing the slowest rank per step,
 * in master routing the master's alone (the routing ranks' times: what the tokens wait),
 * within the histogram's 1/32; summary.json and summary.txt show them; a window where the
 * ranks' lists disagree on a step adds no sample for it; the share of the step reading
 * weights. */
static void test_merge_latency(const char *root)
{
    wt_run_t w;
    bool ok = lt_merge(&w, root, "symmetric");
    CHECK(ok);
    if (!ok) {
        wt_done(&w, root);
        return;
    }
    int64_t step[LT_STEPS], lay[2][LT_STEPS];
    for (int i = 0; i < LT_STEPS; i++) {
        step[i] = lt_step_ns(2, i);
        for (int l = 0; l < 2; l++) {
            int64_t a = lt_layer_ns(0, i, l), b = lt_layer_ns(1, i, l), c = lt_layer_ns(2, i, l);
            lay[l][i] = a > b ? (a > c ? a : c) : (b > c ? b : c);
        }
    }
    lt_check(&w.r->step_latency, step, LT_STEPS); /* the second window added nothing */
    lt_check(&w.r->layers[0].latency, lay[0], LT_STEPS);
    lt_check(&w.r->layers[1].latency, lay[1], LT_STEPS);
    /* layer 1's tail: p90 is the common 3 ms, p99 the 40 ms step, max the 60 ms one */
    CHECK_NEAR(moe_hist_quantile(&w.r->layers[1].latency, 0.9), 3e6, 3e6 / 32);
    CHECK_NEAR(moe_hist_quantile(&w.r->layers[1].latency, 0.99), 40e6, 40e6 / 32);
    CHECK_INT_EQ(w.r->layers[1].latency.max, 60000000);
    lt_write(&w);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "layers.1.latency_ms.p99"), -1), 40.0, 40.0 / 32);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "layers.1.latency_ms.p50"), -1), 3.0, 3.0 / 32);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "layers.1.latency_ms.max"), -1), 60.0, 1e-9);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "layers.0.latency_ms.samples"), -1), LT_STEPS, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "run.step_latency_ms.p50"), -1), 50.25,
               50.25 / 32);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "run.step_latency_ms.p99"), -1), 99.0, 99.0 / 32);
    /* rank 1: 2 ms a step of expert calls over its mean step of 50.5 ms, both windows */
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.1.share_of_step.weights"), -1),
               2.0 / 50.5, 1e-9);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.1.per_step_ms.weights"), -1), 2.0, 1e-9);
    CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.0.share_of_step.weights"), -1), 0.0, 0);
    w.summary = slurp(w.r->run_dir, "summary.txt", NULL);
    CHECK_STR_CONTAINS(w.summary, "Latency per recorded step (the tail: p50 / p90 / p99)");
    CHECK_STR_CONTAINS(w.summary, "  layer 1        100      3.");
    CHECK_STR_CONTAINS(w.summary, "     60.000\n");
    CHECK_STR_CONTAINS(w.summary, "     1  h1         4.0%        0.0%");
    wt_done(&w, root);
    /* master routing: rank 0's times alone (rank 2's slow layer 1 is not the tokens'); its
     * second window counts too (no other rank to disagree with) */
    ok = lt_merge(&w, root, "master");
    CHECK(ok);
    for (int i = 0; ok && i < LT_STEPS; i++) {
        step[i] = lt_step_ns(0, i);
        lay[0][i] = lt_layer_ns(0, i, 0);
        lay[1][i] = lt_layer_ns(0, i, 1);
    }
    if (ok) {
        lt_check(&w.r->step_latency, step, 2 * LT_STEPS);
        lt_check(&w.r->layers[0].latency, lay[0], 2 * LT_STEPS);
        lt_check(&w.r->layers[1].latency, lay[1], 2 * LT_STEPS);
        CHECK_INT_EQ(w.r->layers[1].latency.max, 3000000);
    }
    wt_done(&w, root);
}

/* Symmetric routing with rank 1's records missing (not profiled): the longest of ranks 0
 * and 2's step and layer times is not the longest of the routing ranks' (rank 1's layer 0
 * is the slowest here, twice rank 0's), and was shown as the step's and layers' latency,
 * unmarked. Now no sample is taken: null in summary.json, '-' in summary.txt. */
static void test_merge_latency_subset(const char *root)
{
    static const bool have[3] = {true, false, true};
    wt_run_t w;
    bool ok = lt_merge_have(&w, root, "symmetric", have);
    CHECK(ok);
    if (ok) {
        CHECK_INT_EQ(w.r->step_latency.count, 0);
        CHECK_INT_EQ(w.r->layers[0].latency.count, 0);
        CHECK_INT_EQ(w.r->layers[1].latency.count, 0);
        lt_write(&w);
        CHECK(json_is_null(moe_json_path(w.doc, "run.step_latency_ms.p99")));
        CHECK(json_is_null(moe_json_path(w.doc, "layers.0.latency_ms.max")));
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "layers.0.latency_ms.samples"), -1), 0, 0);
        w.summary = slurp(w.r->run_dir, "summary.txt", NULL);
        CHECK_STR_CONTAINS(w.summary, "  layer 0          0          -");
    }
    wt_done(&w, root);
}

/* The routing rank's records missing: the expert ranks' dispatch waits (for its gate, by
 * design) cannot be split, and were booked as imbalance against the expert rank that came
 * last (rank 1 "waiting for rank 2" 0.300 ms here, on one machine 35-75% of its step);
 * now they stay in the exchange, and only the combine's wait between the expert ranks,
 * which neither waits for by design, is imbalance: rank 1 for rank 2, 0.100 ms. */
static void test_merge_waits_unrouted(const char *root)
{
    static const wt_case_t c = {"unrouted", {500, 100, 400}, {900, 700, 800}, {100, 600, 700},
                                NULL, true};
    wt_run_t w;
    bool ok = wt_run(&w, root, &c);
    CHECK(ok);
    if (ok) {
        CHECK(!w.r->ranks[0].present);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.1.idle_waiting_for_ms.2"), -1),
                   0.100, 1e-9);
        CHECK_NEAR(wt_ms(&w, 1, "idle"), 0.100, 1e-9);
        CHECK_NEAR(wt_ms(&w, 2, "idle"), 0.0, 1e-9);
        /* rank 1's whole dispatch (100 to 550 us) stays in its exchange; of its combine
         * (700 to 950 us) the 100 us waiting for rank 2 is idle: 450 + 150 us */
        CHECK_NEAR(wt_ms(&w, 1, "exchange"), 0.600, 1e-9);
    }
    wt_done(&w, root);
}

/* profiler.output_dir with a trailing slash: the run folder under it is joined with one
 * slash (ROOT/trail/RUN, not ROOT/trail//RUN, in every path and message). */
static void test_merge_output_slash(const char *root)
{
    fixture_t fx;
    mt_config(&fx, root, "master", "[0, 2]", "trail/");
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    moe_merge_t *m = moe_merge_create(&fx.cfg, 3, hosts);
    char want[MOE_PATH_MAX];
    snprintf(want, sizeof(want), "%s/trail/", root);
    const char *dir = m != NULL ? moe_merge_run_dir(m) : "";
    CHECK(strncmp(dir, want, strlen(want)) == 0 && strstr(dir, "//") == NULL);
    mt_remove(mt_finish(m, fx.yaml, 6), root, "trail");
    moe_merge_destroy(m);
}

int main(void)
{
    char root[] = "/tmp/moed_test_merge_XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_merge_router(root);
    test_merge_unrouted(root);
    test_merge_symmetric_subset(root);
    test_merge_symmetric_lost(root);
    test_merge_unrouted_host_missing(root);
    test_merge_copy_host_missing(root);
    test_merge_waits_combine(root);
    test_merge_waits_balanced(root);
    test_merge_waits_dispatch(root);
    test_merge_waits_next_dispatch(root);
    test_merge_waits_windows(root);
    test_merge_waits_unrouted(root);
    test_merge_latency(root);
    test_merge_latency_subset(root);
    test_merge_output_slash(root);
    rmdir(root);
    return moe_test_finish("test_merge");
}
