/* The routing as the report shows it: where the expert choices came from (the router, or
 * a replayed trace), and the shape of each layer's choices (its hottest expert's share,
 * the entropy of its experts' shares), the hottest (layer, expert) pairs of the run. From
 * the layers' demand: the routing ranks' choices before the capacity limit, so a replayed
 * trace and a run of the router read the same way. */
#include "report/report.h"

#include <math.h>
#include <string.h>

void moe_report_routing_parse(const char *text, moe_report_routing_src_t *out)
{
    memset(out, 0, sizeof(*out));
    const char *s = text != NULL ? text : "";
    while (*s == ' ') {
        s++;
    }
    if (*s == '\0') {
        s = "router";
    }
    out->detail = text != NULL && *text != '\0' ? text : "router";
    size_t word = strcspn(s, " ");
    snprintf(out->kind, sizeof(out->kind), "%.*s", (int)word, s);
    if (strcmp(out->kind, "replayed") != 0) {
        return;
    }
    const char *rest = s + word;
    while (*rest == ' ') {
        rest++;
    }
    size_t n = strlen(rest);
    while (n > 0 && rest[n - 1] == ' ') {
        n--;
    }
    size_t file_end = n;
    if (n > 0 && rest[n - 1] == ')') { /* the last parenthesis, nested ones inside it */
        int depth = 0;
        for (size_t i = n; i-- > 0;) {
            depth += rest[i] == ')' ? 1 : rest[i] == '(' ? -1 : 0;
            if (depth == 0) {
                if (i > 0 && rest[i - 1] == ' ') {
                    snprintf(out->trace_source, sizeof(out->trace_source), "%.*s",
                             (int)(n - i - 2), rest + i + 1);
                    file_end = i - 1;
                }
                break;
            }
        }
    }
    snprintf(out->file, sizeof(out->file), "%.*s", (int)file_end, rest);
}

void moe_report_routing_counts(const uint64_t *counts, int n, moe_report_layer_routing_t *out)
{
    memset(out, 0, sizeof(*out));
    out->hottest_expert = -1;
    out->hottest_share = out->max_mean = out->entropy_bits = out->entropy_norm = NAN;
    for (int e = 0; counts != NULL && e < n; e++) {
        out->choices += counts[e];
        if (counts[e] > out->hottest_count) {
            out->hottest_count = counts[e];
            out->hottest_expert = e;
        }
    }
    if (out->choices == 0) {
        return;
    }
    double total = (double)out->choices, h = 0.0;
    for (int e = 0; e < n; e++) {
        double p = (double)counts[e] / total;
        h -= p > 0.0 ? p * log2(p) : 0.0;
    }
    out->hottest_share = (double)out->hottest_count / total;
    out->max_mean = out->hottest_share * n;
    out->entropy_bits = h > 0.0 ? h : 0.0; /* no "-0" for one expert */
    out->entropy_norm = n > 1 ? out->entropy_bits / log2((double)n) : NAN;
}

void moe_report_layer_routing(const moe_report_t *r, int layer, moe_report_layer_routing_t *out)
{
    bool ok = r != NULL && r->layers != NULL && layer >= 0 && layer < r->num_layers;
    moe_report_routing_counts(ok ? r->layers[layer].demand : NULL, ok ? r->num_experts : 0, out);
}

void moe_report_run_routing(const moe_report_t *r, moe_report_run_routing_t *out)
{
    double share = 0.0, bits = 0.0, norm = 0.0;
    memset(out, 0, sizeof(*out));
    out->entropy_norm_min = NAN;
    out->entropy_norm_min_layer = -1;
    for (int l = 0; r != NULL && r->layers != NULL && l < r->num_layers; l++) {
        moe_report_layer_routing_t y;
        moe_report_layer_routing(r, l, &y);
        out->choices += y.choices;
        out->choices_unknown = out->choices_unknown || r->layers[l].demand_unknown;
        if (y.choices == 0) {
            continue;
        }
        out->layers_with_choices++;
        share += y.hottest_share;
        bits += y.entropy_bits;
        norm += y.entropy_norm;
        if (out->entropy_norm_min_layer < 0 || y.entropy_norm < out->entropy_norm_min) {
            out->entropy_norm_min = y.entropy_norm;
            out->entropy_norm_min_layer = l;
        }
    }
    double per = out->layers_with_choices > 0 ? 1.0 / out->layers_with_choices : NAN;
    out->hottest_share_mean = share * per;
    out->entropy_bits_mean = bits * per;
    out->entropy_norm_mean = norm * per;
}

static uint64_t routing_at(const uint64_t *v, int e)
{
    return v != NULL ? v[e] : 0;
}

/* Insert (l, e) into the n-long sorted list top[*have] if it belongs there: by share, most
 * first; a tie keeps the earlier (lower layer, lower expert) first. */
static void routing_insert(const moe_report_t *r, int l, int e, uint64_t choices,
                           moe_report_hot_t *top, int *have, int n)
{
    const moe_rep_layer_t *y = &r->layers[l];
    uint64_t d = routing_at(y->demand, e);
    if (d == 0 || choices == 0 || n <= 0) {
        return;
    }
    double share = (double)d / (double)choices;
    int at = *have;
    while (at > 0 && top[at - 1].share < share) {
        at--;
    }
    if (at >= n) {
        return;
    }
    int last = *have < n ? *have : n - 1;
    memmove(&top[at + 1], &top[at], sizeof(*top) * (size_t)(last - at));
    top[at] = (moe_report_hot_t){l, e, d, routing_at(y->kept, e), routing_at(y->dropped, e),
                                 share, share * r->num_experts};
    *have += *have < n;
}

static uint64_t routing_choices(const moe_report_t *r, int l)
{
    uint64_t s = 0;
    for (int e = 0; r->layers[l].demand != NULL && e < r->num_experts; e++) {
        s += r->layers[l].demand[e];
    }
    return s;
}

int moe_report_hottest(const moe_report_t *r, moe_report_hot_t *out, int n)
{
    int have = 0;
    for (int l = 0; r != NULL && r->layers != NULL && l < r->num_layers; l++) {
        uint64_t choices = routing_choices(r, l);
        for (int e = 0; e < r->num_experts; e++) {
            routing_insert(r, l, e, choices, out, &have, n);
        }
    }
    return have;
}

int moe_report_layer_hottest(const moe_report_t *r, int layer, moe_report_hot_t *out, int n)
{
    int have = 0;
    if (r == NULL || r->layers == NULL || layer < 0 || layer >= r->num_layers) {
        return 0;
    }
    uint64_t choices = routing_choices(r, layer);
    for (int e = 0; e < r->num_experts; e++) {
        routing_insert(r, layer, e, choices, out, &have, n);
    }
    return have;
}
