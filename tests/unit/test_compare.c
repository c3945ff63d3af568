/* Unit tests for `moed compare` and the JSON it reads: two report folders of the synthetic
 * profile (tests/unit/report_fixture.c) side by side (shapes, the resolved configuration,
 * run states, folders that are not reports), the bytes between ranks apart from local
 * copies in every writer and in compare, and jansson loading, lookups and the write helpers
 * on valid, malformed and mutated JSON. Split from test_report.c. */
#include "report/report.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include "gather/balance.h"
#include "compare/json_lookup.h"
#include "compare/rank_load.h"
#include "gather/gather.h"
#include "report/json_write.h"
#include "report_fixture.h"
#include "report_util.h"
#include "test_util.h"

/* Runs compare into a string; returns its code. */
static int run_compare(const char *a, const char *b, char **text)
{
    size_t len = 0;
    *text = NULL;
    FILE *f = open_memstream(text, &len);
    if (f == NULL) {
        return -1;
    }
    int rc = moe_report_compare(a, b, f);
    fclose(f);
    return rc;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_compare(const char *root, const fixture_t *a)
{
    shape_t sb = small_shape;
    sb.tokens_per_s = 10500.0;
    fixture_t *b = fx_make(&sb);
    char *out = NULL, missing[MOE_PATH_MAX + 16], bad[MOE_PATH_MAX + 16];
    CHECK(b != NULL);
    for (int k = 0; b != NULL && k < b->rep.world_size; k++) {
        b->rep.ranks[k].chunks = 1; /* B: one chunk, nothing hidden */
        b->rep.ranks[k].hidden_ns = 0.0;
    }
    if (b != NULL) {
        b->rep.chunks = 1;
        b->cfg.chunks = 1;
    }
    if (b == NULL || !write_into(b, root, "b")) {
        fx_free(b);
        return;
    }
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "tokens/s");
    CHECK_STR_CONTAINS(out, "11900.0");
    CHECK_STR_CONTAINS(out, "10500.0");
    CHECK_STR_CONTAINS(out, "-1400.0 (-11.8%)");
    CHECK_STR_CONTAINS(out, "  A: ");
    CHECK_STR_CONTAINS(out, "     device cuda (NVIDIA H200), runtime.chunks 2\n");
    CHECK_STR_CONTAINS(out, "     device cuda (NVIDIA H200), runtime.chunks 1\n");
    CHECK_STR_CONTAINS(out, "  device                             A: cuda (NVIDIA H200); B: cuda "
                            "(NVIDIA H200) (same)\n");
    /* a knob: old -> new, never a percentage */
    CHECK_STR_CONTAINS(out, "  runtime.chunks                                  2              1"
                            "   2 -> 1\n");
    CHECK_STR_CONTAINS(out, "Configuration (resolved values, A -> B)\n"
                            "  runtime.chunks                       2 -> 1\n\nRun");
    CHECK(strstr(out, "-50.0%") == NULL);
    CHECK_STR_CONTAINS(out, "  exchange in flight (ms/step, mean)          8.000          8.000"
                            "   +0.000 (+0.0%)\n");
    CHECK_STR_CONTAINS(out, "  exchange hidden by compute (%)               20.8            0.0"
                            "   -20.8 (-100.0%)\n");
    CHECK_STR_CONTAINS(out, "Experts");
    CHECK_STR_CONTAINS(out, "Configuration");
    /* hottest is of demand (layers[].routing.hottest_share), as the report's finding: not
     * of the tokens computed, which the capacity limit caps */
    CHECK_STR_CONTAINS(out, "\nhottest: the most demanded expert's share of the layer's demand "
                            "(choices before the\ncapacity limit, as the report's hottest "
                            "expert)");
    free(out);

    snprintf(missing, sizeof(missing), "%s/no-such-run", root);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, missing, &out), 2);
    CHECK(out == NULL || out[0] == '\0'); /* the error goes to stderr, nothing to out */
    free(out);

    CHECK(make_dir(root, "corrupt", bad, sizeof(bad)));
    write_text(bad, "summary.json",
               "{\"schema\": \"moed.summary\", \"schema_version\": 1, \"run\": {");
    CHECK_INT_EQ(run_compare(bad, a->rep.run_dir, &out), 2);
    free(out);
    write_text(bad, "summary.json", "{\"schema\": \"other\", \"schema_version\": 1}");
    CHECK_INT_EQ(run_compare(a->rep.run_dir, bad, &out), 2);
    free(out);
    write_text(bad, "summary.json", "{\"schema\": \"moed.summary\", \"schema_version\": 99}");
    CHECK_INT_EQ(run_compare(a->rep.run_dir, bad, &out), 2);
    free(out);
    remove_report(bad, 0);
    remove_report(b->rep.run_dir, b->rep.world_size);
    fx_free(b);
}

/* Different shapes: 16 experts against 8; compares what matches and says so. */
static void test_compare_shapes(const char *root, const fixture_t *a)
{
    shape_t sb = {4, 2, 16, false, 50000.0, NULL, NULL};
    fixture_t *b = fx_make(&sb);
    char *out = NULL;
    CHECK(b != NULL);
    if (b == NULL || !write_into(b, root, "shape")) {
        fx_free(b);
        return;
    }
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "different shapes");
    CHECK_STR_CONTAINS(out, "only in B");
    CHECK_STR_CONTAINS(out, "the worlds differ");
    CHECK_STR_CONTAINS(out, "model.num_experts");
    free(out);
    remove_report(b->rep.run_dir, b->rep.world_size);
    fx_free(b);
}

/* ---- bytes between ranks apart from local copies --------------------------------- */

/* A hand-made 3-rank matrix (bytes; row = sender). A: between ranks 4 MB, local 1 MB.
 * B moves 26% of the traffic between ranks onto the diagonal: between 2.96 MB, local
 * 2.04 MB, the same 5 MB in all, so a total would read +0.0%. */
static const uint64_t bytes_a[9] = {400000, 1000000, 1000000, 1000000, 300000, 0,
                                    1000000, 0, 300000};
static const uint64_t bytes_b[9] = {1040000, 740000, 740000, 740000, 500000, 0,
                                    740000, 0, 500000};

static void plant_bytes(fixture_t *fx, const uint64_t *m)
{
    memcpy(fx->rep.bytes, m, 9 * sizeof(uint64_t));
}

static void check_bytes_json(const char *dir)
{
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_between_ranks"), -1), 4000000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_local"), -1), 1000000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_total"), -1), 5000000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_between_ranks_per_recorded_step"), -1),
               400000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_local_per_recorded_step"), -1), 100000,
               0);
    json_decref(doc);
}

static void check_bytes_text(const moe_report_t *r)
{
    char *t = slurp(r->run_dir, "summary.txt", NULL);
    char *k = slurp(r->run_dir, "summary_rank_0.txt", NULL);
    char *c = slurp(r->run_dir, "comm.csv", NULL), *h = slurp(r->run_dir, "report.html", NULL);
    char *line = headline_of(r);
    CHECK_STR_CONTAINS(t, "  between ranks 4.000 MB (0.400 MB per recorded step)\n"
                          "  local copies  1.000 MB (0.100 MB per recorded step)\n");
    /* row 0: its own 0.4 MB in brackets, sent = 2 MB to the other ranks only */
    CHECK_STR_CONTAINS(t, "   from\\to        0        1        2     sent\n"
                          "         0  (0.400)    1.000    1.000    2.000\n");
    CHECK_STR_CONTAINS(t, "  received    2.000    1.000    1.000    4.000\n");
    CHECK_STR_CONTAINS(k, "to other ranks: sent 2.000 MB, received 2.000 MB; local copies "
                          "0.400 MB");
    CHECK_STR_CONTAINS(c, "\n0,0,400000,0,0.000000,1\n");
    CHECK_STR_CONTAINS(c, "\n0,1,1000000,");
    CHECK_STR_CONTAINS(h, "Between ranks <b>4.000 MB</b>; local copies 1.000 MB");
    CHECK_STR_CONTAINS(h, "class=\"local\"><title>rank 0 to rank 0 (local copies");
    CHECK_STR_CONTAINS(line, "bytes per recorded step: 0.400 MB between ranks, 0.100 MB local "
                             "copies");
    free(t);
    free(k);
    free(c);
    free(h);
    free(line);
}

