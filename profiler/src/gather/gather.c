/* Part gather (profiler/src/gather/): on rank 0: the records every rank sends received,
 * merged into one report and written, window folders, on-demand windows' sets, balance
 * figures. May include: report (and the public headers in moe/, the record layout in
 * proto/). One file of each part's folder opens with such a comment; tests/lint/parts.sh
 * holds every part to its list. */
/* Rank 0's receive-and-merge loop (gather.h): parts are taken as they arrive, kept until
 * their window is whole, then merged as one set (idle time compares the ranks' exchanges
 * step by step). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "gather/gather.h"
#include "gather/routing_gather.h"
#include "moe_proto/routing_msg.h"

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe/testctl.h"

/* A run without end: window folders kept (docs/profiler.md "A run without end"); the oldest goes first. */
#define MOE_PROF_KEEP_WINDOWS 10
/* Rank 0 looks for parts between window ends at most this often: parts come at most every
 * 250 ms per rank (record/), and a probe is an MPI progress call (microseconds, a yield
 * when ranks share cores) that 1 ms steps should not pay every step. */
#define PROBE_INTERVAL_NS 20000000LL
#define OD_GRACE_NS 10000000000LL /* rank 0 waits this long after its close for the rest */

/* Why a rank's figures are short when some of its parts could not be kept or merged. */
#define PART_LOST_WHY                                                                           \
    "some of its profile parts were lost on rank 0 (no memory to keep or merge them)"

struct moe_gather {
    const moe_config_t *cfg;
    MPI_Comm comm;               /* the recorder's duplicate */
    int world;
    moe_prof_static_t info;
    moe_merge_t *merge;          /* the end-of-run report (NULL: on-demand) */
    moe_prof_record_t *pending;  /* records received but not merged yet (grows) */
    int num_pending, cap_pending;
    bool *final_seen;            /* [world] its last record arrived, or it was given up */
    int lost_parts;              /* on-demand: parts received but not kept (no memory) since
                                  * the last window taken */
    int64_t merged_windows;      /* windows merged so far */
    moe_rep_rebalance_t *rebalances; /* online rebalances (grows; the report takes it) */
    int num_rebalances, cap_rebalances;
    int64_t last_probe_ns;       /* when it last looked for parts between windows */
    int64_t t0_ns;               /* rank 0's first step's begin */
    bool have_t0;
    char *config;                /* the run's config text, for the folders */
    size_t config_len;
    /* a run without end (workload.steps 0): each scheduled window's own folder, written by
     * a thread when the window closes */
    bool win_folders;
    int64_t win_seen, win_begin_ns, win_end_ns; /* the window in progress: its span */
    pthread_t win_writer;
    bool win_writer_started;
    atomic_llong win_cpu_ns;     /* those threads' CPU time */
    /* on-demand: the window closed here and still gathering */
    bool od_gathering;
    int64_t od_end_ns, od_close_ns;
};

moe_gather_t *moe_gather_create(const moe_config_t *cfg, MPI_Comm comm, int world,
                                const moe_prof_static_t *info, bool on_demand)
{
    moe_gather_t *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return NULL;
    }
    g->cfg = cfg;
    g->comm = comm;
    g->world = world;
    g->info = *info;
    g->final_seen = calloc((size_t)world, sizeof(bool));
    if (g->final_seen == NULL) {
        moe_gather_destroy(g);
        return NULL;
    }
    if (!on_demand) {
        g->merge = moe_merge_create(cfg, world, info->hosts);
        if (g->merge == NULL) {
            moe_gather_destroy(g);
            return NULL;
        }
        g->win_folders = cfg->steps == 0; /* a run without end: a folder per window */
        g->win_seen = -1;
    }
    if ((on_demand || g->win_folders) && info->config_text != NULL) {
        g->config = malloc(info->config_len + 1); /* the folders' config.yaml */
        if (g->config != NULL) {
            memcpy(g->config, info->config_text, info->config_len);
            g->config[info->config_len] = '\0';
            g->config_len = info->config_len;
        }
    }
    return g;
}

static void win_join(moe_gather_t *g)
{
    if (g->win_writer_started) {
        pthread_join(g->win_writer, NULL);
        g->win_writer_started = false;
    }
}

void moe_gather_destroy(moe_gather_t *g)
{
    if (g == NULL) {
        return;
    }
    win_join(g);
    moe_merge_destroy(g->merge);
    for (int i = 0; i < g->num_pending; i++) {
        moe_prof_record_free(&g->pending[i]);
    }
    free(g->pending);
    free(g->final_seen);
    free(g->rebalances);
    free(g->config);
    free(g);
}

