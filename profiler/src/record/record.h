/* record/: what every rank records: the memory sampler, the on-demand windows' memory
 * series, and the per-rank recorder the facade (facade/prof.c) drives. */
#ifndef MOE_RECORD_H
#define MOE_RECORD_H

#include <pthread.h>
#include <stdatomic.h>

#include "moe_prof/prof.h"
#include "moe_proto/prof_record.h"

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
 * open), no lock, no allocation. A step's own peak between boundaries is not in the series
 * but is in the window's peak: the kernel's resident high-water mark (VmHWM) is reset at the
 * window's start (moe_step_mem_begin: "5" to /proc/self/clear_refs) and read at its end
 * (moe_step_mem_end); where it cannot be reset the peak is the largest sample. */
#define MOE_STEP_MEM_HALVE 256
#define MOE_STEP_MEM_MAX 4096
typedef struct moe_step_mem {
    int fd;                  /* /proc/self/statm; -1: no samples */
    int status_fd;           /* /proc/self/status (VmHWM); -1: not readable */
    int clear_fd;            /* /proc/self/clear_refs, written; -1: not writable */
    bool hwm_reset;          /* this window reset the mark at its start */
    int64_t period0_ns, period_ns;
    int64_t last_ns;
    bool have_last;
    int64_t taken;           /* samples this window */
} moe_step_mem_t;
int moe_step_mem_open(moe_step_mem_t *s, int64_t period_ms); /* -1: not readable */
void moe_step_mem_close(moe_step_mem_t *s);
void moe_step_mem_restart(moe_step_mem_t *s);                /* a new window */
/* The window's first step begins on a chosen rank: the mark, kept first for the run's peak
 * (the sampler's stop reports the larger), is reset to the resident size now. */
void moe_step_mem_begin(moe_step_mem_t *s);
/* The window's end on that rank: rec->rss_peak raised to VmHWM when the start reset it. */
void moe_step_mem_end(moe_step_mem_t *s, moe_prof_record_t *rec);
/* A sample into rec->mem (room for cap) at now_ns when due or force; raises rec->rss_peak. */
void moe_step_mem_take(moe_step_mem_t *s, int64_t now_ns, bool force, moe_prof_record_t *rec,
                       int64_t cap);

/* ---- the per-rank recorder (record/recorder.c) --------------------------------------
 * What a rank records and sends to rank 0; rank 0's collection is gather/'s, the public
 * moe_prof_* calls are the facade's (facade/prof.c), which drives both. */
typedef struct moe_rec moe_rec_t;

/* Collective (the communicator duplicated, clocks aligned to rank 0); the memory sampler is
 * started apart (moe_rec_start_sampler). err: "profiler start-up failed: ..."; *out NULL. */
moe_status_t moe_rec_create(const moe_config_t *cfg, MPI_Comm comm,
                            const moe_prof_static_t *info, moe_rec_t **out, moe_error_t *err);
/* The same for on-demand windows: its own copy of cfg (moe_rec_cfg) whose windows are set
 * by moe_rec_od_arm, lists for max_steps steps, no sampler thread (the memory series is
 * read at the window's step boundaries). */
moe_status_t moe_rec_od_create(const moe_config_t *cfg, MPI_Comm comm,
                               const moe_prof_static_t *info, int64_t max_steps,
                               moe_rec_t **out, moe_error_t *err);
void moe_rec_destroy(moe_rec_t *r); /* accepts NULL; stops the sampler */
int moe_rec_start_sampler(moe_rec_t *r); /* 0, or -1: the thread could not start */
int64_t moe_rec_sampler_cpu_ns(const moe_rec_t *r);

int moe_rec_rank(const moe_rec_t *r);
int moe_rec_world(const moe_rec_t *r);
MPI_Comm moe_rec_comm(const moe_rec_t *r);          /* the profiler's own duplicate */
const moe_config_t *moe_rec_cfg(const moe_rec_t *r); /* an on-demand one's: its window's */
bool moe_rec_profiled(const moe_rec_t *r);           /* this rank records (this window) */
double moe_rec_timeout_s(const moe_rec_t *r);        /* the bound on a wait for a peer */
/* This rank's record of the window in progress (rank 0 merges it in place). */
moe_prof_record_t *moe_rec_own(moe_rec_t *r);
/* The window the records in flight belong to: the windows closed so far. */
int64_t moe_rec_window_index(const moe_rec_t *r);

