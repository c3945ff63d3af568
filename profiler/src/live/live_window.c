/* An on-demand window's folder, written by its own thread while the run goes on: the
 * records the chosen ranks made of the window's steps, merged and written as the end of
 * the run does (summary.txt, summary.json, report.html, metrics.csv, trace.json when
 * profiler.trace is on; each whole or absent, INCOMPLETE until the last is written). */
#include <stdio.h>
#include <string.h>

#include "live/live_int.h"
#include "moe/log.h"

/* msg with every `path` in it replaced by `by`, into out[len]. */
static void replace_path(const char *msg, const char *path, const char *by, char *out, size_t len)
{
    size_t n = 0, pl = strlen(path);
    out[0] = '\0';
    while (*msg != '\0' && n + 1 < len) {
        if (pl > 0 && strncmp(msg, path, pl) == 0) {
            n += (size_t)snprintf(out + n, len - n, "%s", by);
            n = n < len ? n : len - 1;
            msg += pl;
        } else {
            out[n++] = *msg++;
            out[n] = '\0';
        }
    }
}

void live_window_result_locked(live_view_t *v, int64_t id, const char *name, const char *folder,
                               bool ok, const char *msg)
{
    if (ok) { /* the newest LIVE_MAX_REPORTS: the oldest dropped when full */
        if (v->num_reports == LIVE_MAX_REPORTS) {
            memmove(v->reports[0], v->reports[1],
                    sizeof(v->reports[0]) * (LIVE_MAX_REPORTS - 1));
            v->num_reports--;
        }
        snprintf(v->reports[v->num_reports++], sizeof(v->reports[0]), "%s", name);
        v->reports_written++;
        return;
    }
    /* /status is read without a token: the folder by its name, the output folder by its
     * last component, never a path to them */
    char dir[sizeof(v->output_dir)], a[MOE_ERROR_MSG_MAX], b[MOE_ERROR_MSG_MAX];
    const char *last = live_output_dir_name(v, dir, sizeof(dir));
    replace_path(msg, folder, name, a, sizeof(a));
    replace_path(a, dir, last, b, sizeof(b)); /* no slash in dir: dir for itself, unchanged */
    snprintf(v->last_error, sizeof(v->last_error), "window %lld: %.200s", (long long)id, b);
}

void moe_live_window_write(live_view_t *v, moe_od_set_t *set)
{
    char folder[sizeof(v->win.folder)], name[sizeof(v->win.name)];
    int64_t id;
    pthread_mutex_lock(&v->mu);
    memcpy(folder, v->win.folder, sizeof(folder));
    memcpy(name, v->win.name, sizeof(name));
    id = v->win.id;
    pthread_mutex_unlock(&v->mu);
    moe_error_t err;
    moe_error_clear(&err);
    moe_status_t st = moe_prof_od_write(set, folder, &err);
    moe_prof_od_free(set);
    if (st == MOE_OK) {
        MOE_INFO("live: window %lld written: %s", (long long)id, folder);
    } else {
        MOE_WARN("live: window %lld: %s", (long long)id, err.msg);
    }
    pthread_mutex_lock(&v->mu);
    live_window_result_locked(v, id, name, folder, st == MOE_OK, err.msg);
    v->win.state = LIVE_WIN_IDLE;
    pthread_mutex_unlock(&v->mu);
}
