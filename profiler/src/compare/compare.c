/* Part compare (profiler/src/compare/): `moed compare A B`: two report folders side by
 * side. May include: report (and the public headers in moe/). One file of each part's
 * folder opens with such a comment; tests/lint/parts.sh holds every part to its list. */
/* `moed compare DIR_A DIR_B`: two runs' summary.json side by side, with the change from A
 * to B (absolute and relative). Figures are matched by identity, never by position: experts
 * by (layer, expert), layers by index, ranks by number; when the two runs differ in shape the
 * output says so and compares what both have. */
#include "report/report.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compare/json_lookup.h"
#include "compare/report_dir.h"
#include "compare/rank_load.h"
#include "moe/file.h"

#define CMP_SCHEMA "moed.summary"
#define CMP_SCHEMA_MAX 1 /* newest summary.json schema_version this reader knows */
#define CMP_ALL_ROWS 32  /* up to this many rows, show all ... */
#define CMP_TOP_ROWS 16  /* ... else the ones with the largest change */
#define CMP_CONFIG_LINES 40
#define CMP_VALUE_CHARS 72 /* a config value longer than this is cut with "..." */
#define CMP_PLACE_LAYERS 4 /* layers whose placement changed shown rank by rank */
#define CMP_PLACE_RANKS 16 /* ranks shown per layer */
#define CMP_IDS_CHARS 28   /* a rank's expert list longer than this is cut with "..." */
#define CMP_EXIT_RUNTIME 1 /* moed's exit code for a runtime failure: out of memory */
#define CMP_EXIT_USAGE 2   /* bad arguments, or a folder refused */
#define CMP_EXIT_OUTPUT 5  /* moed's exit code for an output it could not write */

typedef struct cmp_run {
    const char *dir;
    char path[MOE_PATH_MAX + 32];
    json_t *doc;
    const json_t *run;
    int world, layers, experts;
    int64_t moved; /* experts its online rebalancing moved (summary.json rebalances[]): its
                    * experts[].rank is then the configured placement, not where they ran */
} cmp_run_t;

/* ---- loading --------------------------------------------------------------------- */

static int cmp_int(const json_t *v, const char *key)
{
    double x = moe_json_num(json_object_get(v, key), -1.0);
    return x >= 0.0 && x <= 1e9 ? (int)x : -1;
}

static moe_status_t cmp_check(cmp_run_t *c, moe_error_t *err)
{
    const char *schema = moe_json_str(json_object_get(c->doc, "schema"), NULL);
    double version = moe_json_num(json_object_get(c->doc, "schema_version"), -1.0);
    if (schema == NULL || strcmp(schema, CMP_SCHEMA) != 0) {
        return moe_error_set(err, MOE_ERR_FORMAT,
                             "%s: not a moed report folder (its summary.json's \"schema\" is "
                             "%s%s%s, expected \"%s\")",
                             c->dir, schema ? "\"" : "", schema ? schema : "missing",
                             schema ? "\"" : "", CMP_SCHEMA);
    }
    if (version < 1.0 || version != floor(version)) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: bad \"schema_version\"", c->path);
    }
    if (version > CMP_SCHEMA_MAX) {
        return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                             "%s: schema_version %.0f is newer than this "
                             "moed reads (%d); use the moed that wrote it",
                             c->path, version, CMP_SCHEMA_MAX);
    }
    c->run = json_object_get(c->doc, "run");
    c->world = cmp_int(c->run, "world_size");
    c->layers = cmp_int(c->run, "num_layers");
    c->experts = cmp_int(c->run, "num_experts");
    /* the bounds the config allows: a file claiming more is not one moed wrote */
    if (c->world < 1 || c->world > MOE_MAX_RANKS || c->layers < 1 || c->layers > 4096 ||
        c->experts < 1 || c->experts > MOE_MAX_EXPERTS ||
        !json_is_array(json_object_get(c->doc, "experts"))) {
        return moe_error_set(err, MOE_ERR_FORMAT,
                             "%s: \"run\" shape fields missing or out of range, or no \"experts\"",
                             c->path);
    }
    c->moved = moe_rank_moved(c->doc, NULL);
    return MOE_OK;
}

/* The folder holds a summary.json, else why not (compare/report_dir.h). */
static moe_status_t cmp_folder(const cmp_run_t *c, moe_error_t *err)
{
    return moe_report_dir_check(c->dir, err);
}

static moe_status_t cmp_load(cmp_run_t *c, const char *dir, moe_error_t *err)
{
    memset(c, 0, sizeof(*c));
    c->dir = dir;
    moe_path_join(c->path, sizeof(c->path), dir, "summary.json");
    moe_status_t st = cmp_folder(c, err);
    if (st == MOE_OK) {
        st = moe_json_load_file(c->path, &c->doc, err);
    }
    return st == MOE_OK ? cmp_check(c, err) : st;
}

/* ---- formatting ------------------------------------------------------------------ */

/* A figure as a row shows it: rounded to `dec` decimals as printf rounds. */
static double cmp_shown(double v, int dec)
{
    char s[64];
    snprintf(s, sizeof(s), "%.*f", dec, v);
    return strtod(s, NULL);
}

/* "+1.234 (+5.6%)": the change from a to b with `dec` decimals: b as shown minus a as shown,
 * so a row adds up as read (0.034 -> 0.046 shows 0.03 -> 0.05 +0.02, not +0.01); the
 * percentage is of the measured figures. */
static void cmp_change(double a, double b, int dec, char *buf, size_t n)
{
    double d = cmp_shown(b, dec) - cmp_shown(a, dec);
    d = d == 0.0 ? 0.0 : d; /* 0.00 - -0.00 is -0.0: "+0.00", never "-0.00" */
    if (!isfinite(a) || !isfinite(b)) {
        snprintf(buf, n, "n/a");
    } else if (a == 0.0 && b == 0.0) {
        snprintf(buf, n, "0");
    } else if (a == 0.0) {
        snprintf(buf, n, "%+.*f (new)", dec, d);
    } else {
        snprintf(buf, n, "%+.*f (%+.1f%%)", dec, d, 100.0 * (b - a) / fabs(a));
    }
}

static double cmp_rel(double a, double b)
{
    return a != 0.0 ? fabs(b - a) / fabs(a) : b != 0.0 ? INFINITY : 0.0;
}

/* One figure of A and B with the change; a figure a run does not have shows as n/a. */
static void cmp_row(FILE *out, const char *name, double a, double b, int dec)
{
    char ch[64], v[2][32];
    const double x[2] = {a, b};
    cmp_change(a, b, dec, ch, sizeof(ch));
    for (int i = 0; i < 2; i++) {
        if (isfinite(x[i])) {
            snprintf(v[i], sizeof(v[i]), "%.*f", dec, x[i]);
        } else {
            snprintf(v[i], sizeof(v[i]), "n/a");
        }
    }
    fprintf(out, "  %-34s %14s %14s   %s\n", name, v[0], v[1], ch);
}

static double cmp_num(const json_t *v, const char *path)
{
    return moe_json_num(moe_json_path(v, path), NAN);
}

/* One figure with printf format fmt, or "n/a" where the run does not have it. */
static void cmp_fig(char *buf, size_t n, double v, const char *fmt)
{
    if (isfinite(v)) {
        snprintf(buf, n, fmt, v);
    } else {
        snprintf(buf, n, "n/a");
    }
}

/* A JSON value as it reads in a config: strings bare, numbers as written, at most n - 1
 * characters (cut with "..."). */
static void cmp_value_text(const json_t *v, char *buf, size_t n)
{
    char *dumped = NULL;
    if (json_is_string(v)) {
        snprintf(buf, n, "%s", json_string_value(v));
    } else if (v == NULL) {
        snprintf(buf, n, "(absent)");
    } else if (json_is_integer(v)) {
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(buf, n, "%.15g", json_real_value(v));
    } else if ((dumped = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT)) != NULL) {
        snprintf(buf, n, "%s", dumped);
    } else {
        snprintf(buf, n, "?");
    }
    free(dumped);
    if (n > 4 && strlen(buf) == n - 1) {
        memcpy(buf + n - 4, "...", 4);
    }
}

/* Equal values: numbers by value (2 and 2.0 are one value), the rest as JSON. */
static bool cmp_same(const json_t *x, const json_t *y)
{
    if (json_is_number(x) && json_is_number(y)) {
        return json_number_value(x) == json_number_value(y);
    }
    return x != NULL && y != NULL && json_equal(x, y);
}

/* ---- run-level figures ----------------------------------------------------------- */

/* A run that recorded no step (all warm-up): every figure of the recorded steps is
 * empty, and its zeros are not measurements. */
