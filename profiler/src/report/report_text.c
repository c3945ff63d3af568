/* summary.txt and summary_rank_<r>.txt: the merged profile as aligned plain-text tables.
 *
 * Every column header carries its unit; tables that grow with the model (experts) are one
 * row per item, and those that grow with the world squared (the rank matrices) are printed
 * with columns as narrow as their widest cell, and fall back to per-rank totals when a row
 * would pass TEXT_WIDTH_MAX characters, pointing at comm.csv for the full matrix. */
#include "report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_WIDTH_MAX 160 /* characters a line of a rank matrix may take */
#define TEXT_MB 1e6        /* MB = 10^6 bytes (network convention) */
#define TEXT_MIB 1048576.0 /* MiB = 2^20 bytes (memory convention) */

/* ---- small helpers --------------------------------------------------------------- */

static const char *text_host(const moe_report_t *r, int rank)
{
    if (r->ranks == NULL || rank < 0 || rank >= r->world_size || r->ranks[rank].host[0] == '\0') {
        return "?";
    }
    return r->ranks[rank].host;
}

/* The row of a rank with nothing to show: why (not profiled, every step was a warm-up
 * step, its records hold no step, or they are missing). */
static void text_absent_row(FILE *f, const moe_report_t *r, int i, int hw)
{
    const moe_rep_rank_t *k = &r->ranks[i];
    fprintf(f, "  %4d  %-*.*s  %s\n", i, hw, hw, text_host(r, i),
            !k->profiled    ? "not profiled"
            : r->all_warmup ? "no step recorded (all steps were warm-up)"
            : k->present    ? "no step recorded"
                            : "records missing");
}

/* Width of the host column: the longest host name, within [4, 24]. */
static int text_host_width(const moe_report_t *r)
{
    size_t w = 4;
    for (int i = 0; r->ranks != NULL && i < r->world_size; i++) {
        size_t n = strnlen(r->ranks[i].host, sizeof(r->ranks[i].host));
        w = n > w ? n : w;
    }
    return w > 24 ? 24 : (int)w;
}

static double text_per_step_ms(double ns, int64_t steps)
{
    return steps > 0 ? ns / (double)steps / 1e6 : 0.0;
}

static double text_pct(double part, double whole)
{
    return whole > 0.0 ? 100.0 * part / whole : 0.0;
}

/* Expert ids as ranges: "0-3, 8, 10-11". */
static void text_id_ranges(FILE *f, const int32_t *ids, int n)
{
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && ids[j + 1] == ids[j] + 1) {
            j++;
        }
        fprintf(f, "%s%d", i > 0 ? ", " : "", ids[i]);
        if (j > i) {
            fprintf(f, "-%d", ids[j]);
        }
        i = j + 1;
    }
}

static void text_rule(FILE *f, const char *title)
{
    size_t n = strlen(title);
    fprintf(f, "\n%s\n", title);
    for (size_t i = 0; i < n; i++) {
        fputc('-', f);
    }
    fputc('\n', f);
}

static const char *text_routing(const moe_config_t *c)
{
    return c->routing == MOE_ROUTING_SYMMETRIC ? "symmetric (every rank routes its tokens)"
                                               : "master (one rank routes every token)";
}

static const char *text_activation(const moe_config_t *c)
{
    return moe_cfg_activation_name(c->activation);
}

static const char *text_device(const moe_config_t *c)
{
    return c->device == MOE_DEVICE_CUDA ? "cuda" : "cpu";
}

/* "cpu", or the back-end with the device's name: "cuda (NVIDIA H200)". */
static void text_device_name(const moe_report_t *r, char *buf, size_t n)
{
    const char *kind = text_device(r->cfg);
    if (r->device[0] == '\0' || strcmp(r->device, kind) == 0) {
        snprintf(buf, n, "%s", kind);
    } else {
        snprintf(buf, n, "%s (%.63s)", kind, r->device);
    }
}

/* A share (0..1) as "12.5%", or "n/a" when it cannot be computed (NAN). */
static void text_share(char *buf, size_t n, double share)
{
    if (isfinite(share)) {
        snprintf(buf, n, "%.1f%%", 100.0 * share);
    } else {
        snprintf(buf, n, "n/a");
    }
}

/* ---- run facts ------------------------------------------------------------------- */

static void text_partial_banner(FILE *f, const moe_report_t *r)
{
    if (r->all_warmup) {
        fprintf(f, "\n*** NOTHING RECORDED: all %" PRId64 " step%s were warm-up "
                   "(profiler.warmup_steps %" PRId64 "); run more steps than that to profile. ***\n",
                r->steps_run, r->steps_run == 1 ? "" : "s", r->cfg->prof_warmup_steps);
    }
    if (r->interrupted) {
        char of[48] = ""; /* workload.steps: 0 has no total */
        if (r->steps_planned > 0) {
            snprintf(of, sizeof(of), " of %lld", (long long)r->steps_planned);
        }
        fprintf(f, "\n*** INTERRUPTED: stopped by a signal after %lld%s steps; every "
                   "completed step that reached rank 0 is below. ***\n",
                (long long)r->steps_run, of);
    }
    if (!r->partial) {
        return;
    }
    fprintf(f, "\n*** PARTIAL: missing %s ***\n",
            r->missing[0] ? r->missing : "some ranks' records");
    bool rank_missing = false; /* a window closed early has every rank: no such line */
    for (int i = 0; r->ranks != NULL && i < r->world_size; i++) {
        rank_missing = rank_missing || (r->ranks[i].profiled && !r->ranks[i].present);
    }
    if (rank_missing) {
        fprintf(f, "*** Figures below cover only the ranks whose records reached rank 0. ***\n");
    }
}

static void text_placement(FILE *f, const moe_report_t *r)
{
    const moe_config_t *c = r->cfg;
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    if (ids == NULL) {
        return;
    }
    for (int k = 0; k < r->world_size; k++) {
        int n = moe_cfg_experts_of_rank(c, k, ids);
        fprintf(f, "  %-16s rank %d (%s): ", k == 0 ? "placement" : "", k, text_host(r, k));
        if (n > 0) {
            fprintf(f, "%d expert%s: ", n, n == 1 ? "" : "s");
            text_id_ranges(f, ids, n);
        } else {
            fputs("no experts", f);
        }
        if (c->routing == MOE_ROUTING_MASTER && k == c->master_rank) {
            fputs(" (routes every token)", f);
        }
        if (r->ranks != NULL && !r->ranks[k].profiled) {
            fputs(" [not profiled]", f);
        } else if (r->ranks != NULL && !r->ranks[k].present) {
            fputs(" [records MISSING]", f);
        }
        fputc('\n', f);
    }
    free(ids);
}

