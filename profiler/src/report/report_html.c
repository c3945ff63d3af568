/* report.html: one self-contained page (inline CSS and SVG, no script, nothing fetched)
 * with the run facts, the findings and the charts:
 *   chart-demand, chart-load, chart-dropped
 *                  expert load per layer (heatmaps: demand, kept, dropped); past
 *                  MOE_REPORT_HEATMAP_MAX_CELLS (layer, expert) cells, instead: hot-top (the
 *                  hottest pairs by share of their layer) and hot-layers (a strip per layer:
 *                  its hottest experts, max/mean, entropy), readable at 256 x 60
 *   chart-latency  latency per expert (p50 bars, p90 ticks, p99 dots; ms)
 *   chart-comm     rank-to-rank volume (heatmap, MB)
 *   chart-memory   RSS (and device memory) over time per rank (MiB against s)
 *   chart-steps    step time per rank split into compute / exchange / idle / designed
 *                  wait / other (ms per step), labelled with the step time summary.txt prints
 * After the charts: the exchange hidden behind expert compute per rank (table) and the
 * load balance per layer (table). Charts are sized from the data: cells shrink with the
 * number of experts or ranks (down to 8 px, then experts wrap into rows: none is drawn past
 * the width), axis labels are thinned so they never overlap, and every cell
 * or bar has a hover title with its exact figures. All text from the run (hosts, paths) is HTML-escaped. */
#include "report/report.h"
#include "report/html_style.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HTML_W 1200         /* drawing width of every chart, px */
#define HTML_MB 1e6         /* MB = 10^6 bytes */
#define HTML_MIB 1048576.0  /* MiB = 2^20 bytes */
#define HTML_COMM_MAX 128   /* ranks; a larger matrix is not drawn (see comm.csv) */
#define HTML_MEM_POINTS 600 /* points per memory line, peaks kept */

/* the sequential palette (report/html_style.h), as numbers */
#define HTML_SEQ_HEX(h) 0x##h,
static const unsigned html_seq[9] = {MOE_HTML_SEQ_PALETTE(HTML_SEQ_HEX)};
/* Tableau 10 for categories (ranks). */
static const unsigned html_cat[10] = {0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                      0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0xbab0ac};
/* The step bar's segments: idle (imbalance) and the designed wait in their own colours. */
#define HTML_SPLIT 5
static const char *const html_split_colour[HTML_SPLIT] = {"#4e79a7", "#f28e2b", "#bab0ac",
                                                          "#76b7b2", "#e9e4dc"};
static const char *const html_split_name[HTML_SPLIT] = {"compute", "exchange", "idle",
                                                        "designed wait", "other"};

/* ---- text helpers ---------------------------------------------------------------- */

static void html_put(FILE *f, const char *s)
{
    for (; s != NULL && *s != '\0'; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

static const char *html_host(const moe_report_t *r, int rank)
{
    return rank >= 0 && rank < r->world_size ? r->ranks[rank].host : "?";
}

/* A colour of the sequential palette for t in [0, 1]. */
static void html_seq_colour(double t, char out[8])
{
    t = !(t > 0.0) ? 0.0 : t > 1.0 ? 1.0 : t;
    double x = t * 8.0;
    int i = x >= 8.0 ? 7 : (int)x;
    double u = x - i;
    unsigned a = html_seq[i], b = html_seq[i + 1], rgb = 0;
    for (int sh = 16; sh >= 0; sh -= 8) {
        double ca = (a >> sh) & 0xff, cb = (b >> sh) & 0xff;
        rgb |= (unsigned)lround(ca + (cb - ca) * u) << sh;
    }
    snprintf(out, 8, "#%06x", rgb & 0xffffffu);
}

static void html_cat_colour(int i, char out[8])
{
    snprintf(out, 8, "#%06x", html_cat[(i % 10 + 10) % 10]);
}

/* A round tick step giving about `target` ticks up to max. */
static double html_nice_step(double max, int target)
{
    if (!(max > 0.0)) {
        return 1.0;
    }
    double raw = max / target, mag = pow(10.0, floor(log10(raw))), n = raw / mag;
    double step = n <= 1.0 ? 1.0 : n <= 2.0 ? 2.0 : n <= 2.5 ? 2.5 : n <= 5.0 ? 5.0 : 10.0;
    return step * mag;
}

/* A tick label with as many decimals as the step needs. */
static void html_tick(double v, double step, char *buf, size_t n)
{
    int dec = 0;
    while (dec < 6 && fabs(step * pow(10.0, dec) - round(step * pow(10.0, dec))) > 1e-6) {
        dec++;
    }
    snprintf(buf, n, "%.*f", dec, fabs(v) < step * 1e-6 ? 0.0 : v); /* no "-0.0" */
}

/* Short numbers for cells: 987, 12.3k, 4.56M. */
static void html_compact(double v, char *buf, size_t n)
{
    if (v < 1000.0) {
        int dec = v == floor(v) ? 0 : v < 10.0 ? 2 : v < 100.0 ? 1 : 0;
        snprintf(buf, n, "%.*f", dec, v);
    } else if (v < 1e6) {
        snprintf(buf, n, "%.1fk", v / 1e3);
    } else if (v < 1e9) {
        snprintf(buf, n, "%.1fM", v / 1e6);
    } else {
        snprintf(buf, n, "%.1fG", v / 1e9);
    }
}

/* Every how many labels to draw so neighbours are at least `min_px` apart. */
static int html_label_every(double slot, double min_px)
{
    static const int steps[] = {1,  2,  4,  5,   8,   10,  16,  20,  25,
                                32, 50, 64, 100, 128, 256, 512, 1024};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (steps[i] * slot >= min_px) {
            return steps[i];
        }
    }
    return 2048;
}

static void html_svg_open(FILE *f, const char *id, int w, int h, const char *label)
{
    fprintf(f,
            "<svg id=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
            "aria-label=\"",
            id, w, h, w, h);
    html_put(f, label);
    fputs("\">\n", f);
}

static void html_text(FILE *f, double x, double y, const char *anchor, const char *extra,
                      const char *text)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s>", x, y, anchor,
            extra[0] ? " " : "", extra);
    html_put(f, text);
    fputs("</text>\n", f);
}

/* A horizontal colour legend for a sequential scale from 0 to max. */
static void html_legend(FILE *f, const char *grad_id, double x, double y, double max,
                        const char *unit)
{
    char buf[32];
    fprintf(f, "<defs><linearGradient id=\"%s\">", grad_id);
    for (int i = 0; i < 9; i++) {
        fprintf(f, "<stop offset=\"%d%%\" stop-color=\"#%06x\"/>", i * 100 / 8, html_seq[i]);
    }
    fprintf(f,
            "</linearGradient></defs>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"240\" height=\"12\" "
            "fill=\"url(#%s)\" stroke=\"#999\"/>\n",
            x, y, grad_id);
    html_text(f, x, y + 26, "start", "", "0");
    html_compact(max, buf, sizeof(buf));
    html_text(f, x + 240, y + 26, "end", "", buf);
    html_text(f, x + 250, y + 11, "start", "", unit);
}

/* A round axis top at or above max, and its tick step. */
static double html_nice_max(double max, double *step)
{
    *step = html_nice_step(max, 5);
    double top = ceil(max / *step - 1e-9) * *step;
    return top > 0.0 ? top : *step;
}

/* A vertical value axis at x from y0 (value 0) up to y0 - h (value max, a nice max from
 * html_nice_max): ticks, grid lines across w, and the rotated unit title. */
static void html_y_axis(FILE *f, double x, double y0, double h, double w, double max, double step,
                        const char *title)
{
    char buf[32];
    for (int i = 0; i * step <= max * 1.0001; i++) {
        double v = i * step, y = y0 - h * v / max;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", x, y,
                x + w, y);
        html_tick(v, step, buf, sizeof(buf));
        html_text(f, x - 6, y + 4, "end", "", buf);
    }
    fprintf(
        f,
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">",
        x - 50, y0 - h / 2, x - 50, y0 - h / 2);
    html_put(f, title);
    fputs("</text>\n", f);
}

/* Labels first..first+n-1 centred in slots of width `slot` from x0, thinned so they never
 * touch. */
static void html_x_labels(FILE *f, double x0, double slot, int first, int n, double y)
{
    char buf[16];
    int every = html_label_every(slot, 26.0);
    for (int i = 0; i < n; i += every) {
        snprintf(buf, sizeof(buf), "%d", first + i);
        html_text(f, x0 + slot * (i + 0.5), y, "middle", "", buf);
    }
}