static bool cmp_empty(const cmp_run_t *c)
{
    return json_is_true(json_object_get(c->run, "all_warmup")) ||
           cmp_num(c->run, "recorded_steps") == 0.0;
}

/* v, a figure of run c's recorded steps: NAN (n/a) for a run that recorded none. */
static double cmp_of(const cmp_run_t *c, double v)
{
    return cmp_empty(c) ? NAN : v;
}

/* A figure over the ranks' placement: unknown (NAN) for a run whose experts moved. */
static double cmp_placed(const cmp_run_t *c, double v)
{
    return c->moved > 0 ? NAN : cmp_of(c, v);
}

/* What a row over ranks takes: the mean over the ranks, or the sum over the ranks hosting
 * experts (num_local > 0) or over those hosting none. */
typedef enum cmp_over {
    CMP_OVER_MEAN,
    CMP_OVER_SUM_EXPERT,
    CMP_OVER_SUM_OTHER,
} cmp_over_t;

#define CMP_LEFT_NAMED 4 /* ranks left out named in a row's note; the rest counted */

/* Rank k's figure at `path` (such as "per_step_ms.step") in ranks[], NAN where the rank is
 * not present (not profiled, lost) or lacks the figure. */
static double cmp_rank_fig(const cmp_run_t *c, size_t k, const char *path)
{
    const json_t *r = json_array_get(json_object_get(c->doc, "ranks"), k);
    if (!json_is_true(json_object_get(r, "present"))) {
        return NAN;
    }
    return moe_json_num(moe_json_path(r, path), NAN);
}

static bool cmp_rank_of(const cmp_run_t *c, size_t k, cmp_over_t over)
{
    const json_t *r = json_array_get(json_object_get(c->doc, "ranks"), k);
    bool hosts = moe_json_num(json_object_get(r, "num_local"), 0) > 0;
    return over == CMP_OVER_MEAN || hosts == (over == CMP_OVER_SUM_EXPERT);
}

/* A figure of ranks[] in A and B over the ranks that have it in both runs, so both sides
 * cover one set of ranks (a rank not profiled or lost in one run would else move the mean
 * or the sum by itself); then a line naming the ranks left out. NAN where no rank has it
 * in both. Runs of different world sizes take each its own ranks that have it. */