/* Where the expert choices came from: the router, or the trace replayed. */
static void text_routing_source(FILE *f, const moe_report_t *r)
{
    moe_report_routing_src_t *src = malloc(sizeof(*src));
    if (src == NULL) {
        return;
    }
    moe_report_routing_parse(r->routing_source, src);
    if (strcmp(src->kind, "router") == 0) {
        fprintf(f, "  %-16s router (the gate chose each token's experts)\n", "routing source");
    } else {
        fprintf(f, "  %-16s %s\n", "routing source", src->detail);
    }
    free(src);
}

static void text_run_facts(FILE *f, const moe_report_t *r)
{
    const moe_config_t *c = r->cfg;
    fprintf(f, "moed profile summary\n====================\n");
    text_partial_banner(f, r);
    text_rule(f, "Run");
    fprintf(f, "  %-16s %s (build %s)\n", "moed", r->version, r->build_id);
    fprintf(f, "  %-16s %s\n", "started", r->started_at);
    fprintf(f, "  %-16s %s\n", "report folder", r->run_dir);
    fprintf(f, "  %-16s %s (hash %016" PRIx64 ")\n", "config", c->source_name, c->text_hash);
    fprintf(f, "  %-16s %d ranks on %d host%s\n", "world", r->world_size, r->num_hosts,
            r->num_hosts == 1 ? "" : "s");
    text_placement(f, r);
    fprintf(f,
            "  %-16s %" PRId64 " layers x %" PRId64 " experts, top-%" PRId64 ", hidden %" PRId64
            ", ffn %" PRId64 ", %s, capacity factor %g%s\n",
            "model", c->num_layers, c->num_experts, c->top_k, c->hidden_dim, c->ffn_dim,
            text_activation(c), c->capacity_factor, c->capacity_factor > 0 ? "" : " (no limit)");
    fprintf(f, "  %-16s %s\n", "routing", text_routing(c));
    text_routing_source(f, r);
    if (r->weights[0] != '\0') {
        fprintf(f, "  %-16s %s\n", "weights", r->weights);
    }
    char dev[96];
    text_device_name(r, dev, sizeof(dev));
    fprintf(f, "  %-16s %s, device %s, BLAS %s (%" PRId64 " thread%s per rank)\n", "transport",
            r->transport, dev, r->blas, c->threads, c->threads == 1 ? "" : "s");
    if (r->chunks > 0) {
        fprintf(f, "  %-16s %d (runtime.chunks; %s)\n", "chunks", r->chunks,
                r->chunks > 1 ? "one chunk's exchange overlaps another's expert compute"
                              : "exchange and expert compute do not overlap");
    } else {
        fprintf(f, "  %-16s not recorded\n", "chunks");
    }
    fprintf(f, "  %-16s %" PRId64 " run, %" PRId64 " tokens each; ", "steps", r->steps_run,
            r->tokens_per_step);
    if (r->all_warmup) {
        fprintf(f, "none recorded: all steps were warm-up (profiler.warmup_steps %" PRId64 ")\n",
                r->cfg->prof_warmup_steps);
    } else {
        fprintf(f, "%" PRId64 " recorded in %d window%s\n", r->recorded_steps, r->windows,
                r->windows == 1 ? "" : "s");
    }
    fprintf(f, "  %-16s %.1f tokens/s (%.3f s for all steps on rank 0)\n", "throughput",
            r->tokens_per_s, r->run_s);
    fprintf(f, "  %-16s skew max %.1f us, uncertainty max +/- %.1f us, drift max %.1f us\n",
            "clocks", r->clock_skew_max_ns / 1e3, r->clock_uncertainty_max_ns / 1e3,
            r->clock_drift_max_ns / 1e3);
    if (r->metrics_dropped > 0 || r->events_dropped > 0) {
        fprintf(f, "  %-16s %" PRId64 " metrics rows, %" PRId64 " trace events (over the bounds)\n",
                "dropped", r->metrics_dropped, r->events_dropped);
    }
    if (r->metrics_lost > 0 || r->metrics_write_failed) {
        fprintf(f, "  %-16s %" PRId64 " rows written; stopped at step %" PRId64 ": %s; %" PRId64
                   " rows not written%s\n", "metrics.csv", r->metrics_rows, r->metrics_stop_step,
                r->metrics_stop_why, r->metrics_lost,
                r->metrics_write_failed ? " (an error: the report is INCOMPLETE)" : "");
    }
}

/* ---- time split ------------------------------------------------------------------ */

typedef struct text_spread {
    double min, sum, max;
    int min_rank, max_rank, n;
} text_spread_t;

static void text_spread_add(text_spread_t *s, double v, int rank)
{
    if (s->n == 0 || v < s->min) {
        s->min = v;
        s->min_rank = rank;
    }
    if (s->n == 0 || v > s->max) {
        s->max = v;
        s->max_rank = rank;
    }
    s->sum += v;
    s->n++;
}

static void text_spread_row(FILE *f, const char *name, const text_spread_t *s)
{
    if (s->n == 0) {
        return;
    }
    fprintf(f, "  %-12s %10.3f  (rank %4d) %10.3f %10.3f  (rank %4d)\n", name, s->min, s->min_rank,
            s->sum / s->n, s->max, s->max_rank);
}

/* The five per-step figures of a rank: step, compute, exchange, idle, designed wait (ms
 * per step). */
#define TEXT_SPLIT 5
static void text_rank_split(const moe_rep_rank_t *k, double out[TEXT_SPLIT])
{
    out[0] = text_per_step_ms(k->phase[MOE_PHASE_STEP].sum, k->steps);
    out[1] = text_per_step_ms(k->compute_ns, k->steps);
    out[2] = text_per_step_ms(k->exchange_ns, k->steps);
    out[3] = text_per_step_ms(k->idle_ns, k->steps);
    out[4] = text_per_step_ms(k->structural_wait_ns, k->steps);
}

/* Each idle rank's idle split by the rank it waited for (ms per step, % of its step):
 * "  rank 2 waited for rank 1 1.234 ms (61.0%), rank 0 0.010 ms (0.5%)". */
static void text_idle_for(FILE *f, const moe_report_t *r)
{
    int W = r->world_size;
    bool head = false;
    for (int i = 0; r->idle_for_ns != NULL && i < W; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        double step = text_per_step_ms(k->phase[MOE_PHASE_STEP].sum, k->steps);
        int n = 0;
        for (int j = 0; k->present && k->steps > 0 && j < W; j++) {
            double v = text_per_step_ms(r->idle_for_ns[(size_t)i * (size_t)W + (size_t)j],
                                        k->steps);
            if (v < 0.0005) {
                continue; /* shows as 0.000 */
            }
            if (!head) {
                fputs("\n  idle by the rank waited for (ms per step, % of the waiting rank's "
                      "step):\n", f);
                head = true;
            }
            if (n++ == 0) {
                fprintf(f, "  rank %d waited for", i);
            }
            fprintf(f, "%s rank %d %.3f ms (%.1f%%)", n > 1 ? "," : "", j, v, text_pct(v, step));
        }
        if (n > 0) {
            fputc('\n', f);
        }
    }
}

