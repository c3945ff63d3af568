/* An on-demand window's folder, written by its own thread while the run goes on: the
 * difference between every rank's counters at the window's close and at its open. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "live/live_int.h"
#include "report/atomic_file.h"

/* mkdir -p for the output folder and the window's own. */
static int make_dirs(const char *path)
{
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
                return -1;
            }
            *p = '/';
        }
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

typedef struct win_in {
    live_dims_t d;
    live_window_t w;
    bool *have;                 /* [W] both marks */
} win_in_t;

static json_t *win_experts(const win_in_t *in, int64_t *const *open, int64_t *const *close)
{
    const live_dims_t *d = &in->d;
    size_t le = (size_t)d->L * (size_t)d->E;
    int64_t *tok = calloc(le, sizeof(int64_t)), *drop = calloc(le, sizeof(int64_t));
    json_t *arr = json_array(), *imb = json_array();
    for (int r = 0; tok != NULL && drop != NULL && r < d->W; r++) {
        if (!in->have[r] || close[r][LIVE_HDR_ROUTES] == 0) {
            continue;
        }
        live_layout_t lay;
        live_layout_of(d, r, true, &lay);
        for (size_t i = 0; i < le; i++) {
            tok[i] += close[r][lay.routed + i] - open[r][lay.routed + i];
            drop[i] += close[r][lay.dropped + i] - open[r][lay.dropped + i];
        }
    }
    for (int l = 0; tok != NULL && drop != NULL && l < d->L; l++) {
        int64_t max = 0, sum = 0;
        for (int e = 0; e < d->E; e++) {
            int64_t t = tok[(size_t)l * d->E + e];
            json_array_append_new(arr, json_pack("{s:i,s:i,s:i,s:I,s:I}", "layer", l, "expert",
                                                 e, "rank", (int)d->owner[e], "tokens",
                                                 (json_int_t)t, "dropped",
                                                 (json_int_t)drop[(size_t)l * d->E + e]));
            sum += t;
            max = t > max ? t : max;
        }
        json_array_append_new(imb, json_real(sum > 0 ? (double)max * d->E / (double)sum : 0));
    }
    free(tok);
    free(drop);
    return json_pack("{s:o,s:o}", "experts", arr, "layer_imbalance", imb);
}

static bool included(const win_in_t *in, int r)
{
    return in->have[r] && (in->w.all_ranks || in->w.ranks[r]);
}

static json_t *win_ranks(const win_in_t *in, int64_t *const *open, int64_t *const *close)
{
    const live_dims_t *d = &in->d;
    json_t *ranks = json_array(), *secs = json_array(), *bytes = json_array();
    for (int r = 0; r < d->W; r++) {
        if (!included(in, r)) {
            continue;
        }
        const int64_t *a = open[r], *b = close[r];
        live_layout_t lay;
        live_layout_of(d, r, b[LIVE_HDR_ROUTES] != 0, &lay);
        json_array_append_new(ranks, json_pack("{s:i,s:I,s:I,s:I}", "rank", r, "open_step",
                                               (json_int_t)a[LIVE_HDR_STEP], "close_step",
                                               (json_int_t)b[LIVE_HDR_STEP], "resident_bytes",
                                               (json_int_t)b[LIVE_HDR_RSS]));
        for (int g = 0; g < lay.groups; g++) {
            size_t o = lay.ehist + (size_t)g * (LIVE_NB + 1);
            int64_t calls = 0;
            for (int k = 0; k < LIVE_NB; k++) {
                calls += b[o + k] - a[o + k];
            }
            double s = (double)(b[o + LIVE_NB] - a[o + LIVE_NB]) * 1e-9;
            int nl = d->nlocal[r];
            json_t *row = json_pack("{s:i,s:i,s:I,s:f}", "rank", r, "layer",
                                    d->per_expert ? g / nl : g, "calls", (json_int_t)calls,
                                    "seconds", s);
            if (d->per_expert) {
                json_object_set_new(row, "expert",
                                    json_integer(d->local_ids[(size_t)r * d->E + g % nl]));
            }
            json_array_append_new(secs, row);
        }
        for (int dst = 0; dst < d->W; dst++) {
            int64_t n = b[lay.bytes + (size_t)dst] - a[lay.bytes + (size_t)dst];
            if (dst != r) {
                json_array_append_new(bytes, json_pack("{s:i,s:i,s:I}", "src", r, "dst", dst,
                                                       "bytes", (json_int_t)n));
            }
        }
    }
    return json_pack("{s:o,s:o,s:o}", "ranks", ranks, "expert_seconds", secs, "exchange_bytes",
                     bytes);
}

