/* Rank 0's side of the record stream: the records every rank sends (record/) received,
 * held until their window is whole, merged into the report and written; the on-demand
 * windows' sets. It knows the record's layout (moe_proto/prof_record.h) and nothing of the
 * recorder: the facade (facade/prof.c) hands it what a rank's recorder knows. */
#ifndef MOE_GATHER_H
#define MOE_GATHER_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe_prof/prof.h"
#include "moe_proto/prof_record.h"
#include "report/report.h"

struct moe_routing_set; /* gather/routing_gather.h */

/* Fold record `src` (a later part of the same rank and window) into `dst`: sums add,
 * extremes combine, lists are appended, the latest static facts win. */
moe_status_t moe_record_absorb(moe_prof_record_t *dst, const moe_prof_record_t *src);

/* Rank 0's accumulation of gathered records into the report. */
typedef struct moe_merge moe_merge_t;
moe_merge_t *moe_merge_create(const moe_config_t *cfg, int world_size, const char (*hosts)[64]);
/* The same with the run folder's exact path (mkdir'ed, must not exist); NULL: by time. */
moe_merge_t *moe_merge_create_in(const moe_config_t *cfg, int world_size,
                                 const char (*hosts)[64], const char *dir);
void moe_merge_destroy(moe_merge_t *m);
/* The run folder, made at create ("" when it could not be made). */
const char *moe_merge_run_dir(const moe_merge_t *m);
/* Add one window's records (recs[i] for the ranks in order; NULL where absent). t0: rank
 * 0's first step begin (its clock); offsets: each rank's clock offset to rank 0. */
moe_status_t moe_merge_window(moe_merge_t *m, moe_prof_record_t *recs, const bool *have,
                              int64_t t0_ns, moe_error_t *err);
/* Fill the run facts and derived figures; returns the report (owned by m). */
moe_report_t *moe_merge_finish(moe_merge_t *m, const moe_prof_run_t *run,
                               const moe_prof_static_t *info);
/* Rank r's last record never arrived: the report is partial and says why. */
void moe_merge_note_missing(moe_merge_t *m, int rank, const char *why);

/* ---- rank 0's collection ---------------------------------------------------------- */

typedef struct moe_gather moe_gather_t;

/* Rank 0, on the recorder's communicator `comm` of `world` ranks. on_demand false: the
 * end-of-run report (its run folder made now) and, in a run without end (cfg->steps 0), a
 * folder per window; true: on-demand windows' sets (moe_gather_od_*). info: the recorder's
 * (copied; its config text copied where window folders need it). NULL: out of memory. */
moe_gather_t *moe_gather_create(const moe_config_t *cfg, MPI_Comm comm, int world,
                                const moe_prof_static_t *info, bool on_demand);
void moe_gather_destroy(moe_gather_t *g); /* accepts NULL; joins a window folder's writer */
/* CPU time of the window folders' writer threads so far, ns. */
int64_t moe_gather_threads_cpu_ns(const moe_gather_t *g);
/* Rank 0's step at its end: window (-1: none) and whether it closes it; its span. */
void moe_gather_note_step(moe_gather_t *g, int64_t window, bool closes, int64_t begin_ns,
                          int64_t end_ns);
/* An online rebalance's row of the report (it grows; the report takes them). */
void moe_gather_rebalance(moe_gather_t *g, const moe_prof_rebalance_t *r);
/* Between window ends: whatever parts arrived, at most every 20 ms. */
void moe_gather_probe(moe_gather_t *g, int64_t now_ns, double timeout_s);
/* Wait (polled, honouring a stop, timeout_s: <= 0 none) for every rank's last part of
 * window w. MOE_OK; MOE_ERR_INTERRUPTED on a stop (what came is kept); else the poll's end
 * with *waited_s: the caller's watchdog fires. */
moe_status_t moe_gather_await_window(moe_gather_t *g, int64_t w, double timeout_s,
                                     double *waited_s);
/* Merge window w's records with `own` (rank 0's, NULL when it records nothing). */
moe_status_t moe_gather_merge_window(moe_gather_t *g, int64_t w, moe_prof_record_t *own,
                                     moe_error_t *err);
/* The end of the run: collect the records still on their way until every profiled rank's
 * last one is here or deadline_s passes (a rank whose last record does not come is noted
 * with why_known, or "no last record within ..." when NULL, and counted in *missing);
 * merge them window by window, with `own` (rank 0's last data, NULL: none) in window
 * own_window; write the report and print its headline; then tell every rank it is done.
 * routing (NULL: profiler.record_routing off) is written as one of the report's files.
 * run_dir receives the folder's path (may be NULL). */
moe_status_t moe_gather_finish(moe_gather_t *g, const moe_prof_run_t *run, double deadline_s,
                               const char *why_known, moe_prof_record_t *own,
                               int64_t own_window, const struct moe_routing_set *routing,
                               int *missing, char *run_dir, size_t run_dir_len,
                               moe_error_t *err);
/* Window folders end here (the end report covers the rest): the last writer joined. */
void moe_gather_end_folders(moe_gather_t *g);

/* ---- on-demand windows (rank 0) ---------------------------------------------------- */

/* A window's records, gathered, for the live path's writer (moe_prof_od_write). */
typedef struct moe_od_set {
    moe_config_t *cfg;          /* the window's: its ranks, its steps (owned) */
    moe_prof_static_t info;     /* the recorder's (hosts below) */
    char (*hosts)[64];          /* [world] (owned) */
    int world;
    moe_prof_record_t *recs;    /* [world] (owned where have) */
    bool *have;                 /* [world] */
    bool *cut;                  /* [world] some parts came, the window's last did not */
    int64_t t0_ns, first, last; /* rank 0's first step begin; the window's steps */
    double seconds;             /* rank 0's first step begin to its last step end */
    double grace_s;
    const char *config_text;    /* the run's, the gather's copy (it outlives the writer) */
    size_t config_len;
    int unmerged;               /* parts that could not be folded in: partial */
    /* set by the caller before the write: the steps asked for (0: last - first + 1), and
     * why the window stopped short (""): the report is then partial and says so */
    int64_t planned;
    bool interrupted;
    char short_why[160];
} moe_od_set_t;

/* The window as rank 0's recorder holds it. */
typedef struct moe_od_window {
    const moe_config_t *cfg;        /* its ranks, its steps */
    const moe_prof_static_t *info;  /* info->hosts: [world] */
    int64_t w, first, last;         /* its index; its steps */
    int64_t t0_ns;                  /* rank 0's first step begin */
} moe_od_window_t;

/* Rank 0 has closed its part of a window at end_ns: the rest is gathered from now on. */
void moe_gather_od_closed(moe_gather_t *g, int64_t end_ns);
bool moe_gather_od_gathering(const moe_gather_t *g);
/* At a step boundary: take what arrived; true when the window gathering is whole (or its
 * grace passed): its set moved into out, recs[0] left for rank 0's own record. */
bool moe_gather_od_poll(moe_gather_t *g, const moe_od_window_t *win, double timeout_s,
                        moe_od_set_t *out);
/* At the run's end: the rest until every chosen rank's last part is in or deadline_ns. */
bool moe_gather_od_collect(moe_gather_t *g, const moe_od_window_t *win, int64_t deadline_ns,
                           moe_od_set_t *out);
/* Merge the set and write the full report folder `dir` (whole or absent, INCOMPLETE). */
moe_status_t moe_gather_od_write(moe_od_set_t *set, const char *dir, moe_error_t *err);
void moe_od_set_free(moe_od_set_t *set);

#endif /* MOE_GATHER_H */
