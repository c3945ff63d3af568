/* The routing in the report (report_routing.c and the writers): the routing source read and
 * shown (summary.json `routing`, summary.txt's and report.html's "routing source"), each
 * layer's hottest expert and entropy of its demand (a case computed by hand: counts
 * [6, 2, 0, 0] -> hottest share 0.75, 0.811278 bits), the hottest (layer, expert) pairs, and
 * report.html past MOE_REPORT_HEATMAP_MAX_CELLS: at 256 experts x 60 layers the hottest
 * pairs' table and a strip per layer instead of the heat maps, checked by their figures.
 *
 *   test_report_routing              run the tests
 *   test_report_routing --demo DIR   write the 256 x 60 report (summary.txt, summary.json,
 *                                    report.html) into DIR/wide (tests/unit/report_render.sh
 *                                    opens it in Chromium) */
#include "report/report.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compare/json_lookup.h"
#include "report_fixture.h"
#include "report_util.h"
#include "test_util.h"

#define BIG_LAYERS 60
#define BIG_EXPERTS 256
#define BITS_6_2 0.8112781244591328 /* -(3/4 log2 3/4 + 1/4 log2 1/4) */

/* needle in hay, printing only the needle when it is not (the pages are large) */
static void has(const char *hay, const char *needle, const char *what)
{
    bool ok = hay != NULL && strstr(hay, needle) != NULL;
    CHECK(ok);
    if (!ok) {
        fprintf(stderr, "  %s: missing \"%s\"\n", what, needle);
    }
}

/* ---- the pure parts ------------------------------------------------------------- */