int64_t moe_gather_threads_cpu_ns(const moe_gather_t *g)
{
    return g != NULL ? (int64_t)atomic_load(&g->win_cpu_ns) : 0;
}

void moe_gather_note_step(moe_gather_t *g, int64_t window, bool closes, int64_t begin_ns,
                          int64_t end_ns)
{
    if (!g->have_t0) {
        g->t0_ns = begin_ns;
        g->have_t0 = true;
    }
    if (window >= 0 && window != g->win_seen) {
        g->win_seen = window; /* its first step */
        g->win_begin_ns = begin_ns;
    }
    if (window >= 0 && closes) {
        g->win_end_ns = end_ns;
    }
}

void moe_gather_rebalance(moe_gather_t *g, const moe_prof_rebalance_t *r)
{
    if (g->num_rebalances == g->cap_rebalances) {
        int cap = g->cap_rebalances > 0 ? 2 * g->cap_rebalances : 16;
        void *grown = realloc(g->rebalances, sizeof(*g->rebalances) * (size_t)cap);
        if (grown == NULL) {
            return; /* the report lacks this row; the run goes on */
        }
        g->rebalances = grown;
        g->cap_rebalances = cap;
    }
    g->rebalances[g->num_rebalances++] = (moe_rep_rebalance_t){
        .step = r->step, .moved = r->moved, .bytes = r->bytes,
        .seconds = (double)r->critical_ns * 1e-9, .slowest_rank = r->slowest_rank,
        .before = r->before, .after = r->after};
}

/* ---- window folders (a run without end) -------------------------------------------- */

/* A window folder's work for its thread: the merge of its records, done, written. */
typedef struct win_job {
    moe_gather_t *g;
    moe_merge_t *m;
    moe_prof_run_t run;
    int64_t w;
    char dir[MOE_PATH_MAX + 32];
} win_job_t;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 ? -1 : 0;
}

/* Window w's folder `dir` written (error NULL) or not: said once, on stdout or stderr, and
 * given to info.folder_written (/status lists it or says why not). */
static void win_result(const moe_gather_t *g, int64_t w, const char *dir, const char *error)
{
    if (error == NULL) {
        printf("moed: profile: window %lld written: %s\n", (long long)w + 1, dir);
        fflush(stdout);
    } else {
        fprintf(stderr, "moed: warning: profile: window %lld: %s\n", (long long)w + 1, error);
    }
    if (g->info.folder_written != NULL) { /* "RUN/window-N": the run folder's name on */
        const char *end = strrchr(dir, '/'), *name = end;
        while (name > dir && name[-1] != '/') {
            name--;
        }
        g->info.folder_written(g->info.folder_arg, w + 1, end != NULL ? name : dir, dir, error);
    }
}

static void *win_main(void *arg)
{
    win_job_t *job = arg;
    moe_gather_t *g = job->g;
    moe_error_t err;
    moe_error_clear(&err);
    moe_report_t *rep = moe_merge_finish(job->m, &job->run, &g->info);
    moe_status_t st = rep != NULL ? moe_report_write_all(rep, &err)
                                  : moe_error_set(&err, MOE_ERR_NO_MEMORY, "no report");
    win_result(g, job->w, job->dir, st == MOE_OK ? NULL : err.msg);
    moe_merge_destroy(job->m);
    free(job);
    atomic_fetch_add(&g->win_cpu_ns, moe_thread_cpu_ns()); /* a thread a window */
    return NULL;
}

/* Window w's records gathered: its own folder, <run folder>/window-<w + 1>, merged here
 * from the same records and written by a thread (the previous window's joined first); the
 * folder MOE_PROF_KEEP_WINDOWS windows older is removed first (a few files: microseconds),
 * so the newest that many are kept. */