static void text_time_split(FILE *f, const moe_report_t *r)
{
    static const char *const names[TEXT_SPLIT] = {"step ms", "compute ms", "exchange ms",
                                                  "idle ms", "designed ms"};
    int hw = text_host_width(r);
    text_spread_t s[TEXT_SPLIT];
    memset(s, 0, sizeof(s));
    text_rule(f, "Time per recorded step, by rank (ms per step; % of that rank's step time)");
    fprintf(f, "  compute = gate + expert + merge; exchange = dispatch + combine moving bytes;\n"
               "  idle = time in the exchange waiting for slower ranks (load imbalance);\n"
               "  designed = the routing rank's designed wait, not imbalance (a rank with no\n"
               "  experts waiting in the combine for the expert ranks, a rank routing nothing\n"
               "  waiting in the dispatch for the routing ranks' gate)\n\n");
    fprintf(f, "  %4s  %-*s  %5s  %9s  %11s %6s  %11s %6s  %11s %6s  %11s %6s\n", "rank", hw,
            "host", "steps", "step ms", "compute ms", "%", "exchange ms", "%", "idle ms", "%",
            "designed ms", "%");
    for (int i = 0; i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        if (!k->present || k->steps <= 0) {
            text_absent_row(f, r, i, hw);
            continue;
        }
        double v[TEXT_SPLIT];
        text_rank_split(k, v);
        fprintf(f, "  %4d  %-*.*s  %5" PRId64 "  %9.3f", i, hw, hw, text_host(r, i), k->steps,
                v[0]);
        for (int j = 1; j < TEXT_SPLIT; j++) {
            fprintf(f, "  %11.3f %5.1f%%", v[j], text_pct(v[j], v[0]));
        }
        fputc('\n', f);
        for (int j = 0; j < TEXT_SPLIT; j++) {
            text_spread_add(&s[j], v[j], i);
        }
    }
    fprintf(f, "\n  %-12s %10s  %11s %10s %10s  %11s\n", "across ranks", "min", "(which)", "mean",
            "max", "(which)");
    for (int j = 0; j < TEXT_SPLIT; j++) {
        text_spread_row(f, names[j], &s[j]);
    }
    text_idle_for(f, r);
}

/* ---- latency percentiles, where the step goes -------------------------------------- */

static void text_ms(FILE *f, const moe_hist_t *h, double ns);

static void text_latency_row(FILE *f, const char *name, const moe_hist_t *h)
{
    fprintf(f, "  %-9s  %7" PRIu64, name, h->count);
    text_ms(f, h, moe_hist_mean(h));
    text_ms(f, h, moe_hist_quantile(h, 0.5));
    text_ms(f, h, moe_hist_quantile(h, 0.9));
    text_ms(f, h, moe_hist_quantile(h, 0.99));
    text_ms(f, h, (double)h->max);
    fputc('\n', f);
}

static void text_latency(FILE *f, const moe_report_t *r)
{
    int hw = text_host_width(r);
    text_rule(f, "Latency per recorded step (the tail: p50 / p90 / p99)");
    fprintf(f, "  per recorded step, the slowest routing rank's time of the step, and of each "
               "layer (from its\n  gate's begin to its merge's end: what the tokens wait); "
               "percentiles within 1/32 of the value;\n  - = unknown (no sample, or not every "
               "routing rank's records came)\n\n");
    fprintf(f, "  %-9s  %7s  %9s  %9s  %9s  %9s  %9s\n", "", "samples", "mean ms", "p50 ms",
            "p90 ms", "p99 ms", "max ms");
    text_latency_row(f, "step", &r->step_latency);
    for (int l = 0; r->layers != NULL && l < r->num_layers; l++) {
        char name[24];
        snprintf(name, sizeof(name), "layer %d", l);
        text_latency_row(f, name, &r->layers[l].latency);
    }
    fprintf(f, "\n  Where the step goes, by rank (%% of its step time): weights = its expert calls "
               "(reading the\n  experts' weights), exchange = moving rows, waiting = idle + "
               "designed, other = the rest\n  (gate, plan, permute, merge, the expert phase "
               "outside calls)\n\n");
    fprintf(f, "  %4s  %-*s  %9s  %10s  %9s  %8s\n", "rank", hw, "host", "weights %",
            "exchange %", "waiting %", "other %");
    for (int i = 0; i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        double step = k->phase[MOE_PHASE_STEP].sum;
        if (!k->present || k->steps <= 0 || step <= 0) {
            text_absent_row(f, r, i, hw);
            continue;
        }
        double wait = k->idle_ns + k->structural_wait_ns;
        double other = step - k->weights_ns - k->exchange_ns - wait;
        fprintf(f, "  %4d  %-*.*s  %8.1f%%  %9.1f%%  %8.1f%%  %7.1f%%\n", i, hw, hw,
                text_host(r, i), text_pct(k->weights_ns, step), text_pct(k->exchange_ns, step),
                text_pct(wait, step), text_pct(other > 0 ? other : 0.0, step));
    }
}

/* ---- exchange hidden behind compute ---------------------------------------------- */

/* Width of the device column: the longest device name, within [6, 24]. */
static int text_device_width(const moe_report_t *r)
{
    size_t w = 6;
    for (int i = 0; i < r->world_size; i++) {
        size_t n = strnlen(r->ranks[i].device, sizeof(r->ranks[i].device));
        w = n > w ? n : w;
    }
    return w > 24 ? 24 : (int)w;
}

static void text_overlap(FILE *f, const moe_report_t *r)
{
    int hw = text_host_width(r), dw = text_device_width(r);
    char pct[16];
    moe_report_findings_t x;
    moe_report_find(r, &x);
    text_rule(f, "Exchange hidden behind expert compute, by rank (ms per recorded step)");
    fprintf(f, "  in flight = time a row exchange was in flight (from its start until this rank saw "
               "it complete;\n  the union over each layer's exchanges; not the exchange ms above, "
               "which is phase time);\n  hidden = the part of it during this rank's own expert "
               "calls; hidden %% = hidden / in flight%s\n\n",
            r->chunks == 1 ? "\n  (0 by construction: runtime.chunks 1)" : "");
    fprintf(f, "  %4s  %-*s  %-*s  %5s  %12s  %11s  %8s\n", "rank", hw, "host", dw, "device",
            "steps", "in flight ms", "hidden ms", "hidden %");
    for (int i = 0; i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        if (!k->present || k->steps <= 0) {
            text_absent_row(f, r, i, hw);
            continue;
        }
        text_share(pct, sizeof(pct), moe_report_hidden_share(k));
        fprintf(f, "  %4d  %-*.*s  %-*.*s  %5" PRId64 "  %12.3f  %11.3f  %8s\n", i, hw, hw,
                text_host(r, i), dw, dw, k->device[0] ? k->device : "?", k->steps,
                text_per_step_ms(k->inflight_ns, k->steps),
                text_per_step_ms(k->hidden_ns, k->steps), pct);
    }
    text_share(pct, sizeof(pct), x.hidden_share);
    fprintf(f, "\n  all ranks present: %s of exchange time in flight hidden behind expert compute "
               "(hidden / in flight summed over the ranks)\n", pct);
}