static void test_counts(void)
{
    moe_report_layer_routing_t y;
    const uint64_t a[4] = {6, 2, 0, 0};
    moe_report_routing_counts(a, 4, &y);
    CHECK_INT_EQ(y.choices, 8);
    CHECK_INT_EQ(y.hottest_expert, 0);
    CHECK_INT_EQ(y.hottest_count, 6);
    CHECK_NEAR(y.hottest_share, 0.75, 1e-15);
    CHECK_NEAR(y.max_mean, 3.0, 1e-12); /* 6 / (8 / 4) */
    CHECK_NEAR(y.entropy_bits, 0.811278, 5e-7);
    CHECK_NEAR(y.entropy_bits, BITS_6_2, 1e-12);
    CHECK_NEAR(y.entropy_norm, BITS_6_2 / 2.0, 1e-12); /* log2(4) = 2 */
    const uint64_t b[4] = {0, 2, 0, 6};                /* the same shape, the hot one last */
    moe_report_routing_counts(b, 4, &y);
    CHECK_INT_EQ(y.hottest_expert, 3);
    CHECK_NEAR(y.entropy_bits, BITS_6_2, 1e-12);
    const uint64_t even[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    moe_report_routing_counts(even, 8, &y);
    CHECK_INT_EQ(y.hottest_expert, 0); /* a tie: the lowest id */
    CHECK_NEAR(y.hottest_share, 0.125, 1e-15);
    CHECK_NEAR(y.entropy_bits, 3.0, 1e-12);
    CHECK_NEAR(y.entropy_norm, 1.0, 1e-12);
    const uint64_t one[3] = {0, 9, 0};
    moe_report_routing_counts(one, 3, &y);
    CHECK_INT_EQ(y.hottest_expert, 1);
    CHECK_NEAR(y.hottest_share, 1.0, 0);
    CHECK(y.entropy_bits == 0.0 && !signbit(y.entropy_bits));
    CHECK_NEAR(y.entropy_norm, 0.0, 0);
    const uint64_t none[3] = {0, 0, 0};
    moe_report_routing_counts(none, 3, &y);
    CHECK_INT_EQ(y.choices, 0);
    CHECK_INT_EQ(y.hottest_expert, -1);
    CHECK(isnan(y.hottest_share) && isnan(y.entropy_bits) && isnan(y.entropy_norm));
    moe_report_routing_counts(NULL, 3, &y);
    CHECK_INT_EQ(y.hottest_expert, -1);
    const uint64_t single[1] = {4}; /* one expert: nothing to normalise by */
    moe_report_routing_counts(single, 1, &y);
    CHECK_NEAR(y.entropy_bits, 0.0, 0);
    CHECK(isnan(y.entropy_norm));
}

static void parse_is(const char *text, const char *kind, const char *file, const char *from,
                     const char *detail)
{
    moe_report_routing_src_t *s = malloc(sizeof(*s));
    CHECK(s != NULL);
    if (s == NULL) {
        return;
    }
    moe_report_routing_parse(text, s);
    bool ok = strcmp(s->kind, kind) == 0 && strcmp(s->file, file) == 0 &&
              strcmp(s->trace_source, from) == 0 && strcmp(s->detail, detail) == 0;
    CHECK(ok);
    if (!ok) {
        fprintf(stderr, "  parse \"%s\": kind \"%s\" file \"%s\" source \"%s\" detail \"%s\"\n",
                text ? text : "(null)", s->kind, s->file, s->trace_source, s->detail);
    }
    free(s);
}

static void test_parse(void)
{
    parse_is(NULL, "router", "", "", "router");
    parse_is("", "router", "", "", "router");
    parse_is("router", "router", "", "", "router");
    parse_is("replayed /data/t.safetensors (vLLM routed_experts)", "replayed",
             "/data/t.safetensors", "vLLM routed_experts",
             "replayed /data/t.safetensors (vLLM routed_experts)");
    /* a path with spaces and parentheses; a source with its own parenthesis */
    parse_is("replayed /my runs (old)/t.safetensors (moed run (a) b)", "replayed",
             "/my runs (old)/t.safetensors", "moed run (a) b",
             "replayed /my runs (old)/t.safetensors (moed run (a) b)");
    parse_is("replayed /data/t.safetensors", "replayed", "/data/t.safetensors", "",
             "replayed /data/t.safetensors");
    parse_is("replayed /data/t(1).safetensors", "replayed", "/data/t(1).safetensors", "",
             "replayed /data/t(1).safetensors");
    parse_is("uniform over 8 experts", "uniform", "", "", "uniform over 8 experts");
}

/* ---- the small report: routing source and the per-layer figures ------------------- */

#define REPLAYED "replayed /tmp/runs (a \"b\")/t.safetensors (vLLM routed_experts <v1>)"

/* Layer 1's demand becomes [6, 2, 0, ...] x 1000: the hand-computed case. */
static void edit_small(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    snprintf(r->routing_source, sizeof(r->routing_source), "%s", REPLAYED);
    moe_rep_layer_t *y = &r->layers[1];
    for (int e = 0; e < r->num_experts; e++) {
        y->demand[e] = e == 0 ? 6000 : e == 1 ? 2000 : 0;
        y->kept[e] = y->demand[e];
        y->dropped[e] = 0;
    }
}

static uint64_t layer_sum(const moe_report_t *r, int l)
{
    uint64_t s = 0;
    for (int e = 0; e < r->num_experts; e++) {
        s += r->layers[l].demand[e];
    }
    return s;
}

/* The expert with the most demand of layer l, found here by a scan of the counts. */
static int layer_argmax(const moe_report_t *r, int l)
{
    int best = 0;
    for (int e = 1; e < r->num_experts; e++) {
        best = r->layers[l].demand[e] > r->layers[l].demand[best] ? e : best;
    }
    return best;
}

static json_t *load_summary(const moe_report_t *r)
{
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/summary.json", r->run_dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    return doc;
}

static double jnum(const json_t *doc, const char *path)
{
    return moe_json_num(moe_json_path(doc, path), NAN);
}

static void check_small_json(const moe_report_t *r)
{
    json_t *doc = load_summary(r);
    if (doc == NULL) {
        return;
    }
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "routing.source"), ""), "replayed") == 0);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "routing.detail"), ""), REPLAYED) == 0);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "routing.file"), ""),
                 "/tmp/runs (a \"b\")/t.safetensors") == 0);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "routing.trace_source"), ""),
                 "vLLM routed_experts <v1>") == 0);
    /* layer 1, by hand: [6, 2, 0, 0, 0, 0, 0, 0] */
    CHECK_NEAR(jnum(doc, "layers.1.routing.hottest_expert"), 0, 0);
    CHECK_NEAR(jnum(doc, "layers.1.routing.hottest_demand"), 6000, 0);
    CHECK_NEAR(jnum(doc, "layers.1.routing.hottest_share"), 0.75, 1e-12);
    CHECK_NEAR(jnum(doc, "layers.1.routing.entropy_bits"), 0.811278, 5e-7);
    CHECK_NEAR(jnum(doc, "layers.1.routing.entropy_norm"), BITS_6_2 / 3.0, 1e-9); /* log2 8 */
    /* layer 0, the fixture's: its hot expert is the one with most demand */
    int hot = layer_argmax(r, 0);
    CHECK_INT_EQ(hot, HOT_EXPERT);
    uint64_t sum0 = layer_sum(r, 0), sum1 = layer_sum(r, 1);
    double share0 = (double)r->layers[0].demand[hot] / (double)sum0;
    CHECK_NEAR(jnum(doc, "layers.0.routing.hottest_expert"), hot, 0);
    CHECK_NEAR(jnum(doc, "layers.0.routing.hottest_share"), share0, 1e-8); /* %.9g */
    double h0 = 0.0;
    for (int e = 0; e < r->num_experts; e++) {
        double p = (double)r->layers[0].demand[e] / (double)sum0;
        h0 -= p > 0 ? p * log2(p) : 0;
    }
    CHECK_NEAR(jnum(doc, "layers.0.routing.entropy_bits"), h0, 1e-8);
    CHECK(h0 > 2.5 && h0 < 3.0); /* near even with one hot expert */
    /* the run-wide figures */
    CHECK_NEAR(jnum(doc, "routing.choices"), (double)(sum0 + sum1), 0);
    CHECK_NEAR(jnum(doc, "routing.layers_with_choices"), 2, 0);
    CHECK_NEAR(jnum(doc, "routing.hottest_share_mean"), (share0 + 0.75) / 2, 1e-8);
    CHECK_NEAR(jnum(doc, "routing.entropy_bits_mean"), (h0 + BITS_6_2) / 2, 1e-9);
    CHECK_NEAR(jnum(doc, "routing.entropy_norm_mean"), (h0 + BITS_6_2) / 2 / 3.0, 1e-9);
    CHECK_NEAR(jnum(doc, "routing.entropy_norm_min"), BITS_6_2 / 3.0, 1e-9);
    CHECK_NEAR(jnum(doc, "routing.entropy_norm_min_layer"), 1, 0);
    /* top: every pair with demand (2 x 8 - 6 without), most first by share of the layer,
     * each share its demand / its layer's sum */
    const json_t *top = moe_json_path(doc, "routing.top");
    CHECK_INT_EQ(moe_json_count(top), 10);
    CHECK_NEAR(jnum(doc, "routing.top.0.layer"), 1, 0);
    CHECK_NEAR(jnum(doc, "routing.top.0.expert"), 0, 0);
    CHECK_NEAR(jnum(doc, "routing.top.0.x_layer_mean"), 6.0, 1e-12);
    CHECK_NEAR(jnum(doc, "routing.top.1.layer"), 0, 0);
    CHECK_NEAR(jnum(doc, "routing.top.1.expert"), HOT_EXPERT, 0);
    double prev = 2.0;
    for (size_t i = 0; i < moe_json_count(top); i++) {
        const json_t *x = json_array_get(top, i);
        int l = (int)moe_json_num(json_object_get(x, "layer"), -1);
        int e = (int)moe_json_num(json_object_get(x, "expert"), -1);
        double share = moe_json_num(json_object_get(x, "share"), NAN);
        CHECK(l >= 0 && l < 2 && e >= 0 && e < r->num_experts);
        if (l < 0 || l >= 2 || e < 0 || e >= r->num_experts) {
            continue;
        }
        CHECK_NEAR(moe_json_num(json_object_get(x, "demand"), -1), r->layers[l].demand[e], 0);
        CHECK_NEAR(share, (double)r->layers[l].demand[e] / (double)layer_sum(r, l), 1e-8);
        CHECK(share <= prev);
        prev = share;
    }
    json_decref(doc);
}