/* A wait of the profiler lasted its bound (what: the wait): the step watchdog's verdict
 * (moe/watchdog.h), MOE_ERR_TIMEOUT with err naming the ranks that do not answer. */
moe_status_t moe_rec_fire(moe_rec_t *r, const char *what, double waited_s, moe_error_t *err);

void moe_rec_step_begin(moe_rec_t *r, int64_t step);
void moe_rec_layer(moe_rec_t *r, const moe_prof_layer_sample_t *s);
void moe_rec_rebalance(moe_rec_t *r, const moe_prof_rebalance_t *rb); /* its trace span */
/* The step completed: recorded if it is; *window its window (-1: none), *closes whether it
 * closes it. */
void moe_rec_step_end(moe_rec_t *r, int64_t begin_ns, int64_t end_ns, int64_t *window,
                      bool *closes);
/* Non-root, the end of a window: its last part to rank 0 (the watchdog's on a timeout). */
moe_status_t moe_rec_send_window_end(moe_rec_t *r, moe_error_t *err);
/* Non-root, between window ends: a part to rank 0 when 250 ms have passed since the last. */
moe_status_t moe_rec_stream(moe_rec_t *r, int64_t now_ns, moe_error_t *err);
/* The window is closed (gathered on rank 0, sent elsewhere): the next one begins. */
void moe_rec_window_done(moe_rec_t *r);

/* The run's end, in order: moe_rec_run_end (the run's CPU and wall time, the sampler
 * stopped, a step in flight abandoned); moe_rec_end_sync (the second clock estimate, after
 * a run not interrupted; MOE_ERR_TIMEOUT with fault set when a rank does not answer);
 * moe_rec_last_part (the memory series and peaks into the record, flagged final). */
void moe_rec_run_end(moe_rec_t *r);
moe_status_t moe_rec_end_sync(moe_rec_t *r, moe_error_t *fault);
void moe_rec_last_part(moe_rec_t *r);
/* Non-root: the last part to rank 0 (by deadline_ns), then wait until rank 0 has written
 * the report (at most until done_deadline_ns). */
moe_status_t moe_rec_send_final(moe_rec_t *r, int64_t deadline_ns, int64_t done_deadline_ns,
                                moe_error_t *err);

/* ---- on-demand windows, as a rank records them -------------------------------------- */

/* Every rank, once it knows the window: steps first..last, ranks[W] (NULL: all). */
void moe_rec_od_arm(moe_rec_t *r, int64_t first, int64_t last, const bool *ranks);
/* In a window (one armed here that has begun) or not. */
bool moe_rec_od_in_window(const moe_rec_t *r);
/* After each step in a window: recorded; true when the step closed the window here
 * (non-root: its last part sent; rank 0: its record kept for moe_rec_od_take_own). */
bool moe_rec_od_step_end(moe_rec_t *r, int64_t step, int64_t begin_ns, int64_t end_ns);
/* A nearer last step for the armed window (at least the next step, at least its first). */
void moe_rec_od_cut(moe_rec_t *r, int64_t last);
/* The run's end at step (its last completed): a window begun here is closed there
 * (non-root: its last part sent, waited for until deadline_ns); one not begun is dropped.
 * True when it closed one here. */
bool moe_rec_od_end(moe_rec_t *r, int64_t step, int64_t deadline_ns);
/* The window as rank 0 holds it: its config, the recorder's info (hosts: its copy), index,
 * steps and rank 0's first step begin. */
void moe_rec_od_window(const moe_rec_t *r, const moe_config_t **cfg,
                       const moe_prof_static_t **info, int64_t *w, int64_t *first,
                       int64_t *last, int64_t *t0_ns);
/* Rank 0: its record of the closed window moved into *dst; false when it has none. */
bool moe_rec_od_take_own(moe_rec_t *r, moe_prof_record_t *dst);

#endif /* MOE_RECORD_H */
