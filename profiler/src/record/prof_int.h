/* Private to the profiler: the recorder's state and the pieces of it other files use. */
#ifndef MOE_PROF_INT_H
#define MOE_PROF_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "moe/prof.h"
#include "moe/prof_record.h"
#include "report/report.h"

/* The memory sampler (the daemon thread). */
typedef struct moe_sampler {
    pthread_t thread;
    bool running;
    atomic_int stop;
    int64_t period_ns;
    moe_rec_mem_t *ring;     /* [cap] the series, decimated by 2 whenever it fills */
    int64_t cap;
    atomic_llong count;      /* samples held */
    atomic_ullong rss_peak;
    atomic_ullong dev_peak;
    atomic_llong cpu_ns;     /* the thread's CPU time so far (it updates it every sample) */
    /* moe_prof_static_t.device_memory, or NULL: called from the thread only */
    void (*device_memory)(uint64_t *current, uint64_t *peak);
} moe_sampler_t;

/* device_memory may be NULL (no device: dev_bytes and dev_peak stay 0). */
int moe_sampler_start(moe_sampler_t *s, int64_t period_ms, int64_t cap,
                      void (*device_memory)(uint64_t *current, uint64_t *peak));
void moe_sampler_stop(moe_sampler_t *s);   /* joins; safe when not running */
void moe_sampler_free(moe_sampler_t *s);
/* The sampler thread's CPU time so far, ns (0 when it never ran). */
int64_t moe_sampler_cpu_ns(const moe_sampler_t *s);
/* Copy the series, oldest first, into rec->mem (allocates). After stop. */
int moe_sampler_collect(moe_sampler_t *s, moe_prof_record_t *rec);
uint64_t moe_read_rss_bytes(void);

/* The on-demand windows' memory series, without a thread: a chosen rank reads its RSS at
 * the window's step boundaries, at the first and the last step and in between once per
 * period (profiler.memory_sample_ms, doubled after every MOE_STEP_MEM_HALVE samples), at
 * most MOE_STEP_MEM_MAX samples a window: one pread of /proc/self/statm (the file kept
 * open), no lock, no allocation. A step's own peak between boundaries is not seen. */
#define MOE_STEP_MEM_HALVE 256
#define MOE_STEP_MEM_MAX 4096
typedef struct moe_step_mem {
    int fd;                  /* /proc/self/statm; -1: no samples */
    int64_t period0_ns, period_ns;
    int64_t last_ns;
    bool have_last;
    int64_t taken;           /* samples this window */
} moe_step_mem_t;
int moe_step_mem_open(moe_step_mem_t *s, int64_t period_ms); /* -1: not readable */
void moe_step_mem_close(moe_step_mem_t *s);
void moe_step_mem_restart(moe_step_mem_t *s);                /* a new window */
/* A sample into rec->mem (room for cap) at now_ns when due or force; raises rec->rss_peak. */
void moe_step_mem_take(moe_step_mem_t *s, int64_t now_ns, bool force, moe_prof_record_t *rec,
                       int64_t cap);

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

/* On-demand windows (the live path's POST /profile): a second recorder on its own
 * communicator whose windows are set at run time, not by the schedule. The ranks record
 * the window's steps as the end-of-run profiler does and send them to rank 0 in parts
 * (the same gather path); rank 0 never waits for them at a step: it takes what arrived at
 * each step boundary and, once every chosen rank's last part is in (or after a grace), hands
 * the set over to be written (moe_prof_od_write, on any thread). The memory series is read
 * at the window's step boundaries (moe_step_mem_t), not by a sampler thread. */
typedef struct moe_od_set {
    moe_config_t *cfg;          /* the window's: its ranks, its steps (owned) */
    moe_prof_static_t info;     /* the recorder's (hosts below) */
    char (*hosts)[64];          /* [world] (owned) */
    int world;
    moe_prof_record_t *recs;    /* [world] (owned where have) */
    bool *have;                 /* [world] */
    int64_t t0_ns, first, last; /* rank 0's first step begin; the window's steps */
    double seconds;             /* rank 0's first step begin to its last step end */
    double grace_s;
    const char *config_text;    /* the run's, the recorder's copy (it outlives the writer) */
    size_t config_len;
    /* set by the caller before the write: the steps asked for (0: last - first + 1), and
     * why the window stopped short (""): the report is then partial and says so */
    int64_t planned;
    bool interrupted;
    char short_why[160];
} moe_od_set_t;

/* Collective, like moe_prof_create. max_steps bounds the per-step lists reserved. */
moe_status_t moe_prof_od_create(const moe_config_t *cfg, MPI_Comm comm,
                                const moe_prof_static_t *info, int64_t max_steps,
                                moe_prof_t **out, moe_error_t *err);
/* Every rank, once it knows the window: steps first..last, ranks[W] (NULL: all). */
void moe_prof_od_arm(moe_prof_t *p, int64_t first, int64_t last, const bool *ranks);
/* Every rank after each step (in place of moe_prof_step_end). Rank 0: true when a window's
 * set is complete, moved into *out (free it with moe_od_set_free). */
bool moe_prof_od_step_end(moe_prof_t *p, int64_t step, int64_t begin_ns, int64_t end_ns,
                          moe_od_set_t *out);
/* Every rank: rank 0 has told a nearer last step for the armed window (DELETE /profile):
 * recorded up to it (at least the next step here, at least its first). */
void moe_prof_od_cut(moe_prof_t *p, int64_t last);
/* Every rank at the run's end, step its last completed step: a window that has begun here
 * is closed at that step (non-root: its last part sent, waited for until deadline_ns); one
 * not begun is dropped. Rank 0: true when a window is now being gathered. */
bool moe_prof_od_end(moe_prof_t *p, int64_t step, int64_t end_ns, int64_t deadline_ns);
/* Rank 0 after moe_prof_od_end (or with a window closed and still gathering): the rest of
 * its parts until every chosen rank's last one is in or deadline_ns; true with the set in
 * *out. */
bool moe_prof_od_collect(moe_prof_t *p, int64_t deadline_ns, moe_od_set_t *out);
/* Merge the set and write the full report folder `dir` (whole or absent, INCOMPLETE). */
moe_status_t moe_prof_od_write(moe_od_set_t *set, const char *dir, moe_error_t *err);
void moe_od_set_free(moe_od_set_t *set);

#endif /* MOE_PROF_INT_H */