static void check_small_text(const moe_report_t *r)
{
    char *t = slurp(r->run_dir, "summary.txt", NULL);
    has(t, "  routing source   " REPLAYED "\n", "summary.txt");
    /* near the top: in the Run section, before the time split */
    const char *src = t != NULL ? strstr(t, "routing source") : NULL;
    const char *split = t != NULL ? strstr(t, "Time per recorded step") : NULL;
    CHECK(src != NULL && split != NULL && src < split);
    has(t, "\nHottest experts (demand: choices before the capacity limit)\n", "summary.txt");
    has(t, "   1      1       0     1          6000           75.0%          6.00\n",
        "summary.txt");
    char want[160];
    snprintf(want, sizeof(want), "   2      0       3     %d  %12" PRIu64 "  %13.1f%%  %12.2f\n",
             r->experts[HOT_EXPERT].rank, r->layers[0].demand[HOT_EXPERT],
             100.0 * (double)r->layers[0].demand[HOT_EXPERT] / (double)layer_sum(r, 0),
             8.0 * (double)r->layers[0].demand[HOT_EXPERT] / (double)layer_sum(r, 0));
    has(t, want, "summary.txt");
    has(t, "least even: layer 1 (0.270)\n", "summary.txt"); /* 0.811278 / 3 */
    /* five rows: from the table's header to the blank line after it */
    const char *sec = t != NULL ? strstr(t, "\nHottest experts") : NULL;
    const char *head = sec != NULL ? strstr(sec, "   #  layer  expert") : NULL;
    const char *end = head != NULL ? strstr(head, "\n\n") : NULL;
    int rows = 0;
    for (const char *p = head; p != NULL && end != NULL && p < end; p = strchr(p + 1, '\n')) {
        rows++;
    }
    CHECK_INT_EQ(rows, 1 + MOE_REPORT_TOP_HOT_TEXT);
    free(t);
}