static void cmp_rank_row(FILE *out, const char *name, const cmp_run_t *a, const cmp_run_t *b,
                         const char *path, cmp_over_t over, int dec)
{
    size_t na = moe_json_count(json_object_get(a->doc, "ranks"));
    size_t nb = moe_json_count(json_object_get(b->doc, "ranks"));
    double sum[2] = {0.0, 0.0}, x[2];
    int n[2] = {0, 0}, left = 0;
    char note[160] = "";
    size_t pos = 0;
    /* runs of different world sizes (the shapes' NOTE says so): each over its own ranks,
     * rank k of one not being rank k of the other */
    bool apart = na != nb;
    for (size_t k = 0; k < (na > nb ? na : nb); k++) {
        double v[2] = {cmp_rank_fig(a, k, path), cmp_rank_fig(b, k, path)};
        bool of[2] = {cmp_rank_of(a, k, over), cmp_rank_of(b, k, over)};
        bool both = isfinite(v[0]) && isfinite(v[1]);
        if (apart) {
            for (int i = 0; i < 2; i++) {
                sum[i] += isfinite(v[i]) && of[i] ? v[i] : 0.0;
                n[i] += isfinite(v[i]) && of[i] ? 1 : 0;
            }
            continue;
        }
        for (int i = 0; i < 2; i++) {
            sum[i] += both && of[i] ? v[i] : 0.0;
            n[i] += both && of[i] ? 1 : 0;
        }
        if (!both && ((isfinite(v[0]) && of[0]) || (isfinite(v[1]) && of[1]))) {
            if (left++ < CMP_LEFT_NAMED) {
                int w = snprintf(note + pos, sizeof(note) - pos, "%srank %zu (not in %s)",
                                 pos > 0 ? ", " : "", k, isfinite(v[0]) ? "B" : "A");
                pos = w > 0 && (size_t)w < sizeof(note) - pos ? pos + (size_t)w : pos;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        x[i] = n[i] == 0 || cmp_empty(i == 0 ? a : b) ? NAN
               : over == CMP_OVER_MEAN               ? sum[i] / n[i]
                                                     : sum[i];
    }
    cmp_row(out, name, x[0], x[1], dec);
    if (left > CMP_LEFT_NAMED) {
        fprintf(out, "    (over the ranks both runs have; left out: %s and %d more)\n", note,
                left - CMP_LEFT_NAMED);
    } else if (left > 0) {
        fprintf(out, "    (over the ranks both runs have; left out: %s)\n", note);
    }
}

static bool cmp_partial(const cmp_run_t *c)
{
    return json_is_true(json_object_get(c->doc, "partial"));
}

/* "cuda (NVIDIA H200)": the back-end and the device's name (run.device_name, else the first
 * present rank's); "+ others" when the present ranks' devices differ. */
static void cmp_device(const cmp_run_t *c, char *buf, size_t n)
{
    const char *kind = moe_json_str(json_object_get(c->run, "device"), "?");
    const char *name = moe_json_str(json_object_get(c->run, "device_name"), "");
    const json_t *ranks = json_object_get(c->doc, "ranks");
    bool mixed = false;
    for (size_t i = 0; i < moe_json_count(ranks); i++) {
        const json_t *k = json_array_get(ranks, i);
        const char *d = moe_json_str(json_object_get(k, "device"), "");
        if (!json_is_true(json_object_get(k, "present")) || d[0] == '\0') {
            continue;
        }
        name = name[0] != '\0' ? name : d;
        mixed = mixed || strcmp(d, name) != 0;
    }
    if (name[0] == '\0' || strcmp(name, kind) == 0) {
        snprintf(buf, n, "%s%s", kind, mixed ? " + others" : "");
    } else {
        snprintf(buf, n, "%s (%.64s%s)", kind, name, mixed ? " + others" : "");
    }
}

/* A resolved config value of the run as text (summary.json "config"), else NULL (a report
 * from a moed that did not write it). */
static const json_t *cmp_cfg(const cmp_run_t *c, const char *key)
{
    return json_object_get(json_object_get(c->doc, "config"), key);
}

/* key's values in A and B: those the runs resolved it to (summary.json "config_resolved":
 * the keys "config" keeps as written, `auto`, -1, 0) where both have one, else "config"'s;
 * NULL for a report without it. */
static void cmp_cfg_pair(const cmp_run_t *a, const cmp_run_t *b, const char *key,
                         const json_t **x, const json_t **y)
{
    const json_t *ra = json_object_get(json_object_get(a->doc, "config_resolved"), key);
    const json_t *rb = json_object_get(json_object_get(b->doc, "config_resolved"), key);
    *x = ra != NULL && rb != NULL ? ra : cmp_cfg(a, key);
    *y = ra != NULL && rb != NULL ? rb : cmp_cfg(b, key);
}

/* How the run ended, when not as planned: stopped early, or nothing recorded. */
static void cmp_run_state(FILE *out, const cmp_run_t *c)
{
    double run = cmp_num(c->run, "steps_run"), planned = cmp_num(c->run, "steps_planned");
    double recorded = cmp_num(c->run, "recorded_steps");
    if (json_is_true(json_object_get(c->run, "interrupted"))) {
        char of[48] = ""; /* workload.steps: 0 runs until stopped: no total */
        if (planned > 0) {
            snprintf(of, sizeof(of), " of %.0f", planned);
        }
        fprintf(out, "     INTERRUPTED: stopped after %.0f%s steps; figures cover what ran\n", run,
                of);
    }
    if (json_is_true(json_object_get(c->run, "all_warmup"))) {
        fprintf(out, "     RECORDED NOTHING: all %.0f steps run were warm-up steps "
                     "(profiler.warmup_steps); its figures are empty\n",
                run);
    } else if (recorded == 0.0) {
        fprintf(out, "     RECORDED NOTHING: no step was recorded; its figures are empty\n");
    }
}

/* The model's shape beyond what the header lists: a different width or weight type, or
 * experts cut into column shares in one run only, makes per-expert times and bytes not like
 * for like. */
static void cmp_model_note(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    static const char *const keys[][2] = {
        {"model.hidden_dim", "hidden_dim"}, {"model.ffn_dim", "ffn_dim"}, {"model.dtype", NULL},
        {"model.top_k", "top_k"}};
    char line[512];
    size_t pos = 0;
    line[0] = '\0';
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const json_t *x = NULL, *y = NULL;
        cmp_cfg_pair(a, b, keys[i][0], &x, &y);
        if (x == NULL && keys[i][1] != NULL) { /* older report: its "run" object */
            x = json_object_get(a->run, keys[i][1]);
        }
        if (y == NULL && keys[i][1] != NULL) {
            y = json_object_get(b->run, keys[i][1]);
        }
        if (x == NULL || y == NULL || cmp_same(x, y)) {
            continue;
        }
        char vx[64], vy[64];
        cmp_value_text(x, vx, sizeof(vx));
        cmp_value_text(y, vy, sizeof(vy));
        int n = snprintf(line + pos, sizeof(line) - pos, "%s%s %s vs %s", pos ? ", " : "",
                         keys[i][0], vx, vy);
        pos = n > 0 && (size_t)n < sizeof(line) - pos ? pos + (size_t)n : pos;
    }
    /* column shares: one run's experts cut in pieces, the other's whole (balance and
     * replicas both keep them whole: like for like) */
    const char *wa = moe_json_str(json_object_get(a->run, "weights"), "");
    const char *wb = moe_json_str(json_object_get(b->run, "weights"), "");
    bool sa = strstr(wa, "column shares") != NULL, sb = strstr(wb, "column shares") != NULL;
    if (sa != sb) {
        int n = snprintf(line + pos, sizeof(line) - pos, "%splacement.copies: columns in %s only",
                         pos ? ", " : "", sa ? "A" : "B");
        pos = n > 0 && (size_t)n < sizeof(line) - pos ? pos + (size_t)n : pos;
    }
    if (pos > 0) {
        fprintf(out,
                "\n  NOTE: the models differ (%s):\n  expert times and bytes are not like for "
                "like.\n",
                line);
    }
}

/* The run's routing line, when summary.json says where its routing came from: its
 * "routing" object's "detail" ("router", "replayed FILE (SOURCE)") printed whole (a replay's
 * names the trace's path and its source: up to MOE_REPORT_ROUTING_MAX), else its "source"
 * and "file"; nothing for a report from before the routing source. */
static void cmp_routing(FILE *out, const cmp_run_t *c)
{
    const json_t *r = json_object_get(c->doc, "routing");
    const char *s = moe_json_str(json_object_get(r, "detail"), moe_json_str(r, NULL));
    const char *kind = moe_json_str(json_object_get(r, "source"), NULL);
    const char *file = moe_json_str(json_object_get(r, "file"), NULL);
    if (s != NULL && s[0] != '\0') {
        fprintf(out, "     routing: %s\n", s);
    } else if (kind != NULL && kind[0] != '\0') {
        fprintf(out, "     routing: %s%s%s\n", kind, file != NULL ? " " : "",
                file != NULL ? file : "");
    }
}

static void cmp_header(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    const cmp_run_t *runs[2] = {a, b};
    fprintf(out, "moed compare\n");
    for (int i = 0; i < 2; i++) {
        const cmp_run_t *c = runs[i];
        fprintf(out, "  %s: %s (moed %s, started %s; %d ranks, %d layers x %d experts)\n",
                i == 0 ? "A" : "B", c->dir, moe_json_str(json_object_get(c->run, "version"), "?"),
                moe_json_str(json_object_get(c->run, "started_at"), "?"), c->world, c->layers,
                c->experts);
        char dev[160];
        double chunks = cmp_num(c->run, "chunks");
        cmp_device(c, dev, sizeof(dev));
        if (chunks > 0.0) {
            fprintf(out, "     device %s, runtime.chunks %.0f\n", dev, chunks);
        } else {
            fprintf(out, "     device %s, runtime.chunks not recorded\n", dev);
        }
        cmp_routing(out, c);
        if (cmp_partial(c)) {
            fprintf(out, "     PARTIAL: missing %s\n",
                    moe_json_str(json_object_get(c->doc, "missing"), "some ranks' records"));
        }
        double rec = cmp_num(c->run, "recorded_steps"), ran = cmp_num(c->run, "steps_run");
        if (isfinite(rec) && isfinite(ran)) {
            fprintf(out, "     recorded steps %.0f (of %.0f run)\n", rec, ran);
        }
        cmp_run_state(out, c);
    }
    double ra = cmp_num(a->run, "recorded_steps"), rb = cmp_num(b->run, "recorded_steps");
    if (isfinite(ra) && isfinite(rb) && ra != rb && ra > 0 && rb > 0) {
        fprintf(out,
                "\n  NOTE: the runs recorded different numbers of steps (%.0f vs %.0f): totals "
                "over the recorded\n  steps (run time, calls, bytes, tokens per rank) are not "
                "like for like; tokens per expert\n  are compared per recorded step, bytes have "
                "per-step rows.\n",
                ra, rb);
    }
    if (a->world != b->world || a->layers != b->layers || a->experts != b->experts) {
        fprintf(out,
                "\n  NOTE: the runs have different shapes (ranks %d vs %d, layers %d vs %d, "
                "experts %d vs %d);\n  only what both have is compared: experts by (layer, "
                "expert), layers by index, ranks by number.\n",
                a->world, b->world, a->layers, b->layers, a->experts, b->experts);
    }
    cmp_model_note(out, a, b);
}

/* A setting (a knob) of A and B: "2 -> 4", or "same"; never a percentage: a knob's change
 * is a choice, not a measured effect. */
static void cmp_knob(FILE *out, const char *name, const char *a, const char *b)
{
    if (strcmp(a, b) == 0) {
        fprintf(out, "  %-34s %14s %14s   same\n", name, a, b);
    } else {
        fprintf(out, "  %-34s %14s %14s   %s -> %s\n", name, a, b, a, b);
    }
}

/* runtime.chunks, the device and the share of exchange time hidden behind compute. */
static void cmp_overlap_figures(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    char da[160], db[160];
    cmp_device(a, da, sizeof(da));
    cmp_device(b, db, sizeof(db));
    fprintf(out, "  %-34s A: %s; B: %s (%s)\n", "device", da, db,
            strcmp(da, db) == 0 ? "same" : "differs");
    double ca = cmp_num(a->run, "chunks"), cb = cmp_num(b->run, "chunks");
    char ta[32] = "n/a", tb[32] = "n/a";
    if (ca > 0.0) {
        snprintf(ta, sizeof(ta), "%.0f", ca);
    }
    if (cb > 0.0) {
        snprintf(tb, sizeof(tb), "%.0f", cb);
    }
    cmp_knob(out, "runtime.chunks", ta, tb);
    cmp_rank_row(out, "exchange in flight (ms/step, mean)", a, b, "exchange_ms", CMP_OVER_MEAN,
                 3);
    cmp_row(out, "exchange hidden by compute (%)",
            cmp_of(a, 100.0 * cmp_num(a->run, "exchange_hidden_share")),
            cmp_of(b, 100.0 * cmp_num(b->run, "exchange_hidden_share")), 1);
}

static void cmp_run_figures(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    fprintf(out, "\nRun %30s %14s %14s   %s\n", "", "A", "B", "change B - A");
    cmp_row(out, "tokens/s", cmp_of(a, cmp_num(a->run, "tokens_per_s")),
            cmp_of(b, cmp_num(b->run, "tokens_per_s")), 1);
    cmp_row(out, "run time (s)", cmp_of(a, cmp_num(a->run, "run_s")),
            cmp_of(b, cmp_num(b->run, "run_s")), 3);
    cmp_rank_row(out, "step (ms, mean over ranks)", a, b, "per_step_ms.step", CMP_OVER_MEAN, 3);
    cmp_rank_row(out, "compute (ms/step, mean over ranks)", a, b, "per_step_ms.compute",
                 CMP_OVER_MEAN, 3);
    cmp_rank_row(out, "exchange (ms/step, mean over ranks)", a, b, "per_step_ms.exchange",
                 CMP_OVER_MEAN, 3);
    cmp_rank_row(out, "idle (ms/step, mean over ranks)", a, b, "per_step_ms.idle", CMP_OVER_MEAN,
                 3);
    /* n/a for a report from before the split, whose idle still holds the designed wait */
    cmp_rank_row(out, "designed wait (ms/step, mean)", a, b, "per_step_ms.structural_wait",
                 CMP_OVER_MEAN, 3);
    cmp_row(out, "exchange share of step (%)",
            cmp_of(a, 100.0 * cmp_num(a->doc, "findings.exchange_share")),
            cmp_of(b, 100.0 * cmp_num(b->doc, "findings.exchange_share")), 1);
    cmp_row(out, "idle share of step (%)",
            cmp_of(a, 100.0 * cmp_num(a->doc, "findings.idle_share")),
            cmp_of(b, 100.0 * cmp_num(b->doc, "findings.idle_share")), 1);
    cmp_row(out, "designed wait share of step (%)",
            cmp_of(a, 100.0 * cmp_num(a->doc, "findings.structural_wait_share")),
            cmp_of(b, 100.0 * cmp_num(b->doc, "findings.structural_wait_share")), 1);
    /* the cores each kind of rank kept busy over the run (CPU time / wall time) */
    cmp_rank_row(out, "CPU, expert ranks (cores, summed)", a, b, "cpu_cores.run",
                 CMP_OVER_SUM_EXPERT, 2);
    cmp_rank_row(out, "CPU, other ranks (cores, summed)", a, b, "cpu_cores.run",
                 CMP_OVER_SUM_OTHER, 2);
    cmp_overlap_figures(out, a, b);
}

/* ---- experts --------------------------------------------------------------------- */

typedef struct cmp_expert {
    int layer, expert;
    double v[6];     /* p50 A, p50 B, p99 A, p99 B, tokens per recorded step A, B */
    double calls[2]; /* A, B: 0 = never called, NAN = not recorded */
    bool replicated; /* copies on several ranks in A or B */
    double score;
} cmp_expert_t;

static int cmp_by_score(const void *x, const void *y)
{
    double a = ((const cmp_expert_t *)x)->score, b = ((const cmp_expert_t *)y)->score;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* One expert's row; its tokens per recorded step (steps_a, steps_b: NAN for a run that
 * recorded none), so the score that picks the rows shown ranks what is shown. */
static void cmp_expert_fill(cmp_expert_t *row, const json_t *ea, const json_t *eb,
                            double steps_a, double steps_b)
{
    row->v[0] = cmp_num(ea, "latency_ms.p50");
    row->v[1] = cmp_num(eb, "latency_ms.p50");
    row->v[2] = cmp_num(ea, "latency_ms.p99");
    row->v[3] = cmp_num(eb, "latency_ms.p99");
    row->v[4] = cmp_num(ea, "tokens") / steps_a;
    row->v[5] = cmp_num(eb, "tokens") / steps_b;
    row->calls[0] = cmp_num(ea, "calls");
    row->calls[1] = cmp_num(eb, "calls");
    row->score = 0.0;
    for (int i = 0; i < 6; i += 2) {
        double s = cmp_rel(row->v[i], row->v[i + 1]);
        row->score = s > row->score || isnan(row->score) ? s : row->score;
    }
}

/* The recorded steps of run c, NAN when it recorded none. */
static double cmp_steps(const cmp_run_t *c)
{
    double steps = cmp_num(c->run, "recorded_steps");
    return steps > 0.0 ? steps : NAN;
}

/* The copies of each expert of run c, indexed by layer * experts + expert: its rows in
 * replicas[] (one row per copy of an expert with several; none for an expert with one). */
static int *cmp_copy_counts(const cmp_run_t *c)
{
    size_t cells = (size_t)c->layers * (size_t)c->experts;
    int *n = calloc(cells > 0 ? cells : 1, sizeof(*n));
    const json_t *reps = json_object_get(c->doc, "replicas");
    for (size_t i = 0; n != NULL && i < moe_json_count(reps); i++) {
        const json_t *r = json_array_get(reps, i);
        int l = cmp_int(r, "layer"), x = cmp_int(r, "expert");
        if (l >= 0 && x >= 0 && l < c->layers && x < c->experts) {
            n[(size_t)l * (size_t)c->experts + (size_t)x]++;
        }
    }
    return n;
}

/* Whether expert x of layer l has several copies in run c (counts: cmp_copy_counts). */
static bool cmp_replicated(const cmp_run_t *c, const int *counts, int l, int x)
{
    return l < c->layers && x < c->experts &&
           counts[(size_t)l * (size_t)c->experts + (size_t)x] > 1;
}

/* B's experts indexed by layer * experts + expert (NULL where absent). */
static const json_t **cmp_expert_index(const cmp_run_t *c)
{
    size_t cells = (size_t)c->layers * (size_t)c->experts;
    const json_t **idx = calloc(cells > 0 ? cells : 1, sizeof(*idx));
    const json_t *list = json_object_get(c->doc, "experts");
    for (size_t i = 0; idx != NULL && i < moe_json_count(list); i++) {
        const json_t *e = json_array_get(list, i);
        int l = cmp_int(e, "layer"), x = cmp_int(e, "expert");
        if (l >= 0 && x >= 0 && l < c->layers && x < c->experts) {
            idx[(size_t)l * (size_t)c->experts + (size_t)x] = e;
        }
    }
    return idx;
}

/* A latency of one run: "-" for an expert that run never called (no call to time), "n/a"
 * where not recorded (its rank not profiled, or lost). */
static void cmp_latency(char *buf, size_t n, double v, double calls)
{
    if (calls == 0.0) {
        snprintf(buf, n, "-");
    } else {
        cmp_fig(buf, n, v, "%.3f");
    }
}

static void cmp_expert_rows(FILE *out, const cmp_expert_t *rows, size_t n, size_t total)
{
    char c1[48], c2[48], c3[48], l[4][24], t[2][24], cl[2][24], id[16];
    fprintf(out, "\nExperts (latency per call in ms; tokens per recorded step; calls over the "
                 "recorded steps;\ne* = an expert with copies on several ranks in A or B: its "
                 "latency is per call of a copy,\nits calls and tokens summed over the copies; "
                 "-: no call)");
    if (n < total) {
        fprintf(out, ": the %zu of %zu with the largest change, largest first", n, total);
    }
    fprintf(out, "\n  %5s %6s  %9s %9s %-18s  %9s %9s %-18s  %10s %10s %-18s  %7s %7s\n",
            "layer", "expert", "p50 A", "p50 B", "  change", "p99 A", "p99 B", "  change",
            "tokens A", "tokens B", "  change", "calls A", "calls B");
    for (size_t i = 0; i < n; i++) {
        const cmp_expert_t *e = &rows[i];
        cmp_change(e->v[0], e->v[1], 3, c1, sizeof(c1));
        cmp_change(e->v[2], e->v[3], 3, c2, sizeof(c2));
        cmp_change(e->v[4], e->v[5], 1, c3, sizeof(c3));
        for (int k = 0; k < 4; k++) {
            cmp_latency(l[k], sizeof(l[k]), e->v[k], e->calls[k % 2]);
        }
        cmp_fig(t[0], sizeof(t[0]), e->v[4], "%.1f");
        cmp_fig(t[1], sizeof(t[1]), e->v[5], "%.1f");
        cmp_fig(cl[0], sizeof(cl[0]), e->calls[0], "%.0f");
        cmp_fig(cl[1], sizeof(cl[1]), e->calls[1], "%.0f");
        snprintf(id, sizeof(id), "%d%s", e->expert, e->replicated ? "*" : "");
        fprintf(out, "  %5d %6s  %9s %9s   %-16s  %9s %9s   %-16s  %10s %10s   %-16s  %7s %7s\n",
                e->layer, id, l[0], l[1], c1, l[2], l[3], c2, t[0], t[1], c3, cl[0], cl[1]);
    }
}

static moe_status_t cmp_experts(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    const json_t *list = json_object_get(a->doc, "experts");
    const json_t **idx = cmp_expert_index(b);
    int *copies_a = cmp_copy_counts(a), *copies_b = cmp_copy_counts(b);
    size_t na = moe_json_count(list), n = 0;
    cmp_expert_t *rows = malloc(sizeof(*rows) * (na > 0 ? na : 1));
    if (idx == NULL || rows == NULL || copies_a == NULL || copies_b == NULL) {
        free(idx);
        free(rows);
        free(copies_a);
        free(copies_b);
        return MOE_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < na; i++) {
        const json_t *ea = json_array_get(list, i);
        int l = cmp_int(ea, "layer"), x = cmp_int(ea, "expert");
        if (l < 0 || x < 0 || l >= b->layers || x >= b->experts ||
            idx[(size_t)l * (size_t)b->experts + (size_t)x] == NULL) {
            continue;
        }
        rows[n].layer = l;
        rows[n].expert = x;
        cmp_expert_fill(&rows[n], ea, idx[(size_t)l * (size_t)b->experts + (size_t)x],
                        cmp_of(a, cmp_steps(a)), cmp_of(b, cmp_steps(b)));
        rows[n].replicated = cmp_replicated(a, copies_a, l, x) ||
                             cmp_replicated(b, copies_b, l, x);
        n++;
    }
    size_t shown = n;
    if (n > CMP_ALL_ROWS) {
        qsort(rows, n, sizeof(*rows), cmp_by_score);
        shown = CMP_TOP_ROWS;
    }
    cmp_expert_rows(out, rows, shown, n);
    if (n < na || n < moe_json_count(json_object_get(b->doc, "experts"))) {
        fprintf(out, "  (%zu experts only in A, %zu only in B: not compared)\n", na - n,
                moe_json_count(json_object_get(b->doc, "experts")) - n);
    }
    free(idx);
    free(rows);
    free(copies_a);
    free(copies_b);
    return MOE_OK;
}

/* ---- placement and per-rank load ------------------------------------------------ */

/* One run's layer: where each expert ran and each rank's rows (rank_load.h). */
typedef struct cmp_place {
    double *load;    /* [W] */
    uint8_t *copies; /* [W * E] */
    double mx, mean;
} cmp_place_t;

static bool cmp_place_read(const cmp_run_t *c, int l, cmp_place_t *p)
{
    p->load = calloc((size_t)c->world, sizeof(double));
    p->copies = calloc((size_t)c->world * (size_t)c->experts, 1);
    if (p->load == NULL || p->copies == NULL) {
        return false;
    }
    moe_rank_loads(c->doc, l, c->world, c->experts, NULL, p->load, p->copies);
    moe_rank_load_stats(p->load, p->copies, c->world, c->experts, &p->mx, &p->mean);
    return true;
}

static void cmp_place_free(cmp_place_t *p)
{
    free(p->load);
    free(p->copies);
    p->load = NULL;
    p->copies = NULL;
}

/* "0 1* 5": rank r's experts, * on a copy of an expert with several, cut at n - 1. */
static void cmp_place_ids(const cmp_run_t *c, const cmp_place_t *p, int r, char *buf, size_t n)
{
    size_t pos = 0;
    int E = c->experts;
    buf[0] = '\0';
    for (int e = 0; r < c->world && e < E; e++) {
        if (!p->copies[(size_t)r * E + e]) {
            continue;
        }
        int copies = 0;
        for (int q = 0; q < c->world; q++) {
            copies += p->copies[(size_t)q * E + e];
        }
        char one[16];
        int w = snprintf(one, sizeof(one), "%s%d%s", pos == 0 ? "" : " ", e, copies > 1 ? "*" : "");
        if (pos + (size_t)w + 4 >= n) {
            snprintf(buf + pos, n - pos, " ...");
            return;
        }
        memcpy(buf + pos, one, (size_t)w + 1);
        pos += (size_t)w;
    }
    if (pos == 0) {
        snprintf(buf, n, "-");
    }
}

static void cmp_place_rows(FILE *out, const cmp_run_t *a, const cmp_run_t *b,
                           const cmp_place_t *pa, const cmp_place_t *pb)
{
    int W = a->world > b->world ? a->world : b->world, shown = 0;
    char ia[CMP_IDS_CHARS + 1], ib[CMP_IDS_CHARS + 1];
    for (int r = 0; r < W && shown < CMP_PLACE_RANKS; r++, shown++) {
        char ta[24], tb[24];
        cmp_place_ids(a, pa, r, ia, sizeof(ia));
        cmp_place_ids(b, pb, r, ib, sizeof(ib));
        /* a rank the run does not have: n/a (it read 0) */
        cmp_fig(ta, sizeof(ta), cmp_of(a, r < a->world ? pa->load[r] : NAN), "%.0f");
        cmp_fig(tb, sizeof(tb), cmp_of(b, r < b->world ? pb->load[r] : NAN), "%.0f");
        fprintf(out, "    rank %-4d A: %-*s %9s   B: %-*s %9s\n", r, CMP_IDS_CHARS, ia, ta,
                CMP_IDS_CHARS, ib, tb);
    }
    if (W > shown) {
        fprintf(out, "    (%d more ranks: see summary.json experts[] and replicas[])\n",
                W - shown);
    }
}

/* Per layer: the busiest rank's rows over the mean of the ranks holding experts, A -> B,
 * and, for the layers whose placement changed, each rank's experts and rows. */
static moe_status_t cmp_placement(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    int L = a->layers < b->layers ? a->layers : b->layers, detailed = 0, changed = 0;
    double amx = 0, amean = 0, bmx = 0, bmean = 0;
    fprintf(out, "\nPlacement and per-rank load (tokens each rank computed over the recorded "
            "steps; e* = a copy of an\nexpert with replicas; max/mean over the ranks holding "
            "experts, 1.00 = even)\n");
    const cmp_run_t *runs[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (runs[i]->moved > 0) {
            fprintf(out, "  NOTE: %s's online rebalancing moved %lld expert%s: its report "
                    "gives the configured\n  placement, not where they ran after a move, so "
                    "its per-rank load and time are n/a\n", i == 0 ? "A" : "B",
                    (long long)runs[i]->moved, runs[i]->moved == 1 ? "" : "s");
        }
    }
    for (int l = 0; l < L; l++) {
        cmp_place_t pa = {0}, pb = {0};
        if (!cmp_place_read(a, l, &pa) || !cmp_place_read(b, l, &pb)) {
            cmp_place_free(&pa);
            cmp_place_free(&pb);
            return MOE_ERR_NO_MEMORY;
        }
        bool same = a->world == b->world && a->experts == b->experts &&
                    memcmp(pa.copies, pb.copies, (size_t)a->world * (size_t)a->experts) == 0;
        changed += same ? 0 : 1;
        if (l < CMP_ALL_ROWS) {
            char ra[24], rb[24];
            cmp_fig(ra, sizeof(ra), cmp_placed(a, pa.mean > 0 ? pa.mx / pa.mean : NAN), "%.3f");
            cmp_fig(rb, sizeof(rb), cmp_placed(b, pb.mean > 0 ? pb.mx / pb.mean : NAN), "%.3f");
            fprintf(out, "  layer %-4d max/mean %s -> %s   %s\n", l, ra, rb,
                    same ? "same placement" : "placement changed");
        }
        bool rows = a->moved == 0 && b->moved == 0 &&
                    (!same ? detailed < CMP_PLACE_LAYERS : (l == L - 1 && changed == 0));
        if (rows) {
            if (same) {
                fprintf(out, "  (layer %d, as every layer:)\n", l);
            }
            cmp_place_rows(out, a, b, &pa, &pb);
            detailed += same ? 0 : 1;
        }
        amx += pa.mx;
        amean += pa.mean;
        bmx += pb.mx;
        bmean += pb.mean;
        cmp_place_free(&pa);
        cmp_place_free(&pb);
    }
    if (L > CMP_ALL_ROWS) {
        fprintf(out, "  (layers %d..%d: in the overall figure below)\n", CMP_ALL_ROWS, L - 1);
    }
    if (changed > detailed) {
        fprintf(out, "  (%d more layers with a changed placement: see summary.json)\n",
                changed - detailed);
    }
    char ra[24], rb[24];
    cmp_fig(ra, sizeof(ra), cmp_placed(a, amean > 0 ? amx / amean : NAN), "%.3f");
    cmp_fig(rb, sizeof(rb), cmp_placed(b, bmean > 0 ? bmx / bmean : NAN), "%.3f");
    fprintf(out, "  overall max/mean %s -> %s (sum over layers of the busiest rank's "
            "tokens / sum of the means)\n", ra, rb);
    return MOE_OK;
}

/* ---- load and time per layer ------------------------------------------------------ */

/* One run's layer: tokens per expert rank max/mean, the hottest expert's share of the
 * layer's demand (choices before the capacity limit) and the entropy of its expert distribution in bits (summary.json's
 * layers[].routing.hottest_share and entropy_bits, else from layers[].demand), expert compute
 * time per expert rank max/mean and the busiest rank's ms per recorded step; NAN where
 * the report lacks the figure. */
typedef struct cmp_layer_fig {
    double tok, hot, bits, time, busiest_ms;
} cmp_layer_fig_t;

static void cmp_demand_figs(const json_t *layer, double *hot, double *bits)
{
    const json_t *d = json_object_get(layer, "demand");
    double sum = 0.0, mx = 0.0, ent = 0.0;
    for (size_t e = 0; e < moe_json_count(d); e++) {
        double x = moe_json_num(json_array_get(d, e), 0.0);
        sum += x;
        mx = x > mx ? x : mx;
    }
    for (size_t e = 0; sum > 0.0 && e < moe_json_count(d); e++) {
        double p = moe_json_num(json_array_get(d, e), 0.0) / sum;
        ent -= p > 0.0 ? p * log2(p) : 0.0;
    }
    const json_t *g = json_object_get(layer, "routing"); /* a report that has them */
    *hot = moe_json_num(json_object_get(g, "hottest_share"), sum > 0.0 ? mx / sum : NAN);
    *bits = moe_json_num(json_object_get(g, "entropy_bits"), sum > 0.0 ? ent : NAN);
}

static bool cmp_layer_figs(const cmp_run_t *c, int l, cmp_layer_fig_t *f)
{
    double *ms = calloc((size_t)c->world, sizeof(double)), mx, mean;
    cmp_place_t p = {0};
    *f = (cmp_layer_fig_t){NAN, NAN, NAN, NAN, NAN};
    if (ms == NULL || l >= c->layers || !cmp_place_read(c, l, &p)) {
        free(ms);
        cmp_place_free(&p);
        return ms != NULL;
    }
    f->tok = p.mean > 0 ? p.mx / p.mean : NAN;
    cmp_demand_figs(json_array_get(json_object_get(c->doc, "layers"), (size_t)l), &f->hot,
                    &f->bits);
    moe_rank_times(c->doc, l, c->world, c->experts, ms);
    moe_rank_load_stats(ms, p.copies, c->world, c->experts, &mx, &mean);
    for (int r = 0; r < c->world; r++) {
        bool holds = false;
        for (int e = 0; e < c->experts && !holds; e++) {
            holds = p.copies[(size_t)r * c->experts + e] != 0;
        }
        mx = holds && !isfinite(ms[r]) ? NAN : mx; /* a rank's time not known */
    }
    double steps = cmp_num(c->run, "recorded_steps");
    f->tok = cmp_placed(c, f->tok);
    f->hot = cmp_of(c, f->hot);
    f->bits = cmp_of(c, f->bits);
    f->time = cmp_placed(c, isfinite(mx) && mean > 0 ? mx / mean : NAN);
    f->busiest_ms = cmp_placed(c, isfinite(mx) && steps > 0 ? mx / steps : NAN);
    free(ms);
    cmp_place_free(&p);
    return true;
}

/* The columns of the per-layer table: each "A | B", A right-aligned in w, B left-aligned in
 * w (the last one unpadded); a name centred over each. */
enum { CMP_LAYER_COLS = 5 };
static const int cmp_layer_w[CMP_LAYER_COLS] = {6, 7, 6, 6, 8};
static const char *const cmp_layer_names[CMP_LAYER_COLS] = {"tokens", "hottest", "entropy",
                                                            "time", "busiest ms/step"};

static void cmp_layer_row(FILE *out, const char *layer, char v[][2][24])
{
    fprintf(out, "  %-6s", layer);
    for (int i = 0; i < CMP_LAYER_COLS; i++) {
        int w = cmp_layer_w[i];
        fprintf(out, "   %*s | %-*s", w, v[i][0], i == CMP_LAYER_COLS - 1 ? 0 : w, v[i][1]);
    }
    fputc('\n', out);
}

static void cmp_layer_head(FILE *out)
{
    fprintf(out, "  %-6s", "layer");
    for (int i = 0; i < CMP_LAYER_COLS; i++) {
        int w = 2 * cmp_layer_w[i] + 3, n = (int)strlen(cmp_layer_names[i]);
        int left = n < w ? (w - n) / 2 : 0;
        fprintf(out, "   %*s%-*s", left, "", i == CMP_LAYER_COLS - 1 ? 0 : w - left,
                cmp_layer_names[i]);
    }
    fputc('\n', out);
    char ab[CMP_LAYER_COLS][2][24];
    for (int i = 0; i < CMP_LAYER_COLS; i++) {
        snprintf(ab[i][0], sizeof(ab[i][0]), "A");
        snprintf(ab[i][1], sizeof(ab[i][1]), "B");
    }
    cmp_layer_row(out, "", ab);
}

/* Per layer, A and B side by side: the load (tokens per expert rank, the hottest expert's
 * share, the entropy) and the time (expert compute per expert rank). */
static moe_status_t cmp_layer_load(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    int L = a->layers < b->layers ? a->layers : b->layers;
    fprintf(out, "\nLoad and time per layer, A | B (tokens: max/mean of the tokens each expert "
            "rank computed;\nhottest: the most demanded expert's share of the layer's demand "
            "(choices before the\ncapacity limit, as the report's hottest expert); entropy: of "
            "the demand over the experts,\nin bits (log2 experts = even); time: max/mean of each "
            "expert rank's expert compute, and\nthe busiest rank's ms per recorded step; "
            "1.00 = even)\n");
    cmp_layer_head(out);
    for (int l = 0; l < L && l < CMP_ALL_ROWS; l++) {
        cmp_layer_fig_t f[2];
        if (!cmp_layer_figs(a, l, &f[0]) || !cmp_layer_figs(b, l, &f[1])) {
            return MOE_ERR_NO_MEMORY;
        }
        char v[CMP_LAYER_COLS][2][24], name[16];
        for (int i = 0; i < 2; i++) {
            cmp_fig(v[0][i], sizeof(v[0][i]), f[i].tok, "%.3f");
            cmp_fig(v[1][i], sizeof(v[1][i]), 100.0 * f[i].hot, "%.1f%%");
            cmp_fig(v[2][i], sizeof(v[2][i]), f[i].bits, "%.2f");
            cmp_fig(v[3][i], sizeof(v[3][i]), f[i].time, "%.3f");
            cmp_fig(v[4][i], sizeof(v[4][i]), f[i].busiest_ms, "%.3f");
        }
        snprintf(name, sizeof(name), "%d", l);
        cmp_layer_row(out, name, v);
    }
    if (L > CMP_ALL_ROWS) {
        fprintf(out, "  (layers %d..%d: see summary.json)\n", CMP_ALL_ROWS, L - 1);
    }
    return MOE_OK;
}

/* ---- balance, bytes, memory ------------------------------------------------------ */

static void cmp_balance(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    static const char *const figs[] = {"gini", "cv", "entropy_norm", "max_mean", "dropped_total"};
    const json_t *la = json_object_get(a->doc, "layers"), *lb = json_object_get(b->doc, "layers");
    size_t n = moe_json_count(la) < moe_json_count(lb) ? moe_json_count(la) : moe_json_count(lb);
    fprintf(out,
            "\nBalance per layer (gini, cv: 0 = even; entropy: 1 = even; max/mean: 1 = even; "
            "dropped in tokens)\n  %5s  %-14s %12s %12s   %s\n",
            "layer", "figure", "A", "B", "change");
    for (size_t l = 0; l < n; l++) {
        for (size_t i = 0; i < sizeof(figs) / sizeof(figs[0]); i++) {
            double x = cmp_of(a, cmp_num(json_array_get(la, l), figs[i]));
            double y = cmp_of(b, cmp_num(json_array_get(lb, l), figs[i]));
            char ch[64], va[32], vb[32];
            cmp_change(x, y, i == 4 ? 0 : 3, ch, sizeof(ch));
            cmp_fig(va, sizeof(va), x, i == 4 ? "%.0f" : "%.3f");
            cmp_fig(vb, sizeof(vb), y, i == 4 ? "%.0f" : "%.3f");
            fprintf(out, "  %5zu  %-14s %12s %12s   %s\n", l, figs[i], va, vb, ch);
        }
    }
}

typedef struct cmp_pair {
    int src, dst;
    double a, b, score;
} cmp_pair_t;

static int cmp_pair_by_score(const void *x, const void *y)
{
    double a = ((const cmp_pair_t *)x)->score, b = ((const cmp_pair_t *)y)->score;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* Rank pairs with bytes in either run (same world only); the diagonal is a rank's local
 * copies, named so. */
static moe_status_t cmp_pairs(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    size_t w = (size_t)a->world, n = 0;
    cmp_pair_t *p = malloc(sizeof(*p) * (w * w > 0 ? w * w : 1));
    if (p == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < w; i++) {
        for (size_t j = 0; j < w; j++) {
            char path[64];
            snprintf(path, sizeof(path), "comm.bytes.%zu.%zu", i, j);
            double x = cmp_of(a, cmp_num(a->doc, path) / 1e6);
            double y = cmp_of(b, cmp_num(b->doc, path) / 1e6);
            if ((x > 0.0 || y > 0.0) && isfinite(x) && isfinite(y)) {
                p[n++] = (cmp_pair_t){(int)i, (int)j, x, y, fabs(y - x)};
            }
        }
    }
    size_t shown = n;
    if (n > CMP_ALL_ROWS) {
        qsort(p, n, sizeof(*p), cmp_pair_by_score);
        shown = CMP_TOP_ROWS;
        fprintf(out, "  the %zu of %zu rank pairs with the largest change in MB, largest first:\n",
                shown, n);
    }
    for (size_t i = 0; i < shown; i++) {
        char name[48];
        if (p[i].src == p[i].dst) {
            snprintf(name, sizeof(name), "rank %d local copies (MB)", p[i].src);
        } else {
            snprintf(name, sizeof(name), "rank %d -> rank %d (MB)", p[i].src, p[i].dst);
        }
        cmp_row(out, name, p[i].a, p[i].b, 3);
    }
    free(p);
    return MOE_OK;
}

/* Bytes between ranks (local 0) or local copies (local 1) over the recorded steps:
 * summary.json's figure, else (an older report) the matrix's cells off or on the diagonal. */
static double cmp_bytes_of(const cmp_run_t *c, bool local)
{
    double v = cmp_num(c->doc, local ? "comm.bytes_local" : "comm.bytes_between_ranks");
    if (isfinite(v)) {
        return v;
    }
    const json_t *m = moe_json_path(c->doc, "comm.bytes");
    if (m == NULL) {
        return NAN;
    }
    double sum = 0.0;
    for (size_t i = 0; i < moe_json_count(m); i++) {
        const json_t *row = json_array_get(m, i);
        for (size_t j = 0; j < moe_json_count(row); j++) {
            sum += (i == j) == local ? moe_json_num(json_array_get(row, j), 0.0) : 0.0;
        }
    }
    return sum;
}

static double cmp_per_step(const cmp_run_t *c, double bytes)
{
    double steps = cmp_num(c->run, "recorded_steps");
    return steps > 0.0 ? bytes / steps : NAN;
}

/* Traffic between ranks apart from local copies (a rank's rows to its own experts): a
 * placement that moves rows onto their router changes the first, not the total. */
static moe_status_t cmp_bytes(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    double ba = cmp_of(a, cmp_bytes_of(a, false)), bb = cmp_of(b, cmp_bytes_of(b, false));
    double la = cmp_of(a, cmp_bytes_of(a, true)), lb = cmp_of(b, cmp_bytes_of(b, true));
    fprintf(out, "\nBytes (MB = 10^6 bytes over the recorded steps; row = sender; local copies: "
                 "a rank's rows\nto its own experts, never sent)\n");
    cmp_row(out, "between ranks (MB)", ba / 1e6, bb / 1e6, 3);
    cmp_row(out, "between ranks per recorded step (MB)", cmp_per_step(a, ba) / 1e6,
            cmp_per_step(b, bb) / 1e6, 3);
    cmp_row(out, "local copies (MB)", la / 1e6, lb / 1e6, 3);
    cmp_row(out, "local copies per recorded step (MB)", cmp_per_step(a, la) / 1e6,
            cmp_per_step(b, lb) / 1e6, 3);
    if (a->world != b->world) {
        fprintf(out, "  (per rank pair: not compared, the worlds differ: %d vs %d ranks)\n",
                a->world, b->world);
        return MOE_OK;
    }
    return cmp_pairs(out, a, b);
}

/* One rank's peak memory in A and B; missing: 1 in A, 2 in B, 3 in both. */
typedef struct cmp_mem {
    int rank, missing;
    double rss[2], dev[2], score;
} cmp_mem_t;

static int cmp_mem_by_score(const void *x, const void *y)
{
    double a = ((const cmp_mem_t *)x)->score, b = ((const cmp_mem_t *)y)->score;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* A rank's memory row holds figures: present, and sampled (a rank lost before its first
 * sample has present true, samples 0 and zeros; a report without "samples" predates it). */
static bool cmp_mem_recorded(const json_t *m)
{
    return json_is_true(json_object_get(m, "present")) &&
           moe_json_num(json_object_get(m, "samples"), 1.0) > 0.0;
}

static void cmp_mem_row(FILE *out, const cmp_mem_t *m)
{
    char name[48];
    if (m->missing != 0) {
        fprintf(out, "  rank %d: records missing in %s\n", m->rank,
                m->missing == 3 ? "A and B" : m->missing == 1 ? "A" : "B");
        return;
    }
    snprintf(name, sizeof(name), "rank %d peak RSS (MiB)", m->rank);
    cmp_row(out, name, m->rss[0], m->rss[1], 1);
    if (m->dev[0] > 0.0 || m->dev[1] > 0.0) {
        snprintf(name, sizeof(name), "rank %d device peak (MiB)", m->rank);
        cmp_row(out, name, m->dev[0], m->dev[1], 1);
    }
}

/* Per rank both runs have: all up to CMP_ALL_ROWS ranks, else the CMP_TOP_ROWS with the
 * largest relative change (a rank with records missing first). */
static moe_status_t cmp_memory(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    const json_t *ma = json_object_get(a->doc, "memory"), *mb = json_object_get(b->doc, "memory");
    int w = a->world < b->world ? a->world : b->world;
    size_t shown = (size_t)w;
    cmp_mem_t *rows = malloc(sizeof(*rows) * (size_t)w);
    if (rows == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    fprintf(out, "\nPeak memory per rank (MiB = 2^20 bytes)");
    for (int k = 0; k < w; k++) {
        const json_t *x = json_array_get(ma, (size_t)k), *y = json_array_get(mb, (size_t)k);
        cmp_mem_t *m = &rows[k];
        m->rank = k;
        m->missing = (cmp_mem_recorded(x) ? 0 : 1) | (cmp_mem_recorded(y) ? 0 : 2);
        m->rss[0] = cmp_num(x, "rss_peak_mib");
        m->rss[1] = cmp_num(y, "rss_peak_mib");
        m->dev[0] = cmp_num(x, "dev_peak_mib");
        m->dev[1] = cmp_num(y, "dev_peak_mib");
        m->score = m->missing != 0 ? INFINITY : cmp_rel(m->rss[0], m->rss[1]);
        m->score = isnan(m->score) ? 0.0 : m->score;
    }
    if (w > CMP_ALL_ROWS) {
        qsort(rows, (size_t)w, sizeof(*rows), cmp_mem_by_score);
        shown = CMP_TOP_ROWS;
        fprintf(out, ": the %zu of %d ranks with the largest change, largest first", shown, w);
    }
    fputc('\n', out);
    for (size_t i = 0; i < shown; i++) {
        cmp_mem_row(out, &rows[i]);
    }
    if (shown < (size_t)w) {
        fprintf(out, "  (%zu more ranks: see summary.json memory[])\n", (size_t)w - shown);
    }
    free(rows);
    return MOE_OK;
}

/* ---- config differences ---------------------------------------------------------- */

#define CMP_CONFIG_MAX_LINES 4096

typedef struct cmp_kv {
    char key[160]; /* "section.key" */
    char value[256];
} cmp_kv_t;

/* One YAML line into key/value with its top-level section as prefix; false for blank,
 * comment-only and section-header lines. Comments (" #...") are dropped. */
static bool cmp_kv_parse(const char *line, size_t len, char *section, size_t sec_cap, cmp_kv_t *kv)
{
    char buf[512];
    len = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
    memcpy(buf, line, len);
    buf[len] = '\0';
    char *hash = strstr(buf, " #");
    if (hash != NULL || buf[0] == '#') {
        *(hash != NULL ? hash : buf) = '\0';
    }
    size_t n = strlen(buf), indent = strspn(buf, " \t");
    while (n > 0 && isspace((unsigned char)buf[n - 1])) {
        buf[--n] = '\0';
    }
    if (indent >= n) {
        return false;
    }
    char *body = buf + indent, *colon = strstr(body, ": ");
    colon =
        colon != NULL ? colon : (body[strlen(body) - 1] == ':' ? body + strlen(body) - 1 : NULL);
    if (indent == 0 && colon != NULL && colon[1] == '\0') {
        snprintf(section, sec_cap, "%.*s", (int)(colon - body), body);
        return false;
    }
    int klen = colon != NULL ? (int)(colon - body) : (int)strlen(body);
    /* A key longer than the field is kept cut short (no moed key comes near 160 bytes). */
    if (snprintf(kv->key, sizeof(kv->key), "%s%s%.*s", indent > 0 ? section : "",
                 indent > 0 ? "." : "", klen, body) >= (int)sizeof(kv->key)) {
        kv->key[sizeof(kv->key) - 1] = '\0';
    }
    snprintf(kv->value, sizeof(kv->value), "%s",
             colon != NULL ? colon + 1 + strspn(colon + 1, " ") : "");
    return true;
}

/* A config.yaml as key/value lines (malloc'd, *n of them); NULL if unreadable. */
static cmp_kv_t *cmp_config_lines(const char *dir, size_t *n)
{
    char path[MOE_PATH_MAX + 32], section[160] = "";
    char *text = NULL;
    size_t len = 0;
    moe_error_t err;
    *n = 0;
    moe_path_join(path, sizeof(path), dir, "config.yaml");
    if (moe_cfg_read_file(path, &text, &len, &err) != MOE_OK) {
        return NULL;
    }
    cmp_kv_t *kv = malloc(sizeof(*kv) * CMP_CONFIG_MAX_LINES);
    for (size_t at = 0; kv != NULL && at < len && *n < CMP_CONFIG_MAX_LINES;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        if (cmp_kv_parse(text + at, end - at, section, sizeof(section), &kv[*n])) {
            (*n)++;
        }
        at = end + 1;
    }
    free(text);
    return kv;
}

static const cmp_kv_t *cmp_kv_find(const cmp_kv_t *kv, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(kv[i].key, key) == 0) {
            return &kv[i];
        }
    }
    return NULL;
}

/* Older reports (no resolved "config" in summary.json): the config.yaml texts line by line;
 * a default and an absent key differ here, which is why summary.json now carries "config". */
static void cmp_config_text(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    size_t na, nb, shown = 0;
    cmp_kv_t *ka = cmp_config_lines(a->dir, &na), *kb = cmp_config_lines(b->dir, &nb);
    fprintf(out, "  (a report without the resolved config: config.yaml texts compared, comments "
                 "ignored,\n  defaults not filled in)\n");
    if (ka == NULL || kb == NULL) {
        fprintf(out, "  (config.yaml missing or unreadable in %s)\n", ka == NULL ? a->dir : b->dir);
        goto free_lines;
    }
    for (size_t i = 0; i < na && shown < CMP_CONFIG_LINES; i++) {
        const cmp_kv_t *o = cmp_kv_find(kb, nb, ka[i].key);
        if (o == NULL || strcmp(o->value, ka[i].value) != 0) {
            fprintf(out, "  %-36s %s -> %s\n", ka[i].key, ka[i].value, o ? o->value : "(absent)");
            shown++;
        }
    }
    for (size_t i = 0; i < nb && shown < CMP_CONFIG_LINES; i++) {
        if (cmp_kv_find(ka, na, kb[i].key) == NULL) {
            fprintf(out, "  %-36s %s -> %s\n", kb[i].key, "(absent)", kb[i].value);
            shown++;
        }
    }
    if (shown == 0) {
        fprintf(out, "  same configuration\n");
    }
free_lines:
    free(ka);
    free(kb);
}

/* One key's A and B, when they differ; returns whether it printed. */
static bool cmp_config_key(FILE *out, const char *key, const json_t *x, const json_t *y)
{
    char vx[CMP_VALUE_CHARS], vy[CMP_VALUE_CHARS];
    if (x != NULL && y != NULL && cmp_same(x, y)) {
        return false;
    }
    cmp_value_text(x, vx, sizeof(vx));
    cmp_value_text(y, vy, sizeof(vy));
    if (strcmp(vx, vy) == 0) { /* long values (a placement) that differ past the cut */
        fprintf(out, "  %-36s differs past the first %d characters (see %s)\n", key,
                CMP_VALUE_CHARS - 4, strncmp(key, "placement.", 10) == 0
                                         ? "Placement below" : "summary.json config");
    } else {
        fprintf(out, "  %-36s %s -> %s\n", key, vx, vy);
    }
    return true;
}

/* The resolved values (summary.json "config"): every key with its default filled in,
 * placement `auto` as the experts each rank got, --steps applied, the keys kept as written
 * as resolved (cmp_cfg_pair). Settings show A -> B. */
static void cmp_config(FILE *out, const cmp_run_t *a, const cmp_run_t *b)
{
    const json_t *ca = json_object_get(a->doc, "config"), *cb = json_object_get(b->doc, "config");
    const char *key;
    const json_t *v;
    size_t shown = 0;
    fprintf(out, "\nConfiguration (resolved values, A -> B)\n");
    if (!json_is_object(ca) || !json_is_object(cb)) {
        cmp_config_text(out, a, b);
        return;
    }
    json_object_foreach((json_t *)ca, key, v)
    {
        const json_t *x = NULL, *y = NULL;
        cmp_cfg_pair(a, b, key, &x, &y);
        shown += cmp_config_key(out, key, x, y);
    }
    json_object_foreach((json_t *)cb, key, v)
    {
        if (json_object_get(ca, key) == NULL) { /* a key only a newer moed has */
            shown += cmp_config_key(out, key, NULL, v);
        }
    }
    if (shown == 0) {
        fprintf(out, "  same configuration\n");
    }
}

/* ---- entry points ---------------------------------------------------------------- */

/* Both names lead to one folder (the same path written twice, "./x" and "x", or a link):
 * the same device and inode. */
static bool cmp_same_folder(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* rc, or CMP_EXIT_OUTPUT with one line on stderr when `out` could not be written (a full
 * disk): a report cut short must not exit 0. */
static int cmp_flush(FILE *out, int rc)
{
    errno = 0;
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, "moed compare: error: cannot write the output: %s\n",
                errno != 0 ? strerror(errno) : "write error");
        return CMP_EXIT_OUTPUT;
    }
    return rc;
}