static double html_clamp(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- page head, facts, findings -------------------------------------------------- */

static const char html_css[] = MOE_HTML_CSS;

static void html_head(FILE *f, const moe_report_t *r)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>moed "
          "profile: ",
          f);
    html_put(f, r->run_dir);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>moed profile</h1>\n", html_css);
    if (r->interrupted) {
        char of[48] = ""; /* workload.steps: 0 has no total */
        if (r->steps_planned > 0) {
            snprintf(of, sizeof(of), " of %lld", (long long)r->steps_planned);
        }
        fprintf(f, "<div class=\"partial\">INTERRUPTED: stopped by a signal after %lld%s "
                   "steps.</div>\n", (long long)r->steps_run, of);
    }
    if (r->all_warmup) {
        fprintf(f, "<div class=\"partial\">NOTHING RECORDED: all %lld step%s were warm-up "
                   "(profiler.warmup_steps %lld); run more steps than that to profile.</div>\n",
                (long long)r->steps_run, r->steps_run == 1 ? "" : "s",
                (long long)r->cfg->prof_warmup_steps);
    }
    if (r->partial) {
        fputs("<div class=\"partial\">PARTIAL: missing ", f);
        html_put(f, r->missing[0] ? r->missing : "some ranks' records");
        fputs(". The figures cover only the ranks whose records reached rank 0.</div>\n", f);
    }
}

static void html_fact(FILE *f, const char *key, const char *value)
{
    fprintf(f, "<tr><th>%s</th><td>", key);
    html_put(f, value);
    fputs("</td></tr>\n", f);
}

/* Expert ids as ranges ("0-3, 8") into buf. */
static void html_id_ranges(const int32_t *ids, int n, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < cap;) {
        int j = i;
        while (j + 1 < n && ids[j + 1] == ids[j] + 1) {
            j++;
        }
        int k = j > i ? snprintf(buf + at, cap - at, "%s%d-%d", i ? ", " : "", ids[i], ids[j])
                      : snprintf(buf + at, cap - at, "%s%d", i ? ", " : "", ids[i]);
        at += k > 0 ? (size_t)k : 0;
        i = j + 1;
    }
}

static void html_placement(FILE *f, const moe_report_t *r)
{
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    char buf[512];
    if (ids == NULL) {
        return;
    }
    fputs("<tr><th>placement</th><td>", f);
    for (int k = 0; k < r->world_size; k++) {
        int n = moe_cfg_experts_of_rank(r->cfg, k, ids);
        html_id_ranges(ids, n, buf, sizeof(buf));
        fprintf(f, "%srank %d (", k ? "<br>" : "", k);
        html_put(f, html_host(r, k));
        fprintf(f, "): %s", n > 0 ? "experts " : "no experts");
        html_put(f, buf);
        if (r->cfg->routing == MOE_ROUTING_MASTER && k == r->cfg->master_rank) {
            fputs(" &mdash; routes every token", f);
        }
        if (!r->ranks[k].present) {
            fputs(r->ranks[k].profiled ? " <b>[records missing]</b>" : " [not profiled]", f);
        }
    }
    fputs("</td></tr>\n", f);
    free(ids);
}

/* Where the expert choices came from: the router, or the trace replayed. */
static void html_routing_source(FILE *f, const moe_report_t *r)
{
    moe_report_routing_src_t *src = malloc(sizeof(*src));
    if (src == NULL) {
        return;
    }
    moe_report_routing_parse(r->routing_source, src);
    html_fact(f, "routing source", strcmp(src->kind, "router") == 0
                                       ? "router (the gate chose each token's experts)"
                                       : src->detail);
    free(src);
}

static void html_facts(FILE *f, const moe_report_t *r)
{
    const moe_config_t *c = r->cfg;
    char buf[512];
    fputs("<table class=\"facts\">\n", f);
    snprintf(buf, sizeof(buf), "%s (build %s)", r->version, r->build_id);
    html_fact(f, "moed", buf);
    html_fact(f, "started", r->started_at);
    html_fact(f, "report folder", r->run_dir);
    snprintf(buf, sizeof(buf), "%d ranks on %d host%s", r->world_size, r->num_hosts,
             r->num_hosts == 1 ? "" : "s");
    html_fact(f, "world", buf);
    html_placement(f, r);
    snprintf(buf, sizeof(buf),
             "%" PRId64 " layers x %" PRId64 " experts, top-%" PRId64 ", hidden %" PRId64
             ", ffn %" PRId64 ", %s, capacity factor %g",
             c->num_layers, c->num_experts, c->top_k, c->hidden_dim, c->ffn_dim,
             moe_cfg_activation_name(c->activation), c->capacity_factor);
    html_fact(f, "model", buf);
    const char *kind = c->device == MOE_DEVICE_CUDA ? "cuda" : "cpu";
    bool named = r->device[0] != '\0' && strcmp(r->device, kind) != 0;
    snprintf(buf, sizeof(buf),
             "routing %s, transport %s, device %s%s%.63s%s, BLAS %s (%" PRId64
             " thread%s per rank)",
             c->routing == MOE_ROUTING_SYMMETRIC ? "symmetric" : "master", r->transport, kind,
             named ? " (" : "", named ? r->device : "", named ? ")" : "", r->blas, c->threads,
             c->threads == 1 ? "" : "s");
    html_fact(f, "runtime", buf);
    html_routing_source(f, r);
    if (r->chunks > 0) {
        snprintf(buf, sizeof(buf), "%d (runtime.chunks; %s)", r->chunks,
                 r->chunks > 1 ? "one chunk's exchange overlaps another's expert compute"
                               : "exchange and expert compute do not overlap");
    } else {
        snprintf(buf, sizeof(buf), "not recorded");
    }
    html_fact(f, "chunks", buf);
    if (r->all_warmup) {
        snprintf(buf, sizeof(buf),
                 "%" PRId64 " run of %" PRId64 " tokens; none recorded: all steps were warm-up "
                 "(profiler.warmup_steps %" PRId64 ")",
                 r->steps_run, r->tokens_per_step, c->prof_warmup_steps);
    } else {
        snprintf(buf, sizeof(buf),
                 "%" PRId64 " run of %" PRId64 " tokens; %" PRId64 " recorded in %d window%s",
                 r->steps_run, r->tokens_per_step, r->recorded_steps, r->windows,
                 r->windows == 1 ? "" : "s");
    }
    html_fact(f, "steps", buf);
    snprintf(buf, sizeof(buf), "%.1f tokens/s (%.3f s for all steps on rank 0)", r->tokens_per_s,
             r->run_s);
    html_fact(f, "throughput", buf);
    snprintf(buf, sizeof(buf), "skew max %.1f us, uncertainty max +/- %.1f us, drift max %.1f us",
             r->clock_skew_max_ns / 1e3, r->clock_uncertainty_max_ns / 1e3,
             r->clock_drift_max_ns / 1e3);
    html_fact(f, "clocks", buf);
    fputs("</table>\n", f);
}