static void check_small_html(const moe_report_t *r)
{
    char *h = slurp(r->run_dir, "report.html", NULL);
    /* escaped: the path's quotes, the source's angle brackets */
    has(h, "<tr><th>routing source</th><td>replayed /tmp/runs (a &quot;b&quot;)/t.safetensors "
           "(vLLM routed_experts &lt;v1&gt;)</td></tr>", "report.html");
    /* 2 x 8 = 16 cells: the heat maps, not the tables */
    CHECK_INT_EQ(count_substr(h, "<svg id=\"chart-demand\""), 1);
    CHECK_INT_EQ(count_substr(h, "id=\"hot-top\""), 0);
    CHECK_INT_EQ(count_substr(h, "id=\"hot-layers\""), 0);
    free(h);
}

static void test_small(const char *root)
{
    fixture_t *fx = fx_written(root, "small", &small_shape, edit_small);
    if (fx == NULL) {
        return;
    }
    check_small_json(&fx->rep);
    check_small_text(&fx->rep);
    check_small_html(&fx->rep);
    /* no source given (NULL in moe_prof_static_t: "" here): the router */
    moe_error_t err;
    fx->rep.routing_source[0] = '\0';
    CHECK_INT_EQ(moe_report_write_all(&fx->rep, &err), MOE_OK);
    json_t *doc = load_summary(&fx->rep);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "routing.source"), ""), "router") == 0);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "routing.detail"), ""), "router") == 0);
    CHECK(json_is_null(moe_json_path(doc, "routing.file")));
    CHECK(json_is_null(moe_json_path(doc, "routing.trace_source")));
    json_decref(doc);
    char *t = slurp(fx->rep.run_dir, "summary.txt", NULL);
    has(t, "  routing source   router (the gate chose each token's experts)\n", "summary.txt");
    free(t);
    t = slurp(fx->rep.run_dir, "report.html", NULL);
    has(t, "<tr><th>routing source</th><td>router (the gate chose each token&#39;s experts)"
           "</td></tr>", "report.html");
    free(t);
    /* no demand recorded (the routing ranks not profiled): nulls, no hottest section */
    for (int l = 0; l < fx->rep.num_layers; l++) {
        memset(fx->rep.layers[l].demand, 0, sizeof(uint64_t) * (size_t)fx->rep.num_experts);
    }
    CHECK_INT_EQ(moe_report_write_all(&fx->rep, &err), MOE_OK);
    doc = load_summary(&fx->rep);
    CHECK(json_is_null(moe_json_path(doc, "layers.0.routing.hottest_expert")));
    CHECK(json_is_null(moe_json_path(doc, "layers.0.routing.entropy_bits")));
    CHECK(json_is_null(moe_json_path(doc, "routing.entropy_norm_min_layer")));
    CHECK_INT_EQ(moe_json_count(moe_json_path(doc, "routing.top")), 0);
    json_decref(doc);
    t = slurp(fx->rep.run_dir, "summary.txt", NULL);
    CHECK(t != NULL && strstr(t, "Hottest experts") == NULL);
    free(t);
    fx_drop(fx);
}

/* ---- 256 experts x 60 layers ------------------------------------------------------ */

