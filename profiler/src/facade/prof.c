/* Part facade (profiler/src/facade/): the profiler's public calls (moe_prof/prof.h moe_prof_*,
 * and the on-demand windows of facade.h): every rank's recorder (record/) and, on rank 0,
 * the collection of its records (gather/), driven in step. May include: record gather
 * (and the public headers in moe/). One file of each part's folder opens with such a
 * comment; tests/lint/parts.sh holds every part to its list. */
/* record/ knows nothing of gather/ and gather/ nothing of the recorder: what rank 0's
 * collection needs of a rank's recorder (its communicator, its own record, the window it
 * is in) is handed over here. */
#include "facade/facade.h"

#include <stdlib.h>

#include "moe/clock.h"
#include "gather/routing_gather.h"
#include "record/record.h"
#include "record/routing_rec.h"

struct moe_prof {
    moe_rec_t *r;    /* every rank */
    moe_gather_t *g; /* rank 0 only */
    moe_routing_rec_t *rr; /* profiler.record_routing on a rank that routes, else NULL */
    const moe_config_t *cfg;
};

static moe_status_t prof_create(const moe_config_t *cfg, MPI_Comm comm,
                                const moe_prof_static_t *info, int64_t od_max_steps,
                                bool on_demand, moe_prof_t **out, moe_error_t *err)
{
    moe_prof_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the profiler");
    }
    moe_status_t st = on_demand ? moe_rec_od_create(cfg, comm, info, od_max_steps, &p->r, err)
                                : moe_rec_create(cfg, comm, info, &p->r, err);
    if (st != MOE_OK) {
        free(p);
        return st;
    }
    if (moe_rec_rank(p->r) == 0) {
        /* an on-demand recorder's config is its own: the window's ranks and steps */
        p->g = moe_gather_create(moe_rec_cfg(p->r), moe_rec_comm(p->r), moe_rec_world(p->r),
                                 info, on_demand);
        st = p->g != NULL ? MOE_OK : MOE_ERR_NO_MEMORY;
    }
    if (st == MOE_OK && !on_demand && moe_rec_start_sampler(p->r) != 0) {
        st = MOE_ERR_INTERNAL;
    }
    if (st != MOE_OK) {
        moe_prof_destroy(p);
        return moe_error_set(err, st, "profiler start-up failed: %s", moe_status_string(st));
    }
    p->cfg = cfg;
    if (!on_demand && (st = moe_routing_rec_create(cfg, info->token_first, info->token_count,
                                                   &p->rr, err)) != MOE_OK) {
        moe_prof_destroy(p);
        return st;
    }
    *out = p;
    return MOE_OK;
}

moe_status_t moe_prof_create(const moe_config_t *cfg, MPI_Comm comm,
                             const moe_prof_static_t *info, moe_prof_t **out, moe_error_t *err)
{
    return prof_create(cfg, comm, info, 0, false, out, err);
}

void moe_prof_destroy(moe_prof_t *p)
{
    if (p == NULL) {
        return;
    }
    moe_gather_destroy(p->g);
    moe_rec_destroy(p->r);
    moe_routing_rec_destroy(p->rr);
    free(p);
}

int64_t moe_prof_threads_cpu_ns(const moe_prof_t *p)
{
    return p != NULL ? moe_rec_sampler_cpu_ns(p->r) + moe_gather_threads_cpu_ns(p->g) : 0;
}

void moe_prof_step_begin(moe_prof_t *p, int64_t step)
{
    moe_rec_step_begin(p->r, step);
    moe_routing_rec_step_begin(p->rr, step);
}

void moe_prof_layer(moe_prof_t *p, const moe_prof_layer_sample_t *s)
{
    moe_rec_layer(p->r, s);
    moe_routing_rec_layer(p->rr, s);
}

void moe_prof_rebalance(moe_prof_t *p, const moe_prof_rebalance_t *r)
{
    moe_rec_rebalance(p->r, r);
    if (p->g != NULL) {
        moe_gather_rebalance(p->g, r);
    }
}

/* The end of a window: non-root ranks send its last part, rank 0 waits for every rank's
 * last part and merges the window. */