static void window_folder(moe_gather_t *g, int64_t w, moe_prof_record_t *set, const bool *have,
                          const bool *short_of)
{
    const char *run_dir = moe_merge_run_dir(g->merge);
    win_join(g);
    win_job_t *job = run_dir[0] != '\0' ? calloc(1, sizeof(*job)) : NULL;
    if (job == NULL) {
        return; /* no run folder: the end report says why */
    }
    job->g = g;
    job->w = w;
    snprintf(job->dir, sizeof(job->dir), "%s/window-%lld", run_dir, (long long)w + 1);
    if (w >= MOE_PROF_KEEP_WINDOWS) { /* first: never more than that many folders */
        char old[MOE_PATH_MAX + 32];
        snprintf(old, sizeof(old), "%s/window-%lld", run_dir,
                 (long long)(w + 1 - MOE_PROF_KEEP_WINDOWS));
        if (access(old, F_OK) == 0 && nftw(old, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
            fprintf(stderr, "moed: warning: profile: cannot remove %s (the newest %d are kept)\n",
                    old, MOE_PROF_KEEP_WINDOWS);
        }
    }
    moe_error_t err;
    moe_error_clear(&err);
    job->m = moe_merge_create_in(g->cfg, g->world, g->info.hosts, job->dir);
    moe_status_t st = job->m != NULL ? moe_merge_window(job->m, set, have, g->win_begin_ns, &err)
                                     : moe_error_set(&err, MOE_ERR_NO_MEMORY, "no memory");
    if (st != MOE_OK) {
        win_result(g, w, job->dir, err.msg);
        moe_merge_destroy(job->m);
        free(job);
        return;
    }
    for (int r = 1; r < g->world; r++) {
        if (moe_cfg_rank_profiled(g->cfg, r) && !have[r]) {
            moe_merge_note_missing(job->m, r, "no record of this window");
        } else if (short_of[r]) {
            moe_merge_note_missing(job->m, r, PART_LOST_WHY);
        }
    }
    int64_t n = g->cfg->prof_measurement_steps;
    job->run = (moe_prof_run_t){.steps_run = n, .steps_planned = n,
                                .run_s = (double)(g->win_end_ns - g->win_begin_ns) * 1e-9,
                                .config_text = g->config, .config_len = g->config_len,
                                .deadline_s = g->cfg->step_timeout_s};
    g->win_writer_started = pthread_create(&g->win_writer, NULL, win_main, job) == 0;
    if (!g->win_writer_started) {
        win_main(job);
    }
}

void moe_gather_end_folders(moe_gather_t *g)
{
    g->win_folders = false; /* the end report covers the rest */
    win_join(g);
}

/* ---- receiving ---------------------------------------------------------------------- */

/* Append n items of `size` bytes from src to *dst (holding *count). */
static bool append_list(void **dst, int64_t *count, const void *src, int64_t n, size_t size)
{
    if (n <= 0) {
        return true;
    }
    void *p = realloc(*dst, (size_t)(*count + n) * size);
    if (p == NULL) {
        return false;
    }
    memcpy((char *)p + (size_t)*count * size, src, (size_t)n * size);
    *dst = p;
    *count += n;
    return true;
}

/* A later part of a rank's window folded into its first (gather.h). */
moe_status_t moe_record_absorb(moe_prof_record_t *dst, const moe_prof_record_t *src)
{
    if (src->num_layers != dst->num_layers || src->num_local != dst->num_local ||
        src->num_experts != dst->num_experts || src->world_size != dst->world_size ||
        memcmp(src->slot_ids, dst->slot_ids,
               sizeof(int32_t) * (size_t)src->num_layers * (size_t)src->num_local) != 0) {
        return MOE_ERR_FORMAT; /* parts of one rank's window have one shape and columns */
    }
    for (int p = 0; p < MOE_PHASE_COUNT && src->steps_recorded > 0; p++) {
        bool first = dst->steps_recorded == 0;
        dst->phase_sum[p] += src->phase_sum[p];
        dst->phase_min[p] = first || src->phase_min[p] < dst->phase_min[p] ? src->phase_min[p] : dst->phase_min[p];
        dst->phase_max[p] = first || src->phase_max[p] > dst->phase_max[p] ? src->phase_max[p] : dst->phase_max[p];
    }
    dst->steps_recorded += src->steps_recorded;
    for (int i = 0; i < dst->num_layers * dst->num_local; i++) {
        dst->experts[i].tokens += src->experts[i].tokens;
        dst->experts[i].calls += src->experts[i].calls;
        dst->experts[i].flops += src->experts[i].flops;
        moe_hist_merge(&dst->experts[i].hist, &src->experts[i].hist);
    }
    for (int i = 0; i < dst->num_layers * dst->num_experts; i++) {
        dst->demand[i] += src->demand[i];
        dst->kept[i] += src->kept[i];
        dst->dropped[i] += src->dropped[i];
    }
    for (int j = 0; j < dst->world_size; j++) {
        dst->bytes_sent[j] += src->bytes_sent[j];
        dst->bytes_recv[j] += src->bytes_recv[j];
        dst->msgs_sent[j] += src->msgs_sent[j];
        dst->msgs_recv[j] += src->msgs_recv[j];
        dst->wait_ns[j] += src->wait_ns[j];
        dst->rows_sent[j] += src->rows_sent[j];
        dst->rows_recv[j] += src->rows_recv[j];
        dst->pairs_sent[j] += src->pairs_sent[j];
        dst->pairs_recv[j] += src->pairs_recv[j];
    }
    bool ok = append_list((void **)&dst->steps, &dst->num_steps, src->steps, src->num_steps, sizeof(*src->steps)) &&
              append_list((void **)&dst->exchanges, &dst->num_exchanges, src->exchanges, src->num_exchanges, sizeof(*src->exchanges)) &&
              append_list((void **)&dst->layer_lat, &dst->num_layer_lat, src->layer_lat, src->num_layer_lat, sizeof(*src->layer_lat)) &&
              append_list((void **)&dst->metrics, &dst->num_metrics, src->metrics, src->num_metrics, sizeof(*src->metrics)) &&
              append_list((void **)&dst->events, &dst->num_events, src->events, src->num_events, sizeof(*src->events)) &&
              append_list((void **)&dst->mem, &dst->num_mem, src->mem, src->num_mem, sizeof(*src->mem));
    dst->metrics_dropped += src->metrics_dropped;
    dst->events_dropped += src->events_dropped;
    dst->flags |= src->flags;
    dst->clock_offset_end_ns = src->clock_offset_end_ns;
    dst->rss_peak = src->rss_peak > dst->rss_peak ? src->rss_peak : dst->rss_peak;
    dst->dev_peak = src->dev_peak > dst->dev_peak ? src->dev_peak : dst->dev_peak;
    dst->exchange_ns += src->exchange_ns;
    dst->hidden_ns += src->hidden_ns;
    dst->cpu_steps_ns += src->cpu_steps_ns;
    dst->wall_steps_ns += src->wall_steps_ns;
    if (src->wall_run_ns > 0) { /* the final part's */
        dst->cpu_run_ns = src->cpu_run_ns;
        dst->wall_run_ns = src->wall_run_ns;
    }
    for (int l = 0; l < dst->num_layers; l++) {
        dst->shared_rows[l] += src->shared_rows[l];
        dst->shared_ns[l] += src->shared_ns[l];
    }
    if (src->chunks > 0) { /* static facts: a part that has them wins */
        dst->chunks = src->chunks;
    }
    if (src->device[0] != '\0') {
        memcpy(dst->device, src->device, sizeof(dst->device));
    }
    return ok ? MOE_OK : MOE_ERR_NO_MEMORY;
}


/* Keep a decoded record until its window can be merged; where it cannot be kept (no memory)
 * it is freed, and its rank's figures are short: said in the report. */
static void pending_push(moe_gather_t *g, moe_prof_record_t *rec)
{
    if (g->num_pending == g->cap_pending) {
        int cap = g->cap_pending ? 2 * g->cap_pending : 16;
        moe_prof_record_t *n = realloc(g->pending, (size_t)cap * sizeof(*n));
        if (n == NULL) {
            fprintf(stderr, "moed: warning: a profile part of rank %d lost: no memory to keep "
                    "it\n", rec->rank);
            if (g->merge != NULL) {
                moe_merge_note_missing(g->merge, rec->rank, PART_LOST_WHY);
            } else {
                g->lost_parts++; /* the window's set counts it (od_take) */
            }
            moe_prof_record_free(rec);
            return;
        }
        g->pending = n;
        g->cap_pending = cap;
    }
    g->pending[g->num_pending++] = *rec;
}

/* An MPI call on rank r's records failed (why). Rank r is given up like a sender that
 * died: no longer waited for, and the report names it and is partial. */
static void give_up_rank(moe_gather_t *g, int r, const moe_error_t *why)
{
    if (r <= 0 || r >= g->world || g->final_seen[r] || !moe_cfg_rank_profiled(g->cfg, r)) {
        return;
    }
    fprintf(stderr, "moed: warning: profile records of rank %d lost: %s\n", r, why->msg);
    if (g->merge != NULL) {
        moe_merge_note_missing(g->merge, r, why->msg);
    }
    g->final_seen[r] = true;
}

/* Receive one record if one is there. Returns true if it took one.
 * A record above the eager size is read from the sender's memory after the match; if the
 * sender died in between, that read never completes. So the receive is non-blocking and
 * abandoned when `poll` ends (its deadline, a stop it honours, a fault notice). A failed MPI
 * call gives up the sender; a failed probe (no sender known) every rank still awaited. */
static bool receive_one(moe_gather_t *g, moe_poll_t *poll)
{
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    moe_error_t why;
    if (MOE_MPI(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, g->comm, &flag, &msg, &status),
                &why) != MOE_OK) {
        for (int r = 1; r < g->world; r++) {
            give_up_rank(g, r, &why);
        }
        return false;
    }
    if (!flag) {
        return false;
    }
    int n = 0, done = 0, src = status.MPI_SOURCE;
    if (MOE_MPI(MPI_Get_count(&status, MPI_BYTE, &n), &why) != MOE_OK) {
        give_up_rank(g, src, &why); /* the matched message is left unreceived */
        return false;
    }
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf == NULL) {
        moe_error_set(&why, MOE_ERR_NO_MEMORY, "no memory for a %d-byte record", n);
        give_up_rank(g, src, &why);
        return false;
    }
    MPI_Request req;
    if (MOE_MPI(MPI_Imrecv(buf, n, MPI_BYTE, &msg, &req), &why) != MOE_OK) {
        free(buf); /* the matched message is lost with its sender's record */
        give_up_rank(g, src, &why);
        return false;
    }
    while (!done) {
        if (MOE_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE), &why) != MOE_OK) {
            give_up_rank(g, src, &why);
            return false; /* buf stays with MPI */
        }
        if (!done && moe_poll_next(poll) != MOE_OK) {
            return false; /* a sender gone mid-message: buf stays with the pending receive */
        }
    }
    moe_prof_record_t rec;
    moe_error_t derr;
    if (status.MPI_TAG == MOE_PROF_TAG_ROUTING) {
        /* a recorded routing that came after rank 0 stopped waiting for it (facade/prof.c,
         * gather/routing_gather.c): taken off the queue, not written */
    } else if (moe_prof_record_decode(buf, (size_t)n, &rec, &derr) != MOE_OK) {
        fprintf(stderr, "moed: warning: record from rank %d dropped: %s\n", src, derr.msg);
    } else if (rec.rank != src) {
        fprintf(stderr, "moed: warning: rank %d sent a record for rank %d; dropped\n", src, rec.rank);
        moe_prof_record_free(&rec);
    } else {
        g->final_seen[src] |= (rec.flags & MOE_PROF_FLAG_FINAL) != 0;
        pending_push(g, &rec);
    }
    free(buf);
    return true;
}