/* ---- experts --------------------------------------------------------------------- */

static void text_expert_header(FILE *f, int hw)
{
    fprintf(f, "  %5s  %6s  %4s  %-*s  %10s  %10s  %10s  %7s  %9s  %9s  %9s  %9s  %9s  %8s\n",
            "layer", "expert", "rank", hw, "host", "demand", "tokens", "dropped", "calls",
            "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "GFLOP/s");
}

/* A latency (ns) in ms, or "-" when the expert made no recorded call (unknown, not 0). */
static void text_ms(FILE *f, const moe_hist_t *h, double ns)
{
    if (h->count > 0) {
        fprintf(f, "  %9.3f", ns / 1e6);
    } else {
        fprintf(f, "  %9s", "-");
    }
}

/* A count, or "-" where it was never taken. */
static void text_count(char *buf, size_t n, uint64_t v, bool known)
{
    if (known) {
        snprintf(buf, n, "%" PRIu64, v);
    } else {
        snprintf(buf, n, "-");
    }
}

/* A figure, or "-" where it is unknown (NAN). */
static void text_fig(char *buf, size_t n, const char *fmt, double v)
{
    if (isfinite(v)) {
        snprintf(buf, n, fmt, v);
    } else {
        snprintf(buf, n, "-");
    }
}

static void text_expert_row(FILE *f, const moe_report_t *r, const moe_rep_expert_t *e, int hw)
{
    const moe_hist_t *h = &e->hist;
    const moe_rep_layer_t *y = r->layers != NULL ? &r->layers[e->layer] : NULL;
    /* demand and dropped: "-" where not every routing rank's records came (no whole count) */
    bool counted = y != NULL && !y->demand_unknown;
    char demand[24], dropped[24], tokens[24];
    text_count(demand, sizeof(demand), counted && y->demand != NULL ? y->demand[e->expert] : 0,
               counted);
    text_count(dropped, sizeof(dropped),
               counted && y->dropped != NULL ? y->dropped[e->expert] : 0, counted);
    text_count(tokens, sizeof(tokens), e->tokens, !e->tokens_unknown);
    fprintf(f, "  %5d  %6d  %4d  %-*.*s  %10s  %10s  %10s", e->layer, e->expert, e->rank, hw, hw,
            text_host(r, e->rank), demand, tokens, dropped);
    if (e->router_count || e->tokens_unknown) {
        fprintf(f, "  %7s", "-");
    } else {
        fprintf(f, "  %7" PRIu64, e->calls);
    }
    text_ms(f, h, moe_hist_mean(h));
    text_ms(f, h, moe_hist_quantile(h, 0.5));
    text_ms(f, h, moe_hist_quantile(h, 0.9));
    text_ms(f, h, moe_hist_quantile(h, 0.99));
    text_ms(f, h, (double)h->max);
    if (h->sum > 0.0) {
        fprintf(f, "  %8.2f", e->flops / h->sum); /* flops per ns = GFLOP/s */
    } else {
        fprintf(f, "  %8s", "-");
    }
    fputs(e->router_count ? "  (router's count)\n" : "\n", f);
}

/* All experts (only_rank < 0) or those hosted by one rank; a blank line between layers. */
static void text_experts(FILE *f, const moe_report_t *r, int only_rank)
{
    int hw = text_host_width(r), last_layer = -1;
    bool router = false;
    text_rule(f, "Experts (latency per forward call in ms over the recorded steps; "
                 "GFLOP/s = flops / sum of call times)");
    fprintf(f, "  demand = choices before the capacity limit; tokens = rows computed (= kept); "
               "dropped = demand - kept;\n  - = unknown (no recorded call; demand, dropped: a "
               "routing rank not profiled or lost;\n  tokens: its host too)\n\n");
    text_expert_header(f, hw);
    for (int i = 0; r->experts != NULL && i < r->num_layers * r->num_experts; i++) {
        const moe_rep_expert_t *e = &r->experts[i];
        if (only_rank >= 0 && e->rank != only_rank) {
            continue;
        }
        if (last_layer >= 0 && e->layer != last_layer) {
            fputc('\n', f);
        }
        last_layer = e->layer;
        router = router || e->router_count;
        text_expert_row(f, r, e, hw);
    }
    if (last_layer < 0) {
        fprintf(f, "  (none)\n");
    }
    if (router) {
        fprintf(f, "\n  (router's count): the host rank (or a copy's) was not profiled or its "
                   "records are missing;\n  its tokens are the routing ranks' count of the "
                   "choices kept for it, its latency\n  is unknown.\n");
    }
}

/* ---- balance --------------------------------------------------------------------- */

static uint64_t text_sum(const uint64_t *v, int n)
{
    uint64_t s = 0;
    for (int i = 0; v != NULL && i < n; i++) {
        s += v[i];
    }
    return s;
}

static void text_balance(FILE *f, const moe_report_t *r)
{
    text_rule(f, "Load balance per layer (of kept tokens over experts)");
    fprintf(f, "  gini: 0 = even, (n-1)/n = all on one; cv = stddev / mean; entropy: 1 = even;\n"
               "  max/mean: 1 = even; tokens = choices over the recorded steps; - = unknown (a\n"
               "  routing rank not profiled or lost: kept and balance from the experts' rows,\n"
               "  - where a host is missing too)\n\n");
    fprintf(f, "  %5s  %12s  %12s  %10s  %7s  %7s  %8s  %8s\n", "layer", "demand", "kept",
            "dropped", "gini", "cv", "entropy", "max/mean");
    for (int l = 0; r->layers != NULL && l < r->num_layers; l++) {
        const moe_rep_layer_t *y = &r->layers[l];
        char c[3][24], b[4][16];
        text_count(c[0], sizeof(c[0]), text_sum(y->demand, r->num_experts), !y->demand_unknown);
        text_count(c[1], sizeof(c[1]), text_sum(y->kept, r->num_experts), !y->kept_unknown);
        text_count(c[2], sizeof(c[2]), text_sum(y->dropped, r->num_experts), !y->demand_unknown);
        text_fig(b[0], sizeof(b[0]), "%.3f", y->gini);
        text_fig(b[1], sizeof(b[1]), "%.3f", y->cv);
        text_fig(b[2], sizeof(b[2]), "%.3f", y->entropy_norm);
        text_fig(b[3], sizeof(b[3]), "%.2f", y->max_mean);
        fprintf(f, "  %5d  %12s  %12s  %10s  %7s  %7s  %8s  %8s\n", l, c[0], c[1], c[2], b[0],
                b[1], b[2], b[3]);
    }
}

/* The hottest (layer, expert) pairs by share of their layer's demand, and the evenness of
 * the routing over the layers (entropy of each layer's expert shares). */
static void text_hottest(FILE *f, const moe_report_t *r)
{
    moe_report_hot_t top[MOE_REPORT_TOP_HOT_TEXT];
    int n = moe_report_hottest(r, top, MOE_REPORT_TOP_HOT_TEXT);
    if (n == 0) {
        return; /* no demand recorded (the routing ranks not profiled) */
    }
    text_rule(f, "Hottest experts (demand: choices before the capacity limit)");
    moe_report_run_routing_t y;
    moe_report_run_routing(r, &y);
    if (r->num_experts > 1) { /* one expert: nothing to spread */
        fprintf(f, "  entropy of the experts' shares, mean over %d layer%s: %.3f bits (%.3f of "
                   "even); least even: layer %d (%.3f)\n\n",
                y.layers_with_choices, y.layers_with_choices == 1 ? "" : "s", y.entropy_bits_mean,
                y.entropy_norm_mean, y.entropy_norm_min_layer, y.entropy_norm_min);
    }
    fprintf(f, "  %2s  %5s  %6s  %4s  %12s  %14s  %12s\n", "#", "layer", "expert", "rank",
            "demand", "share of layer", "x layer mean");
    for (int i = 0; i < n; i++) {
        const moe_report_hot_t *h = &top[i];
        int rank = r->experts != NULL ? r->experts[h->layer * r->num_experts + h->expert].rank : -1;
        fprintf(f, "  %2d  %5d  %6d  %4d  %12" PRIu64 "  %13.1f%%  %12.2f\n", i + 1, h->layer,
                h->expert, rank, h->demand, 100.0 * h->share, h->x_mean);
    }
}

/* Online rebalances (runtime.rebalance_every): one line each. */
static void text_rebalances(FILE *f, const moe_report_t *r)
{
    if (r->num_rebalances == 0) {
        return;
    }
    text_rule(f, "Online rebalancing (runtime.rebalance_every)");
    fprintf(f, "  imbalance: max/mean of the expert ranks' rows over the window before it, and\n"
               "  as predicted for the new placement; the report's placement is the config's\n\n");
    for (int i = 0; r->rebalances != NULL && i < r->num_rebalances; i++) {
        const moe_rep_rebalance_t *x = &r->rebalances[i];
        fprintf(f, "  rebalance before step %" PRId64 ": %" PRId64 " experts moved, %.3f MB, "
                "%.1f ms (the slowest rank's, rank %d), imbalance %.2f -> %.2f predicted\n",
                x->step, x->moved, (double)x->bytes / 1e6, x->seconds * 1e3, x->slowest_rank,
                x->before, x->after);
    }
}

/* The shared experts' own rows (models with shared experts only): per recorded step,
 * summed over the routing ranks, which run them while the dispatch is in flight. */
static void text_shared(FILE *f, const moe_report_t *r)
{
    int64_t steps = 0;
    bool any = false;
    for (int k = 0; r->ranks != NULL && k < r->world_size; k++) {
        steps = r->ranks[k].steps > steps ? r->ranks[k].steps : steps;
    }
    for (int l = 0; r->layers != NULL && l < r->num_layers; l++) {
        any = any || r->layers[l].shared_rows > 0;
    }
    if (!any || steps <= 0) {
        return;
    }
    text_rule(f, "Shared experts per layer (routing ranks, during the dispatch)");
    fprintf(f, "  %5s  %-6s  %14s  %12s\n", "layer", "", "tokens/step", "busy ms/step");
    for (int l = 0; l < r->num_layers; l++) {
        const moe_rep_layer_t *y = &r->layers[l];
        fprintf(f, "  %5d  %-6s  %14.1f  %12.3f\n", l, "shared",
                (double)y->shared_rows / (double)steps, y->shared_ns / 1e6 / (double)steps);
    }
}

/* ---- rank-to-rank matrices ------------------------------------------------------- */

static double text_cell(const moe_report_t *r, int kind, int i, int j)
{
    size_t at = (size_t)i * (size_t)r->world_size + (size_t)j;
    if (kind == 0) {
        return r->bytes != NULL ? (double)r->bytes[at] / TEXT_MB : 0.0;
    }
    return r->msgs != NULL ? (double)r->msgs[at] : 0.0;
}

/* One matrix (kind 0: MB, 1: messages). The diagonal (a rank's rows to its own experts,
 * never sent) is shown in brackets and left out of the sent / received totals, so they are
 * traffic between ranks only. */
/* Cell i,j of matrix `kind` as printed: "-" when zero, the diagonal in brackets. */
static int text_matrix_cell(const moe_report_t *r, int kind, int i, int j, char *cell,
                            size_t len)
{
    int dec = kind == 0 ? 3 : 0; /* MB with 3 decimals, counts whole */
    double v = text_cell(r, kind, i, j);
    return v > 0.0 ? snprintf(cell, len, i == j ? "(%.*f)" : "%.*f", dec, v)
                   : snprintf(cell, len, "-");
}

/* Sent (row) or received (column) total of rank k, the diagonal left out. */
static double text_matrix_total(const moe_report_t *r, int kind, int k, bool row)
{
    double tot = 0.0;
    for (int o = 0; o < r->world_size; o++) {
        tot += o != k ? text_cell(r, kind, row ? k : o, row ? o : k) : 0.0;
    }
    return tot;
}

/* The column width matrix `kind` needs: its widest cell, total or header. */
static int text_matrix_width(const moe_report_t *r, int kind)
{
    int w = r->world_size, dec = kind == 0 ? 3 : 0, cw = 8; /* "received" */
    char cell[64];
    double all = 0.0;
    for (int i = 0; i < w; i++) {
        for (int j = 0; j < w; j++) {
            int n = text_matrix_cell(r, kind, i, j, cell, sizeof(cell));
            cw = n > cw ? n : cw;
        }
        int n = snprintf(cell, sizeof(cell), "%.*f", dec, text_matrix_total(r, kind, i, true));
        cw = n > cw ? n : cw;
        all += text_matrix_total(r, kind, i, false);
    }
    int n = snprintf(cell, sizeof(cell), "%.*f", dec, all);
    return n > cw ? n : cw;
}

/* One matrix (kind 0: MB, 1: messages), its columns as wide as its widest cell. */
static void text_matrix(FILE *f, const moe_report_t *r, int kind, int cw)
{
    int w = r->world_size;
    int dec = kind == 0 ? 3 : 0;
    char cell[64];
    fprintf(f, "  %*s", cw, "from\\to");
    for (int j = 0; j < w; j++) {
        fprintf(f, " %*d", cw, j);
    }
    fprintf(f, " %*s\n", cw, "sent");
    for (int i = 0; i < w; i++) {
        fprintf(f, "  %*d", cw, i);
        for (int j = 0; j < w; j++) {
            text_matrix_cell(r, kind, i, j, cell, sizeof(cell));
            fprintf(f, " %*s", cw, cell);
        }
        fprintf(f, " %*.*f\n", cw, dec, text_matrix_total(r, kind, i, true));
    }
    fprintf(f, "  %*s", cw, "received");
    double all = 0.0;
    for (int j = 0; j < w; j++) {
        double tot = text_matrix_total(r, kind, j, false);
        all += tot;
        fprintf(f, " %*.*f", cw, dec, tot);
    }
    fprintf(f, " %*.*f\n", cw, dec, all);
}

/* Characters of a matrix line with columns cw wide: label, w ranks, the total. */
static int text_matrix_line(const moe_report_t *r, int cw)
{
    return 2 + (r->world_size + 2) * (cw + 1) - 1;
}

/* When a matrix line would pass TEXT_WIDTH_MAX: what each rank sent to and received from other ranks, and its
 * local copies, one row per rank. */
static void text_matrix_totals(FILE *f, const moe_report_t *r)
{
    int w = r->world_size;
    fprintf(f, "  (%d ranks: the full matrices are in comm.csv)\n", w);
    fprintf(f, "  %4s  %12s  %12s  %12s  %12s  %12s\n", "rank", "sent MB", "received MB",
            "local MB", "msgs sent", "msgs recv");
    for (int i = 0; i < w; i++) {
        moe_report_rank_bytes_t b = moe_report_rank_bytes(r, i);
        double m[2] = {0, 0};
        for (int j = 0; j < w; j++) {
            m[0] += j != i ? text_cell(r, 1, i, j) : 0.0;
            m[1] += j != i ? text_cell(r, 1, j, i) : 0.0;
        }
        fprintf(f, "  %4d  %12.3f  %12.3f  %12.3f  %12.0f  %12.0f\n", i,
                (double)b.sent / TEXT_MB, (double)b.recv / TEXT_MB, (double)b.local / TEXT_MB,
                m[0], m[1]);
    }
}

/* "12.345 MB (= 1.234 MB per recorded step)" */
static void text_mb(FILE *f, const moe_report_t *r, uint64_t bytes)
{
    fprintf(f, "%.3f MB", (double)bytes / TEXT_MB);
    if (r->recorded_steps > 0) {
        fprintf(f, " (%.3f MB per recorded step)",
                (double)bytes / TEXT_MB / (double)r->recorded_steps);
    }
}

static void text_comm(FILE *f, const moe_report_t *r)
{
    moe_report_bytes_t b = moe_report_bytes_split(r);
    text_rule(f, "Bytes rank to rank (MB = 10^6 bytes over the recorded steps; "
                 "row = sender, column = receiver)");
    fputs("  between ranks ", f);
    text_mb(f, r, b.between_ranks);
    fputs("\n  local copies  ", f);
    text_mb(f, r, b.local);
    moe_report_rows_t rw = moe_report_rows_split(r);
    if (rw.rows_between_ranks > 0) {
        fprintf(f, "\n  rows between ranks %" PRIu64 " carrying %" PRIu64 " (token, expert) "
                "pairs: %.3f pairs a row", rw.rows_between_ranks, rw.pairs_between_ranks,
                (double)rw.pairs_between_ranks / (double)rw.rows_between_ranks);
    }
    fputs("\n  (dispatch and combine both counted; local copies, in brackets on the diagonal,\n"
          "  are a rank's rows to its own experts: never sent, left out of the totals; a row\n"
          "  carries a token to a rank and back, with runtime.dedup every choice of the token\n"
          "  there)\n\n",
          f);
    int cw_mb = text_matrix_width(r, 0), cw_msg = text_matrix_width(r, 1);
    if (text_matrix_line(r, cw_mb) > TEXT_WIDTH_MAX ||
        text_matrix_line(r, cw_msg) > TEXT_WIDTH_MAX) {
        text_matrix_totals(f, r);
        return;
    }
    text_matrix(f, r, 0, cw_mb);
    text_rule(f, "Messages rank to rank (count over the recorded steps; row = sender; "
                 "diagonal in brackets: local)");
    text_matrix(f, r, 1, cw_msg);
}

/* ---- memory ---------------------------------------------------------------------- */

static bool text_any_device(const moe_report_t *r)
{
    for (int i = 0; i < r->world_size; i++) {
        if (r->ranks[i].dev_peak > 0) {
            return true;
        }
    }
    return false;
}

static void text_memory(FILE *f, const moe_report_t *r)
{
    bool dev = text_any_device(r);
    int hw = text_host_width(r);
    text_rule(f, "Memory per rank (MiB = 2^20 bytes)");
    fprintf(f, "  %4s  %-*s  %13s", "rank", hw, "host", "peak RSS MiB");
    if (dev) {
        fprintf(f, "  %16s", "device peak MiB");
    }
    fprintf(f, "  %19s  %21s  %8s\n", "expert weights MiB", "exchange buffers MiB", "samples");
    for (int i = 0; i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        if (!k->present) {
            text_absent_row(f, r, i, hw);
            continue;
        }
        /* "-" where its last record did not come: the peaks are read at the end */
        char rss[24], devp[24];
        double known = k->peak_known ? 1.0 : NAN;
        text_fig(rss, sizeof(rss), "%.1f", known * (double)k->rss_peak / TEXT_MIB);
        text_fig(devp, sizeof(devp), "%.1f", known * (double)k->dev_peak / TEXT_MIB);
        fprintf(f, "  %4d  %-*.*s  %13s", i, hw, hw, text_host(r, i), rss);
        if (dev) {
            fprintf(f, "  %16s", devp);
        }
        fprintf(f, "  %19.1f  %21.1f  %8d\n", (double)k->expert_weight_bytes / TEXT_MIB,
                (double)k->exchange_buffer_bytes / TEXT_MIB, k->num_mem);
    }
}

/* "cpu 0.93 cores", or "cpu -" when not measured. */
static void text_cores(char *buf, size_t n, double cores)
{
    if (isnan(cores)) {
        snprintf(buf, n, "cpu -");
    } else {
        snprintf(buf, n, "cpu %.2f cores", cores);
    }
}

/* Each rank's process CPU time (every thread) over its wall time: the cores it kept busy.
 * A rank that only waits (the master in the combine) should cost little; an expert rank
 * computing with N BLAS threads should be near N unless ranks share cores. */
static void text_cpu(FILE *f, const moe_report_t *r)
{
    int hw = text_host_width(r);
    text_rule(f, "CPU per rank (process CPU time, all threads, over wall time = cores kept busy)");
    fprintf(f, "  %4s  %-*s  %7s  %18s  %18s\n", "rank", hw, "host", "experts",
            "recorded steps", "whole run");
    for (int i = 0; i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        if (!k->present) {
            text_absent_row(f, r, i, hw);
            continue;
        }
        char steps[32], run[32];
        text_cores(steps, sizeof(steps), moe_report_cpu_cores(k, false));
        text_cores(run, sizeof(run), moe_report_cpu_cores(k, true));
        fprintf(f, "  %4d  %-*.*s  %7d  %18s  %18s\n", i, hw, hw, text_host(r, i), k->num_local,
                steps, run);
    }
}

/* ---- findings -------------------------------------------------------------------- */

static void text_findings(FILE *f, const moe_report_t *r)
{
    moe_report_findings_t x;
    moe_report_find(r, &x);
    text_rule(f, "Findings");
    if (x.hot_layer >= 0) {
        const moe_rep_expert_t *e = &r->experts[x.hot_layer * r->num_experts + x.hot_expert];
        if (x.hot_by_demand) {
            fprintf(f,
                    "  * Hottest expert: layer %d expert %d (rank %d): demand %" PRIu64
                    " choices, %.2fx the mean of its layer; kept %" PRIu64 ", dropped %" PRIu64
                    ".\n",
                    x.hot_layer, x.hot_expert, e->rank, x.hot_demand, x.hot_share, x.hot_kept,
                    x.hot_dropped);
        } else {
            fprintf(f,
                    "  * Hottest expert: layer %d expert %d (rank %d) got %" PRIu64 " tokens, "
                    "%.2fx the mean of its layer (no demand recorded).\n",
                    x.hot_layer, x.hot_expert, e->rank, e->tokens, x.hot_share);
        }
    }
    if (x.dropped_total > 0) {
        fprintf(f, "  * Drops: %.1f%% of expert choices were dropped by the capacity limit (%" PRIu64
                   " of %" PRIu64 "); most:",
                100.0 * x.drop_share, x.dropped_total, x.demand_total);
        for (int i = 0; i < x.num_drops; i++) {
            fprintf(f, "%s layer %d expert %d (%" PRIu64 " of %" PRIu64 ")", i ? "," : "",
                    x.drop_layer[i], x.drop_expert[i], x.drop_count[i], x.drop_demand[i]);
        }
        fputs(".\n", f);
    }
    if (x.slow_layer >= 0) {
        fprintf(f,
                "  * Slowest expert: layer %d expert %d ran at %.2f GFLOP/s, %.2fx the median "
                "expert; its p99 call took %.3f ms.\n",
                x.slow_layer, x.slow_expert, x.slow_gflops, x.slow_vs_median, x.slow_p99_ns / 1e6);
    }
    if (x.straggler_rank >= 0) {
        const moe_rep_rank_t *k = &r->ranks[x.straggler_rank];
        fprintf(f, "  * Straggler rank: rank %d (%s) spends %.3f ms per step in its experts, "
                   "%.2fx the mean of the ranks with experts (a straggler is named from "
                   "%.2fx).\n",
                x.straggler_rank, text_host(r, x.straggler_rank),
                moe_report_expert_per_step_ns(k) / 1e6, x.straggler_ratio,
                MOE_STRAGGLER_MIN_RATIO);
    } else {
        fputs("  * Straggler: ", f);
        moe_report_print_straggler(&x, f);
        fputs(".\n", f);
    }
    if (x.exchange_wait_unknown != NULL) {
        fprintf(f, "  * Exchange: %.1f%% of step time is spent in the exchange, moving bytes and "
                   "waiting (%s: the routing rank's designed wait is unknown), and %.1f%% "
                   "waiting in the exchange for slower ranks (mean over the ranks present).\n",
                100.0 * x.exchange_share, x.exchange_wait_unknown, 100.0 * x.idle_share);
    } else {
        fprintf(f,
            "  * Exchange: %.1f%% of step time goes to moving bytes and %.1f%% to waiting in "
            "the exchange for slower ranks (load imbalance); the routing rank's designed wait, "
            "not imbalance, is %.1f%% (mean over the ranks present).\n",
            100.0 * x.exchange_share, 100.0 * x.idle_share, 100.0 * x.structural_wait_share);
    }
    if (x.idle_most_rank >= 0 && x.idle_most_share > 0.0005) {
        fprintf(f, "  * Most imbalance: rank %d (%s) waited %.1f%% of its step for rank %d (%s).\n",
                x.idle_most_rank, text_host(r, x.idle_most_rank), 100.0 * x.idle_most_share,
                x.idle_most_for, text_host(r, x.idle_most_for));
    }
    if (isfinite(x.hidden_share)) {
        fprintf(f,
                "  * Overlap: %.1f%% of exchange time was hidden behind expert compute "
                "(runtime.chunks %d; summed over the ranks present).\n",
                100.0 * x.hidden_share, r->chunks);
    }
    if (r->partial) {
        fprintf(f, "  * PARTIAL: missing %s; the findings cover the ranks present only.\n",
                r->missing[0] ? r->missing : "some ranks' records");
    }
}

moe_status_t moe_report_write_summary(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL || r->cfg == NULL || r->ranks == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "summary.txt: no report");
    }
    FILE *f = moe_report_open(r, "summary.txt", err);
    if (f == NULL) {
        return MOE_ERR_IO;
    }
    text_run_facts(f, r);
    text_time_split(f, r);
    text_latency(f, r);
    text_overlap(f, r);
    text_experts(f, r, -1);
    text_balance(f, r);
    text_hottest(f, r);
    text_rebalances(f, r);
    text_shared(f, r);
    text_comm(f, r);
    text_memory(f, r);
    text_cpu(f, r);
    text_findings(f, r);
    return moe_report_close(f, r, "summary.txt", err);
}