/* The planted hot expert of layer l and its demand; every other expert 100..149. */
static int big_hot(int l)
{
    return (37 * l + 11) % BIG_EXPERTS;
}

static uint64_t big_demand(int l, int e)
{
    return e == big_hot(l) ? 2000 + 50 * (uint64_t)l : 100 + (uint64_t)((e * 13 + l * 7) % 50);
}

static void edit_big(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    fx->cfg.prof_trace = false; /* not read here; spares the time */
    snprintf(r->routing_source, sizeof(r->routing_source), "%s",
             "replayed /data/deepseek.safetensors (vLLM routed_experts)");
    for (int l = 0; l < r->num_layers; l++) {
        moe_rep_layer_t *y = &r->layers[l];
        for (int e = 0; e < r->num_experts; e++) {
            y->demand[e] = big_demand(l, e);
            y->dropped[e] = e == big_hot(l) ? 300 : 0;
            y->kept[e] = y->demand[e] - y->dropped[e];
            r->experts[l * r->num_experts + e].tokens = y->kept[e];
        }
    }
    /* latency: every pair 1 ms but layer 7's expert 9 (9 ms) and layer 50's expert 200
     * (5 ms): the slowest two, in that order, lead the latency chart */
    for (int i = 0; i < r->num_layers * r->num_experts; i++) {
        moe_hist_t *h = &r->experts[i].hist;
        moe_hist_reset(h);
        int64_t ns = i == 7 * r->num_experts + 9 ? 9000000 : i == 50 * r->num_experts + 200 ? 5000000
                                                                                         : 1000000;
        moe_hist_add(h, ns);
        r->experts[i].calls = 1;
    }
}

typedef struct big_pair {
    int layer, expert;
    double share;
} big_pair_t;

static int big_cmp(const void *a, const void *b)
{
    const big_pair_t *x = a, *y = b;
    return x->share < y->share ? 1 : x->share > y->share ? -1 : x->layer - y->layer;
}

/* The pairs in order, computed here from the planted counts (each layer's hot expert has
 * 2000 or more, every other 149 at most, so the 60 hot ones lead in the order of their
 * share). */
static void big_order(const moe_report_t *r, big_pair_t *out)
{
    for (int l = 0; l < BIG_LAYERS; l++) {
        out[l] = (big_pair_t){l, big_hot(l),
                              (double)big_demand(l, big_hot(l)) / (double)layer_sum(r, l)};
    }
    qsort(out, BIG_LAYERS, sizeof(*out), big_cmp);
}