static void html_findings(FILE *f, const moe_report_t *r)
{
    moe_report_findings_t x;
    moe_report_find(r, &x);
    fputs("<h2>Findings</h2>\n<ul class=\"findings\">\n", f);
    if (x.hot_layer >= 0) {
        const moe_rep_expert_t *e = &r->experts[x.hot_layer * r->num_experts + x.hot_expert];
        if (x.hot_by_demand) {
            fprintf(f,
                    "<li><b>Hottest expert:</b> layer %d expert %d (rank %d): demand %" PRIu64
                    " choices, <b>%.2fx</b> the mean of its layer; kept %" PRIu64
                    ", dropped %" PRIu64 ".</li>\n",
                    x.hot_layer, x.hot_expert, e->rank, x.hot_demand, x.hot_share, x.hot_kept,
                    x.hot_dropped);
        } else {
            fprintf(f,
                    "<li><b>Hottest expert:</b> layer %d expert %d (rank %d) got %" PRIu64
                    " tokens, <b>%.2fx</b> the mean of its layer (no demand recorded).</li>\n",
                    x.hot_layer, x.hot_expert, e->rank, e->tokens, x.hot_share);
        }
    }
    if (x.dropped_total > 0) {
        fprintf(f,
                "<li><b>Drops:</b> <b>%.1f%%</b> of expert choices were dropped by the capacity "
                "limit (%" PRIu64 " of %" PRIu64 "); most:",
                100.0 * x.drop_share, x.dropped_total, x.demand_total);
        for (int i = 0; i < x.num_drops; i++) {
            fprintf(f, "%s layer %d expert %d (%" PRIu64 " of %" PRIu64 ")", i ? "," : "",
                    x.drop_layer[i], x.drop_expert[i], x.drop_count[i], x.drop_demand[i]);
        }
        fputs(".</li>\n", f);
    }
    if (x.slow_layer >= 0) {
        fprintf(f,
                "<li><b>Slowest expert:</b> layer %d expert %d ran at %.2f GFLOP/s, "
                "<b>%.2fx</b> the median expert; its p99 call took %.3f ms.</li>\n",
                x.slow_layer, x.slow_expert, x.slow_gflops, x.slow_vs_median, x.slow_p99_ns / 1e6);
    }
    if (x.straggler_rank >= 0) {
        const moe_rep_rank_t *k = &r->ranks[x.straggler_rank];
        fprintf(f, "<li><b>Straggler rank:</b> rank %d (", x.straggler_rank);
        html_put(f, k->host);
        fprintf(f, ") spends %.3f ms per step in its experts, <b>%.2fx</b> the mean of the "
                   "ranks with experts (a straggler is named from %.2fx).</li>\n",
                moe_report_expert_per_step_ns(k) / 1e6, x.straggler_ratio,
                MOE_STRAGGLER_MIN_RATIO);
    } else {
        fputs("<li><b>Straggler:</b> ", f);
        moe_report_print_straggler(&x, f); /* numbers and fixed words only: nothing to escape */
        fputs(".</li>\n", f);
    }
    if (x.exchange_wait_unknown != NULL) {
        fprintf(f, "<li><b>Exchange:</b> <b>%.1f%%</b> of step time is spent in the exchange, "
                   "moving bytes and waiting (%s: the routing rank's designed wait is unknown), "
                   "and <b>%.1f%%</b> waiting in the exchange for slower ranks (mean over the "
                   "ranks present).</li>\n",
                100.0 * x.exchange_share, x.exchange_wait_unknown, 100.0 * x.idle_share);
    } else {
        fprintf(f,
            "<li><b>Exchange:</b> <b>%.1f%%</b> of step time goes to moving bytes and "
            "<b>%.1f%%</b> to waiting in the exchange for slower ranks (load imbalance); the "
            "routing rank's designed wait, not imbalance, is <b>%.1f%%</b> (mean over the ranks "
            "present).</li>\n",
            100.0 * x.exchange_share, 100.0 * x.idle_share, 100.0 * x.structural_wait_share);
    }
    if (x.idle_most_rank >= 0 && x.idle_most_share > 0.0005) {
        fprintf(f, "<li><b>Most imbalance:</b> rank %d (", x.idle_most_rank);
        html_put(f, html_host(r, x.idle_most_rank)); /* hosts are the run's text: escaped */
        fprintf(f, ") waited <b>%.1f%%</b> of its step for rank %d (",
                100.0 * x.idle_most_share, x.idle_most_for);
        html_put(f, html_host(r, x.idle_most_for));
        fputs(").</li>\n", f);
    }
    if (isfinite(x.hidden_share)) {
        fprintf(f,
                "<li><b>Overlap:</b> <b>%.1f%%</b> of exchange time was hidden behind expert "
                "compute (runtime.chunks %d; summed over the ranks present).</li>\n",
                100.0 * x.hidden_share, r->chunks);
    }
    fputs("</ul>\n", f);
}

/* ---- chart 1: expert load heatmaps (demand, kept, dropped) ----------------------- */

/* Experts per row of a chart: all of them when they fit `avail` px at `min_slot` px each,
 * else rows of equal length, so every expert lies inside the drawing (256 experts at 8 px
 * do not fit 1200 px: two rows of 128). */
static int html_per_row(int ne, double avail, double min_slot)
{
    int fit = (int)(avail / min_slot);
    fit = fit > 0 ? fit : 1;
    int rows = (ne + fit - 1) / fit;
    return (ne + rows - 1) / rows;
}

typedef enum { HTML_MAP_KEPT = 0, HTML_MAP_DEMAND = 1, HTML_MAP_DROPPED = 2 } html_map_t;

static const char *const html_map_id[3] = {"chart-load", "chart-demand", "chart-dropped"};
static const char *const html_map_name[3] = {"kept", "demand", "dropped"};

static uint64_t html_u64_at(const uint64_t *v, int i)
{
    return v != NULL ? v[i] : 0;
}

/* Kept: the tokens each expert computed (the router's count where its host sent nothing);
 * demand and dropped: the routing ranks' counts. */
static uint64_t html_map_value(const moe_report_t *r, html_map_t kind, int l, int e)
{
    const moe_rep_layer_t *y = &r->layers[l];
    return kind == HTML_MAP_DEMAND    ? html_u64_at(y->demand, e)
           : kind == HTML_MAP_DROPPED ? html_u64_at(y->dropped, e)
                                      : r->experts[l * r->num_experts + e].tokens;
}

/* Whether a cell's figure is known: demand and dropped where every routing rank's records
 * came, kept where the expert's tokens are known. */
static bool html_map_known(const moe_report_t *r, html_map_t kind, int l, int e)
{
    return kind == HTML_MAP_KEPT ? !r->experts[l * r->num_experts + e].tokens_unknown
                                 : !r->layers[l].demand_unknown;
}

/* The hatched grey of a map's unknown cells, as a pattern named unknown-<chart id>. */
static void html_unknown_pattern(FILE *f, html_map_t kind)
{
    fprintf(f,
            "<defs><pattern id=\"unknown-%s\" width=\"6\" height=\"6\" "
            "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
            "<rect width=\"6\" height=\"6\" fill=\"#e4e4e4\"/><line x1=\"0\" y1=\"0\" "
            "x2=\"0\" y2=\"6\" stroke=\"#bdbdbd\" stroke-width=\"2\"/></pattern></defs>\n",
            html_map_id[kind]);
}

/* A cell's fill and outline: the scale's colour of t; hatched grey where unknown (not the
 * colour of 0, which reads "none"); a kept cell from the router's count has a dashed red
 * outline. */
static void html_cell_rect(FILE *f, html_map_t kind, bool known, bool router, double t,
                           double x, double y, double cw, double ch)
{
    char col[40];
    if (known) {
        html_seq_colour(t, col);
    } else {
        snprintf(col, sizeof(col), "url(#unknown-%s)", html_map_id[kind]);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" %s%s>", x,
            y, cw, ch, col,
            router ? "stroke=\"#c0392b\" stroke-width=\"1.2\" stroke-dasharray=\"2 1.5\""
                   : "stroke=\"#fff\" stroke-width=\"0.5\"",
            known ? "" : " class=\"unknown\"");
}

/* One cell; mean = the layer's mean of this map's value (NAN where some of the layer's
 * cells are unknown), max = the colour scale's top. */
static void html_load_cell(FILE *f, const moe_report_t *r, html_map_t kind, int l, int e,
                           double x, double y, double cw, double ch, double mean, double max)
{
    const moe_rep_expert_t *ex = &r->experts[l * r->num_experts + e];
    const moe_rep_layer_t *ly = &r->layers[l];
    uint64_t v = html_map_value(r, kind, l, e);
    bool known = html_map_known(r, kind, l, e);
    double t = (double)v / max;
    char buf[32];
    html_cell_rect(f, kind, known, kind == HTML_MAP_KEPT && ex->router_count, t, x, y, cw, ch);
    fprintf(f, "<title>layer %d expert %d (rank %d, ", l, e, ex->rank);
    html_put(f, html_host(r, ex->rank));
    /* unknown: not every routing rank's records came; kept: nor the host's */
    char demand[32] = "unknown", kept[32] = "unknown", dropped[32] = "unknown";
    if (!ly->demand_unknown) {
        snprintf(demand, sizeof(demand), "%" PRIu64, html_u64_at(ly->demand, e));
        snprintf(dropped, sizeof(dropped), "%" PRIu64, html_u64_at(ly->dropped, e));
    }
    if (!ex->tokens_unknown) {
        snprintf(kept, sizeof(kept), "%" PRIu64, ex->tokens);
    }
    fprintf(f, "): demand %s, kept %s%s, dropped %s; %s", demand, kept,
            ex->router_count ? " (router's count)" : "", dropped, html_map_name[kind]);
    if (!known) {
        fputs(" unknown</title></rect>\n", f);
    } else if (!isfinite(mean)) {
        fputs(" against the layer mean: unknown</title></rect>\n", f);
    } else if (mean > 0.0) {
        fprintf(f, " %.2fx the layer mean</title></rect>\n", (double)v / mean);
    } else { /* 0 in every cell of the layer (no drops): no mean to compare with */
        fputs(": none in the layer, no mean to compare with</title></rect>\n", f);
    }
    if (!known && cw >= 10.0 && ch >= 10.0) {
        html_text(f, x + cw / 2, y + ch / 2 + 4, "middle", "class=\"in\"", "-");
    } else if (known && cw >= 40.0 && ch >= 16.0) {
        html_compact((double)v, buf, sizeof(buf));
        html_text(f, x + cw / 2, y + ch / 2 + 4, "middle",
                  t > 0.55 ? "class=\"in dark\"" : "class=\"in\"", buf);
    }
}

/* One block of experts [e0, e0 + n): a row per layer, from y = top. */
static void html_map_block(FILE *f, const moe_report_t *r, html_map_t kind, int e0, int n,
                           double top, double cw, double ch, double max)
{
    double left = 70;
    char buf[32];
    for (int l = 0; l < r->num_layers; l++) {
        double sum = 0.0;
        bool whole = true;
        for (int e = 0; e < r->num_experts; e++) {
            sum += (double)html_map_value(r, kind, l, e);
            whole = whole && html_map_known(r, kind, l, e);
        }
        for (int e = e0; e < e0 + n; e++) {
            html_load_cell(f, r, kind, l, e, left + (e - e0) * cw, top + l * ch, cw, ch,
                           whole ? sum / r->num_experts : NAN, max);
        }
    }
    int every = html_label_every(ch, 14.0);
    for (int l = 0; l < r->num_layers; l += every) {
        snprintf(buf, sizeof(buf), "layer %d", l);
        html_text(f, left - 8, top + ch * (l + 0.5) + 4, "end", "", buf);
    }
    html_x_labels(f, left, cw, e0, n, top + ch * r->num_layers + 16);
}