static void test_bytes_split(const char *root)
{
    fixture_t *a = fx_make(&small_shape), *b = fx_make(&small_shape);
    char *out = NULL;
    CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL) {
        goto free_fixtures;
    }
    plant_bytes(a, bytes_a);
    plant_bytes(b, bytes_b);
    moe_report_bytes_t s = moe_report_bytes_split(&a->rep);
    CHECK_INT_EQ(s.between_ranks, 4000000);
    CHECK_INT_EQ(s.local, 1000000);
    moe_report_rank_bytes_t k = moe_report_rank_bytes(&b->rep, 1);
    CHECK_INT_EQ(k.sent, 740000);
    CHECK_INT_EQ(k.recv, 740000);
    CHECK_INT_EQ(k.local, 500000);
    if (!write_into(a, root, "bytes-a") || !write_into(b, root, "bytes-b")) {
        goto free_fixtures;
    }
    check_bytes_json(a->rep.run_dir);
    check_bytes_text(&a->rep);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "  between ranks (MB)                          4.000          2.960"
                            "   -1.040 (-26.0%)\n");
    CHECK_STR_CONTAINS(out, "  local copies (MB)                           1.000          2.040"
                            "   +1.040 (+104.0%)\n");
    CHECK_STR_CONTAINS(out, "  rank 0 local copies (MB)                    0.400          1.040");
    CHECK_STR_CONTAINS(out, "  rank 0 -> rank 1 (MB)                       1.000          0.740");
    free(out);
free_fixtures:
    if (a != NULL) {
        remove_report(a->rep.run_dir, a->rep.world_size);
    }
    if (b != NULL) {
        remove_report(b->rep.run_dir, b->rep.world_size);
    }
    fx_free(a);
    fx_free(b);
}

/* ---- compare: resolved configuration, run states, folders ------------------------ */

/* What compare prints after "Configuration (...)\n" up to the blank line. */
static void check_config_section(const char *out, const char *want)
{
    const char *at = out != NULL ? strstr(out, "Configuration (resolved values, A -> B)\n") : NULL;
    CHECK(at != NULL);
    if (at != NULL) {
        CHECK_STR_CONTAINS(at, want);
    }
}

static void edit_steps_flag(fixture_t *fx)
{
    fx->cfg.steps = 30; /* what app/main.c does with --steps 30 */
}

static void edit_interrupted(fixture_t *fx)
{
    fx->rep.interrupted = true;
    fx->rep.steps_run = 12;
    fx->rep.steps_planned = 20;
}

static void edit_interrupted_no_end(fixture_t *fx) /* workload.steps: 0, stopped */
{
    fx->rep.interrupted = true;
    fx->rep.steps_run = 8236;
    fx->rep.steps_planned = 0;
}

static void edit_all_warmup(fixture_t *fx)
{
    fx->rep.all_warmup = true;
    fx->rep.recorded_steps = 0;
}

static void edit_model(fixture_t *fx)
{
    fx->cfg.hidden_dim = 2048;
    fx->cfg.dtype = MOE_DTYPE_BF16;
    snprintf(fx->rep.resolved[MOE_PROF_RESOLVED_DTYPE], sizeof(fx->rep.resolved[0]), "bf16");
}

/* What A's auto, -1 and 0 resolved to, written: runtime.dedup true (auto on cpu), bind none
 * (auto pinned nothing), small_batch_rows 0 (-1: no kernels for f32), expert_histograms
 * expert (auto, few experts); model.shared_ffn_dim 512 without shared experts resolves to 0
 * as A's 0 did. The same configuration. */
static void edit_resolved_written(fixture_t *fx)
{
    fx->cfg.dedup = MOE_DEDUP_ON;
    fx->cfg.bind = MOE_BIND_NONE;
    fx->cfg.small_batch_rows = 0;
    fx->cfg.prof_expert_hist = MOE_EXPERT_HIST_EXPERT;
    fx->cfg.shared_ffn_dim = 512;
}

/* runtime.dedup auto resolved otherwise, and the small-batch kernels' switch point differing
 * between the ranks */
static void edit_resolved_other(fixture_t *fx)
{
    snprintf(fx->rep.resolved[MOE_PROF_RESOLVED_DEDUP], sizeof(fx->rep.resolved[0]), "false");
    snprintf(fx->rep.resolved[MOE_PROF_RESOLVED_SMALL_BATCH_ROWS], sizeof(fx->rep.resolved[0]),
             "32-64");
}

/* model.dtype: f32 written where A's auto resolved to f32: the same model */
static void edit_dtype_written(fixture_t *fx)
{
    fx->cfg.dtype = MOE_DTYPE_F32;
}

/* The resolved config in summary.json: defaults filled in, auto written out. */
static void check_config_object(const char *dir)
{
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    const json_t *c = json_object_get(doc, "config");
    CHECK(json_is_integer(json_object_get(c, "runtime.chunks")));
    CHECK(strcmp(moe_json_str(json_object_get(c, "placement.experts"), ""),
                 "{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}") == 0);
    CHECK(strcmp(moe_json_str(json_object_get(c, "profiler.profiled_ranks"), ""), "[0, 1, 2]") ==
          0);
    CHECK(strcmp(moe_json_str(json_object_get(c, "runtime.routing"), ""), "master") == 0);
    CHECK(json_is_true(json_object_get(c, "model.normalize_topk")));
    CHECK_NEAR(moe_json_num(json_object_get(c, "runtime.step_timeout_s"), -1), 60, 0);
    CHECK_NEAR(moe_json_num(json_object_get(c, "model.hidden_dim"), -1), HIDDEN, 0);
    /* the dtypes as written (a planned config keeps `auto`), resolved in their own object */
    CHECK(strcmp(moe_json_str(json_object_get(c, "model.dtype"), ""), "auto") == 0);
    const json_t *r = json_object_get(doc, "config_resolved");
    CHECK_INT_EQ((int)json_object_size(r), MOE_PROF_RESOLVED_COUNT);
    CHECK(strcmp(moe_json_str(json_object_get(r, "model.dtype"), ""), "f32") == 0);
    CHECK(strcmp(moe_json_str(json_object_get(r, "runtime.wire_dtype"), ""), "f32") == 0);
    /* the other keys kept as written: auto, -1 and 0 resolved, numbers as numbers */
    CHECK(strcmp(moe_json_str(json_object_get(c, "runtime.dedup"), ""), "auto") == 0);
    CHECK(strcmp(moe_json_str(json_object_get(r, "runtime.dedup"), ""), "true") == 0);
    CHECK(strcmp(moe_json_str(json_object_get(r, "runtime.bind"), ""), "none") == 0);
    CHECK(strcmp(moe_json_str(json_object_get(r, "profiler.expert_histograms"), ""),
                 "expert") == 0);
    CHECK(json_is_integer(json_object_get(r, "runtime.small_batch_rows")));
    CHECK(json_is_integer(json_object_get(r, "model.shared_ffn_dim")));
    json_decref(doc);
}