static void check_big_html(const moe_report_t *r, const big_pair_t *order)
{
    size_t n = 0;
    char *h = slurp(r->run_dir, "report.html", &n);
    CHECK(h != NULL);
    if (h == NULL) {
        return;
    }
    printf("256 experts x 60 layers: report.html %zu bytes\n", n);
    /* 15360 cells: the tables instead of the three heat maps */
    CHECK(strstr(h, "<svg id=\"chart-demand\"") == NULL);
    CHECK(strstr(h, "<svg id=\"chart-load\"") == NULL);
    CHECK(strstr(h, "<svg id=\"chart-dropped\"") == NULL);
    CHECK_INT_EQ(count_substr(h, "<table id=\"hot-top\">"), 1);
    CHECK_INT_EQ(count_substr(h, "<table id=\"hot-layers\">"), 1);
    has(h, "60 layers x 256 experts = 15360 cells, more than 1024", "report.html");
    /* latency: the 40 slowest pairs, not 15360 bars; the slowest two first */
    const char *lat = strstr(h, "<svg id=\"chart-latency\"");
    CHECK(lat != NULL);
    if (lat != NULL) {
        const char *lat_end = strstr(lat, "</svg>");
        size_t len = lat_end != NULL ? (size_t)(lat_end - lat) : 0;
        char *chart = strndup(lat, len);
        CHECK_INT_EQ(count_substr(chart, "<rect "), 40 + 1); /* 40 bars and the legend's */
        const char *first = strstr(chart, "<title>layer ");
        CHECK(first != NULL && strncmp(first, "<title>layer 7 expert 9 ", 24) == 0);
        const char *second = first != NULL ? strstr(first + 1, "<title>layer ") : NULL;
        CHECK(second != NULL && strncmp(second, "<title>layer 50 expert 200 ", 27) == 0);
        free(chart);
    }
    CHECK(n < 1024 * 1024); /* was 6.6 MB with a bar per pair */
    /* the top table: MOE_REPORT_TOP_HOT rows in the order computed from the counts, each
     * with its demand, kept, dropped, share and times the layer mean */
    const char *tab = strstr(h, "<table id=\"hot-top\">");
    const char *tab_end = tab != NULL ? strstr(tab, "</table>") : NULL;
    CHECK(tab != NULL && tab_end != NULL);
    if (tab == NULL || tab_end == NULL) {
        free(h);
        return;
    }
    const char *at = tab;
    for (int i = 0; i < MOE_REPORT_TOP_HOT; i++) {
        const big_pair_t *p = &order[i];
        uint64_t d = big_demand(p->layer, p->expert);
        int rank = r->experts[p->layer * r->num_experts + p->expert].rank;
        char row[512];
        snprintf(row, sizeof(row),
                 "<tr><td class=\"num\">%d</td><td class=\"num\">%d</td><td class=\"num\">%d</td>"
                 "<td>%d (%s)</td><td class=\"num\">%" PRIu64 "</td><td class=\"num\">%" PRIu64
                 "</td><td class=\"num\">300</td><td class=\"num\">%.2f%%</td><td class=\"num\">"
                 "%.2f</td></tr>\n",
                 i + 1, p->layer, p->expert, rank, r->ranks[rank].host, d, d - 300,
                 100.0 * p->share, p->share * BIG_EXPERTS);
        const char *found = strstr(at, row);
        CHECK(found != NULL && found < tab_end); /* and after the row before it */
        if (found == NULL || found > tab_end) {
            fprintf(stderr, "  hot-top row %d: missing %s", i + 1, row);
            continue;
        }
        at = found + strlen(row);
    }
    CHECK_INT_EQ(count_substr(tab, "<tr>") - count_substr(tab_end, "<tr>"),
                 MOE_REPORT_TOP_HOT + 1);
    /* the strips: one row per layer, its planted hot expert first with its share, then the
     * layer's next hottest; max/mean and entropy from the counts */
    const char *strips = strstr(h, "<table id=\"hot-layers\">");
    const char *strips_end = strips != NULL ? strstr(strips, "</table>") : NULL;
    CHECK(strips != NULL && strips_end != NULL);
    int rows_ok = 0;
    for (int l = 0; strips != NULL && strips_end != NULL && l < BIG_LAYERS; l++) {
        uint64_t sum = layer_sum(r, l), hot = big_demand(l, big_hot(l));
        double bits = 0.0;
        int second = -1;
        for (int e = 0; e < BIG_EXPERTS; e++) {
            double p = (double)big_demand(l, e) / (double)sum;
            bits -= p * log2(p);
            if (e != big_hot(l) && (second < 0 || big_demand(l, e) > big_demand(l, second))) {
                second = e;
            }
        }
        char row[256], chip[128], chip2[128];
        snprintf(row, sizeof(row),
                 "<tr><td class=\"num\">%d</td><td class=\"num\">%" PRIu64 "</td><td "
                 "class=\"num\">%.2f</td><td class=\"num\">%.3f</td><td class=\"num\">%.3f</td>"
                 "<td><span class=\"chip",
                 l, sum, (double)hot * BIG_EXPERTS / (double)sum, bits, bits / 8.0);
        snprintf(chip, sizeof(chip), "\">%d <b>%.1f%%</b></span><span", big_hot(l),
                 100.0 * (double)hot / (double)sum);
        snprintf(chip2, sizeof(chip2), "\">%d <b>%.1f%%</b></span>", second,
                 100.0 * (double)big_demand(l, second) / (double)sum);
        const char *found = strstr(strips, row);
        const char *line_end = found != NULL ? strstr(found, "</tr>") : NULL;
        const char *c1 = found != NULL ? strstr(found, chip) : NULL;
        const char *c2 = c1 != NULL ? strstr(c1, chip2) : NULL;
        bool ok = found != NULL && found < strips_end && c1 != NULL && c1 < line_end &&
                  c2 != NULL && c2 < line_end &&
                  count_substr(found, "<span class=\"chip") -
                          count_substr(line_end, "<span class=\"chip") ==
                      MOE_REPORT_STRIP_EXPERTS;
        rows_ok += ok;
        if (!ok) {
            fprintf(stderr, "  hot-layers layer %d: want %s ... %s ... %s\n", l, row, chip, chip2);
        }
    }
    CHECK_INT_EQ(rows_ok, BIG_LAYERS);
    /* well formed as far as the new parts go: every element opened is closed */
    CHECK_INT_EQ(count_substr(h, "<tr>"), count_substr(h, "</tr>"));
    CHECK_INT_EQ(count_substr(h, "<table"), count_substr(h, "</table>"));
    CHECK_INT_EQ(count_substr(h, "<span"), count_substr(h, "</span>"));
    CHECK(strstr(h, "</html>") != NULL);
    free(h);
}