/* Does it still wait for rank r's last part of window w? (Not profiled, its last record
 * arrived, or a part of w with the end flag or of a later window is here: no.) */
static bool awaits_window_end(const moe_gather_t *g, const moe_config_t *cfg, int r,
                              int64_t w)
{
    if (!moe_cfg_rank_profiled(cfg, r) || g->final_seen[r]) {
        return false;
    }
    for (int i = 0; i < g->num_pending; i++) {
        const moe_prof_record_t *q = &g->pending[i];
        if (q->rank == r && (q->window > w ||
                             (q->window == w && (q->flags & MOE_PROF_FLAG_WINDOW_END)))) {
            return false;
        }
    }
    return true;
}

/* cfg: the one that says which ranks record (an on-demand window's own). */
static bool window_complete(const moe_gather_t *g, const moe_config_t *cfg, int64_t w)
{
    for (int r = 1; r < g->world; r++) {
        if (awaits_window_end(g, cfg, r, w)) {
            return false;
        }
    }
    return true;
}

void moe_gather_probe(moe_gather_t *g, int64_t now_ns, double timeout_s)
{
    if (now_ns - g->last_probe_ns < PROBE_INTERVAL_NS) {
        return;
    }
    g->last_probe_ns = now_ns;
    moe_poll_t poll;
    moe_poll_begin(&poll, timeout_s, true);
    while (receive_one(g, &poll)) {
    }
}