/* Compare A with a run B written with `shape` and `edit` (exit 0); the output, to free. */
static char *compare_with(const char *root, const fixture_t *a, const char *name,
                          const shape_t *shape, void (*edit)(fixture_t *))
{
    char *out = NULL;
    fixture_t *b = fx_written(root, name, shape, edit);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    fx_drop(b);
    return out;
}

/* compare_with's B, which differs only in how it writes its config: "same configuration". */
static void check_same_config(const char *root, const fixture_t *a, const char *name,
                              const shape_t *shape, void (*edit)(fixture_t *))
{
    char *out = compare_with(root, a, name, shape, edit);
    check_config_section(out, "\n  same configuration\n");
    free(out);
}

static void test_compare_config(const char *root, const fixture_t *a)
{
    static const shape_t explicit_default = {3, 2, 8, false, 11900.0, "  chunks: 2\n", NULL};
    static const shape_t written_out = {3, 2, 8, false, 11900.0, NULL,
                                        "{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}"};
    check_config_object(a->rep.run_dir);
    /* runtime.chunks absent in A's YAML (CHUNKS set as the ranks ran it) vs written in B */
    check_same_config(root, a, "cfg-default", &explicit_default, NULL);
    /* placement auto vs the map it resolves to */
    check_same_config(root, a, "cfg-placement", &written_out, NULL);
    /* model.dtype auto (resolved f32) vs f32 written: no note, the same configuration */
    char *out = compare_with(root, a, "cfg-dtype", &small_shape, edit_dtype_written);
    CHECK(out != NULL && strstr(out, "the models differ") == NULL);
    check_config_section(out, "\n  same configuration\n");
    free(out);
    /* auto, -1 and 0 in A vs what they resolved to, written in B */
    check_same_config(root, a, "cfg-resolved", &small_shape, edit_resolved_written);
    out = compare_with(root, a, "cfg-resolved-other", &small_shape, edit_resolved_other);
    CHECK_STR_CONTAINS(out, "  runtime.small_batch_rows             0 -> 32-64\n");
    CHECK_STR_CONTAINS(out, "  runtime.dedup                        true -> false\n");
    free(out);
    /* --steps 30 over workload.steps 20 */
    out = compare_with(root, a, "cfg-steps", &small_shape, edit_steps_flag);
    check_config_section(out, "\n  workload.steps                       20 -> 30\n\nRun");
    free(out);
}

static void test_compare_states(const char *root, const fixture_t *a)
{
    char *out = NULL;
    fixture_t *b = fx_written(root, "interrupted", &small_shape, edit_interrupted);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    CHECK_STR_CONTAINS(out, "     INTERRUPTED: stopped after 12 of 20 steps; figures cover what "
                            "ran\n");
    free(out);
    fx_drop(b);
    b = fx_written(root, "interrupted-no-end", &small_shape, edit_interrupted_no_end);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    CHECK_STR_CONTAINS(out, "     INTERRUPTED: stopped after 8236 steps; figures cover what ran\n");
    free(out);
    fx_drop(b);
    b = fx_written(root, "warmup", &small_shape, edit_all_warmup);
    CHECK_INT_EQ(run_compare(b ? b->rep.run_dir : "", a->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "     RECORDED NOTHING: all 20 steps run were warm-up steps");
    free(out);
    fx_drop(b);
    b = fx_written(root, "model", &small_shape, edit_model);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    CHECK_STR_CONTAINS(out, "NOTE: the models differ (model.hidden_dim 1024 vs 2048, model.dtype "
                            "f32 vs bf16)");
    check_config_section(out, "  model.hidden_dim                     1024 -> 2048\n");
    free(out);
    fx_drop(b);
}

static void test_compare_folders(const char *root, const fixture_t *a)
{
    char *out = NULL, other[MOE_PATH_MAX + 16], dot[MOE_PATH_MAX + 64], dir[MOE_PATH_MAX];
    CHECK_INT_EQ(run_compare(a->rep.run_dir, a->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "A and B are the same folder");
    free(out);
    snprintf(dot, sizeof(dot), "%s/.", a->rep.run_dir);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, dot, &out), 0);
    CHECK_STR_CONTAINS(out, "A and B are the same folder");
    free(out);
    CHECK(make_dir(root, "random", other, sizeof(other)));
    write_text(other, "notes.txt", "not a report\n");
    CHECK_INT_EQ(run_compare(a->rep.run_dir, other, &out), 2);
    CHECK(out == NULL || out[0] == '\0');
    free(out);
    snprintf(dot, sizeof(dot), "%s/notes.txt", other);
    unlink(dot);
    rmdir(other);
    /* the command line: --help, and wrong argument counts */
    snprintf(dir, sizeof(dir), "%s", a->rep.run_dir);
    char *help[] = {"--help"}, *one[] = {"x"}, *two[] = {dir, dir};
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    CHECK(f != NULL);
    if (f != NULL) {
        CHECK_INT_EQ(moe_report_compare_main(1, help, f), 0);
        CHECK_INT_EQ(moe_report_compare_main(1, one, f), 2);
        CHECK_INT_EQ(moe_report_compare_main(2, two, f), 0);
        fclose(f);
        CHECK_STR_CONTAINS(out, "usage: moed compare RUN_DIR_A RUN_DIR_B\n");
        CHECK_STR_CONTAINS(out, "exit status: 0 compared");
        free(out);
    }
    /* an unknown option is named (not "expected two report folders") */
    char *bogus[] = {"--bogus", dir, dir}, errpath[MOE_PATH_MAX + 32];
    snprintf(errpath, sizeof(errpath), "%s/../bogus_stderr.txt", dir);
    fflush(stderr);
    int saved = dup(STDERR_FILENO), fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && fd >= 0);
    if (saved >= 0 && fd >= 0) {
        dup2(fd, STDERR_FILENO);
        close(fd);
        int rc = moe_report_compare_main(3, bogus, stdout);
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        close(saved);
        CHECK_INT_EQ(rc, 2);
        char *said = slurp(dir, "../bogus_stderr.txt", NULL);
        CHECK_STR_CONTAINS(said, "moed compare: error: unknown option '--bogus'; usage: ");
        free(said);
        unlink(errpath);
    }
}

/* ---- JSON: loading through jansson, lookups, the write helpers --------------------- */

static void test_json_valid(void)
{
    static const char text[] =
        " {\"a\": [1, -2.5e3, {\"b\": null}], \"c\": \"\\u00e9\\ud83d\\ude00\\n\\\"\", "
        "\"d\": true, \"e\": false, \"f\": {}, \"g\": [], \"h\": 0}\n";
    json_t *v = NULL;
    moe_error_t err;
    CHECK_INT_EQ(moe_json_load(text, strlen(text), "t", &v, &err), MOE_OK);
    CHECK_NEAR(moe_json_num(moe_json_path(v, "a.1"), 0), -2500.0, 0);
    CHECK(json_is_null(moe_json_path(v, "a.2.b")));
    CHECK(strcmp(moe_json_str(json_object_get(v, "c"), ""), "\xc3\xa9\xf0\x9f\x98\x80\n\"") == 0);
    CHECK(json_is_true(json_object_get(v, "d")));
    CHECK_INT_EQ(moe_json_count(json_object_get(v, "f")), 0);
    CHECK_INT_EQ(moe_json_count(v), 7);
    CHECK_INT_EQ(moe_json_count(json_object_get(v, "a")), 3);
    CHECK_INT_EQ(moe_json_count(json_object_get(v, "h")), 0);
    CHECK(moe_json_path(v, "a.9") == NULL && moe_json_path(v, "zz.y") == NULL);
    CHECK(json_object_get(json_object_get(v, "a"), "x") == NULL);
    json_decref(v);

    /* write helpers round-trip through the reader */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f != NULL) {
        fputc('[', f);
        moe_json_put_string(f, "q\"\\\t\x01 \xff ok");
        fputc(',', f);
        moe_json_put_number(f, 1.0 / 0.0);
        fputc(',', f);
        moe_json_put_number(f, 0.1);
        fputc(']', f);
        fclose(f);
        CHECK_INT_EQ(moe_json_load(buf, len, NULL, &v, &err), MOE_OK);
        CHECK(strcmp(moe_json_str(json_array_get(v, 0), ""), "q\"\\\t\x01 \xef\xbf\xbd ok") == 0);
        CHECK(json_is_null(json_array_get(v, 1)));
        CHECK_NEAR(moe_json_num(json_array_get(v, 2), 0), 0.1, 1e-12);
        json_decref(v);
        free(buf);
    }
}