static json_t *win_summary(const win_in_t *in, int64_t *const *open, int64_t *const *close,
                           int64_t seconds_ns)
{
    const live_window_t *w = &in->w;
    json_t *o = json_object();
    json_object_set_new(o, "window", json_integer(w->id));
    json_object_set_new(o, "steps_requested", json_integer(w->steps));
    json_object_set_new(o, "first_step", json_integer(w->open_step + 1));
    json_object_set_new(o, "last_step", json_integer(w->close_step));
    double s = (double)seconds_ns * 1e-9;
    json_object_set_new(o, "seconds", json_real(s));
    json_object_set_new(o, "tokens_per_s", json_real(s > 0 ? (double)w->steps *
                                                                 (double)in->d.tokens_per_step / s
                                                           : 0.0));
    if (in->have[0]) {
        live_layout_t lay;
        live_layout_of(&in->d, 0, close[0][LIVE_HDR_ROUTES] != 0, &lay);
        int64_t n = 0;
        for (int k = 0; k < LIVE_NB; k++) {
            n += close[0][lay.step_hist + k] - open[0][lay.step_hist + k];
        }
        int64_t ns = close[0][lay.step_hist + LIVE_NB] - open[0][lay.step_hist + LIVE_NB];
        json_object_set_new(o, "step_seconds_mean", json_real(n > 0 ? (double)ns * 1e-9 / n : 0));
    }
    json_t *missing = json_array();
    for (int r = 0; r < in->d.W; r++) {
        if (!in->have[r]) {
            json_array_append_new(missing, json_integer(r));
        }
    }
    json_object_set_new(o, "ranks_missing", missing);
    json_object_update_new(o, win_experts(in, open, close));
    json_object_update_new(o, win_ranks(in, open, close));
    return o;
}

static int write_folder(const win_in_t *in, json_t *root)
{
    char path[700];
    if (make_dirs(in->w.folder) != 0) {
        return -1;
    }
    char *s = json_dumps(root, JSON_INDENT(1));
    if (s == NULL) {
        return -1;
    }
    snprintf(path, sizeof(path), "%s/window.json", in->w.folder);
    int rc = moe_afile_write(path, s, strlen(s));
    free(s);
    if (rc == 0) {
        char txt[512];
        int n = snprintf(txt, sizeof(txt),
                         "moed live window %lld: steps %lld..%lld, %.3f s, %.0f tokens/s\n"
                         "details: window.json\n",
                         (long long)in->w.id, (long long)in->w.open_step + 1,
                         (long long)in->w.close_step,
                         json_real_value(json_object_get(root, "seconds")),
                         json_real_value(json_object_get(root, "tokens_per_s")));
        snprintf(path, sizeof(path), "%s/summary.txt", in->w.folder);
        rc = moe_afile_write(path, txt, (size_t)n);
    }
    return rc;
}

void moe_live_window_write(live_view_t *v, int64_t *const *open, int64_t *const *close,
                           const size_t *lens, int64_t seconds_ns)
{
    (void)lens;
    win_in_t in;
    pthread_mutex_lock(&v->mu);
    in.d = v->dims;
    in.w = v->win;
    in.w.ranks = calloc((size_t)v->dims.W, sizeof(bool));
    in.have = calloc((size_t)v->dims.W, sizeof(bool));
    if (in.w.ranks != NULL) {
        memcpy(in.w.ranks, v->win.ranks, (size_t)v->dims.W * sizeof(bool));
    }
    pthread_mutex_unlock(&v->mu);
    int rc = -1;
    if (in.w.ranks != NULL && in.have != NULL) {
        for (int r = 0; r < in.d.W; r++) {
            in.have[r] = open[r][LIVE_HDR_MAGIC] != 0 && close[r][LIVE_HDR_MAGIC] != 0 &&
                         open[r][LIVE_HDR_WINDOW] == in.w.id &&
                         close[r][LIVE_HDR_WINDOW] == in.w.id;
        }
        json_t *root = win_summary(&in, open, close, seconds_ns);
        rc = root != NULL ? write_folder(&in, root) : -1;
        json_decref(root);
    }
    pthread_mutex_lock(&v->mu);
    if (rc == 0 && v->num_reports < LIVE_MAX_REPORTS) {
        snprintf(v->reports[v->num_reports++], sizeof(v->reports[0]), "%s", in.w.name);
    } else if (rc != 0) {
        snprintf(v->last_error, sizeof(v->last_error), "window %lld: cannot write %.200s",
                 (long long)in.w.id, in.w.folder);
    }
    v->win.state = LIVE_WIN_IDLE;
    pthread_mutex_unlock(&v->mu);
    free(in.w.ranks);
    free(in.have);
}