moe_status_t moe_gather_await_window(moe_gather_t *g, int64_t w, double timeout_s,
                                     double *waited_s)
{
    moe_poll_t poll;
    moe_poll_begin(&poll, timeout_s, true);
    while (!window_complete(g, g->cfg, w)) {
        moe_status_t pst = receive_one(g, &poll) ? MOE_OK : moe_poll_next(&poll);
        if (pst != MOE_OK) { /* a stop: what came is kept for the final merge */
            *waited_s = moe_poll_waited_s(&poll);
            return pst;
        }
    }
    return MOE_OK;
}

/* Window w's parts out of g->pending into set/have (a rank's first part taken over, its
 * later ones, in the order they were sent, folded in); with drop_older, parts of windows
 * before w (late ones of a window taken without them) are freed. The rest stays pending, in
 * order: their count into *kept (the caller sets num_pending). Returns the parts that
 * could not be folded in, each warned of, their ranks marked in short_of ([world], or
 * NULL). */
static int take_pending(moe_gather_t *g, int64_t w, bool drop_older, moe_prof_record_t *set,
                        bool *have, int *kept, bool *short_of)
{
    int k = 0, unmerged = 0;
    for (int i = 0; i < g->num_pending; i++) {
        moe_prof_record_t *rec = &g->pending[i];
        if (drop_older && rec->window < w) {
            moe_prof_record_free(rec);
        } else if (rec->window != w) {
            g->pending[k++] = *rec;
        } else if (!have[rec->rank]) {
            set[rec->rank] = *rec;
            have[rec->rank] = true;
        } else {
            if (moe_testctl_absorb_fails(rec->rank) ||
                moe_record_absorb(&set[rec->rank], rec) != MOE_OK) {
                fprintf(stderr, "moed: warning: a profile part of rank %d could not be merged\n",
                        rec->rank);
                unmerged++;
                if (short_of != NULL) {
                    short_of[rec->rank] = true;
                }
            }
            moe_prof_record_free(rec);
        }
    }
    *kept = k;
    return unmerged;
}