/* ---- one rank -------------------------------------------------------------------- */

static void text_rank_phases(FILE *f, const moe_rep_rank_t *k)
{
    text_rule(f, "Phases per recorded step (ms, summed over layers)");
    fprintf(f, "  %-10s %10s %10s %10s %12s\n", "phase", "min ms", "mean ms", "max ms", "total ms");
    for (int p = 0; p < MOE_PHASE_COUNT; p++) {
        const moe_rep_stat_t *s = &k->phase[p];
        double mean = s->n > 0 ? s->sum / (double)s->n : 0.0;
        fprintf(f, "  %-10s %10.3f %10.3f %10.3f %12.3f\n", moe_phase_name(p), s->min / 1e6,
                mean / 1e6, s->max / 1e6, s->sum / 1e6);
    }
    double v[TEXT_SPLIT];
    text_rank_split(k, v);
    fprintf(f,
            "\n  per step: compute %.3f ms (%.1f%%), exchange %.3f ms (%.1f%%), "
            "idle (imbalance) %.3f ms (%.1f%%), designed wait %.3f ms (%.1f%%) of %.3f ms\n",
            v[1], text_pct(v[1], v[0]), v[2], text_pct(v[2], v[0]), v[3], text_pct(v[3], v[0]),
            v[4], text_pct(v[4], v[0]), v[0]);
    char pct[16];
    text_share(pct, sizeof(pct), moe_report_hidden_share(k));
    fprintf(f,
            "  exchange in flight %.3f ms per step, %s of it hidden behind expert compute "
            "(%.3f ms); device %s, runtime.chunks %d\n",
            text_per_step_ms(k->inflight_ns, k->steps), pct,
            text_per_step_ms(k->hidden_ns, k->steps), k->device[0] ? k->device : "?", k->chunks);
}