static void html_chart_map(FILE *f, const moe_report_t *r, html_map_t kind)
{
    static const char *const what[3] = {
        "kept: tokens each expert computed (choices within the capacity limit)",
        "demand: choices of each expert before the capacity limit (the routing ranks' count)",
        "dropped: choices the capacity limit dropped (demand - kept)"};
    int ne = r->num_experts, nl = r->num_layers;
    double left = 70, top = 8, avail = HTML_W - left - 20, max = 1.0;
    int per = html_per_row(ne, avail, 8.0), blocks = (ne + per - 1) / per;
    double cw = html_clamp(avail / per, 8, 64), ch = html_clamp(cw * 0.7, 22, 36);
    ch = nl * blocks * ch > 900 ? html_clamp(900.0 / (nl * blocks), 3, ch) : ch;
    double bh = ch * nl + 30; /* a block: its layers and its expert labels */
    bool router = false, unknown = false;
    for (int l = 0; l < nl; l++) {
        for (int e = 0; e < ne; e++) {
            bool known = html_map_known(r, kind, l, e);
            max = known ? fmax(max, (double)html_map_value(r, kind, l, e)) : max;
            unknown = unknown || !known;
            router = router || (kind == HTML_MAP_KEPT && r->experts[l * ne + e].router_count);
        }
    }
    fprintf(f, "<p class=\"note\"><b>%s</b>%s%s</p>\n", what[kind],
            router ? "; cells outlined in red dashes are the router's count (their host rank "
                     "was not profiled or its records are missing)"
                   : "",
            !unknown                 ? ""
            : kind == HTML_MAP_KEPT ? "; hatched grey cells with - are unknown (their host rank "
                                      "and a routing rank were not profiled or are missing)"
                                    : "; hatched grey cells with - are unknown (a routing rank "
                                      "was not profiled or its records are missing)");
    html_svg_open(f, html_map_id[kind], HTML_W, (int)(top + blocks * bh + 70),
                  "Heatmap of choices per expert and layer");
    if (unknown) {
        html_unknown_pattern(f, kind);
    }
    for (int b = 0; b < blocks; b++) {
        int e0 = b * per, n = ne - e0 < per ? ne - e0 : per;
        html_map_block(f, r, kind, e0, n, top + b * bh, cw, ch, max);
    }
    html_text(f, left + cw * per / 2, top + blocks * bh + 6, "middle", "", "expert");
    html_legend(f, kind == HTML_MAP_KEPT ? "grad-load" : kind == HTML_MAP_DEMAND ? "grad-demand"
                                                                                 : "grad-dropped",
                left, top + blocks * bh + 24, max, "tokens");
    fputs("</svg>\n", f);
}

/* ---- chart 1 past MOE_REPORT_HEATMAP_MAX_CELLS: the hottest pairs, a strip per layer -- */

/* One pair's hover title: its figures. */
static void html_hot_title(FILE *f, const moe_report_t *r, const moe_report_hot_t *h)
{
    int rank = r->experts[h->layer * r->num_experts + h->expert].rank;
    fprintf(f, "layer %d expert %d (rank %d, ", h->layer, h->expert, rank);
    html_put(f, html_host(r, rank));
    fprintf(f, "): demand %" PRIu64 ", kept %" PRIu64 ", dropped %" PRIu64 "; %.2f%% of the "
               "layer's choices, %.2fx the layer mean", h->demand, h->kept, h->dropped,
            100.0 * h->share, h->x_mean);
}

/* The MOE_REPORT_TOP_HOT hottest (layer, expert) pairs by share of their layer's demand. */
static void html_hot_table(FILE *f, const moe_report_t *r)
{
    moe_report_hot_t top[MOE_REPORT_TOP_HOT];
    int n = moe_report_hottest(r, top, MOE_REPORT_TOP_HOT);
    if (n == 0) {
        fputs("<p class=\"note\">No demand recorded (the routing ranks were not profiled): "
              "the tokens each expert computed are in summary.json.</p>\n", f);
        return;
    }
    fprintf(f, "<h3>The %d hottest experts</h3>\n<p class=\"note\">(layer, expert) pairs by "
               "their share of the layer's choices (demand), most first.</p>\n", n);
    fputs("<table id=\"hot-top\">\n<tr><th class=\"num\">#</th><th class=\"num\">layer</th>"
          "<th class=\"num\">expert</th><th>rank (host)</th><th class=\"num\">demand "
          "(tokens)</th><th class=\"num\">kept</th><th class=\"num\">dropped</th>"
          "<th class=\"num\">share of layer</th><th class=\"num\">x layer mean</th></tr>\n",
          f);
    for (int i = 0; i < n; i++) {
        const moe_report_hot_t *h = &top[i];
        int rank = r->experts[h->layer * r->num_experts + h->expert].rank;
        fprintf(f, "<tr><td class=\"num\">%d</td><td class=\"num\">%d</td><td class=\"num\">"
                   "%d</td><td>%d (", i + 1, h->layer, h->expert, rank);
        html_put(f, html_host(r, rank));
        fprintf(f, ")</td><td class=\"num\">%" PRIu64 "</td><td class=\"num\">%" PRIu64
                   "</td><td class=\"num\">%" PRIu64 "</td><td class=\"num\">%.2f%%</td>"
                   "<td class=\"num\">%.2f</td></tr>\n",
                h->demand, h->kept, h->dropped, 100.0 * h->share, h->x_mean);
    }
    fputs("</table>\n", f);
}

/* One row per layer: its choices, max/mean and entropy of its demand, and its hottest
 * experts as chips "id share", coloured by x layer mean on the scale of the run's hottest. */