static void check_big_json_text(const moe_report_t *r, const big_pair_t *order)
{
    json_t *doc = load_summary(r);
    int good = 0;
    for (int l = 0; doc != NULL && l < BIG_LAYERS; l++) {
        char path[64];
        snprintf(path, sizeof(path), "layers.%d.routing.hottest_expert", l);
        double e = jnum(doc, path);
        snprintf(path, sizeof(path), "layers.%d.routing.hottest_share", l);
        double s = jnum(doc, path);
        good += e == big_hot(l) && e == layer_argmax(r, l) &&
                fabs(s - (double)big_demand(l, big_hot(l)) / (double)layer_sum(r, l)) < 1e-8;
    }
    CHECK_INT_EQ(good, BIG_LAYERS);
    for (int i = 0; doc != NULL && i < MOE_REPORT_TOP_HOT_JSON; i++) {
        char path[64];
        snprintf(path, sizeof(path), "routing.top.%d.layer", i);
        CHECK_NEAR(jnum(doc, path), order[i].layer, 0);
        snprintf(path, sizeof(path), "routing.top.%d.expert", i);
        CHECK_NEAR(jnum(doc, path), order[i].expert, 0);
        snprintf(path, sizeof(path), "routing.top.%d.share", i);
        CHECK_NEAR(jnum(doc, path), order[i].share, 1e-8); /* %.9g */
    }
    CHECK_INT_EQ(moe_json_count(moe_json_path(doc, "routing.top")), MOE_REPORT_TOP_HOT_JSON);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "routing.file"), ""),
                 "/data/deepseek.safetensors") == 0);
    json_decref(doc);
    char *t = slurp(r->run_dir, "summary.txt", NULL);
    for (int i = 0; i < MOE_REPORT_TOP_HOT_TEXT; i++) {
        const big_pair_t *p = &order[i];
        char want[160];
        snprintf(want, sizeof(want), "  %2d  %5d  %6d  %4d  %12" PRIu64 "  %13.1f%%  %12.2f\n",
                 i + 1, p->layer, p->expert,
                 r->experts[p->layer * BIG_EXPERTS + p->expert].rank,
                 big_demand(p->layer, p->expert), 100.0 * p->share, p->share * BIG_EXPERTS);
        has(t, want, "summary.txt");
    }
    has(t, "entropy of the experts' shares, mean over 60 layers: ", "summary.txt");
    free(t);
}

/* summary.json, summary.txt and report.html of the 256 x 60 fixture into root/name (the
 * other files are not read here). */
static fixture_t *big_written(const char *root, const char *name)
{
    shape_t s = {3, BIG_LAYERS, BIG_EXPERTS, false, 1000.0, NULL, NULL};
    fixture_t *fx = fx_make(&s);
    CHECK(fx != NULL);
    if (fx == NULL) {
        return NULL;
    }
    edit_big(fx);
    moe_error_t err;
    bool ok = make_dir(root, name, fx->rep.run_dir, sizeof(fx->rep.run_dir));
    ok = ok && moe_report_write_json(&fx->rep, &err) == MOE_OK;
    ok = ok && moe_report_write_summary(&fx->rep, &err) == MOE_OK;
    ok = ok && moe_report_write_html(&fx->rep, &err) == MOE_OK;
    CHECK(ok);
    if (!ok) {
        fprintf(stderr, "  %s: %s\n", name, err.msg);
        fx_free(fx);
        return NULL;
    }
    return fx;
}

static void test_big(const char *root)
{
    fixture_t *fx = big_written(root, "big");
    if (fx == NULL) {
        return;
    }
    big_pair_t order[BIG_LAYERS];
    big_order(&fx->rep, order);
    CHECK(order[0].layer == 59); /* the planted order: the largest hot expert leads */
    check_big_html(&fx->rep, order);
    check_big_json_text(&fx->rep, order);
    fx_drop(fx);
}

