/* Rank 0's view and what the endpoints make of it: the Prometheus text (exposition format
 * 0.0.4), /status and the page's data (JSON through jansson). The caller holds v->mu. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/live_int.h"
#include "moe/clock.h"
#include "report/report.h"

#define LIVE_ALIVE_NS 3000000000LL /* a rank heard from within this is alive */

int live_view_init(live_view_t *v, const live_dims_t *d)
{
    memset(v, 0, sizeof(*v));
    v->dims = *d;
    v->start_ns = moe_now_ns();
    v->step = -1;
    atomic_init(&v->threads_cpu_ns, 0);
    v->snap = calloc((size_t)d->W, sizeof(int64_t *));
    v->snap_len = calloc((size_t)d->W, sizeof(size_t));
    v->snap_cap = calloc((size_t)d->W, sizeof(size_t));
    v->recv_ns = calloc((size_t)d->W, sizeof(int64_t));
    v->win.ranks = calloc((size_t)d->W, sizeof(bool));
    v->imb_base = calloc((size_t)LIVE_IMB_RING * (size_t)d->L * (size_t)d->E, sizeof(int64_t));
    v->lat = calloc((size_t)d->L + 1, sizeof(moe_hist_t));
    if (!v->snap || !v->snap_len || !v->snap_cap || !v->recv_ns || !v->win.ranks ||
        !v->imb_base || !v->lat || pthread_mutex_init(&v->mu, NULL) != 0) {
        return -1;
    }
    return 0;
}

int live_view_store(live_view_t *v, int r, const int64_t *m, size_t n)
{
    if (n > v->snap_cap[r]) {
        int64_t *p = realloc(v->snap[r], n * sizeof(int64_t));
        if (p == NULL) {
            return -1;
        }
        v->snap[r] = p;
        v->snap_cap[r] = n;
    }
    memcpy(v->snap[r], m, n * sizeof(int64_t));
    v->snap_len[r] = n;
    return 0;
}

void live_view_free(live_view_t *v)
{
    for (int r = 0; v->snap != NULL && r < v->dims.W; r++) {
        free(v->snap[r]);
    }
    free(v->snap);
    free(v->snap_len);
    free(v->snap_cap);
    free(v->recv_ns);
    free(v->win.ranks);
    free(v->imb_base);
    free(v->lat);
    v->lat = NULL;
    free(v->routing);
    v->routing = NULL;
    pthread_mutex_destroy(&v->mu);
}