static void html_hot_strips(FILE *f, const moe_report_t *r)
{
    moe_report_hot_t best, hot[MOE_REPORT_STRIP_EXPERTS];
    double scale = moe_report_hottest(r, &best, 1) == 1 ? best.x_mean : 1.0;
    fprintf(f, "<h3>Per layer: its %d hottest experts</h3>\n<p class=\"note\">One row per "
               "layer: its choices, max/mean (1 = even) and the entropy of its experts' shares "
               "(bits, and of even: 1 = even, 0 = one expert), then its hottest experts as "
               "<i>expert share</i>, darker = more times the layer mean (the darkest: %.2fx). "
               "Hover for the figures.</p>\n", MOE_REPORT_STRIP_EXPERTS, scale);
    fputs("<table id=\"hot-layers\">\n<tr><th class=\"num\">layer</th><th class=\"num\">"
          "choices</th><th class=\"num\">max/mean</th><th class=\"num\">entropy bits</th>"
          "<th class=\"num\">of even</th><th>hottest experts (share of the layer)</th></tr>\n",
          f);
    for (int l = 0; l < r->num_layers; l++) {
        moe_report_layer_routing_t y;
        moe_report_layer_routing(r, l, &y);
        if (r->layers[l].demand_unknown) {
            fprintf(f, "<tr><td class=\"num\">%d</td><td class=\"num\">-</td><td class="
                       "\"num\">-</td><td class=\"num\">-</td><td class=\"num\">-</td><td>"
                       "unknown (a routing rank not profiled or lost)</td></tr>\n", l);
            continue;
        }
        fprintf(f, "<tr><td class=\"num\">%d</td><td class=\"num\">%" PRIu64 "</td>", l,
                y.choices);
        if (y.choices == 0) {
            fputs("<td class=\"num\">-</td><td class=\"num\">-</td><td class=\"num\">-</td>"
                  "<td>no choice recorded</td></tr>\n", f);
            continue;
        }
        fprintf(f, "<td class=\"num\">%.2f</td><td class=\"num\">%.3f</td><td class=\"num\">"
                   "%.3f</td><td>", y.max_mean, y.entropy_bits,
                isfinite(y.entropy_norm) ? y.entropy_norm : 1.0);
        int n = moe_report_layer_hottest(r, l, hot, MOE_REPORT_STRIP_EXPERTS);
        for (int i = 0; i < n; i++) {
            double t = scale > 0.0 ? hot[i].x_mean / scale : 0.0;
            char col[8];
            html_seq_colour(t, col);
            fprintf(f, "<span class=\"chip%s\" style=\"background:%s\" title=\"",
                    t > 0.55 ? " dark" : "", col);
            html_hot_title(f, r, &hot[i]);
            fprintf(f, "\">%d <b>%.1f%%</b></span>", hot[i].expert, 100.0 * hot[i].share);
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void html_chart_load(FILE *f, const moe_report_t *r)
{
    int64_t cells = (int64_t)r->num_layers * r->num_experts;
    if (cells > MOE_REPORT_HEATMAP_MAX_CELLS) {
        fprintf(f, "<h2>Expert load per layer (tokens over the recorded steps)</h2>\n<p "
                   "class=\"note\">%d layers x %d experts = %lld cells, more than %d: instead "
                   "of a heat map cell per expert, the hottest experts and a strip per layer. "
                   "Demand = the router's choices before the capacity limit; every count is in "
                   "summary.json (<code>layers[]</code>).</p>\n",
                r->num_layers, r->num_experts, (long long)cells, MOE_REPORT_HEATMAP_MAX_CELLS);
        html_hot_table(f, r);
        html_hot_strips(f, r);
        return;
    }
    fputs("<h2>Expert load per layer (tokens over the recorded steps)</h2>\n<p class=\"note\">"
          "Each cell is one expert of one layer; darker = more. Three maps: demand, kept, "
          "dropped. Hover a cell for its figures.</p>\n",
          f);
    html_chart_map(f, r, HTML_MAP_DEMAND);
    html_chart_map(f, r, HTML_MAP_KEPT);
    html_chart_map(f, r, HTML_MAP_DROPPED);
}

/* ---- chart 2: latency per expert ------------------------------------------------- */

static void html_latency_bar(FILE *f, const moe_report_t *r, const moe_rep_expert_t *e, double x,
                             double bw, double y0, double ph, double max)
{
    const moe_hist_t *h = &e->hist;
    if (h->count == 0) { /* unknown, not 0 ms: a dash on the axis */
        fprintf(f, "<g><title>layer %d expert %d (rank %d): latency unknown (%s)</title>",
                e->layer, e->expert, e->rank,
                e->router_count || e->tokens_unknown
                    ? "its host rank (or a copy's) was not profiled or its records are missing"
                    : "no recorded call");
        html_text(f, x + bw / 2, y0 - 4, "middle", "", "-");
        fputs("</g>\n", f);
        return;
    }
    double q[3] = {moe_hist_quantile(h, 0.5) / 1e6, moe_hist_quantile(h, 0.9) / 1e6,
                   moe_hist_quantile(h, 0.99) / 1e6};
    double y[3];
    for (int i = 0; i < 3; i++) {
        y[i] = y0 - ph * html_clamp(q[i] / max, 0.0, 1.0);
    }
    fprintf(f,
            "<g><title>layer %d expert %d (rank %d): p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, "
            "max %.3f ms, %" PRIu64 " calls</title>\n",
            e->layer, e->expert, e->rank, q[0], q[1], q[2], (double)h->max / 1e6, e->calls);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4e79a7\"/>\n", x,
            y[0], bw, y0 - y[0]);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
            x + bw / 2, y[0], x + bw / 2, y[2]);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" "
            "stroke-width=\"2\"/>\n",
            x, y[1], x + bw, y[1]);
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"#e15759\"/>\n</g>\n", x + bw / 2,
            y[2], html_clamp(bw / 3, 2.0, 3.5));
}

static void html_latency_legend(FILE *f, double x, double y)
{
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"#4e79a7\"/>\n", x,
            y - 10);
    html_text(f, x + 18, y, "start", "", "p50 (bar)");
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" "
            "stroke-width=\"2\"/>\n",
            x + 100, y - 4, x + 114, y - 4);
    html_text(f, x + 120, y, "start", "", "p90 (tick)");
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#e15759\"/>\n", x + 210, y - 4);
    html_text(f, x + 220, y, "start", "", "p99 (dot)");
}

/* Past MOE_REPORT_HEATMAP_MAX_CELLS (layer, expert) pairs a bar per pair is unreadable (and
 * was most of a 256 x 60 page): the HTML_LAT_TOP slowest pairs by p99, in one panel. */
#define HTML_LAT_TOP 40

typedef struct html_lat_rank {
    int i;
    double p99;
} html_lat_rank_t;

static int html_lat_cmp(const void *a, const void *b)
{
    const html_lat_rank_t *x = a, *y = b;
    if (x->p99 != y->p99) {
        return x->p99 < y->p99 ? 1 : -1;
    }
    return x->i - y->i;
}

static void html_chart_latency_top(FILE *f, const moe_report_t *r)
{
    int cells = r->num_layers * r->num_experts, n = 0;
    html_lat_rank_t *rank = malloc(sizeof(*rank) * (size_t)(cells > 0 ? cells : 1));
    if (rank == NULL) {
        return;
    }
    for (int i = 0; i < cells; i++) {
        if (r->experts[i].hist.count > 0) {
            rank[n++] = (html_lat_rank_t){i, moe_hist_quantile(&r->experts[i].hist, 0.99) / 1e6};
        }
    }
    qsort(rank, (size_t)n, sizeof(*rank), html_lat_cmp);
    int shown = n < HTML_LAT_TOP ? n : HTML_LAT_TOP;
    double left = 80, slot = (HTML_W - left - 20) / (double)(shown > 0 ? shown : 1), step;
    double ph = 160, top = 24, y0 = top + 20 + ph;
    double max = html_nice_max(shown > 0 && rank[0].p99 > 0.0 ? rank[0].p99 : 1.0, &step);
    char buf[64];
    fprintf(f, "<h2>Latency per expert (ms per forward call)</h2>\n<p class=\"note\">%d layers "
            "x %d experts are too many bars to read: the %d slowest (layer, expert) pairs by "
            "p99, slowest first (every pair's figures: summary.json <code>experts[]</code>); "
            "the line runs from p50 to p99. Hover a bar for all figures.</p>\n",
            r->num_layers, r->num_experts, shown);
    html_svg_open(f, "chart-latency", HTML_W, (int)(y0 + 60),
                  "Latency of the slowest experts: p50, p90, p99 in ms");
    html_latency_legend(f, left, 14);
    html_y_axis(f, left, y0, ph, shown * slot, max, step, "ms");
    for (int k = 0; k < shown; k++) {
        const moe_rep_expert_t *e = &r->experts[rank[k].i];
        html_latency_bar(f, r, e, left + k * slot + slot * 0.2, slot * 0.6, y0, ph, max);
        snprintf(buf, sizeof(buf), "%d.%d", e->layer, e->expert);
        html_text(f, left + k * slot + slot / 2, y0 + 14, "middle", " font-size=\"9\"", buf);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n",
            left, y0, left + shown * slot, y0);
    html_text(f, left + shown * slot / 2, y0 + 32, "middle", "", "layer.expert");
    fputs("</svg>\n", f);
    free(rank);
}

static void html_chart_latency(FILE *f, const moe_report_t *r)
{
    int ne = r->num_experts, nl = r->num_layers;
    if (nl * ne > MOE_REPORT_HEATMAP_MAX_CELLS) {
        html_chart_latency_top(f, r);
        return;
    }
    double left = 80, avail = HTML_W - left - 20;
    int per = html_per_row(ne, avail, 8.0), blocks = (ne + per - 1) / per;
    double slot = html_clamp(avail / per, 8, 64);
    double ph = nl * blocks > 8 ? 90 : 130, panel = ph + 52, top = 24, max = 0.0, step;
    char buf[64];
    for (int i = 0; i < nl * ne; i++) {
        double p99 = moe_hist_quantile(&r->experts[i].hist, 0.99) / 1e6;
        max = p99 > max ? p99 : max;
    }
    max = html_nice_max(max > 0.0 ? max : 1.0, &step);
    fputs("<h2>Latency per expert (ms per forward call)</h2>\n<p class=\"note\">One panel per "
          "layer (and per row of experts when they do not fit one), same scale; the line runs "
          "from p50 to p99; - = unknown (no recorded call). Hover a bar for all figures.</p>\n",
          f);
    html_svg_open(f, "chart-latency", HTML_W, (int)(top + nl * blocks * panel),
                  "Latency per expert: p50, p90, p99 in ms");
    html_latency_legend(f, left, 14);
    for (int p = 0; p < nl * blocks; p++) {
        int l = p / blocks, e0 = (p % blocks) * per, n = ne - e0 < per ? ne - e0 : per;
        double y0 = top + p * panel + 20 + ph;
        if (blocks > 1) {
            snprintf(buf, sizeof(buf), "layer %d, experts %d-%d", l, e0, e0 + n - 1);
        } else {
            snprintf(buf, sizeof(buf), "layer %d", l);
        }
        html_text(f, left + n * slot, y0 - ph - 6, "end", "font-weight=\"600\"", buf);
        html_y_axis(f, left, y0, ph, n * slot, max, step, "ms");
        for (int e = e0; e < e0 + n; e++) {
            html_latency_bar(f, r, &r->experts[l * ne + e], left + (e - e0) * slot + slot * 0.2,
                             slot * 0.6, y0, ph, max);
        }
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", left,
                y0, left + n * slot, y0);
        html_x_labels(f, left, slot, e0, n, y0 + 15);
        html_text(f, left + n * slot / 2, y0 + 30, "middle", "", "expert");
    }
    fputs("</svg>\n", f);
}