static void text_rank_peers(FILE *f, const moe_report_t *r, int me)
{
    int w = r->world_size, hw = text_host_width(r);
    moe_report_rank_bytes_t b = moe_report_rank_bytes(r, me);
    text_rule(f, "Exchange with each peer (MB = 10^6 bytes; wait = time until that peer's rows "
                 "had arrived)");
    fprintf(f, "  to other ranks: sent %.3f MB, received %.3f MB; local copies %.3f MB (rows "
               "to its own\n  experts, never sent: the row marked \"local\")\n\n",
            (double)b.sent / TEXT_MB, (double)b.recv / TEXT_MB, (double)b.local / TEXT_MB);
    fprintf(f, "  %4s  %-*s  %10s  %10s  %9s  %9s  %10s\n", "peer", hw, "host", "sent MB",
            "recv MB", "msgs sent", "msgs recv", "wait ms");
    for (int j = 0; j < w; j++) {
        size_t out = (size_t)me * (size_t)w + (size_t)j, in = (size_t)j * (size_t)w + (size_t)me;
        char ms[32]; /* "-": unknown, never 0 */
        text_fig(ms, sizeof(ms), "%.3f", moe_report_wait_ms(r, me, j));
        fprintf(f, "  %4d  %-*.*s  %10.3f  %10.3f  %9" PRIu64 "  %9" PRIu64 "  %10s%s\n", j, hw,
                hw, text_host(r, j), r->bytes ? (double)r->bytes[out] / TEXT_MB : 0.0,
                r->bytes ? (double)r->bytes[in] / TEXT_MB : 0.0, r->msgs ? r->msgs[out] : 0,
                r->msgs ? r->msgs[in] : 0, ms, j == me ? "  local" : "");
    }
}