/* Merge the received records of window w together with `own` (rank 0's, may be NULL),
 * then forget them. Records of one window are merged as one set: idle time compares the
 * ranks' exchanges step by step. */
moe_status_t moe_gather_merge_window(moe_gather_t *g, int64_t w, moe_prof_record_t *own,
                                     moe_error_t *err)
{
    moe_prof_record_t *set = calloc((size_t)g->world, sizeof(*set));
    bool *have = calloc((size_t)g->world, sizeof(bool));
    bool *short_of = calloc((size_t)g->world, sizeof(bool));
    moe_status_t st = set && have && short_of ? MOE_OK : MOE_ERR_NO_MEMORY;
    if (st == MOE_OK && own != NULL) {
        set[0] = *own; /* shallow: read only */
        have[0] = true;
    }
    int kept = g->num_pending;
    if (st == MOE_OK && take_pending(g, w, false, set, have, &kept, short_of) > 0) {
        for (int r = 0; r < g->world; r++) { /* its figures are short: the report says so */
            if (short_of[r]) {
                moe_merge_note_missing(g->merge, r, PART_LOST_WHY);
            }
        }
    }
    if (st == MOE_OK) {
        st = moe_merge_window(g->merge, set, have, g->t0_ns, err);
        if (st == MOE_OK && g->win_folders && w == g->win_seen) { /* closed while running */
            window_folder(g, w, set, have, short_of);
        }
        for (int r = 1; r < g->world; r++) {
            if (have[r]) {
                moe_prof_record_free(&set[r]);
            }
        }
        g->num_pending = kept;
        g->merged_windows = w + 1;
    }
    free(set);
    free(have);
    free(short_of);
    return st;
}

/* ---- the end of the run ------------------------------------------------------------ */

/* Collect the records still on their way until every profiled rank's last one is here or
 * the deadline passes; then merge what came, window by window. The ranks whose last record
 * did not come are noted in the report (why: the cause when known) and counted in
 * *missing. */
static moe_status_t collect_final(moe_gather_t *g, double deadline_s, const char *why_known,
                                  moe_prof_record_t *own, int64_t own_window, int *missing,
                                  moe_error_t *err)
{
    moe_poll_t poll;
    moe_poll_begin(&poll, deadline_s, false);
    for (;;) {
        bool all = true;
        for (int r = 1; r < g->world; r++) {
            all = all && (!moe_cfg_rank_profiled(g->cfg, r) || g->final_seen[r]);
        }
        if (all || (!receive_one(g, &poll) && moe_poll_next(&poll) != MOE_OK)) {
            break; /* its deadline, or a fault another rank reported: write what is here */
        }
    }
    char why[160];
    if (why_known != NULL) {
        snprintf(why, sizeof(why), "%s", why_known);
    } else {
        snprintf(why, sizeof(why), "no last record within %.1f s (rank lost, killed or hung)",
                 deadline_s);
    }
    *missing = 0;
    for (int r = 1; r < g->world; r++) {
        if (moe_cfg_rank_profiled(g->cfg, r) && !g->final_seen[r]) {
            moe_merge_note_missing(g->merge, r, why);
            ++*missing;
        }
    }
    /* windows in order; rank 0's own last data joins the group of its own window index */
    int64_t last = own != NULL ? own_window : -1;
    for (int i = 0; i < g->num_pending; i++) {
        last = g->pending[i].window > last ? g->pending[i].window : last;
    }
    moe_status_t st = MOE_OK;
    for (int64_t w = g->merged_windows; w <= last && st == MOE_OK; w++) {
        st = moe_gather_merge_window(g, w, own != NULL && w == own_window ? own : NULL, err);
    }
    return st;
}