/* ---- chart 3: rank-to-rank volume ------------------------------------------------ */

/* The diagonal (a rank's rows to its own experts, never sent) is drawn hatched-grey with
 * its figure, outside the colour scale, so local copies never pass for traffic. */
static void html_comm_cell(FILE *f, const moe_report_t *r, int i, int j, double x, double y,
                           double cs, double max)
{
    size_t at = (size_t)i * (size_t)r->world_size + (size_t)j;
    double mb = (double)r->bytes[at] / HTML_MB, t = i != j ? mb / max : 0.0;
    char col[8], buf[32], wait[96];
    double wait_ms = moe_report_wait_ms(r, i, j);
    if (isfinite(wait_ms)) { /* unknown where rank i's records did not come, not 0 ms */
        snprintf(wait, sizeof(wait), "rank %d waited %.3f ms for rank %d", i, wait_ms, j);
    } else {
        snprintf(wait, sizeof(wait), "rank %d's wait for rank %d: unknown (%s)", i, j,
                 r->ranks[i].profiled ? "its records missing" : "not profiled");
    }
    if (i == j) {
        snprintf(col, sizeof(col), "#d9d9d9");
    } else if (mb > 0.0) {
        html_seq_colour(t, col);
    } else {
        snprintf(col, sizeof(col), "#f2f2f2");
    }
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
            "stroke=\"#fff\"%s><title>rank %d to rank %d%s: %.3f MB in %" PRIu64
            " messages; %s</title></rect>\n",
            x, y, cs, cs, col, i == j ? " class=\"local\"" : "", i, j,
            i == j ? " (local copies: rows to its own experts, not sent)" : "", mb,
            r->msgs != NULL ? r->msgs[at] : 0, wait);
    if (cs >= 36.0 && mb > 0.0) {
        html_compact(mb, buf, sizeof(buf));
        if (i == j) {
            char paren[40];
            snprintf(paren, sizeof(paren), "(%s)", buf);
            html_text(f, x + cs / 2, y + cs / 2 + 4, "middle", "class=\"in\"", paren);
        } else {
            html_text(f, x + cs / 2, y + cs / 2 + 4, "middle",
                      t > 0.55 ? "class=\"in dark\"" : "class=\"in\"", buf);
        }
    }
}

static void html_chart_comm(FILE *f, const moe_report_t *r)
{
    int w = r->world_size;
    moe_report_bytes_t b = moe_report_bytes_split(r);
    fputs("<h2>Bytes rank to rank (MB = 10<sup>6</sup> bytes, over the recorded steps)</h2>\n",
          f);
    fprintf(f,
            "<p class=\"note\">Between ranks <b>%.3f MB</b>; local copies %.3f MB (the grey "
            "diagonal, in brackets: a rank's rows to its own experts, never sent; outside the "
            "colour scale). Row = sender, column = receiver; dispatch and combine both counted. "
            "Hover a cell for messages and wait time.</p>\n",
            (double)b.between_ranks / HTML_MB, (double)b.local / HTML_MB);
    if (w > HTML_COMM_MAX || r->bytes == NULL) {
        html_svg_open(f, "chart-comm", HTML_W, 40, "Rank-to-rank volume");
        html_text(f, 10, 24, "start", "",
                  w > HTML_COMM_MAX ? "Too many ranks to draw the matrix: "
                                      "see comm.csv."
                                    : "No volume recorded.");
        fputs("</svg>\n", f);
        return;
    }
    double cs = html_clamp(640.0 / w, 6, 72), left = 90, top = 44, max = 0.0;
    for (size_t i = 0; i < (size_t)w * (size_t)w; i++) {
        double mb = (double)r->bytes[i] / HTML_MB;
        max = i % ((size_t)w + 1) != 0 && mb > max ? mb : max; /* off the diagonal */
    }
    max = max > 0.0 ? max : 1.0;
    html_svg_open(f, "chart-comm", HTML_W, (int)(top + cs * w + 60),
                  "Heatmap of MB sent from each rank to each other rank");
    for (int i = 0; i < w; i++) {
        for (int j = 0; j < w; j++) {
            html_comm_cell(f, r, i, j, left + j * cs, top + i * cs, cs, max);
        }
    }
    html_text(f, left + cs * w / 2, 14, "middle", "", "to rank (receiver)");
    html_x_labels(f, left, cs, 0, w, top - 8);
    int every = html_label_every(cs, 14.0);
    char buf[16];
    for (int i = 0; i < w; i += every) {
        snprintf(buf, sizeof(buf), "%d", i);
        html_text(f, left - 8, top + cs * (i + 0.5) + 4, "end", "", buf);
    }
    fprintf(f,
            "<text x=\"30\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 30 %.1f)\">"
            "from rank (sender)</text>\n",
            top + cs * w / 2, top + cs * w / 2);
    html_legend(f, "grad-comm", left, top + cs * w + 20, max, "MB");
    fputs("</svg>\n", f);
}

/* ---- chart 4: memory over time --------------------------------------------------- */

typedef struct html_box {
    double x0, y0, w, h;     /* plot area: x0 left, y0 bottom */
    double tmin, tmax, vmax; /* data ranges: seconds, MiB */
} html_box_t;

static bool html_mem_range(const moe_report_t *r, html_box_t *b)
{
    bool any = false;
    for (int k = 0; k < r->world_size; k++) {
        const moe_rep_rank_t *rk = &r->ranks[k];
        for (int i = 0; rk->present && rk->mem != NULL && i < rk->num_mem; i++) {
            double t = (double)rk->mem[i].t_ns / 1e9;
            double v = (double)(rk->mem[i].rss_bytes > rk->mem[i].dev_bytes ? rk->mem[i].rss_bytes
                                                                            : rk->mem[i].dev_bytes);
            b->tmin = !any || t < b->tmin ? t : b->tmin;
            b->tmax = !any || t > b->tmax ? t : b->tmax;
            b->vmax = !any || v / HTML_MIB > b->vmax ? v / HTML_MIB : b->vmax;
            any = true;
        }
    }
    return any;
}

#define HTML_MEM_POINT_CHARS 24 /* "1234.5,123.4 " with room to spare */

/* The points of one series for a polyline (into buf, HTML_MEM_POINTS * HTML_MEM_POINT_CHARS
 * + 1 bytes), at most HTML_MEM_POINTS points: each the peak of its window, so short spikes
 * stay visible. */
static void html_mem_points(const moe_rep_rank_t *rk, const html_box_t *b, bool dev, char *buf)
{
    int n = rk->num_mem, win = (n + HTML_MEM_POINTS - 1) / HTML_MEM_POINTS;
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i += win) {
        int best = i;
        for (int j = i; j < i + win && j < n; j++) {
            uint64_t a = dev ? rk->mem[j].dev_bytes : rk->mem[j].rss_bytes;
            uint64_t c = dev ? rk->mem[best].dev_bytes : rk->mem[best].rss_bytes;
            best = a > c ? j : best;
        }
        double t = (double)rk->mem[best].t_ns / 1e9;
        double v = (double)(dev ? rk->mem[best].dev_bytes : rk->mem[best].rss_bytes) / HTML_MIB;
        int k = snprintf(buf + at, HTML_MEM_POINT_CHARS, "%.1f,%.1f ",
                         b->x0 + b->w * (t - b->tmin) / (b->tmax - b->tmin),
                         b->y0 - b->h * v / b->vmax);
        at += k > 0 && k < HTML_MEM_POINT_CHARS ? (size_t)k : 0;
    }
}

/* One series; `of` > 1 lines drawn the same (equal series): this one is the `nth`, dashed
 * so that each shows in turn along the line instead of the last hiding the others. */
static void html_mem_line(FILE *f, const char *points, bool dev, const char *col, int nth, int of)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"", col);
    if (of > 1) {
        fprintf(f, " stroke-dasharray=\"6 %d\" stroke-dashoffset=\"%d\"", 6 * (of - 1),
                (6 * of - 6 * nth) % (6 * of));
    } else if (dev) {
        fputs(" stroke-dasharray=\"6 4\"", f);
    }
    fprintf(f, " points=\"%s\"/>\n", points);
}

static void html_time_axis(FILE *f, const html_box_t *b)
{
    double step = html_nice_step(b->tmax - b->tmin, 8);
    char buf[32];
    double first = ceil(b->tmin / step - 1e-9) * step;
    for (double t = first; t <= b->tmax + step * 1e-6; t += step) {
        double x = b->x0 + b->w * (t - b->tmin) / (b->tmax - b->tmin);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", x,
                b->y0, x, b->y0 - b->h);
        html_tick(t, step, buf, sizeof(buf));
        html_text(f, x, b->y0 + 16, "middle", "", buf);
    }
    html_text(f, b->x0 + b->w / 2, b->y0 + 34, "middle", "", "time since the first step (s)");
}