static moe_status_t close_window(moe_prof_t *p, moe_error_t *err)
{
    moe_status_t st;
    if (p->g == NULL) {
        st = moe_rec_send_window_end(p->r, err);
    } else {
        double waited = 0;
        st = moe_gather_await_window(p->g, moe_rec_window_index(p->r), moe_rec_timeout_s(p->r),
                                     &waited);
        if (st == MOE_ERR_INTERRUPTED) { /* what came is kept for the final merge */
            return moe_error_set(err, MOE_ERR_INTERRUPTED, "stop requested");
        }
        if (st != MOE_OK) {
            return moe_rec_fire(p->r, "the profile window's gather", waited, err);
        }
        st = moe_gather_merge_window(p->g, moe_rec_window_index(p->r),
                                     moe_rec_profiled(p->r) ? moe_rec_own(p->r) : NULL, err);
    }
    if (st == MOE_OK) {
        moe_rec_window_done(p->r);
    }
    return st;
}

moe_status_t moe_prof_step_end(moe_prof_t *p, int64_t step, int64_t begin_ns, int64_t end_ns,
                               moe_error_t *err)
{
    (void)step;
    int64_t window;
    bool closes;
    moe_rec_step_end(p->r, begin_ns, end_ns, &window, &closes);
    moe_routing_rec_step_end(p->rr);
    if (p->g != NULL) {
        moe_gather_note_step(p->g, window, closes, begin_ns, end_ns);
    }
    if (window >= 0 && closes) {
        return close_window(p, err);
    }
    /* between window ends: rank 0 takes whatever has arrived, so senders never wait on it */
    moe_status_t st = MOE_OK;
    if (p->g != NULL) {
        moe_gather_probe(p->g, end_ns, moe_rec_timeout_s(p->r));
    } else {
        st = moe_rec_stream(p->r, end_ns, err);
    }
    return st == MOE_ERR_INTERRUPTED ? moe_error_set(err, st, "stop requested") : st;
}

moe_status_t moe_prof_finish(moe_prof_t *p, const moe_prof_run_t *run, char *run_dir,
                             size_t run_dir_len, moe_error_t *err)
{
    moe_rec_run_end(p->r);
    if (p->g != NULL) {
        moe_gather_end_folders(p->g);
    }
    moe_error_t fault; /* the watchdog's verdict, reported once the report is written */
    moe_error_clear(&fault);
    moe_status_t fst = run->interrupted ? MOE_OK : moe_rec_end_sync(p->r, &fault);
    if (fst != MOE_OK && p->g == NULL) {
        *err = fault;
        return fst;
    }
    moe_rec_last_part(p->r);
    int64_t deadline = moe_now_ns() + (int64_t)(run->deadline_s * 1e9);
    if (p->g == NULL) {
        /* its recorded routing first (rank 0 takes it before the records), then the last
         * record; rank 0 waits run->deadline_s for both, then writes: allow for that */
        int64_t done_by = deadline + (int64_t)(run->deadline_s * 1e9) + 5000000000LL;
        moe_status_t rst = p->rr != NULL ? moe_routing_rec_send(p->rr, moe_rec_comm(p->r), err)
                                         : MOE_OK;
        moe_status_t st = moe_rec_send_final(p->r, deadline, done_by, err);
        moe_routing_rec_send_done(p->rr, done_by);
        return st != MOE_OK ? st : rst;
    }
    moe_routing_set_t routing = {0};
    /* no step of the schedule is recorded (all warm-up): no rank records routing, nothing
     * to wait for, no file to write */
    bool routing_on = p->cfg->prof_record_routing && moe_cfg_recorded_steps(p->cfg) != 0;
    if (routing_on) {
        const void *own = NULL;
        size_t own_len = 0;
        if (p->rr != NULL) {
            moe_routing_rec_message(p->rr, &own, &own_len);
        }
        moe_gather_routing(p->cfg, moe_rec_comm(p->r), own, own_len,
                           fst != MOE_OK ? moe_now_ns() + 200000000LL : deadline, &routing);
    }
    int missing = 0;
    const char *why = fst != MOE_OK ? "the watchdog ended the run before its last record "
                                      "(see the error)"
                                    : run->missing_why;
    double left_s = (double)(deadline - moe_now_ns()) / 1e9; /* what the routing left */
    moe_prof_run_t job = *run;
    job.job_recorded = run->job_steps ? moe_prof_schedule_recorded(p->cfg, run->steps_run) : 0;
    moe_status_t st = moe_gather_finish(p->g, &job, fst != MOE_OK ? 0.2 : left_s > 0.2 ? left_s
                                                                                      : 0.2,
                                        why, moe_rec_profiled(p->r) ? moe_rec_own(p->r) : NULL,
                                        moe_rec_window_index(p->r),
                                        routing_on ? &routing : NULL, &missing,
                                        run_dir, run_dir_len, err);
    moe_routing_set_free(&routing);
    if (fst == MOE_OK && missing > 0 && !run->interrupted && run->missing_why == NULL) {
        /* a complete run whose ranks do not all end: the watchdog names them */
        fst = moe_rec_fire(p->r, "the last profile records", run->deadline_s, &fault);
    }
    if (fst != MOE_OK) {
        *err = fault;
        return fst;
    }
    return st;
}

