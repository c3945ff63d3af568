/* Per-rank load of one layer from summary.json's experts[] and replicas[] rows
 * (rank_load.h). */
#include "compare/rank_load.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compare/json_lookup.h"

static int row_int(const json_t *v, const char *key)
{
    double x = moe_json_num(json_object_get(v, key), -1.0);
    return x >= 0.0 && x <= 1e9 ? (int)x : -1;
}

/* Row i of a summary.json array when it is one of `layer`'s, with an expert and a rank in
 * range: true, its expert and rank set. */
static bool layer_row(const json_t *rows, size_t i, int layer, int W, int E, int *e, int *r)
{
    const json_t *x = json_array_get(rows, i);
    *e = row_int(x, "expert");
    *r = row_int(x, "rank");
    return row_int(x, "layer") == layer && *e >= 0 && *e < E && *r >= 0 && *r < W;
}

/* A row's tokens; NAN when null or absent (a host not profiled or lost): not 0. */
static double row_tokens(const json_t *rows, size_t i)
{
    return moe_json_num(json_object_get(json_array_get(rows, i), "tokens"), NAN);
}

/* Copies of each expert of the layer: replicas[] rows where the expert has several,
 * else experts[].rank. */
static void layer_copies(const json_t *doc, int layer, int W, int E, uint8_t *copies,
                         int *ncopy)
{
    const json_t *reps = json_object_get(doc, "replicas");
    const json_t *list = json_object_get(doc, "experts");
    int e, r;
    for (size_t i = 0; i < moe_json_count(reps); i++) {
        if (layer_row(reps, i, layer, W, E, &e, &r) && !copies[(size_t)r * E + e]) {
            copies[(size_t)r * E + e] = 1;
            ncopy[e]++;
        }
    }
    for (size_t i = 0; i < moe_json_count(list); i++) {
        if (layer_row(list, i, layer, W, E, &e, &r) && ncopy[e] == 0) {
            copies[(size_t)r * E + e] = 1;
            ncopy[e] = 1;
        }
    }
}

/* The rows each copy computed: replicas[] for an expert with several, experts[] else. */
static void layer_tokens(const json_t *doc, int layer, int W, int E, const int *ncopy,
                         double *load)
{
    const json_t *reps = json_object_get(doc, "replicas");
    const json_t *list = json_object_get(doc, "experts");
    int e, r;
    for (size_t i = 0; i < moe_json_count(reps); i++) {
        if (layer_row(reps, i, layer, W, E, &e, &r) && ncopy[e] > 1) {
            load[r] += row_tokens(reps, i);
        }
    }
    for (size_t i = 0; i < moe_json_count(list); i++) {
        if (layer_row(list, i, layer, W, E, &e, &r) && ncopy[e] == 1) {
            load[r] += row_tokens(list, i);
        }
    }
}

int moe_rank_loads(const json_t *doc, int layer, int W, int E, const double *demand,
                   double *load, uint8_t *copies)
{
    uint8_t *own = copies != NULL ? copies : calloc((size_t)W * E, 1);
    int *ncopy = calloc((size_t)(E > 0 ? E : 1), sizeof(int));
    int hosts = 0;
    memset(load, 0, sizeof(double) * (size_t)W);
    if (own == NULL || ncopy == NULL) {
        goto done;
    }
    memset(own, 0, (size_t)W * E);
    layer_copies(doc, layer, W, E, own, ncopy);
    if (demand == NULL) {
        layer_tokens(doc, layer, W, E, ncopy, load);
    }
    for (int r = 0; r < W; r++) {
        bool any = false;
        for (int e = 0; e < E; e++) {
            if (own[(size_t)r * E + e]) {
                any = true;
                load[r] += demand != NULL ? demand[e] / ncopy[e] : 0.0;
            }
        }
        hosts += any ? 1 : 0;
    }
done:
    if (own != copies) {
        free(own);
    }
    free(ncopy);
    return hosts;
}

void moe_rank_load_stats(const double *load, const uint8_t *copies, int W, int E, double *mx,
                         double *mean)
{
    double m = 0, sum = 0;
    int hosts = 0;
    for (int r = 0; r < W; r++) {
        bool any = false;
        for (int e = 0; e < E && !any; e++) {
            any = copies[(size_t)r * E + e] != 0;
        }
        if (any) {
            m = !isfinite(load[r]) ? NAN : load[r] > m ? load[r] : m;
            sum += load[r];
            hosts++;
        }
    }
    *mx = isfinite(sum) ? m : NAN; /* a host's load unknown: the busiest is not known */
    *mean = hosts > 0 ? sum / hosts : 0.0;
}

/* One row's compute time in ms: busy_ms (replicas[]), else latency_ms.mean x calls
 * (experts[]); 0 for a copy that was never called (its mean is null: no call to average,
 * not a time unknown), NAN when not known (calls null: the rank was not profiled). */
static double row_ms(const json_t *x)
{
    const json_t *busy = json_object_get(x, "busy_ms");
    if (busy != NULL) {
        return moe_json_num(busy, NAN);
    }
    double calls = moe_json_num(json_object_get(x, "calls"), NAN);
    if (calls == 0.0) {
        return 0.0;
    }
    double mean = moe_json_num(json_object_get(json_object_get(x, "latency_ms"), "mean"), NAN);
    return mean * calls;
}

int moe_rank_times(const json_t *doc, int layer, int W, int E, double *ms)
{
    uint8_t *copies = calloc((size_t)W * (size_t)(E > 0 ? E : 1), 1);
    int *ncopy = calloc((size_t)(E > 0 ? E : 1), sizeof(int));
    int known = 0, e, r;
    memset(ms, 0, sizeof(double) * (size_t)W);
    if (copies == NULL || ncopy == NULL) {
        goto done;
    }
    layer_copies(doc, layer, W, E, copies, ncopy);
    const json_t *reps = json_object_get(doc, "replicas");
    const json_t *list = json_object_get(doc, "experts");
    for (size_t i = 0; i < moe_json_count(reps); i++) {
        if (layer_row(reps, i, layer, W, E, &e, &r) && ncopy[e] > 1) {
            ms[r] += row_ms(json_array_get(reps, i));
        }
    }
    for (size_t i = 0; i < moe_json_count(list); i++) {
        if (layer_row(list, i, layer, W, E, &e, &r) && ncopy[e] == 1) {
            ms[r] += row_ms(json_array_get(list, i));
        }
    }
    for (r = 0; r < W; r++) {
        known += isfinite(ms[r]) ? 1 : 0;
    }
done:
    free(copies);
    free(ncopy);
    return known;
}

int64_t moe_rank_moved(const json_t *doc, int64_t *times)
{
    const json_t *rb = json_object_get(doc, "rebalances");
    int64_t moved = 0, n = 0;
    for (size_t i = 0; json_is_array(rb) && i < json_array_size(rb); i++) {
        double m = moe_json_num(json_object_get(json_array_get(rb, i), "experts_moved"), 0);
        moved += m > 0 && m < 1e9 ? (int64_t)m : 0;
        n += m > 0 ? 1 : 0;
    }
    if (times != NULL) {
        *times = n;
    }
    return moved;
}