/* Legend entries in rows under the plot: colour swatch, "rank k (host)" and its peak; then
 * which ranks' lines coincide. */
static void html_mem_legend(FILE *f, const moe_report_t *r, double x0, double y, bool any_dev,
                            const char *equal)
{
    char col[8], buf[128];
    int shown = 0;
    for (int k = 0; k < r->world_size; k++) {
        if (!r->ranks[k].present || r->ranks[k].num_mem <= 0) {
            continue;
        }
        double x = x0 + (shown % 5) * 215, yy = y + (shown / 5) * 18;
        html_cat_colour(k, col);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>\n", x,
                yy - 6, col);
        if (r->ranks[k].peak_known) {
            snprintf(buf, sizeof(buf), "rank %d (%.24s) peak %.1f", k, r->ranks[k].host,
                     (double)r->ranks[k].rss_peak / HTML_MIB);
        } else { /* its last record did not come: the peak is read at the end */
            snprintf(buf, sizeof(buf), "rank %d (%.24s) peak -", k, r->ranks[k].host);
        }
        html_text(f, x + 20, yy, "start", "", buf);
        shown++;
    }
    y += ((shown + 4) / 5) * 18;
    if (any_dev) {
        html_text(f, x0, y, "start", "", "solid = RSS, dashed = device memory");
        y += 18;
    }
    if (equal[0] != '\0') {
        html_text(f, x0, y, "start", "", equal);
    }
}

/* Each present rank's RSS points into pts[k] (NULL where none), and which lines coincide:
 * nth[k] of of[k] equal ones, named in `equal` ("equal lines, drawn in alternating dashes:
 * ranks 1, 2"). False when out of memory. */
static bool html_mem_series(const moe_report_t *r, const html_box_t *b, char **pts, int *nth,
                            int *of, char *equal, size_t cap)
{
    size_t at = 0;
    equal[0] = '\0';
    for (int k = 0; k < r->world_size; k++) {
        const moe_rep_rank_t *rk = &r->ranks[k];
        nth[k] = 0;
        of[k] = 1;
        pts[k] = NULL;
        if (!rk->present || rk->mem == NULL || rk->num_mem <= 0) {
            continue;
        }
        pts[k] = malloc(HTML_MEM_POINTS * HTML_MEM_POINT_CHARS + 1);
        if (pts[k] == NULL) {
            return false;
        }
        html_mem_points(rk, b, false, pts[k]);
        for (int j = 0; j < k; j++) {
            if (pts[j] != NULL && nth[j] == 0 && strcmp(pts[j], pts[k]) == 0) {
                nth[k] = of[j]++; /* j leads the group: it counts the members */
                break;
            }
        }
    }
    for (int j = 0; j < r->world_size; j++) { /* each group, by its leader j */
        if (pts[j] == NULL || nth[j] != 0 || of[j] < 2) {
            continue;
        }
        int n = snprintf(equal + at, at < cap ? cap - at : 0, "%sranks %d",
                         at ? "; " : "equal lines, drawn in alternating dashes: ", j);
        at = n > 0 && at + (size_t)n < cap ? at + (size_t)n : cap; /* cap: full */
        for (int k = j + 1; k < r->world_size; k++) {
            if (pts[k] != NULL && nth[k] > 0 && strcmp(pts[j], pts[k]) == 0) {
                of[k] = of[j]; /* members learn the group's size */
                n = snprintf(equal + at, at < cap ? cap - at : 0, ", %d", k);
                at = n > 0 && at + (size_t)n < cap ? at + (size_t)n : cap;
            }
        }
    }
    return true;
}

static void html_chart_memory(FILE *f, const moe_report_t *r)
{
    html_box_t b = {90, 0, HTML_W - 110, 280, 0, 0, 0};
    int series = 0;
    bool any_dev = false;
    for (int k = 0; k < r->world_size; k++) {
        series += r->ranks[k].present && r->ranks[k].num_mem > 0;
        any_dev |= r->ranks[k].present && r->ranks[k].dev_peak > 0;
    }
    fputs("<h2>Memory over time per rank (RSS, MiB = 2<sup>20</sup> bytes)</h2>\n", f);
    char **pts = calloc((size_t)r->world_size, sizeof(char *));
    int *nth = calloc((size_t)r->world_size, sizeof(int));
    int *of = calloc((size_t)r->world_size, sizeof(int));
    char equal[512];
    double step;
    bool any = html_mem_range(r, &b);
    b.tmax = b.tmax > b.tmin ? b.tmax : b.tmin + 1e-3;
    b.vmax = html_nice_max(b.vmax > 0.0 ? b.vmax : 1.0, &step);
    b.y0 = 20 + b.h;
    if (!any || pts == NULL || nth == NULL || of == NULL ||
        !html_mem_series(r, &b, pts, nth, of, equal, sizeof(equal))) {
        html_svg_open(f, "chart-memory", HTML_W, 40, "Memory over time");
        html_text(f, 10, 24, "start", "",
                  any ? "Out of memory drawing the chart." : "No memory samples were recorded.");
        fputs("</svg>\n", f);
        goto cleanup;
    }
    int legend_rows = (series + 4) / 5 + (any_dev ? 1 : 0) + (equal[0] ? 1 : 0);
    html_svg_open(f, "chart-memory", HTML_W, (int)(b.y0 + 56 + 18 * legend_rows),
                  "Memory per rank over time in MiB");
    html_y_axis(f, b.x0, b.y0, b.h, b.w, b.vmax, step, "MiB");
    html_time_axis(f, &b);
    for (int k = 0; k < r->world_size; k++) {
        const moe_rep_rank_t *rk = &r->ranks[k];
        char col[8];
        if (pts[k] == NULL) {
            continue;
        }
        html_cat_colour(k, col);
        html_mem_line(f, pts[k], false, col, nth[k], of[k]);
        if (rk->dev_peak > 0) {
            html_mem_points(rk, &b, true, pts[k]);
            html_mem_line(f, pts[k], true, col, 0, 1);
        }
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", b.x0,
            b.y0, b.x0 + b.w, b.y0);
    html_mem_legend(f, r, b.x0, b.y0 + 58, any_dev, equal);
    fputs("</svg>\n", f);
cleanup:
    for (int k = 0; pts != NULL && k < r->world_size; k++) {
        free(pts[k]);
    }
    free(pts);
    free(nth);
    free(of);
}

/* ---- chart 5: step time per rank ------------------------------------------------- */

/* A rank's step split in ms per recorded step: compute, exchange, idle, designed wait and
 * the rest of the step (outside the phases: bookkeeping between layers, the profiler's
 * hooks), so the bar ends at the step time summary.txt prints. Returns the step time. */
static double html_step_split(const moe_rep_rank_t *rk, double v[HTML_SPLIT])
{
    double n = rk->steps > 0 ? (double)rk->steps : 1.0;
    double step = rk->phase[MOE_PHASE_STEP].sum / n / 1e6;
    v[0] = rk->compute_ns / n / 1e6;
    v[1] = rk->exchange_ns / n / 1e6;
    v[2] = rk->idle_ns / n / 1e6;
    v[3] = rk->structural_wait_ns / n / 1e6;
    double phases = v[0] + v[1] + v[2] + v[3];
    v[4] = fmax(step - phases, 0.0);
    return fmax(step, phases);
}

static void html_steps_row(FILE *f, const moe_report_t *r, int k, double x0, double y, double bh,
                           double scale)
{
    double v[HTML_SPLIT], step = html_step_split(&r->ranks[k], v), x = x0;
    for (int i = 0; i < HTML_SPLIT; i++) {
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\">"
                "<title>rank %d %s: %.3f ms per step (%.1f%% of the step)</title></rect>\n",
                x, y, v[i] * scale, bh, html_split_colour[i], k, html_split_name[i], v[i],
                step > 0.0 ? 100.0 * v[i] / step : 0.0);
        x += v[i] * scale;
    }
    char buf[48];
    snprintf(buf, sizeof(buf), "%.3f ms", step); /* the "step ms" of summary.txt */
    if (bh >= 10.0) {
        html_text(f, x + 6, y + bh / 2 + 4, "start", "class=\"in\"", buf);
    }
}

static void html_steps_legend(FILE *f, double x, double y)
{
    for (int i = 0; i < HTML_SPLIT; i++) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n",
                x + i * 120, y - 10, html_split_colour[i]);
        html_text(f, x + i * 120 + 18, y, "start", "", html_split_name[i]);
    }
}

