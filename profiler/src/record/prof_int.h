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
    /* moe_prof_static_t.device_memory, or NULL: called from the thread only */
    void (*device_memory)(uint64_t *current, uint64_t *peak);
} moe_sampler_t;

/* device_memory may be NULL (no device: dev_bytes and dev_peak stay 0). */
int moe_sampler_start(moe_sampler_t *s, int64_t period_ms, int64_t cap,
                      void (*device_memory)(uint64_t *current, uint64_t *peak));
void moe_sampler_stop(moe_sampler_t *s);   /* joins; safe when not running */
void moe_sampler_free(moe_sampler_t *s);
/* Copy the series, oldest first, into rec->mem (allocates). After stop. */
int moe_sampler_collect(moe_sampler_t *s, moe_prof_record_t *rec);
uint64_t moe_read_rss_bytes(void);

/* Fold record `src` (a later part of the same rank and window) into `dst`: sums add,
 * extremes combine, lists are appended, the latest static facts win. */
moe_status_t moe_record_absorb(moe_prof_record_t *dst, const moe_prof_record_t *src);

/* Rank 0's accumulation of gathered records into the report. */
typedef struct moe_merge moe_merge_t;
moe_merge_t *moe_merge_create(const moe_config_t *cfg, int world_size, const char (*hosts)[64]);
void moe_merge_destroy(moe_merge_t *m);
/* Add one window's records (recs[i] for the ranks in order; NULL where absent). t0: rank
 * 0's first step begin (its clock); offsets: each rank's clock offset to rank 0. */
moe_status_t moe_merge_window(moe_merge_t *m, moe_prof_record_t *recs, const bool *have,
                              int64_t t0_ns, moe_error_t *err);
/* Fill the run facts and derived figures; returns the report (owned by m). */
moe_report_t *moe_merge_finish(moe_merge_t *m, const moe_prof_run_t *run,
                               const moe_prof_static_t *info);
/* Rank r's last record never arrived: the report is partial and says why. */
void moe_merge_note_missing(moe_merge_t *m, int rank, const char *why);

#endif /* MOE_PROF_INT_H */