void live_buf_printf(live_buf_t *b, const char *fmt, ...)
{
    if (b->failed) {
        return;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p != NULL ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap < 65536 ? 65536 : b->cap * 2;
        while (cap - b->len <= (size_t)n) {
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

void live_buf_free(live_buf_t *b)
{
    free(b->p);
    *b = (live_buf_t){0};
}

/* Rank r's latest message and its layout, or NULL before the first. */
static const int64_t *snap_of(const live_view_t *v, int r, moe_live_layout_t *lay)
{
    if (v->snap_len[r] == 0) {
        return NULL;
    }
    const int64_t *m = v->snap[r]; /* checked when it arrived */
    const live_dims_t *d = &v->dims;
    moe_live_layout_of(d->L, d->E, d->W, m[MOE_LIVE_HDR_ROUTES] != 0, m[MOE_LIVE_HDR_RKEYS],
                       d->per_expert, m[MOE_LIVE_HDR_GROUPS], lay);
    return m;
}

/* Tokens routed to (layer, expert) and dropped there, summed over the routing ranks;
 * dropped may be NULL. */
static void sum_routed(const live_view_t *v, int64_t *routed, int64_t *dropped)
{
    size_t le = (size_t)v->dims.L * (size_t)v->dims.E;
    memset(routed, 0, le * sizeof(int64_t));
    if (dropped != NULL) {
        memset(dropped, 0, le * sizeof(int64_t));
    }
    for (int r = 0; r < v->dims.W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        if (m == NULL || !lay.routes) {
            continue;
        }
        for (int64_t i = 0; i < lay.rkeys; i++) {
            routed[m[lay.rkey + (size_t)i] / v->dims.W] += m[lay.rrows + (size_t)i];
        }
        for (size_t i = 0; dropped != NULL && i < le; i++) {
            dropped[i] += m[lay.dropped + i];
        }
    }
}

void live_view_sample_routed(live_view_t *v, int64_t now_ns)
{
    size_t le = (size_t)v->dims.L * (size_t)v->dims.E;
    int last = (v->imb_head + LIVE_IMB_RING - 1) % LIVE_IMB_RING;
    if (v->imb_n > 0 && now_ns - v->imb_t[last] < LIVE_IMB_EVERY_NS) {
        return;
    }
    sum_routed(v, v->imb_base + (size_t)v->imb_head * le, NULL);
    v->imb_t[v->imb_head] = now_ns;
    v->imb_head = (v->imb_head + 1) % LIVE_IMB_RING;
    v->imb_n += v->imb_n < LIVE_IMB_RING;
}

/* The baseline of the recent imbalance: the newest snapshot at least LIVE_IMB_WINDOW_NS
 * old, else the oldest there is (NULL: none yet, counts since the start). */
static const int64_t *imb_baseline(const live_view_t *v)
{
    size_t le = (size_t)v->dims.L * (size_t)v->dims.E;
    int64_t now = moe_now_ns();
    const int64_t *base = NULL;
    for (int i = 1; i <= v->imb_n; i++) { /* newest first */
        int k = (v->imb_head + LIVE_IMB_RING - i) % LIVE_IMB_RING;
        base = v->imb_base + (size_t)k * le;
        if (now - v->imb_t[k] >= LIVE_IMB_WINDOW_NS) {
            break;
        }
    }
    return base;
}

/* The busiest expert's tokens over the layer's mean, over the counts since base (may be
 * NULL: since the start). */
static double imbalance(const int64_t *row, const int64_t *base, int E)
{
    int64_t max = 0, sum = 0;
    for (int e = 0; e < E; e++) {
        int64_t n = row[e] - (base != NULL ? base[e] : 0);
        sum += n;
        max = n > max ? n : max;
    }
    return sum > 0 ? (double)max * E / (double)sum : 0.0;
}

static void help_type(live_buf_t *o, const char *name, const char *type, const char *help)
{
    live_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series: cumulative buckets, _sum (seconds), _count. */
static void histogram(live_buf_t *o, const char *name, const char *labels, const int64_t *h)
{
    int64_t cum = 0;
    const char *sep = labels[0] != '\0' ? "," : "";
    for (int b = 0; b < MOE_LIVE_NB; b++) {
        cum += h[b];
        if (b < MOE_LIVE_NB - 1) {
            live_buf_printf(o, "%s_bucket{%s%sle=\"%g\"} %lld\n", name, labels, sep,
                            moe_live_bucket_s[b], (long long)cum);
        } else {
            live_buf_printf(o, "%s_bucket{%s%sle=\"+Inf\"} %lld\n", name, labels, sep,
                            (long long)cum);
        }
    }
    const char *open = labels[0] != '\0' ? "{" : "", *close = labels[0] != '\0' ? "}" : "";
    live_buf_printf(o, "%s_sum%s%s%s %.9f\n%s_count%s%s%s %lld\n", name, open, labels, close,
                    (double)h[MOE_LIVE_NB] * 1e-9, name, open, labels, close, (long long)cum);
}

/* Rows the routing ranks sent to each (layer, expert, rank) they ever sent to: [L*E*W],
 * -1 where none did (no series). NULL: no memory. */
static int64_t *sum_routed_ranks(const live_view_t *v)
{
    const live_dims_t *d = &v->dims;
    size_t n = (size_t)d->L * (size_t)d->E * (size_t)d->W;
    int64_t *t = malloc(n * sizeof(int64_t));
    if (t == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        t[i] = -1;
    }
    for (int r = 0; r < d->W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        for (int64_t i = 0; m != NULL && lay.routes && i < lay.rkeys; i++) {
            int64_t *x = &t[m[lay.rkey + (size_t)i]];
            *x = (*x < 0 ? 0 : *x) + m[lay.rrows + (size_t)i];
        }
    }
    return t;
}

static void render_experts(const live_view_t *v, live_buf_t *o, const int64_t *routed,
                           const int64_t *dropped)
{
    const live_dims_t *d = &v->dims;
    help_type(o, "moed_expert_tokens_total", "counter",
              "Tokens routed to the expert (after capacity) on the rank that computed them, from "
              "the routing ranks' counts; an expert moved or replicated has a series per rank.");
    int64_t *per_rank = sum_routed_ranks(v);
    if (per_rank == NULL) {
        o->failed = true;
        return;
    }
    for (size_t i = 0; i < (size_t)d->L * (size_t)d->E * (size_t)d->W; i++) {
        if (per_rank[i] >= 0) {
            size_t le = i / (size_t)d->W;
            live_buf_printf(o, "moed_expert_tokens_total{layer=\"%d\",expert=\"%d\",rank=\"%d\"} "
                            "%lld\n", (int)(le / (size_t)d->E), (int)(le % (size_t)d->E),
                            (int)(i % (size_t)d->W), (long long)per_rank[i]);
        }
    }
    free(per_rank);
    help_type(o, "moed_tokens_dropped_total", "counter",
              "Expert choices dropped by the capacity limit.");
    for (int l = 0; l < d->L; l++) {
        for (int e = 0; e < d->E; e++) {
            live_buf_printf(o, "moed_tokens_dropped_total{layer=\"%d\",expert=\"%d\"} %lld\n", l,
                            e, (long long)dropped[(size_t)l * d->E + e]);
        }
    }
    help_type(o, "moed_layer_imbalance", "gauge",
              "Tokens routed to the layer's busiest expert over the mean, over the last ~10 s "
              "(rank 0's counts since its snapshot of 10 to 11 s ago; since the start for the "
              "first 10 s).");
    const int64_t *base = imb_baseline(v);
    for (int l = 0; l < d->L; l++) {
        size_t o0 = (size_t)l * d->E;
        live_buf_printf(o, "moed_layer_imbalance{layer=\"%d\"} %.6f\n", l,
                        imbalance(routed + o0, base != NULL ? base + o0 : NULL, d->E));
    }
}

static void render_expert_seconds(const live_view_t *v, live_buf_t *o)
{
    const live_dims_t *d = &v->dims;
    help_type(o, "moed_expert_seconds", "histogram",
              d->per_expert ? "Busy time of one expert in one layer of one step."
                            : "Busy time of one expert in one layer of one step, per layer "
                              "and hosting rank (profiler.expert_histograms).");
    char labels[96];
    for (int r = 0; r < d->W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        for (int g = 0; m != NULL && g < (int)lay.groups; g++) {
            const int64_t *h = m + lay.ehist + (size_t)g * (MOE_LIVE_NB + 1);
            if (d->per_expert) {
                int64_t key = m[lay.hkey + (size_t)g]; /* layer * E + expert, as it ran */
                snprintf(labels, sizeof(labels), "layer=\"%d\",expert=\"%d\",rank=\"%d\"",
                         (int)(key / d->E), (int)(key % d->E), r);
            } else {
                snprintf(labels, sizeof(labels), "layer=\"%d\",rank=\"%d\"", g, r);
            }
            histogram(o, "moed_expert_seconds", labels, h);
        }
    }
}

static void render_ranks(const live_view_t *v, live_buf_t *o)
{
    const live_dims_t *d = &v->dims;
    help_type(o, "moed_exchange_bytes_total", "counter",
              "Token-row bytes sent from rank src to rank dst (dispatch and combine).");
    for (int r = 0; r < d->W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        for (int dst = 0; m != NULL && dst < d->W; dst++) {
            if (dst != r) {
                live_buf_printf(o, "moed_exchange_bytes_total{src=\"%d\",dst=\"%d\"} %lld\n", r,
                                dst, (long long)m[lay.bytes + (size_t)dst]);
            }
        }
    }
    help_type(o, "moed_rank_resident_bytes", "gauge", "Resident memory of the rank's process.");
    for (int r = 0; r < d->W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        if (m != NULL) {
            live_buf_printf(o, "moed_rank_resident_bytes{rank=\"%d\"} %lld\n", r,
                            (long long)m[MOE_LIVE_HDR_RSS]);
        }
    }
    help_type(o, "moed_rank_last_step", "gauge", "The last step the rank reported done.");
    for (int r = 0; r < d->W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        if (m != NULL) {
            live_buf_printf(o, "moed_rank_last_step{rank=\"%d\"} %lld\n", r,
                            (long long)m[MOE_LIVE_HDR_STEP]);
        }
    }
}

/* A label value as the exposition format wants it: backslash, quote and newline escaped. */
static void label_value(live_buf_t *o, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '\\': live_buf_printf(o, "\\\\"); break;
        case '"': live_buf_printf(o, "\\\""); break;
        case '\n': live_buf_printf(o, "\\n"); break;
        default: live_buf_printf(o, "%c", *s);
        }
    }
}

/* Where the expert choices come from, as an info gauge (always 1; the labels say it). */
static void render_routing(const live_view_t *v, live_buf_t *o)
{
    moe_report_routing_src_t *src = malloc(sizeof(*src));
    if (src == NULL) {
        o->failed = true;
        return;
    }
    moe_report_routing_parse(v->routing, src);
    bool replayed = strcmp(src->kind, "replayed") == 0;
    help_type(o, "moed_routing_info", "gauge",
              "Where the expert choices come from: source \"router\" (the gate chose them) or "
              "\"replayed\" (workload.routing) with the trace's file and its own source; "
              "always 1.");
    live_buf_printf(o, "moed_routing_info{source=\"");
    label_value(o, src->kind);
    live_buf_printf(o, "\",file=\"");
    label_value(o, replayed ? src->file : "");
    live_buf_printf(o, "\",trace_source=\"");
    label_value(o, replayed ? src->trace_source : "");
    live_buf_printf(o, "\"} 1\n");
    free(src);
}

/* One summary's series: p50, p90 and p99 (NaN before the first sample), _sum (seconds) and
 * _count, from a latency histogram (quantiles within 1/32 of the value). */
static void summary(live_buf_t *o, const char *name, const char *labels, const moe_hist_t *h)
{
    static const char *const qn[3] = {"0.5", "0.9", "0.99"};
    static const double qv[3] = {0.5, 0.9, 0.99};
    const char *sep = labels[0] != '\0' ? "," : "";
    for (int i = 0; i < 3; i++) {
        if (h->count > 0) {
            live_buf_printf(o, "%s{%s%squantile=\"%s\"} %.9f\n", name, labels, sep, qn[i],
                            moe_hist_quantile(h, qv[i]) * 1e-9);
        } else {
            live_buf_printf(o, "%s{%s%squantile=\"%s\"} NaN\n", name, labels, sep, qn[i]);
        }
    }
    const char *open = labels[0] != '\0' ? "{" : "", *close = labels[0] != '\0' ? "}" : "";
    live_buf_printf(o, "%s_sum%s%s%s %.9f\n%s_count%s%s%s %llu\n", name, open, labels, close,
                    h->sum * 1e-9, name, open, labels, close, (unsigned long long)h->count);
}

/* Rank 0's own step and layer latencies since the start, as summaries (decode is judged
 * by the tail: p50, p90, p99 per layer and for the step). */
static void render_latency(const live_view_t *v, live_buf_t *o)
{
    help_type(o, "moed_step_latency_seconds", "summary",
              "Wall time of one step on rank 0 since the start: p50, p90, p99 (within 1/32).");
    summary(o, "moed_step_latency_seconds", "", &v->lat[v->dims.L]);
    help_type(o, "moed_layer_latency_seconds", "summary",
              "Time of one layer in one step on rank 0 (its gate's begin to its merge's end) "
              "since the start: p50, p90, p99 (within 1/32).");
    char labels[32];
    for (int l = 0; l < v->dims.L; l++) {
        snprintf(labels, sizeof(labels), "layer=\"%d\"", l);
        summary(o, "moed_layer_latency_seconds", labels, &v->lat[l]);
    }
}

void live_render_metrics(const live_view_t *v, live_buf_t *o)
{
    size_t le = (size_t)v->dims.L * (size_t)v->dims.E;
    int64_t *routed = malloc(le * sizeof(int64_t)), *dropped = malloc(le * sizeof(int64_t));
    if (routed == NULL || dropped == NULL) {
        o->failed = true;
        goto out;
    }
    sum_routed(v, routed, dropped);
    help_type(o, "moed_steps_total", "counter", "Steps rank 0 has completed.");
    live_buf_printf(o, "moed_steps_total %lld\n", (long long)(v->step + 1));
    help_type(o, "moed_step_seconds", "histogram", "Wall time of one step on rank 0.");
    moe_live_layout_t lay;
    const int64_t *m0 = snap_of(v, 0, &lay);
    int64_t zero[MOE_LIVE_NB + 1] = {0};
    histogram(o, "moed_step_seconds", "", m0 != NULL ? m0 + lay.step_hist : zero);
    render_latency(v, o);
    render_routing(v, o);
    render_experts(v, o, routed, dropped);
    render_expert_seconds(v, o);
    render_ranks(v, o);
out:
    free(routed);
    free(dropped);
}

/* tokens/s over about the last five seconds of rank 0's steps */
static double tokens_per_s(const live_view_t *v)
{
    if (v->rate_n < 2) {
        return 0.0;
    }
    int newest = (v->rate_head + LIVE_RATE_RING - 1) % LIVE_RATE_RING;
    int oldest = newest;
    for (int i = 1; i < v->rate_n; i++) {
        int k = (newest + LIVE_RATE_RING - i) % LIVE_RATE_RING;
        if (v->rate_t[newest] - v->rate_t[k] > 5000000000LL) {
            break;
        }
        oldest = k;
    }
    double dt = (double)(v->rate_t[newest] - v->rate_t[oldest]) * 1e-9;
    return dt > 0 ? (double)(v->rate_s[newest] - v->rate_s[oldest]) *
                        (double)v->dims.tokens_per_step / dt
                  : 0.0;
}

static const char *win_state_name(live_win_state_t s)
{
    static const char *const names[] = {"idle", "requested", "open", "writing"};
    return names[s];
}

static json_t *status_ranks(const live_view_t *v, int64_t now)
{
    json_t *ranks = json_array();
    for (int r = 0; r < v->dims.W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        json_t *o = json_object();
        json_object_set_new(o, "rank", json_integer(r));
        if (m == NULL) {
            json_object_set_new(o, "alive", json_false());
            json_object_set_new(o, "last_step", json_null());
        } else {
            bool alive = now - v->recv_ns[r] < LIVE_ALIVE_NS || m[MOE_LIVE_HDR_KIND] == MOE_LIVE_KIND_FIN;
            json_object_set_new(o, "alive", json_boolean(alive));
            json_object_set_new(o, "last_step", json_integer(m[MOE_LIVE_HDR_STEP]));
            json_object_set_new(o, "seconds_since_heard",
                                json_real((double)(now - v->recv_ns[r]) * 1e-9));
            json_object_set_new(o, "resident_bytes", json_integer(m[MOE_LIVE_HDR_RSS]));
        }
        json_array_append_new(ranks, o);
    }
    return ranks;
}

static json_t *status_window(const live_view_t *v)
{
    const live_window_t *w = &v->win;
    json_t *o = json_object();
    json_object_set_new(o, "state", json_string(win_state_name(w->state)));
    if (w->state != LIVE_WIN_IDLE) {
        json_object_set_new(o, "id", json_integer(w->id));
        json_object_set_new(o, "steps", json_integer(w->steps));
        json_object_set_new(o, "folder", json_string(w->name));
    }
    if (w->state == LIVE_WIN_OPEN || w->state == LIVE_WIN_WRITING) {
        json_object_set_new(o, "first_step", json_integer(w->open_step + 1));
        json_object_set_new(o, "last_step", json_integer(w->close_step));
    }
    return o;
}

const char *live_output_dir_name(const live_view_t *v, char *dir, size_t n)
{
    snprintf(dir, n, "%s", v->output_dir);
    for (size_t len = strlen(dir); len > 1 && dir[len - 1] == '/'; len--) {
        dir[len - 1] = '\0'; /* "dir/" */
    }
    const char *slash = strrchr(dir, '/');
    return slash != NULL && slash[1] != '\0' ? slash + 1 : dir;
}

char *live_render_status(const live_view_t *v)
{
    int64_t now = moe_now_ns();
    json_t *root = json_object();
    json_object_set_new(root, "step", json_integer(v->step));
    json_object_set_new(root, "steps_total", json_integer(v->step + 1));
    json_object_set_new(root, "tokens_per_s", json_real(tokens_per_s(v)));
    json_object_set_new(root, "uptime_s", json_real((double)(now - v->start_ns) * 1e-9));
    json_object_set_new(root, "finished", json_boolean(v->finished));
    json_object_set_new(root, "world", json_integer(v->dims.W));
    json_object_set_new(root, "layers", json_integer(v->dims.L));
    json_object_set_new(root, "experts", json_integer(v->dims.E));
    json_object_set_new(root, "control", json_boolean(v->token[0] != '\0'));
    json_object_set_new(root, "ranks", status_ranks(v, now));
    json_object_set_new(root, "window", status_window(v));
    json_t *reps = json_array();
    for (int i = 0; i < v->num_reports; i++) {
        json_array_append_new(reps, json_string(v->reports[i]));
    }
    json_object_set_new(root, "reports", reps);
    json_object_set_new(root, "reports_written", json_integer(v->reports_written));
    /* read without a token: the folder's name, never the path to it */
    char dir[MOE_PATH_MAX];
    json_object_set_new(root, "output_dir",
                        json_string(live_output_dir_name(v, dir, sizeof(dir))));
    if (v->last_error[0] != '\0') {
        json_object_set_new(root, "last_error", json_string(v->last_error));
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

static json_t *int_array(const int64_t *x, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(a, json_integer(x[i]));
    }
    return a;
}

static json_t *data_ranks(const live_view_t *v, json_t *root)
{
    const live_dims_t *d = &v->dims;
    json_t *bytes = json_array(), *rss = json_array();
    for (int r = 0; r < d->W; r++) {
        moe_live_layout_t lay;
        const int64_t *m = snap_of(v, r, &lay);
        if (m == NULL) {
            json_array_append_new(bytes, json_array());
            json_array_append_new(rss, json_integer(0));
            continue;
        }
        json_array_append_new(bytes, int_array(m + lay.bytes, (size_t)d->W));
        json_array_append_new(rss, json_integer(m[MOE_LIVE_HDR_RSS]));
    }
    json_object_set_new(root, "bytes", bytes);
    json_object_set_new(root, "resident", rss);
    return root;
}

/* For each layer and expert, the ranks the routing ranks sent its tokens to (the page's
 * hover titles name them): [L][E][ranks], NULL when out of memory. */
static json_t *expert_ranks(const live_view_t *v)
{
    const live_dims_t *d = &v->dims;
    int64_t *per_rank = sum_routed_ranks(v);
    if (per_rank == NULL) {
        return NULL;
    }
    json_t *layers = json_array();
    for (int l = 0; l < d->L; l++) {
        json_t *experts = json_array();
        for (int e = 0; e < d->E; e++) {
            json_t *ranks = json_array();
            const int64_t *t = per_rank + ((size_t)l * d->E + e) * (size_t)d->W;
            for (int r = 0; r < d->W; r++) {
                if (t[r] >= 0) {
                    json_array_append_new(ranks, json_integer(r));
                }
            }
            json_array_append_new(experts, ranks);
        }
        json_array_append_new(layers, experts);
    }
    free(per_rank);
    return layers;
}

char *live_render_data(const live_view_t *v)
{
    const live_dims_t *d = &v->dims;
    size_t le = (size_t)d->L * (size_t)d->E;
    int64_t *routed = malloc(le * sizeof(int64_t)), *dropped = malloc(le * sizeof(int64_t));
    char *s = NULL;
    if (routed == NULL || dropped == NULL) {
        goto out;
    }
    sum_routed(v, routed, dropped);
    json_t *root = json_object();
    json_object_set_new(root, "step", json_integer(v->step));
    json_object_set_new(root, "layers", json_integer(d->L));
    json_object_set_new(root, "experts", json_integer(d->E));
    json_object_set_new(root, "world", json_integer(d->W));
    const int64_t *base = imb_baseline(v);
    json_t *tok = json_array(), *imb = json_array();
    for (int l = 0; l < d->L; l++) {
        json_array_append_new(tok, int_array(routed + (size_t)l * d->E, (size_t)d->E));
        size_t o0 = (size_t)l * d->E;
        json_array_append_new(imb, json_real(imbalance(routed + o0,
                                                       base != NULL ? base + o0 : NULL, d->E)));
    }
    json_object_set_new(root, "tokens", tok);
    json_object_set_new(root, "imbalance", imb);
    json_t *hosts = expert_ranks(v);
    if (hosts == NULL) {
        json_decref(root);
        goto out;
    }
    json_object_set_new(root, "expert_ranks", hosts);
    json_t *ms = json_array(), *idx = json_array();
    for (int i = v->step_n; i > 0; i--) {
        int k = (v->step_head + LIVE_STEP_RING - i) % LIVE_STEP_RING;
        json_array_append_new(ms, json_real(v->step_ms[k]));
        json_array_append_new(idx, json_integer(v->step_idx[k]));
    }
    json_object_set_new(root, "step_ms", ms);
    json_object_set_new(root, "step_index", idx);
    json_object_set_new(root, "tokens_per_s", json_real(tokens_per_s(v)));
    data_ranks(v, root);
    s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
out:
    free(routed);
    free(dropped);
    return s;
}