/* The threshold: 1024 cells keep the heat maps, 1025 and more get the tables. */
static void test_threshold(const char *root)
{
    static const int shapes[3][2] = {{16, 64}, {1, 1024}, {17, 64}};
    for (int i = 0; i < 3; i++) {
        shape_t s = {3, shapes[i][0], shapes[i][1], false, 1000.0, NULL, NULL};
        fixture_t *fx = fx_make(&s);
        CHECK(fx != NULL);
        char name[32];
        moe_error_t err;
        snprintf(name, sizeof(name), "cells%d", i);
        if (fx == NULL || !make_dir(root, name, fx->rep.run_dir, sizeof(fx->rep.run_dir))) {
            fx_free(fx);
            continue;
        }
        CHECK_INT_EQ(moe_report_write_html(&fx->rep, &err), MOE_OK);
        char *h = slurp(fx->rep.run_dir, "report.html", NULL);
        bool maps = (int64_t)s.layers * s.experts <= MOE_REPORT_HEATMAP_MAX_CELLS;
        CHECK_INT_EQ(count_substr(h, "<svg id=\"chart-demand\""), maps);
        CHECK_INT_EQ(count_substr(h, "<table id=\"hot-top\">"), !maps);
        CHECK_INT_EQ(count_substr(h, "<table id=\"hot-layers\">"), !maps);
        free(h);
        fx_drop(fx);
    }
}

/* Past the cell limit, a layer whose demand is unknown (a routing rank not profiled or lost:
 * the merge leaves its counts 0) gets a strip of '-' and the reason, not "0 choices, no
 * choice recorded"; the layers around it keep their figures. */
static void test_strip_unknown(const char *root)
{
    shape_t s = {3, 17, 64, false, 1000.0, NULL, NULL}; /* 1088 cells: the tables */
    fixture_t *fx = fx_make(&s);
    CHECK(fx != NULL);
    moe_error_t err;
    if (fx == NULL || !make_dir(root, "strip_unknown", fx->rep.run_dir,
                                sizeof(fx->rep.run_dir))) {
        fx_free(fx);
        return;
    }
    moe_rep_layer_t *y = &fx->rep.layers[1];
    y->demand_unknown = true;
    memset(y->demand, 0, sizeof(uint64_t) * (size_t)s.experts);
    memset(y->dropped, 0, sizeof(uint64_t) * (size_t)s.experts);
    CHECK_INT_EQ(moe_report_write_html(&fx->rep, &err), MOE_OK);
    char *h = slurp(fx->rep.run_dir, "report.html", NULL);
    const char *strips = h != NULL ? strstr(h, "<table id=\"hot-layers\">") : NULL;
    const char *end = strips != NULL ? strstr(strips, "</table>") : NULL;
    CHECK(strips != NULL && end != NULL);
    char *table = strips != NULL && end != NULL ? strndup(strips, (size_t)(end - strips)) : NULL;
    has(table, "<tr><td class=\"num\">1</td><td class=\"num\">-</td><td class=\"num\">-</td><td "
               "class=\"num\">-</td><td class=\"num\">-</td><td>unknown (a routing rank not "
               "profiled or lost)</td></tr>\n<tr><td class=\"num\">2</td>", "hot-layers");
    CHECK(table != NULL && strstr(table, "no choice recorded") == NULL);
    const char *zero = "<tr><td class=\"num\">1</td><td class=\"num\">0</td>";
    CHECK(table != NULL && strstr(table, zero) == NULL);
    char row[96];
    snprintf(row, sizeof(row), "<tr><td class=\"num\">0</td><td class=\"num\">%" PRIu64
             "</td><td class=\"num\">", layer_sum(&fx->rep, 0));
    has(table, row, "hot-layers");
    CHECK_INT_EQ(count_substr(table, "<tr>"), 1 + s.layers);
    free(table);
    free(h);
    fx_drop(fx);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--demo") == 0) {
        mkdir(argv[2], 0755);
        fixture_t *fx = big_written(argv[2], "wide");
        fx_free(fx);
        return fx != NULL ? 0 : 1;
    }
    char root[] = "/tmp/moed_test_report_routing_XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_counts();
    test_parse();
    test_small(root);
    test_big(root);
    test_threshold(root);
    test_strip_unknown(root);
    rmdir(root);
    return moe_test_finish("test_report_routing");
}