int moe_report_compare(const char *dir_a, const char *dir_b, FILE *out)
{
    cmp_run_t a, b;
    moe_error_t err;
    moe_error_clear(&err);
    int rc = CMP_EXIT_USAGE;
    if (dir_a == NULL || dir_b == NULL || out == NULL) {
        fprintf(stderr, "moed compare: usage: moed compare DIR_A DIR_B\n");
        return CMP_EXIT_USAGE;
    }
    b.doc = NULL;
    moe_status_t st = cmp_load(&a, dir_a, &err);
    if (st != MOE_OK) {
        goto print_error;
    }
    if (cmp_same_folder(dir_a, dir_b)) {
        fprintf(out, "moed compare: A and B are the same folder (%s): nothing to compare\n",
                dir_a);
        rc = cmp_flush(out, 0);
        goto free_docs;
    }
    st = cmp_load(&b, dir_b, &err);
    if (st != MOE_OK) {
        goto print_error;
    }
    cmp_header(out, &a, &b);
    cmp_config(out, &a, &b);
    cmp_run_figures(out, &a, &b);
    if (cmp_experts(out, &a, &b) != MOE_OK || cmp_placement(out, &a, &b) != MOE_OK ||
        cmp_layer_load(out, &a, &b) != MOE_OK || cmp_bytes(out, &a, &b) != MOE_OK) {
        st = moe_error_set(&err, MOE_ERR_NO_MEMORY, "out of memory");
        goto print_error;
    }
    cmp_balance(out, &a, &b);
    if (cmp_memory(out, &a, &b) != MOE_OK) {
        st = moe_error_set(&err, MOE_ERR_NO_MEMORY, "out of memory");
        goto print_error;
    }
    rc = cmp_flush(out, 0);
    goto free_docs;
print_error:
    fprintf(stderr, "moed compare: error: %s\n", err.msg);
    rc = st == MOE_ERR_NO_MEMORY ? CMP_EXIT_RUNTIME : CMP_EXIT_USAGE; /* as moed plan's */
free_docs:
    json_decref(a.doc);
    json_decref(b.doc);
    return rc;
}