/* The report is written: tell every rank, and see the notes leave (for at most 0.5 s: a
 * rank may be gone), so no rank waits for one that died with rank 0's exit. */
static void announce_done(moe_gather_t *g)
{
    static const int one = 1;
    MPI_Request *reqs = calloc((size_t)g->world, sizeof(MPI_Request));
    if (reqs == NULL) {
        return; /* the ranks' wait ends at its deadline */
    }
    for (int r = 1; r < g->world; r++) {
        /* a failure is logged: the report is written, the ranks' wait ends at its deadline */
        if (MOE_MPI(MPI_Isend(&one, 1, MPI_INT, r, MOE_PROF_TAG_DONE, g->comm, &reqs[r]),
                    NULL) != MOE_OK) {
            reqs[r] = MPI_REQUEST_NULL;
        }
    }
    moe_poll_t poll;
    moe_poll_begin(&poll, 0.5, false);
    for (int r = 1; r < g->world; r++) {
        if (reqs[r] != MPI_REQUEST_NULL && moe_poll_request(&reqs[r], &poll, NULL) != MOE_OK) {
            break; /* left to the process's end */
        }
    }
    free(reqs);
}

moe_status_t moe_gather_finish(moe_gather_t *g, const moe_prof_run_t *run, double deadline_s,
                               const char *why_known, moe_prof_record_t *own,
                               int64_t own_window, const moe_routing_set_t *routing,
                               int *missing, char *run_dir, size_t run_dir_len,
                               moe_error_t *err)
{
    moe_status_t st = collect_final(g, deadline_s, why_known, own, own_window, missing, err);
    moe_report_t *rep = st == MOE_OK ? moe_merge_finish(g->merge, run, &g->info) : NULL;
    if (rep != NULL && rep->rebalances == NULL) {
        rep->rebalances = g->rebalances; /* the report owns them from here */
        rep->num_rebalances = g->num_rebalances;
        g->rebalances = NULL;
        g->num_rebalances = g->cap_rebalances = 0;
    }
    if (rep != NULL && routing != NULL) {
        rep->routing_write = moe_gather_routing_report;
        rep->routing_arg = routing;
    }
    if (rep != NULL) {
        st = moe_report_write_all(rep, err);
        moe_report_print_headline(rep, stdout);
        if (run_dir != NULL) {
            snprintf(run_dir, run_dir_len, "%s", rep->run_dir);
        }
    }
    fflush(stdout);
    announce_done(g);
    return st;
}

/* ---- on-demand windows ------------------------------------------------------------ */

void moe_gather_od_closed(moe_gather_t *g, int64_t end_ns)
{
    g->od_end_ns = end_ns;
    g->od_close_ns = moe_now_ns();
    g->od_gathering = true;
}

bool moe_gather_od_gathering(const moe_gather_t *g)
{
    return g != NULL && g->od_gathering;
}

/* The window's records, gathered: moved into out (recs[0]: the caller's). */
static bool od_take(moe_gather_t *g, const moe_od_window_t *win, moe_od_set_t *out)
{
    memset(out, 0, sizeof(*out));
    out->world = g->world;
    out->cfg = malloc(sizeof(*out->cfg));
    out->hosts = calloc((size_t)g->world, sizeof(*out->hosts));
    out->recs = calloc((size_t)g->world, sizeof(*out->recs));
    out->have = calloc((size_t)g->world, sizeof(bool));
    out->cut = calloc((size_t)g->world, sizeof(bool));
    if (!out->cfg || !out->hosts || !out->recs || !out->have || !out->cut) {
        moe_od_set_free(out);
        return false;
    }
    *out->cfg = *win->cfg;
    memcpy(out->hosts, win->info->hosts, (size_t)g->world * sizeof(*out->hosts));
    out->info = *win->info;
    out->info.hosts = (const char (*)[64])out->hosts;
    out->t0_ns = win->t0_ns;
    out->first = win->first;
    out->last = win->last;
    out->seconds = (double)(g->od_end_ns - win->t0_ns) * 1e-9;
    out->grace_s = (double)OD_GRACE_NS * 1e-9;
    out->config_text = g->config;
    out->config_len = g->config_len;
    for (int r = 1; r < g->world; r++) { /* before the parts leave g->pending */
        out->cut[r] = awaits_window_end(g, win->cfg, r, win->w);
    }
    int kept = 0;
    /* an earlier window's late parts (it was taken without them) go: in a run without end
     * with a stalled rank they would pile up */
    out->unmerged = take_pending(g, win->w, true, out->recs, out->have, &kept, NULL) +
                    g->lost_parts;
    g->lost_parts = 0;
    g->num_pending = kept;
    return true;
}

