/* An on-demand window's folder, written by its own thread while the run goes on: the
 * records the chosen ranks made of the window's steps, merged and written as the end of
 * the run does (summary.txt, summary.json, report.html, metrics.csv, trace.json when
 * profiler.trace is on; each whole or absent, INCOMPLETE until the last is written). */
#include <stdio.h>
#include <string.h>

#include "live/live_int.h"
#include "moe/log.h"

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
    if (st == MOE_OK && v->num_reports < LIVE_MAX_REPORTS) {
        snprintf(v->reports[v->num_reports++], sizeof(v->reports[0]), "%s", name);
    } else if (st != MOE_OK) {
        /* /status is read without a token: the folder by its name, not its path */
        const char *at = strstr(err.msg, folder);
        if (at != NULL) {
            snprintf(v->last_error, sizeof(v->last_error), "window %lld: %.*s%s%.100s",
                     (long long)id, (int)(at - err.msg), err.msg, name,
                     at + strlen(folder));
        } else {
            snprintf(v->last_error, sizeof(v->last_error), "window %lld: %.200s",
                     (long long)id, err.msg);
        }
    }
    v->win.state = LIVE_WIN_IDLE;
    pthread_mutex_unlock(&v->mu);
}