static void cmp_usage(FILE *out)
{
    fputs("usage: moed compare RUN_DIR_A RUN_DIR_B\n"
          "\n"
          "Prints two profiler report folders (each holding a summary.json) side by side:\n"
          "the resolved configuration where it differs (A -> B), then tokens/s, step, compute,\n"
          "exchange and idle time, per-expert latency and tokens, the placement and the\n"
          "tokens per expert rank, load and time per layer (tokens per expert rank, the hottest\n"
          "expert's share of demand, entropy, expert compute per rank), bytes between ranks\n"
          "and local copies apart, balance per layer and peak memory, each with its change\n"
          "B - A.\n"
          "Each run's routing source (the router, a replayed trace) when its report says.\n"
          "Measured figures show their change in percent; settings show A -> B.\n"
          "It says when a run was interrupted, recorded nothing, is partial, or when the\n"
          "runs' shapes or models differ.\n"
          "\n"
          "exit status: 0 compared (or A and B are the same folder, or --help);\n"
          "             1 out of memory;\n"
          "             2 bad arguments, or a folder that is missing, unreadable, not a\n"
          "               moed report folder or an incomplete one;\n"
          "             5 the output could not be written (a full disk)\n",
          out);
}

int moe_report_compare_main(int argc, char **argv, FILE *out)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            cmp_usage(out);
            return cmp_flush(out, 0);
        }
    }
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0') { /* a folder named so: ./-x */
            fprintf(stderr, "moed compare: error: unknown option '%s'; usage: moed compare "
                            "RUN_DIR_A RUN_DIR_B (moed compare --help)\n", argv[i]);
            return CMP_EXIT_USAGE;
        }
    }
    if (argc != 2 || argv[0][0] == '-' || argv[1][0] == '-') {
        fprintf(stderr, "moed compare: error: expected two report folders; "
                        "usage: moed compare RUN_DIR_A RUN_DIR_B (moed compare --help)\n");
        return CMP_EXIT_USAGE;
    }
    return moe_report_compare(argv[0], argv[1], out);
}

int moe_prof_compare_main(int argc, char **argv, FILE *out)
{
    return moe_report_compare_main(argc, argv, out);
}