static void html_chart_steps(FILE *f, const moe_report_t *r)
{
    int rows = 0;
    double max = 0.0, step;
    for (int k = 0; k < r->world_size; k++) {
        const moe_rep_rank_t *rk = &r->ranks[k];
        if (rk->present && rk->steps > 0) {
            double v[HTML_SPLIT], t = html_step_split(rk, v);
            max = t > max ? t : max;
            rows++;
        }
    }
    fputs("<h2>Step time per rank (ms per recorded step)</h2>\n<p class=\"note\">compute = gate + "
          "expert + merge; exchange = dispatch + combine moving bytes; idle = waiting in the "
          "exchange for slower ranks (load imbalance); designed wait = the routing rank's designed "
          "wait, not imbalance (a rank with no experts waiting in the combine for the expert "
          "ranks, a rank routing nothing waiting in the dispatch for the routing ranks' gate); "
          "other = the rest of the step (outside the phases). The label is the step time, as in "
          "summary.txt.</p>\n",
          f);
    double left = 190, top = 30, rh = html_clamp(640.0 / (rows > 0 ? rows : 1), 4, 28);
    double pw = HTML_W - left - 110, bh = rh * 0.7;
    max = html_nice_max(max > 0.0 ? max : 1.0, &step);
    html_svg_open(f, "chart-steps", HTML_W, (int)(top + rh * rows + 50),
                  "Step time per rank split into compute, exchange, idle and designed wait");
    html_steps_legend(f, left, 14);
    double y0 = top + rh * rows;
    for (int i = 0; i * step <= max * 1.0001; i++) {
        char buf[32];
        double x = left + pw * i * step / max;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", x,
                top, x, y0);
        html_tick(i * step, step, buf, sizeof(buf));
        html_text(f, x, y0 + 16, "middle", "", buf);
    }
    html_text(f, left + pw / 2, y0 + 36, "middle", "", "ms per recorded step");
    int row = 0, every = html_label_every(rh, 14.0);
    for (int k = 0; k < r->world_size; k++) {
        if (!r->ranks[k].present || r->ranks[k].steps <= 0) {
            continue;
        }
        double y = top + rh * row;
        html_steps_row(f, r, k, left, y + (rh - bh) / 2, bh, pw / max);
        if (row % every == 0) {
            char buf[96];
            snprintf(buf, sizeof(buf), "rank %d (%.24s)", k, r->ranks[k].host);
            html_text(f, left - 8, y + rh / 2 + 4, "end", "", buf);
        }
        row++;
    }
    fputs("</svg>\n", f);
}

/* ---- exchange hidden behind compute, per rank ------------------------------------- */

static double html_per_step_ms(double ns, int64_t steps)
{
    return steps > 0 ? ns / (double)steps / 1e6 : 0.0;
}

static void html_overlap(FILE *f, const moe_report_t *r)
{
    fprintf(f, "<h2 id=\"overlap\">Exchange hidden behind expert compute</h2>\n<p class=\"note\">"
            "exchange = time a row exchange was in flight (from its start until the rank saw it "
            "complete, the union over each layer's exchanges); hidden = the part of it during the "
            "rank's own expert calls; share = hidden / exchange%s.</p>\n<table>\n<tr><th "
            "class=\"num\">rank</th><th>host</th><th>device</th><th class=\"num\">exchange "
            "(ms per step)</th><th class=\"num\">hidden (ms per step)</th><th class=\"num\">"
            "hidden share</th></tr>\n",
            r->chunks == 1 ? " (0 by construction: runtime.chunks 1)" : "");
    for (int k = 0; k < r->world_size; k++) {
        const moe_rep_rank_t *rk = &r->ranks[k];
        if (!rk->present || rk->steps <= 0) {
            continue;
        }
        double share = moe_report_hidden_share(rk);
        fprintf(f, "<tr><td class=\"num\">%d</td><td>", k);
        html_put(f, rk->host);
        fputs("</td><td>", f);
        html_put(f, rk->device[0] ? rk->device : "?");
        fprintf(f, "</td><td class=\"num\">%.3f</td><td class=\"num\">%.3f</td>",
                html_per_step_ms(rk->inflight_ns, rk->steps),
                html_per_step_ms(rk->hidden_ns, rk->steps));
        if (isfinite(share)) {
            fprintf(f, "<td class=\"num\">%.1f%%</td></tr>\n", 100.0 * share);
        } else {
            fputs("<td class=\"num\">n/a</td></tr>\n", f);
        }
    }
    fputs("</table>\n", f);
}

/* One cell: "0.93" cores, or "n/a" when not measured. */
static void html_cores_cell(FILE *f, double cores)
{
    if (isfinite(cores)) {
        fprintf(f, "<td class=\"num\">%.2f</td>", cores);
    } else {
        fputs("<td class=\"num\">n/a</td>", f);
    }
}

static void html_cpu(FILE *f, const moe_report_t *r)
{
    fputs("<h2 id=\"cpu\">CPU per rank</h2>\n<p class=\"note\">cores kept busy = the "
          "process's CPU time (every thread, user + system) over wall time, over the recorded "
          "steps and over the whole run (first step to the end). A rank that only waits should "
          "cost little; a computing rank is near its BLAS threads unless ranks share cores."
          "</p>\n<table>\n<tr><th class=\"num\">rank</th><th>host</th><th class=\"num\">"
          "experts</th><th class=\"num\">cores (recorded steps)</th><th class=\"num\">cores "
          "(whole run)</th></tr>\n",
          f);
    for (int k = 0; k < r->world_size; k++) {
        const moe_rep_rank_t *rk = &r->ranks[k];
        if (!rk->present) {
            continue;
        }
        fprintf(f, "<tr><td class=\"num\">%d</td><td>", k);
        html_put(f, rk->host);
        fprintf(f, "</td><td class=\"num\">%d</td>", rk->num_local);
        html_cores_cell(f, moe_report_cpu_cores(rk, false));
        html_cores_cell(f, moe_report_cpu_cores(rk, true));
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* ---- balance table, footer, the file --------------------------------------------- */

static uint64_t html_sum(const uint64_t *v, int n)
{
    uint64_t s = 0;
    for (int i = 0; v != NULL && i < n; i++) {
        s += v[i];
    }
    return s;
}

static void html_balance(FILE *f, const moe_report_t *r)
{
    fputs("<h2>Load balance per layer</h2>\n<p class=\"note\">Of the kept tokens over experts. "
          "gini: 0 = even; cv = stddev / mean; entropy: 1 = even; max/mean: 1 = even.</p>\n"
          "<table>\n<tr><th class=\"num\">layer</th><th class=\"num\">demand (tokens)</th>"
          "<th class=\"num\">kept (tokens)</th><th class=\"num\">dropped (tokens)</th>"
          "<th class=\"num\">gini</th><th class=\"num\">cv</th><th class=\"num\">entropy</th>"
          "<th class=\"num\">max/mean</th></tr>\n",
          f);
    for (int l = 0; l < r->num_layers; l++) {
        const moe_rep_layer_t *y = &r->layers[l];
        int ne = r->num_experts;
        /* "-" where unknown: no routing rank's records (demand, dropped), and a host's
         * missing too (kept and the balance); never 0, which would read "even" */
        bool known[7] = {!y->demand_unknown, !y->kept_unknown, !y->demand_unknown,
                         isfinite(y->gini), isfinite(y->cv), isfinite(y->entropy_norm),
                         isfinite(y->max_mean)};
        double v[7] = {(double)html_sum(y->demand, ne), (double)html_sum(y->kept, ne),
                       (double)html_sum(y->dropped, ne), y->gini, y->cv, y->entropy_norm,
                       y->max_mean};
        fprintf(f, "<tr><td class=\"num\">%d</td>", l);
        for (int c = 0; c < 7; c++) {
            if (!known[c]) {
                fputs("<td class=\"num\">-</td>", f);
            } else {
                fprintf(f, "<td class=\"num\">%.*f</td>", c < 3 ? 0 : c == 6 ? 2 : 3, v[c]);
            }
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void html_footer(FILE *f, const moe_report_t *r)
{
    fputs("<footer>Written by moed ", f);
    html_put(f, r->version);
    fputs(". This folder also holds summary.txt (the same figures as text), summary.json "
          "(machine-readable), metrics.csv, comm.csv, per-rank summary_rank_&lt;r&gt;.txt",
          f);
    fputs(r->cfg->prof_trace ? " and trace.json (open it in Perfetto or chrome://tracing)" : "", f);
    fputs(". Schemas: docs/report-files.md.</footer>\n</body>\n</html>\n", f);
}

static void html_document(FILE *f, const moe_report_t *r)
{
    html_head(f, r);
    html_facts(f, r);
    html_findings(f, r);
    html_chart_load(f, r);
    html_chart_latency(f, r);
    html_chart_comm(f, r);
    html_chart_memory(f, r);
    html_chart_steps(f, r);
    html_overlap(f, r);
    html_cpu(f, r);
    html_balance(f, r);
    html_footer(f, r);
}

moe_status_t moe_report_write_html(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL || r->cfg == NULL || r->ranks == NULL || r->experts == NULL ||
        r->layers == NULL || r->num_experts <= 0) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "report.html: no report");
    }
    FILE *f = moe_report_open(r, "report.html", err);
    if (f == NULL) {
        return MOE_ERR_IO;
    }
    html_document(f, r);
    return moe_report_close(f, r, "report.html", err);
}