bool moe_gather_od_poll(moe_gather_t *g, const moe_od_window_t *win, double timeout_s,
                        moe_od_set_t *out)
{
    moe_poll_t poll;
    moe_poll_begin(&poll, timeout_s, true);
    while (receive_one(g, &poll)) {
    }
    if (!g->od_gathering || (!window_complete(g, win->cfg, win->w) &&
                             moe_now_ns() - g->od_close_ns < OD_GRACE_NS)) {
        return false;
    }
    g->od_gathering = false;
    return od_take(g, win, out);
}

bool moe_gather_od_collect(moe_gather_t *g, const moe_od_window_t *win, int64_t deadline_ns,
                           moe_od_set_t *out)
{
    if (!g->od_gathering) {
        return false;
    }
    moe_poll_t poll;
    moe_poll_begin_at(&poll, deadline_ns, false);
    while (!window_complete(g, win->cfg, win->w)) {
        if (!receive_one(g, &poll) && moe_poll_next(&poll) != MOE_OK) {
            break; /* its deadline: written without the ranks still missing */
        }
    }
    g->od_gathering = false;
    bool ok = od_take(g, win, out);
    if (ok) {
        double waited = (double)(deadline_ns - g->od_close_ns) * 1e-9;
        out->grace_s = waited > 0 ? waited : 0;
    }
    return ok;
}

moe_status_t moe_gather_od_write(moe_od_set_t *set, const char *dir, moe_error_t *err)
{
    moe_merge_t *m = moe_merge_create_in(set->cfg, set->world,
                                         (const char (*)[64])set->hosts, dir);
    if (m == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: cannot allocate the report", dir);
    }
    char why[96], cut[96];
    snprintf(why, sizeof(why), "no record within %.1f s of the window's end", set->grace_s);
    snprintf(cut, sizeof(cut), "its last part not in within %.1f s of the window's end",
             set->grace_s);
    for (int r = 0; r < set->world; r++) {
        if (moe_cfg_rank_profiled(set->cfg, r) && !set->have[r]) {
            moe_merge_note_missing(m, r, why);
        } else if (set->have[r]) {
            if (set->cut[r]) { /* its figures stop short: named, the report partial */
                moe_merge_note_missing(m, r, cut);
            }
            /* each rank's whole window is here: the merge takes its memory series and peak
             * as a run's last record's; a window has no second clock estimate */
            set->recs[r].flags |= MOE_PROF_FLAG_FINAL;
            set->recs[r].clock_offset_end_ns = set->recs[r].clock_offset_ns;
        }
    }
    moe_status_t st = moe_merge_window(m, set->recs, set->have, set->t0_ns, err);
    if (st == MOE_OK) {
        int64_t n = set->last - set->first + 1;
        moe_prof_run_t run = {.steps_run = n, .steps_planned = set->planned > 0 ? set->planned : n,
                              .run_s = set->seconds, .deadline_s = set->grace_s,
                              .interrupted = set->interrupted, .config_text = set->config_text,
                              .config_len = set->config_len};
        moe_report_t *rep = moe_merge_finish(m, &run, &set->info);
        if (rep != NULL && set->unmerged > 0) { /* a rank's records incomplete */
            size_t used = strlen(rep->missing);
            snprintf(rep->missing + used, sizeof(rep->missing) - used,
                     "%s%d profile part(s) could not be merged", rep->partial ? "; " : "",
                     set->unmerged);
            rep->partial = true;
        }
        if (rep != NULL && set->short_why[0] != '\0') { /* cut short: partial, and why */
            size_t used = strlen(rep->missing);
            snprintf(rep->missing + used, sizeof(rep->missing) - used, "%s%s",
                     rep->partial ? "; " : "", set->short_why);
            rep->partial = true;
        }
        st = rep != NULL ? moe_report_write_all(rep, err)
                         : moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: no report", dir);
    }
    moe_merge_destroy(m);
    return st;
}

void moe_od_set_free(moe_od_set_t *set)
{
    if (set == NULL) {
        return;
    }
    for (int r = 0; set->recs != NULL && r < set->world; r++) {
        if (set->have[r]) {
            moe_prof_record_free(&set->recs[r]);
        }
    }
    free(set->recs);
    free(set->have);
    free(set->cut);
    free(set->cfg);
    free(set->hosts);
    memset(set, 0, sizeof(*set));
}