static void test_json_malformed(void)
{
    static const char *const bad[] = {
        "",
        " ",
        "{",
        "}",
        "[",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{1:2}",
        "{\"a\":}",
        "01",
        "1.",
        "-",
        "+1",
        ".5",
        "1e",
        "1e+",
        "\"abc",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "\"\x01\"",
        "[1 2]",
        "nul",
        "tru",
        "falsey",
        "NaN",
        "Infinity",
        "1e999",
        "[1]x",
        "\xef\xbb\xbf{}",
        "\"\xc0\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"",
        "\"\xe2\x82\"",
        "[\"a\",]",
        "{\"a\":1 \"b\":2}",
        "// c\n{}",
        "{'a':1}",
        "[1,,2]",
        "{\"a\":1,\"a\":2}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *v = (json_t *)&v; /* must come back NULL */
        moe_error_t err;
        moe_error_clear(&err);
        moe_status_t st = moe_json_load(bad[i], strlen(bad[i]), "bad.json", &v, &err);
        CHECK_INT_EQ(st, MOE_ERR_FORMAT);
        CHECK(v == NULL);
        CHECK(strncmp(err.msg, "bad.json:1:", 11) == 0);
        if (st == MOE_OK) {
            fprintf(stderr, "  accepted: \"%s\"\n", bad[i]);
            json_decref(v);
        }
    }
    /* line:col of the offending byte */
    static const char where[] = "{\n  \"a\": 1,\n  \"b\": }";
    json_t *v = NULL;
    moe_error_t err;
    CHECK_INT_EQ(moe_json_load(where, strlen(where), "w.json", &v, &err), MOE_ERR_FORMAT);
    CHECK_STR_CONTAINS(err.msg, "w.json:3:8:");
    /* nesting is bounded (jansson stops at 2048 levels) */
    char deep[4096];
    memset(deep, '[', sizeof(deep));
    CHECK_INT_EQ(moe_json_load(deep, sizeof(deep), NULL, &v, &err), MOE_ERR_FORMAT);
    CHECK_STR_CONTAINS(err.msg, "maximum parsing depth reached");
    CHECK_INT_EQ(moe_json_load(NULL, 0, NULL, &v, &err), MOE_ERR_FORMAT);
    CHECK_INT_EQ(moe_json_load_file("/nonexistent/x.json", &v, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/x.json");
}

/* Every prefix and many single-byte mutations of a real summary.json: an error or a tree,
 * never a crash or a leak (ASan watches). */
static void test_json_mutations(const fixture_t *fx)
{
    size_t len = 0;
    char *text = slurp(fx->rep.run_dir, "summary.json", &len);
    static const char subst[] = "{}[]\",:0-eE.\\ a\x80\xff";
    int ok = 0, failed = 0;
    CHECK(text != NULL && len > 100);
    for (size_t cut = 0; text != NULL && cut < len; cut += 1 + cut / 64) {
        json_t *v = NULL;
        moe_error_t err;
        moe_status_t st = moe_json_load(text, cut, NULL, &v, &err);
        ok += st == MOE_OK;
        failed += st != MOE_OK;
        json_decref(v);
    }
    for (size_t i = 0; text != NULL && i < len; i += 7) {
        char saved = text[i];
        text[i] = subst[i % (sizeof(subst) - 1)];
        json_t *v = NULL;
        moe_error_t err;
        ok += moe_json_load(text, len, NULL, &v, &err) == MOE_OK;
        json_decref(v);
        text[i] = saved;
    }
    CHECK(failed > 0);
    CHECK(ok >= 0);
    free(text);
}

/* ---- hand-made summary.json: figures known exactly ---------------------------------- */

/* One layer of 4 experts on 3 ranks: rank 0 routes (no experts), rank 1 holds experts 0
 * and 1, rank 2 experts 2 and 3. An expert with calls < 0 was not profiled (its rank's
 * records absent: calls and latency null); one with 0 calls has a null latency. */
typedef struct mini_exp {
    int rank;
    double tokens, calls, mean, p50, p99;
} mini_exp_t;

typedef struct mini {
    double recorded, steps_run;
    bool all_warmup, replicated; /* replicated: expert 0 has a copy on ranks 1 and 2 */
    mini_exp_t ex[4];
    bool present[3];
    double step_ms[3], cpu[3]; /* NAN: null */
    double rss[3];
    int samples[3];
    double gini; /* layers[0].gini; NAN: null */
    int moved;   /* rebalances[0].experts_moved (0: no rebalances) */
} mini_t;

static const mini_t mini_base = {
    5, 6, false, false,
    {{1, 100, 5, 0.2, 0.2, 0.3}, {1, 50, 5, 0.1, 0.1, 0.1}, {2, 30, 5, 0.1, 0.1, 0.1},
     {2, 20, 5, 0.1, 0.1, 0.1}},
    {true, true, true},
    {3.0, 3.0, 3.0},
    {0.25, 0.5, 0.5},
    {100, 200, 300},
    {4, 4, 4},
    0.25,
    0,
};

static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *mini_experts(const mini_t *m)
{
    json_t *list = json_array();
    for (int e = 0; e < 4; e++) {
        const mini_exp_t *x = &m->ex[e];
        bool known = x->calls > 0;
        json_array_append_new(
            list, json_pack("{s:i, s:i, s:i, s:o, s:o, s:{s:o, s:o, s:o}}", "layer", 0, "expert",
                            e, "rank", x->rank, "tokens", jnum(x->tokens), "calls",
                            x->calls >= 0 ? json_real(x->calls) : json_null(), "latency_ms",
                            "mean", jnum(known ? x->mean : NAN), "p50",
                            jnum(known ? x->p50 : NAN), "p99", jnum(known ? x->p99 : NAN)));
    }
    return list;
}

static json_t *mini_ranks(const mini_t *m)
{
    json_t *list = json_array();
    for (int k = 0; k < 3; k++) {
        json_array_append_new(
            list, json_pack("{s:i, s:b, s:b, s:i, s:{s:o, s:o, s:o, s:o, s:o}, s:o, s:{s:o}}",
                            "rank", k, "present", m->present[k], "profiled", m->present[k],
                            "num_local", k == 0 ? 0 : 2, "per_step_ms", "step",
                            jnum(m->present[k] ? m->step_ms[k] : NAN), "compute",
                            jnum(m->present[k] ? 1.0 : NAN), "exchange", jnum(0.5), "idle",
                            jnum(0.5), "structural_wait", jnum(0.25), "exchange_ms",
                            jnum(m->present[k] ? 1.0 : NAN), "cpu_cores", "run",
                            jnum(m->present[k] ? m->cpu[k] : NAN)));
    }
    return list;
}

static json_t *mini_memory(const mini_t *m)
{
    json_t *list = json_array();
    for (int k = 0; k < 3; k++) {
        json_array_append_new(list, json_pack("{s:i, s:b, s:i, s:f, s:f}", "rank", k, "present",
                                              m->present[k], "samples", m->samples[k],
                                              "rss_peak_mib", m->rss[k], "dev_peak_mib", 0.0));
    }
    return list;
}

/* expert 0's two copies (ranks 1 and 2), its calls and tokens split evenly */
static json_t *mini_replicas(const mini_t *m)
{
    json_t *list = json_array();
    for (int k = 1; m->replicated && k <= 2; k++) {
        json_array_append_new(
            list, json_pack("{s:i, s:i, s:i, s:f, s:f, s:f}", "layer", 0, "expert", 0, "rank", k,
                            "tokens", m->ex[0].tokens / 2, "calls", m->ex[0].calls / 2,
                            "busy_ms", m->ex[0].mean * m->ex[0].calls / 2));
    }
    return list;
}

static json_t *mini_doc(const mini_t *m)
{
    double demand = 0, mx = 0;
    for (int e = 0; e < 4; e++) {
        demand += m->ex[e].tokens;
        mx = m->ex[e].tokens > mx ? m->ex[e].tokens : mx;
    }
    double empty = m->all_warmup || m->recorded == 0;
    return json_pack(
        "{s:s, s:i, s:{s:i, s:i, s:i, s:f, s:f, s:b, s:f, s:f}, s:o, s:o, s:o, s:[{s:i, s:o, "
        "s:f, s:f, s:f, s:f}], s:{s:f, s:f}, s:o}",
        "schema", "moed.summary", "schema_version", 1, "run", "world_size", 3, "num_layers", 1,
        "num_experts", 4, "recorded_steps", m->recorded, "steps_run", m->steps_run, "all_warmup",
        m->all_warmup, "tokens_per_s", empty ? 0.0 : 1000.0, "run_s", 0.5, "ranks",
        mini_ranks(m), "experts", mini_experts(m), "replicas", mini_replicas(m), "layers",
        "layer", 0, "gini", jnum(empty ? 0.0 : m->gini), "cv", empty ? 0.0 : 0.5, "entropy_norm",
        empty ? 0.0 : 0.9, "max_mean", demand > 0 ? 4 * mx / demand : 0.0, "dropped_total", 0.0,
        "comm", "bytes_between_ranks", empty ? 0.0 : 1e6, "bytes_local", 0.0, "memory",
        mini_memory(m));
}

/* m written as ROOT/NAME/summary.json; the folder's path into dir. */
static bool mini_write(const char *root, const char *name, const mini_t *m, char *dir,
                       size_t cap)
{
    char path[MOE_PATH_MAX + 64];
    json_t *doc = mini_doc(m);
    if (doc != NULL && m->moved > 0) {
        json_object_set_new(doc, "rebalances", json_pack("[{s:i}]", "experts_moved", m->moved));
    }
    bool ok = doc != NULL && make_dir(root, name, dir, cap);
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    ok = ok && json_dump_file(doc, path, JSON_INDENT(1)) == 0;
    json_decref(doc);
    CHECK(ok);
    return ok;
}

static void mini_remove(const char *dir)
{
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    unlink(path);
    rmdir(dir);
}

/* Compares two hand-made runs; the output (malloc'd) or NULL. */
static char *mini_compare(const char *root, const mini_t *ma, const mini_t *mb)
{
    char a[MOE_PATH_MAX], b[MOE_PATH_MAX], *out = NULL;
    if (!mini_write(root, "mini-a", ma, a, sizeof(a)) ||
        !mini_write(root, "mini-b", mb, b, sizeof(b))) {
        return NULL;
    }
    CHECK_INT_EQ(run_compare(a, b, &out), 0);
    mini_remove(a);
    mini_remove(b);
    return out;
}

/* An expert with 0 calls takes no time (row_ms: 0 x null was NaN, which made the rank's
 * time and the layer's unknown); one whose rank was not profiled stays unknown. */
static void test_rank_times(const char *root)
{
    mini_t b = mini_base;
    double ms[3];
    b.ex[2].mean = 0.4;
    b.ex[3] = (mini_exp_t){2, 0, 0, 0, 0, 0};
    json_t *doc = mini_doc(&b);
    CHECK_INT_EQ(moe_rank_times(doc, 0, 3, 4, ms), 3);
    CHECK_NEAR(ms[0], 0.0, 0);
    CHECK_NEAR(ms[1], 1.5, 1e-12);
    CHECK_NEAR(ms[2], 2.0, 1e-12);
    json_decref(doc);
    mini_t c = mini_base;
    c.ex[3].calls = -1; /* rank 2 not profiled for it: its time is not known */
    doc = mini_doc(&c);
    CHECK_INT_EQ(moe_rank_times(doc, 0, 3, 4, ms), 2);
    CHECK(isnan(ms[2]));
    json_decref(doc);
    /* the layer table: time max/mean 1.500/1.250 = 1.200 -> 2.000/1.750 = 1.143; the
     * busiest rank's ms per recorded step 1.5 / 5 -> 2.0 / 5 */
    char *out = mini_compare(root, &mini_base, &b);
    CHECK_STR_CONTAINS(out, "   1.200 | 1.143       0.300 | 0.400\n");
    free(out);
}

/* A figure a run lacks prints n/a, never nan: latency of an expert whose rank was not
 * profiled, a balance figure that is null; an expert never called shows "-". */
static void test_no_nan(const char *root)
{
    mini_t b = mini_base;
    b.ex[2].calls = -1; /* not profiled: calls and latency null */
    b.ex[3] = (mini_exp_t){2, 0, 0, 0, 0, 0};
    b.gini = NAN;
    char *out = mini_compare(root, &mini_base, &b);
    CHECK(out != NULL && strstr(out, "nan") == NULL);
    CHECK_STR_CONTAINS(out, "      0      2      0.100       n/a   n/a                   0.100"
                            "       n/a   n/a   ");
    CHECK_STR_CONTAINS(out, "      0      3      0.100         -   n/a                   0.100"
                            "         -   n/a   ");
    CHECK_STR_CONTAINS(out, "      0  gini                  0.250          n/a   n/a\n");
    free(out);
}
/* An expert whose tokens are null (its host not profiled, no whole routing count): its
 * rank's load and the layer's max/mean are n/a, not read as 0 tokens (rank 2 "20", max/mean
 * 150 / 90 = 1.667 before); in the experts table its tokens are n/a, not 0.0. */
static void test_tokens_unknown(const char *root)
{
    mini_t b = mini_base;
    b.ex[3] = (mini_exp_t){2, NAN, -1, 0, 0, 0};
    char *out = mini_compare(root, &mini_base, &b);
    CHECK(out != NULL && strstr(out, "nan") == NULL);
    CHECK_STR_CONTAINS(out, "  layer 0    max/mean 1.500 -> n/a");
    CHECK(out != NULL && strstr(out, "-> 1.667") == NULL);
    CHECK_STR_CONTAINS(out, "  overall max/mean 1.500 -> n/a");
    free(out);
    /* the expert's tokens alone null (its calls and latency known): its row's tokens B and
     * change n/a, not 0.0 and -4.0 (-100.0%) */
    b.ex[3] = (mini_exp_t){2, NAN, 5, 0.1, 0.1, 0.1};
    out = mini_compare(root, &mini_base, &b);
    CHECK(out != NULL && strstr(out, "nan") == NULL);
    CHECK_STR_CONTAINS(out, "      0      3      0.100     0.100   +0.000 (+0.0%)        0.100"
                            "     0.100   +0.000 (+0.0%)           4.0        n/a   n/a        "
                            "             5       5\n");
    free(out);
}

/* A run whose online rebalancing moved experts: its summary.json's experts[].rank is the
 * configured placement, so its per-rank load and time are n/a with a note, not the
 * configured placement's figures (which showed "1.500 -> 1.500" for a run that ran even). */
static void test_moved(const char *root)
{
    mini_t b = mini_base;
    b.moved = 3;
    char *out = mini_compare(root, &mini_base, &b);
    CHECK(out != NULL && strstr(out, "nan") == NULL);
    CHECK_STR_CONTAINS(out, "  NOTE: B's online rebalancing moved 3 experts: its report gives "
                            "the configured\n  placement, not where they ran after a move");
    CHECK_STR_CONTAINS(out, "  layer 0    max/mean 1.500 -> n/a");
    CHECK_STR_CONTAINS(out, "  overall max/mean 1.500 -> n/a");
    CHECK(out != NULL && strstr(out, "-> 1.500") == NULL);
    free(out);
}

/* Rows over ranks (mean over ranks, summed) take the ranks both runs have: rank 2 not
 * profiled in B (A's mean over 3 ranks was 5.000, its CPU sum 1.00), or only its CPU
 * figure lost in B; the note names the rank left out. */
static void test_rank_sets(const char *root)
{
    mini_t a = mini_base, b = mini_base;
    a.step_ms[0] = 2.0;
    a.step_ms[1] = 4.0;
    a.step_ms[2] = 9.0;
    b.step_ms[0] = 2.0;
    b.step_ms[1] = 4.0;
    b.present[2] = false;
    char *out = mini_compare(root, &a, &b);
    CHECK_STR_CONTAINS(out, "  step (ms, mean over ranks)                  3.000          3.000"
                            "   +0.000 (+0.0%)\n"
                            "    (over the ranks both runs have; left out: rank 2 (not in B))\n");
    CHECK_STR_CONTAINS(out, "  CPU, expert ranks (cores, summed)            0.50           0.50"
                            "   +0.00 (+0.0%)\n"
                            "    (over the ranks both runs have; left out: rank 2 (not in B))\n");
    free(out);
    b = mini_base;
    b.cpu[2] = NAN; /* rank 2 lost before its CPU share was read */
    out = mini_compare(root, &b, &mini_base);
    CHECK_STR_CONTAINS(out, "  step (ms, mean over ranks)                  3.000          3.000"
                            "   +0.000 (+0.0%)\n  compute");
    CHECK_STR_CONTAINS(out, "  CPU, expert ranks (cores, summed)            0.50           0.50"
                            "   +0.00 (+0.0%)\n"
                            "    (over the ranks both runs have; left out: rank 2 (not in A))\n");
    CHECK_STR_CONTAINS(out, "  CPU, other ranks (cores, summed)             0.25           0.25"
                            "   +0.00 (+0.0%)\n  device");
    free(out);
}
/* A run that recorded nothing (all warm-up): each of its figures is n/a, not a zero
 * compared as -100%. */
static void test_empty_run(const char *root)
{
    mini_t b = mini_base;
    b.all_warmup = true;
    b.recorded = 0;
    for (int e = 0; e < 4; e++) {
        b.ex[e].tokens = 0;
        b.ex[e].calls = 0;
    }
    char *out = mini_compare(root, &mini_base, &b);
    CHECK_STR_CONTAINS(out, "  tokens/s                                   1000.0            n/a"
                            "   n/a\n");
    CHECK_STR_CONTAINS(out, "  step (ms, mean over ranks)                  3.000            n/a"
                            "   n/a\n");
    CHECK_STR_CONTAINS(out, "  CPU, expert ranks (cores, summed)            1.00            n/a"
                            "   n/a\n");
    CHECK_STR_CONTAINS(out, "  layer 0    max/mean 1.500 -> n/a   same placement\n");
    CHECK_STR_CONTAINS(out, "  overall max/mean 1.500 -> n/a (");
    CHECK_STR_CONTAINS(out, "    rank 1    A: 0 1                                150   B: 0 1"
                            "                                n/a\n");
    CHECK_STR_CONTAINS(out, "  between ranks (MB)                          1.000            n/a"
                            "   n/a\n");
    CHECK_STR_CONTAINS(out, "      0  gini                  0.250          n/a   n/a\n");
    CHECK_STR_CONTAINS(out, "      0  max_mean              2.000          n/a   n/a\n");
    CHECK(out != NULL && strstr(out, "-100.0%") == NULL && strstr(out, "nan") == NULL);
    free(out);
}
/* Peak memory: a rank lost before its first sample (present, samples 0, zeros) has its
 * records missing, not 0.0 MiB (-100%). */
static void test_memory_missing(const char *root)
{
    mini_t b = mini_base;
    b.rss[2] = 0;
    b.samples[2] = 0;
    char *out = mini_compare(root, &mini_base, &b);
    CHECK_STR_CONTAINS(out, "  rank 1 peak RSS (MiB)                       200.0          200.0"
                            "   +0.0 (+0.0%)\n  rank 2: records missing in B\n");
    CHECK(out != NULL && strstr(out, "-100.0%") == NULL);
    free(out);
}

/* 40 ranks: the peak memory table shows the 16 with the largest change (ranks 39 down
 * to 24: rank k grows from 100 + k to 100 + 2k MiB), like the other tables. */
static void test_memory_cap(const char *root)
{
    char dir[2][MOE_PATH_MAX], path[MOE_PATH_MAX + 64], *out = NULL;
    for (int i = 0; i < 2; i++) {
        json_t *doc = mini_doc(&mini_base), *mem = json_object_get(doc, "memory");
        json_object_set_new(json_object_get(doc, "run"), "world_size", json_integer(40));
        for (int k = 3; k < 40; k++) {
            json_array_append_new(mem, json_pack("{s:i, s:b, s:i, s:f}", "rank", k, "present", 1,
                                                 "samples", 1, "rss_peak_mib",
                                                 100.0 + (i + 1) * k));
        }
        CHECK(make_dir(root, i == 0 ? "mem-a" : "mem-b", dir[i], sizeof(dir[i])));
        snprintf(path, sizeof(path), "%s/summary.json", dir[i]);
        CHECK(json_dump_file(doc, path, 0) == 0);
        json_decref(doc);
    }
    CHECK_INT_EQ(run_compare(dir[0], dir[1], &out), 0);
    const char *at = out != NULL ? strstr(out, "\nPeak memory per rank") : NULL;
    CHECK(at != NULL);
    CHECK_STR_CONTAINS(at, "(MiB = 2^20 bytes): the 16 of 40 ranks with the largest change, "
                           "largest first\n  rank 39 peak RSS (MiB)                      139.0"
                           "          178.0   +39.0 (+28.1%)\n");
    CHECK_STR_CONTAINS(at, "\n  rank 24 peak RSS (MiB)                      124.0          148.0"
                           "   +24.0 (+19.4%)\n  (24 more ranks: see summary.json memory[])\n");
    CHECK_INT_EQ(count_substr(at, " peak RSS (MiB) "), 16);
    free(out);
    mini_remove(dir[0]);
    mini_remove(dir[1]);
}

/* compare A B with its stderr caught: the error line (malloc'd) into *err; its code. */
static int run_compare_err(const char *root, const char *a, const char *b, char **err)
{
    char path[MOE_PATH_MAX + 32], *out = NULL;
    snprintf(path, sizeof(path), "%s/stderr.txt", root);
    fflush(stderr);
    int saved = dup(STDERR_FILENO), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0) {
        return -1;
    }
    dup2(fd, STDERR_FILENO);
    close(fd);
    int rc = run_compare(a, b, &out);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    free(out);
    *err = slurp(root, "stderr.txt", NULL);
    unlink(path);
    return rc;
}

/* A folder without summary.json: an incomplete report (INCOMPLETE, metrics.csv.part)
 * says so and points to its INCOMPLETE; a folder of runs names its newest ones. */
static void test_not_report(const char *root, const fixture_t *a)
{
    char out_dir[MOE_PATH_MAX], run[2][MOE_PATH_MAX], want[4 * MOE_PATH_MAX], *err = NULL;
    CHECK(make_dir(root, "outdir", out_dir, sizeof(out_dir)));
    CHECK(make_dir(out_dir, "2026-01-01__00-00-00_aa", run[0], sizeof(run[0])));
    CHECK(make_dir(out_dir, "2026-01-02__00-00-00_bb", run[1], sizeof(run[1])));
    write_text(run[0], "summary.json", "{}");
    write_text(run[1], "INCOMPLETE", "This report is not complete\n");
    write_text(run[1], "metrics.csv.part", "step\n");
    struct timespec old[2] = {{1000, 0}, {1000, 0}};
    CHECK(utimensat(AT_FDCWD, run[0], old, 0) == 0); /* run[1] is the newer */
    CHECK_INT_EQ(run_compare_err(root, a->rep.run_dir, run[1], &err), 2);
    snprintf(want, sizeof(want), "moed compare: error: %s: an incomplete report (no "
             "summary.json: the run ended before its report was written, or is still writing "
             "it); %s/INCOMPLETE says which files are missing and why\n", run[1], run[1]);
    CHECK_STR_CONTAINS(err, want);
    free(err);
    CHECK_INT_EQ(run_compare_err(root, out_dir, a->rep.run_dir, &err), 2);
    snprintf(want, sizeof(want), "moed compare: error: %s: not a moed report folder but a "
             "folder of 2 run folders; give one: the newest is %s, the one before %s\n",
             out_dir, run[1], run[0]);
    CHECK_STR_CONTAINS(err, want);
    free(err);
    /* written with a trailing slash: the paths it names have one slash each */
    char slashed[MOE_PATH_MAX + 2];
    snprintf(slashed, sizeof(slashed), "%s/", out_dir);
    CHECK_INT_EQ(run_compare_err(root, slashed, a->rep.run_dir, &err), 2);
    CHECK_STR_CONTAINS(err, "the newest is ");
    CHECK(err != NULL && strstr(err, "//") == NULL);
    free(err);
    snprintf(slashed, sizeof(slashed), "%s/", run[1]);
    CHECK_INT_EQ(run_compare_err(root, a->rep.run_dir, slashed, &err), 2);
    snprintf(want, sizeof(want), "%s/INCOMPLETE says which files", run[1]);
    CHECK_STR_CONTAINS(err, want);
    free(err);
    const char *files[][2] = {{run[0], "summary.json"}, {run[1], "INCOMPLETE"},
                              {run[1], "metrics.csv.part"}};
    for (size_t i = 0; i < 3; i++) {
        snprintf(want, sizeof(want), "%s/%s", files[i][0], files[i][1]);
        unlink(want);
    }
    rmdir(run[0]);
    rmdir(run[1]);
    rmdir(out_dir);
}

/* B recorded twice A's steps with expert 0 copied on ranks 1 and 2: the header shows each
 * run's recorded steps and a NOTE that they differ; tokens compare per recorded step
 * (old: 100 -> 200, +100%), expert 0 is marked e* and each run's calls are shown. */
static void test_steps_replicas(const char *root)
{
    mini_t b = mini_base;
    b.recorded = 10;
    b.steps_run = 11;
    b.replicated = true;
    b.ex[0] = (mini_exp_t){1, 200, 20, 0.1, 0.1, 0.2};
    for (int e = 1; e < 4; e++) {
        b.ex[e].tokens *= 2;
        b.ex[e].calls *= 2;
    }
    char *out = mini_compare(root, &mini_base, &b);
    CHECK_STR_CONTAINS(out, "     recorded steps 5 (of 6 run)\n");
    CHECK_STR_CONTAINS(out, "     recorded steps 10 (of 11 run)\n");
    CHECK_STR_CONTAINS(out, "  NOTE: the runs recorded different numbers of steps (5 vs 10)");
    CHECK_STR_CONTAINS(out, "\n      0     0*      0.200     0.100   -0.100 (-50.0%)       "
                            "0.300     0.200   -0.100 (-33.3%)         20.0       20.0   "
                            "+0.0 (+0.0%)            5      20\n");
    CHECK_STR_CONTAINS(out, "\n      0      1      0.100     0.100   +0.000 (+0.0%)        "
                            "0.100     0.100   +0.000 (+0.0%)          10.0       10.0   "
                            "+0.0 (+0.0%)            5      10\n");
    free(out);
}

/* Two hand-made summary.json documents compared; the output (malloc'd) or NULL. Takes
 * the documents. */
static char *doc_compare(const char *root, json_t *da, json_t *db)
{
    char a[MOE_PATH_MAX], b[MOE_PATH_MAX], path[MOE_PATH_MAX + 64], *out = NULL;
    bool ok = da != NULL && db != NULL && make_dir(root, "doc-a", a, sizeof(a)) &&
              make_dir(root, "doc-b", b, sizeof(b));
    snprintf(path, sizeof(path), "%s/summary.json", a);
    ok = ok && json_dump_file(da, path, 0) == 0;
    snprintf(path, sizeof(path), "%s/summary.json", b);
    ok = ok && json_dump_file(db, path, 0) == 0;
    CHECK(ok);
    if (ok) {
        CHECK_INT_EQ(run_compare(a, b, &out), 0);
    }
    json_decref(da);
    json_decref(db);
    mini_remove(a);
    mini_remove(b);
    return out;
}

/* Runs of different world sizes: each row over ranks takes each run's own ranks (B's
 * rank 3 is no rank of A's: not "left out"); B's mean step (3 + 3 + 3 + 7) / 4. */
static void test_world_apart(const char *root)
{
    json_t *db = mini_doc(&mini_base);
    json_array_append_new(
        json_object_get(db, "ranks"),
        json_pack("{s:i, s:b, s:b, s:i, s:{s:f, s:f, s:f, s:f, s:f}, s:f, s:{s:f}}", "rank", 3,
                  "present", 1, "profiled", 1, "num_local", 2, "per_step_ms", "step", 7.0,
                  "compute", 1.0, "exchange", 0.5, "idle", 0.5, "structural_wait", 0.25,
                  "exchange_ms", 1.0, "cpu_cores", "run", 0.5));
    json_object_set_new(json_object_get(db, "run"), "world_size", json_integer(4));
    char *out = doc_compare(root, mini_doc(&mini_base), db);
    CHECK_STR_CONTAINS(out, "  step (ms, mean over ranks)                  3.000          4.000"
                            "   +1.000 (+33.3%)\n  compute");
    CHECK_STR_CONTAINS(out, "  CPU, expert ranks (cores, summed)            1.00           1.50");
    CHECK(out != NULL && strstr(out, "left out") == NULL);
    /* the placement rows: rank 3, which A does not have, reads n/a there, not 0 tokens */
    const char *row = out != NULL ? strstr(out, "    rank 3    A: ") : NULL;
    const char *eol = row != NULL ? strchr(row, '\n') : NULL;
    const char *na = row != NULL ? strstr(row, "n/a") : NULL;
    CHECK(row != NULL && eol != NULL && na != NULL && na < strstr(row, "B: "));
    free(out);
}

/* A change is the shown B minus the shown A, so a row adds up as read (it was B - A
 * unrounded: 0.03 -> 0.05 read +0.01); its percentage is of the measured figures. In the
 * run table and in the balance table alike. */
static void test_change_shown(const char *root)
{
    mini_t a = mini_base, b = mini_base;
    a.cpu[0] = 0.034; /* rank 0 holds no expert: "other ranks" */
    b.cpu[0] = 0.046;
    a.gini = 0.2504;
    b.gini = 0.2516;
    char *out = mini_compare(root, &a, &b);
    CHECK_STR_CONTAINS(out, "  CPU, other ranks (cores, summed)             0.03           0.05"
                            "   +0.02 (+35.3%)\n");
    CHECK_STR_CONTAINS(out, "      0  gini                  0.250        0.252   +0.002 (+0.5%)\n");
    free(out);
}

/* A replay's routing detail names the trace's path and its source: 1,947 bytes of it are
 * printed whole (compare copied it into 1,088 bytes and cut it inside the path). */
static void test_routing_long(const char *root)
{
    char detail[2100], want[2200];
    int n = snprintf(detail, sizeof(detail), "replayed /srv/%01900d/routing.safetensors (moed run x)", 0);
    CHECK(n > 1900 && (size_t)n < sizeof(detail));
    json_t *da = mini_doc(&mini_base), *db = mini_doc(&mini_base);
    json_object_set_new(db, "routing", json_pack("{s:s, s:s}", "source", "replayed", "detail", detail));
    char *out = doc_compare(root, da, db);
    snprintf(want, sizeof(want), "     routing: %s\n", detail);
    CHECK_STR_CONTAINS(out, want);
    free(out);
}

/* Over 32 experts the rows shown are the most changed by what is shown: tokens per
 * recorded step (equal here: 10 in A's 5 steps and B's 10), so expert 37, whose p50 alone
 * changes (+30%), leads; ranked by total tokens (+100% for every expert) it did not. */
static void test_experts_ranked(const char *root)
{
    json_t *doc[2];
    for (int r = 0; r < 2; r++) {
        mini_t m = mini_base;
        m.recorded = r == 0 ? 5 : 10;
        doc[r] = mini_doc(&m);
        json_t *list = json_array();
        for (int e = 0; e < 40; e++) {
            double p50 = r == 1 && e == 37 ? 0.13 : 0.1;
            json_array_append_new(
                list, json_pack("{s:i, s:i, s:i, s:f, s:f, s:{s:f, s:f, s:f}}", "layer", 0,
                                "expert", e, "rank", 1 + e % 2, "tokens", 10.0 * m.recorded,
                                "calls", m.recorded, "latency_ms", "mean", p50, "p50", p50,
                                "p99", 0.1));
        }
        json_object_set_new(doc[r], "experts", list);
        json_object_set_new(json_object_get(doc[r], "run"), "num_experts", json_integer(40));
    }
    char *out = doc_compare(root, doc[0], doc[1]);
    const char *row = out != NULL ? strstr(out, "      0     37      0.100     0.130") : NULL;
    const char *other = out != NULL ? strstr(out, "      0      0      0.100") : NULL;
    CHECK(row != NULL);
    CHECK(row != NULL && (other == NULL || row < other)); /* the first row shown */
    free(out);
}

/* The output could not be written (/dev/full): exit 5 (moed's code for an output it
 * cannot write), for the comparison and for --help, never 0. */
static void test_write_error(const fixture_t *a)
{
    FILE *full = fopen("/dev/full", "w");
    CHECK(full != NULL);
    if (full == NULL) {
        return;
    }
    char dir[MOE_PATH_MAX], *help[] = {"--help"};
    snprintf(dir, sizeof(dir), "%s", a->rep.run_dir);
    CHECK_INT_EQ(moe_report_compare(a->rep.run_dir, a->rep.run_dir, full), 5);
    clearerr(full);
    CHECK_INT_EQ(moe_report_compare_main(1, help, full), 5);
    fclose(full);
}

#if defined(__SANITIZE_ADDRESS__)
#define CMP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CMP_TEST_ASAN 1
#endif
#endif

#ifndef CMP_TEST_ASAN
/* compare A B in a child whose address space may grow by `room` bytes more (0: no limit);
 * its stderr into ROOT/oom.txt; its exit code, -1 when it did not exit. */
static int compare_limited(const char *root, const char *a, const char *b, size_t room)
{
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/oom.txt", root);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        FILE *out = fopen("/dev/null", "w");
        unsigned long pages = 0;
        FILE *statm = fopen("/proc/self/statm", "r");
        bool ok = fd >= 0 && out != NULL && statm != NULL && fscanf(statm, "%lu", &pages) == 1;
        struct rlimit lim = {(rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + room, RLIM_INFINITY};
        if (!ok || dup2(fd, STDERR_FILENO) < 0 || (room > 0 && setrlimit(RLIMIT_AS, &lim) != 0)) {
            _exit(99);
        }
        _exit(moe_report_compare(a, b, out));
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return -1;
    }
    return WEXITSTATUS(status);
}
#endif

/* Out of memory: exit 1 (a runtime failure, as moed plan's), not 2, which says the input
 * was refused. B claims 4096 layers x 1024 experts (the largest shape compare takes) with
 * no expert: its index by (layer, expert) is 32 MiB, which an address space 8 MiB above
 * the child's size at the call cannot hold; the same compare unlimited exits 0. */
static void test_out_of_memory(const char *root, const fixture_t *a)
{
#ifdef CMP_TEST_ASAN
    (void)root;
    (void)a;
    printf("test_compare: out of memory: skipped (AddressSanitizer reserves the address "
           "space RLIMIT_AS bounds)\n");
#else
    char dir[MOE_PATH_MAX], path[MOE_PATH_MAX + 32];
    CHECK(make_dir(root, "huge", dir, sizeof(dir)));
    write_text(dir, "summary.json",
               "{\"schema\": \"moed.summary\", \"schema_version\": 1, \"run\": {\"world_size\": "
               "3, \"num_layers\": 4096, \"num_experts\": 1024}, \"experts\": []}\n");
    CHECK_INT_EQ(compare_limited(root, a->rep.run_dir, dir, 0), 0);
    CHECK_INT_EQ(compare_limited(root, a->rep.run_dir, dir, (size_t)8 << 20), 1);
    char *err = slurp(root, "oom.txt", NULL);
    CHECK_STR_CONTAINS(err, "moed compare: error: out of memory\n");
    free(err);
    snprintf(path, sizeof(path), "%s/oom.txt", root);
    unlink(path);
    mini_remove(dir);
#endif
}

int main(void)
{
    char root[] = "/tmp/moed_test_compare_XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_json_valid();
    test_json_malformed();
    fixture_t *fx = fx_make(&small_shape);
    CHECK(fx != NULL);
    if (fx != NULL && write_into(fx, root, "a")) {
        test_json_mutations(fx);
        test_compare(root, fx);
        test_compare_shapes(root, fx);
        test_compare_config(root, fx);
        test_compare_states(root, fx);
        test_compare_folders(root, fx);
        test_write_error(fx);
        test_not_report(root, fx);
        test_out_of_memory(root, fx);
        remove_report(fx->rep.run_dir, fx->rep.world_size);
    }
    fx_free(fx);
    test_bytes_split(root);
    test_rank_times(root);
    test_no_nan(root);
    test_tokens_unknown(root);
    test_moved(root);
    test_rank_sets(root);
    test_empty_run(root);
    test_memory_missing(root);
    test_memory_cap(root);
    test_steps_replicas(root);
    test_world_apart(root);
    test_experts_ranked(root);
    test_change_shown(root);
    test_routing_long(root);
    rmdir(root);
    return moe_test_finish("test_compare");
}