static void text_rank_memory(FILE *f, const moe_rep_rank_t *k)
{
    text_rule(f, "Memory (MiB = 2^20 bytes)");
    if (k->peak_known) {
        fprintf(f, "  peak RSS %.1f MiB", (double)k->rss_peak / TEXT_MIB);
    } else {
        fputs("  peak RSS - (its last record did not come)", f);
    }
    if (k->peak_known && k->dev_peak > 0) {
        fprintf(f, ", device peak %.1f MiB", (double)k->dev_peak / TEXT_MIB);
    }
    fprintf(f, "; expert weights %.1f MiB, exchange buffers %.1f MiB\n",
            (double)k->expert_weight_bytes / TEXT_MIB, (double)k->exchange_buffer_bytes / TEXT_MIB);
    if (k->num_mem <= 0 || k->mem == NULL) {
        fprintf(f, "  no samples\n");
        return;
    }
    double lo = 0, hi = 0, sum = 0;
    for (int i = 0; i < k->num_mem; i++) {
        double v = (double)k->mem[i].rss_bytes / TEXT_MIB;
        lo = i == 0 || v < lo ? v : lo;
        hi = i == 0 || v > hi ? v : hi;
        sum += v;
    }
    /* + 0.0 turns a rounded -0.000 into 0.000 */
    double first = round((double)k->mem[0].t_ns / 1e6) / 1e3 + 0.0;
    double last = round((double)k->mem[k->num_mem - 1].t_ns / 1e6) / 1e3 + 0.0;
    fprintf(f, "  %d samples from %.3f s to %.3f s after the first step: RSS min %.1f, mean %.1f, "
               "max %.1f MiB\n",
            k->num_mem, first, last, lo, sum / k->num_mem, hi);
}