/* ---- on-demand windows ------------------------------------------------------------ */

moe_status_t moe_prof_od_create(const moe_config_t *cfg, MPI_Comm comm,
                                const moe_prof_static_t *info, int64_t max_steps,
                                moe_prof_t **out, moe_error_t *err)
{
    return prof_create(cfg, comm, info, max_steps, true, out, err);
}

void moe_prof_od_arm(moe_prof_t *p, int64_t first, int64_t last, const bool *ranks)
{
    moe_rec_od_arm(p->r, first, last, ranks);
}

/* Rank 0: the window as its recorder holds it. */
static moe_od_window_t od_window(const moe_prof_t *p)
{
    moe_od_window_t win;
    moe_rec_od_window(p->r, &win.cfg, &win.info, &win.w, &win.first, &win.last, &win.t0_ns);
    return win;
}

/* Rank 0: the set gathered (ok), with its own record of the window. */
static bool od_own_into(moe_prof_t *p, bool ok, moe_od_set_t *out)
{
    moe_prof_record_t own;
    if (moe_rec_od_take_own(p->r, &own)) {
        if (ok) {
            out->recs[0] = own;
            out->have[0] = true;
        } else {
            moe_prof_record_free(&own);
        }
    }
    return ok;
}

bool moe_prof_od_step_end(moe_prof_t *p, int64_t step, int64_t begin_ns, int64_t end_ns,
                          moe_od_set_t *out)
{
    if (!moe_rec_od_in_window(p->r) && !moe_gather_od_gathering(p->g)) {
        return false; /* no window: nothing to record, nothing to poll */
    }
    bool closed = moe_rec_od_step_end(p->r, step, begin_ns, end_ns);
    if (p->g == NULL) {
        return false;
    }
    if (closed) {
        moe_gather_od_closed(p->g, end_ns);
    }
    moe_od_window_t win = od_window(p);
    if (!moe_gather_od_poll(p->g, &win, moe_rec_timeout_s(p->r), out)) {
        return false;
    }
    return od_own_into(p, true, out);
}

void moe_prof_od_cut(moe_prof_t *p, int64_t last)
{
    moe_rec_od_cut(p->r, last);
}

bool moe_prof_od_end(moe_prof_t *p, int64_t step, int64_t end_ns, int64_t deadline_ns)
{
    if (moe_rec_od_end(p->r, step, deadline_ns) && p->g != NULL) {
        moe_gather_od_closed(p->g, end_ns);
    }
    return moe_gather_od_gathering(p->g);
}

bool moe_prof_od_collect(moe_prof_t *p, int64_t deadline_ns, moe_od_set_t *out)
{
    if (!moe_gather_od_gathering(p->g)) {
        return false;
    }
    moe_od_window_t win = od_window(p);
    return od_own_into(p, moe_gather_od_collect(p->g, &win, deadline_ns, out), out);
}

moe_status_t moe_prof_od_write(moe_od_set_t *set, const char *dir, moe_error_t *err)
{
    return moe_gather_od_write(set, dir, err);
}

void moe_prof_od_free(moe_od_set_t *set)
{
    moe_od_set_free(set);
}