static void text_rank_cpu(FILE *f, const moe_rep_rank_t *k)
{
    char steps[32], run[32];
    text_cores(steps, sizeof(steps), moe_report_cpu_cores(k, false));
    text_cores(run, sizeof(run), moe_report_cpu_cores(k, true));
    text_rule(f, "CPU (process CPU time, all threads, over wall time)");
    fprintf(f, "  recorded steps: %s; whole run: %s\n", steps, run);
}

static void text_rank_clock(FILE *f, const moe_rep_rank_t *k)
{
    text_rule(f, "Clock (this rank's clock minus rank 0's)");
    fprintf(f,
            "  offset at start %.3f us, at end %.3f us (drift %.3f us), uncertainty +/- %.3f us\n",
            k->clock_offset_ns / 1e3, k->clock_offset_end_ns / 1e3,
            (k->clock_offset_end_ns - k->clock_offset_ns) / 1e3, k->clock_uncertainty_ns / 1e3);
}

static moe_status_t text_write_rank(const moe_report_t *r, int me, moe_error_t *err)
{
    char name[64];
    const moe_rep_rank_t *k = &r->ranks[me];
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    snprintf(name, sizeof(name), "summary_rank_%d.txt", me);
    FILE *f = ids != NULL ? moe_report_open(r, name, err) : NULL;
    if (f == NULL) {
        free(ids);
        return ids == NULL ? moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory", name)
                           : MOE_ERR_IO;
    }
    int n = moe_cfg_experts_of_rank(r->cfg, me, ids);
    fprintf(f, "moed profile: rank %d (%s)\n", me, text_host(r, me));
    fprintf(f, "%" PRId64 " recorded steps; ", k->steps);
    if (n > 0) {
        fprintf(f, "%d expert%s hosted here: ", n, n == 1 ? "" : "s");
        text_id_ranges(f, ids, n);
    } else {
        fputs("no experts hosted here", f);
    }
    fprintf(f, "%s\n",
            r->cfg->routing == MOE_ROUTING_MASTER && me == r->cfg->master_rank
                ? "; routes every token"
                : "");
    free(ids);
    text_rank_phases(f, k);
    text_experts(f, r, me);
    text_rank_peers(f, r, me);
    text_rank_memory(f, k);
    text_rank_cpu(f, k);
    text_rank_clock(f, k);
    return moe_report_close(f, r, name, err);
}

moe_status_t moe_report_write_rank_summaries(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL || r->cfg == NULL || r->ranks == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "summary_rank_*.txt: no report");
    }
    for (int i = 0; i < r->world_size; i++) {
        if (!r->ranks[i].present) {
            continue;
        }
        moe_status_t st = text_write_rank(r, i, err);
        if (st != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}
