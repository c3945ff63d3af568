/* Part record (profiler/src/record/): on every rank: the recorder's spans and counters,
 * the memory sampler, clock alignment, measurement windows as a rank sees them, overlap,
 * its records packed and sent to rank 0. May include: no other part (the public headers in
 * moe/, the record layout in proto/). One file of each part's folder opens with such a
 * comment; tests/lint/parts.sh holds every part to its list. */
/* The per-rank recorder (record.h): the hot-path entry points and the parts sent to rank
 * 0; rank 0's receive-and-merge loop is gather/'s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moe/stop.h"
#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe/watchdog.h"
#include "record/overlap.h"
#include "record/record.h"

#define LIST_BOUND (1 << 20) /* items per list per window, whatever the config */

struct moe_rec {
    const moe_config_t *cfg;
    MPI_Comm comm;
    int rank, world;
    bool profiled;
    moe_prof_static_t info;
    int32_t *local_ids;
    moe_prof_record_t rec;       /* this window's data */
    int64_t cap_steps, cap_exchanges, cap_metrics, cap_events;
    int64_t events_budget;       /* events this rank may still record over the run */
    int chunks;                  /* runtime.chunks (>= 1) */
    moe_ival_t *ov_spans;        /* [2 * chunks] scratch: the layer's exchange spans */
    moe_ival_t *ov_calls;        /* [chunks * num_local] scratch: its expert calls */
    /* the current step */
    int64_t step;
    bool recorded, closes;
    int64_t window;
    int64_t phase_acc[MOE_PHASE_COUNT];
    int64_t cpu_step_ns;         /* process CPU time at the recorded step's begin */
    int64_t run_cpu0_ns, run_wall0_ns; /* the same, and the clock, at the run's first step */
    int windows_gathered;
    double *offsets, *uncert;    /* [world] clock offsets to rank 0 */
    moe_sampler_t sampler;
    MPI_Comm pcomm;              /* the profiler's own duplicate of the job's communicator */
    moe_wbuf_t sendbuf;          /* the record in flight to rank 0 (non-root ranks) */
    MPI_Request sendreq;
    bool sending;
    int64_t last_send_ns;        /* non-root: when the last part left */
    /* the step in flight: its per-layer figures count only when it completes */
    moe_prof_record_t mark;      /* the accumulators as they were at its begin */
    int64_t mark_budget;         /* events_budget then */
    bool step_open;
    /* on-demand windows (moe_rec_od_*) */
    bool on_demand;
    moe_config_t *own_cfg;       /* cfg points here: the current window's ranks and steps */
    char (*hosts)[64];           /* [world] a copy: windows are written after create */
    bool od_armed;
    int64_t od_first, od_last, od_w;
    int64_t od_t0_ns;            /* its first step's begin here */
    moe_prof_record_t od_own;    /* rank 0's record of the window, while the rest come */
    bool od_own_have;
    moe_step_mem_t od_mem;       /* the window's memory series, read at its steps */
};

/* A rank that may be SIGKILLed about 1 s after a signal must not sit on much data: parts
 * go to rank 0 at the first step boundary this long after the previous one. */
#define PART_INTERVAL_NS 250000000LL

/* Recorded steps the run will have: bounds the per-window lists. */
static int64_t steps_per_window(const moe_config_t *cfg)
{
    return (cfg->prof_measurement_steps + cfg->prof_sampling_rate - 1) / cfg->prof_sampling_rate;
}

static int64_t bound(int64_t n)
{
    return n < 1 ? 1 : n > LIST_BOUND ? LIST_BOUND : n;
}

static moe_status_t alloc_lists(moe_rec_t *p)
{
    const moe_config_t *cfg = p->cfg;
    int64_t steps = steps_per_window(cfg), L = cfg->num_layers, nl = p->rec.num_local;
    int64_t total_steps = p->info.total_steps, C = p->chunks;
    steps = steps < total_steps ? steps : total_steps;
    p->cap_steps = bound(steps);
    p->cap_exchanges = bound(steps * L);
    p->cap_metrics = bound(steps * L * nl);
    int64_t profiled = cfg->prof_all_ranks ? p->world : cfg->prof_num_ranks;
    p->events_budget = cfg->prof_trace ? cfg->prof_trace_max_events / (profiled > 0 ? profiled : 1) : 0;
    /* per layer 5 phases, up to 2 * C exchanges and C * nl expert calls; the step itself.
     * No more than the run's budget can ever be recorded. */
    p->cap_events = bound(steps * (L * (5 + 2 * C + C * nl) + 1));
    p->cap_events = p->events_budget < p->cap_events ? bound(p->events_budget) : p->cap_events;
    p->rec.steps = calloc((size_t)p->cap_steps, sizeof(moe_rec_step_t));
    p->rec.exchanges = calloc((size_t)p->cap_exchanges, sizeof(moe_rec_exchange_t));
    p->rec.layer_lat = calloc((size_t)p->cap_exchanges, sizeof(moe_rec_lat_t));
    p->rec.metrics = calloc((size_t)p->cap_metrics, sizeof(moe_rec_metric_t));
    p->rec.events = calloc((size_t)p->cap_events, sizeof(moe_rec_event_t));
    p->ov_spans = calloc((size_t)(2 * C), sizeof(moe_ival_t));
    p->ov_calls = calloc((size_t)(C * (nl > 0 ? nl : 1)), sizeof(moe_ival_t));
    if (!p->rec.steps || !p->rec.exchanges || !p->rec.layer_lat || !p->rec.metrics || !p->rec.events ||
        !p->ov_spans || !p->ov_calls) {
        return MOE_ERR_NO_MEMORY;
    }
    return MOE_OK;
}

/* Clear what a window accumulates; keep identity and static facts. */
static void reset_window(moe_rec_t *p)
{
    moe_prof_record_t *r = &p->rec;
    size_t le = (size_t)r->num_layers * (size_t)r->num_experts;
    size_t ll = (size_t)r->num_layers * (size_t)r->num_local;
    size_t W = (size_t)r->world_size;
    r->steps_recorded = 0;
    for (int i = 0; i < MOE_PHASE_COUNT; i++) {
        r->phase_sum[i] = r->phase_min[i] = r->phase_max[i] = 0;
    }
    memset(r->experts, 0, ll * sizeof(*r->experts));
    memset(r->demand, 0, le * sizeof(uint64_t));
    memset(r->kept, 0, le * sizeof(uint64_t));
    memset(r->dropped, 0, le * sizeof(uint64_t));
    memset(r->bytes_sent, 0, W * sizeof(uint64_t));
    memset(r->bytes_recv, 0, W * sizeof(uint64_t));
    memset(r->msgs_sent, 0, W * sizeof(uint64_t));
    memset(r->msgs_recv, 0, W * sizeof(uint64_t));
    memset(r->wait_ns, 0, W * sizeof(double));
    memset(r->rows_sent, 0, W * sizeof(uint64_t));
    memset(r->rows_recv, 0, W * sizeof(uint64_t));
    memset(r->pairs_sent, 0, W * sizeof(uint64_t));
    memset(r->pairs_recv, 0, W * sizeof(uint64_t));
    r->exchange_ns = r->hidden_ns = 0;
    r->cpu_steps_ns = r->wall_steps_ns = 0;
    memset(r->shared_rows, 0, (size_t)r->num_layers * sizeof(int64_t));
    memset(r->shared_ns, 0, (size_t)r->num_layers * sizeof(int64_t));
    r->num_steps = r->num_exchanges = r->num_metrics = r->num_events = 0;
    r->num_layer_lat = 0;
    r->metrics_dropped = r->events_dropped = 0;
    if (p->on_demand) { /* its series is per part (the end of a run sets its own once) */
        r->num_mem = 0;
        r->rss_peak = r->dev_peak = 0;
    }
}

/* The profiler's bound on one wait for a peer: the step watchdog's (0: none). */
static double prof_timeout_s(const moe_rec_t *p)
{
    return p->cfg->step_timeout_s;
}

/* A wait of the profiler lasted its bound (what: the wait; waited_on: the rank it waited
 * for, -1 for several). As the step watchdog does: a fault another rank reported to rank 0
 * is taken as is; else ask every rank whether it runs, name those that do not, and let one
 * rank report it (moe/watchdog.h). Returns MOE_ERR_TIMEOUT with err set. */
static moe_status_t prof_fire(moe_rec_t *p, const char *what, double waited_s,
                              moe_error_t *err)
{
    if (moe_watchdog_notice(err) != MOE_OK) {
        return MOE_ERR_TIMEOUT;
    }
    int dead[64];
    int ndead = moe_watchdog_unresponsive(1.0, dead, 64);
    char who[512] = "";
    size_t used = 0;
    for (int i = 0; i < ndead && used + 80 < sizeof(who); i++) {
        used += (size_t)snprintf(who + used, sizeof(who) - used, "%srank %d (%s)", i ? ", " : "",
                                 dead[i], p->info.hosts[dead[i]]);
    }
    moe_error_set(err, MOE_ERR_TIMEOUT,
                  "watchdog: rank %d (%s) made no progress for %.1f s %s %lld: waiting "
                  "in %s; %s%s (runtime.step_timeout_s = %g); aborting the job",
                  p->rank, p->info.hosts[p->rank], waited_s,
                  p->step < 0 ? "before step" : "after step", (long long)(p->step < 0 ? 0 : p->step), what,
                  ndead > 0 ? who : "every rank answers (they wait too: a rank too slow?)",
                  ndead == 1 ? " does not answer (stopped, hung or lost)"
                  : ndead > 1 ? " do not answer (stopped, hung or lost)" : "",
                  p->cfg->step_timeout_s);
    moe_watchdog_defer(err->msg, dead, ndead, MOE_WATCHDOG_REPORT_S);
    return MOE_ERR_TIMEOUT;
}

/* The record's columns: with a fixed placement, one per local expert of the layer that
 * has the most here (a layer of placement.layers may have more than placement.experts);
 * with online rebalancing, where any expert may come here, one per expert. */
static int record_columns(const moe_config_t *cfg, int rank)
{
    return cfg->rebalance_every > 0 ? (int)cfg->num_experts : moe_cfg_max_local(cfg, rank);
}

/* Each (layer, column)'s expert: the layer's local experts in order, or the identity. */
static void fill_slot_ids(moe_prof_record_t *r, const moe_config_t *cfg, int rank)
{
    int nl = r->num_local;
    for (int l = 0; l < r->num_layers; l++) {
        int32_t *ids = r->slot_ids + (size_t)l * (size_t)nl;
        if (cfg->rebalance_every > 0) {
            for (int e = 0; e < nl; e++) {
                ids[e] = e;
            }
            continue;
        }
        int n = moe_cfg_experts_of_rank_layer(cfg, l, rank, ids); /* n <= nl */
        for (int i = n; i < nl; i++) {
            ids[i] = -1;
        }
    }
}

static moe_status_t prof_setup(moe_rec_t *p, const moe_prof_static_t *info, moe_error_t *err)
{
    const moe_config_t *cfg = p->cfg;
    int nl = record_columns(cfg, p->rank);
    moe_status_t st = moe_prof_record_alloc(&p->rec, p->world, (int)cfg->num_layers,
                                            (int)cfg->num_experts, nl);
    if (st != MOE_OK) {
        return st;
    }
    st = moe_prof_record_alloc(&p->mark, p->world, (int)cfg->num_layers, (int)cfg->num_experts,
                               nl);
    if (st != MOE_OK) {
        return st;
    }
    p->rec.rank = p->rank;
    for (int i = 0; i < nl; i++) { /* the shared placement's experts, for old readers */
        p->rec.local_ids[i] = i < info->num_local && cfg->rebalance_every == 0
                                  ? info->local_ids[i]
                                  : i;
    }
    fill_slot_ids(&p->rec, cfg, p->rank);
    p->rec.expert_weight_bytes = info->expert_weight_bytes;
    p->rec.exchange_buffer_bytes = info->exchange_buffer_bytes;
    p->chunks = info->chunks > 0 ? info->chunks : cfg->chunks > 0 ? (int)cfg->chunks : 1;
    p->rec.chunks = p->chunks;
    snprintf(p->rec.device, sizeof(p->rec.device), "%s",
             info->device != NULL ? info->device : cfg->device == MOE_DEVICE_CUDA ? "cuda" : "cpu");
    p->offsets = calloc((size_t)p->world, sizeof(double));
    p->uncert = calloc((size_t)p->world, sizeof(double));
    if (p->offsets == NULL || p->uncert == NULL || alloc_lists(p) != MOE_OK) {
        return MOE_ERR_NO_MEMORY;
    }
    snprintf(p->rec.host, sizeof(p->rec.host), "%s", info->hosts[p->rank]);
    MPI_Request req;
    st = MOE_MPI(MPI_Comm_idup(p->comm, &p->pcomm, &req), err);
    if (st == MOE_OK) {
        moe_poll_t poll;
        moe_poll_begin(&poll, prof_timeout_s(p), true);
        st = moe_poll_request(&req, &poll, err);
        st = st == MOE_ERR_TIMEOUT ? prof_fire(p, "the profiler's start-up", prof_timeout_s(p), err)
                                   : st;
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_set_errhandler(p->pcomm, MPI_ERRORS_RETURN), err);
    }
    if (st == MOE_OK) {
        int waited_on = -1;
        st = moe_prof_clock_sync(p->pcomm, 20, prof_timeout_s(p), p->offsets, p->uncert,
                                 &waited_on, err);
        if (st == MOE_ERR_TIMEOUT) {
            st = prof_fire(p, "the clock sync at start-up", prof_timeout_s(p), err);
        }
    }
    p->rec.clock_offset_ns = p->offsets[p->rank];
    p->rec.clock_uncertainty_ns = p->uncert[p->rank];
    return st;
}

static moe_status_t prof_create(const moe_config_t *cfg, MPI_Comm comm,
                                const moe_prof_static_t *info, bool on_demand,
                                moe_rec_t **out, moe_error_t *err)
{
    *out = NULL;
    moe_rec_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the profiler");
    }
    p->cfg = cfg;
    p->comm = comm;
    p->on_demand = on_demand;
    p->od_mem.fd = p->od_mem.status_fd = p->od_mem.clear_fd = -1;
    p->pcomm = MPI_COMM_NULL;
    moe_wbuf_init(&p->sendbuf);
    p->step = -1;
    p->window = -1;
    p->info = *info;
    moe_error_t why; /* an MPI failure's own line; other failures have only a code */
    moe_error_clear(&why);
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &p->rank), &why);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &p->world), &why);
    }
    if (st == MOE_OK) {
        p->profiled = moe_cfg_rank_profiled(cfg, p->rank);
        st = prof_setup(p, info, &why);
    }
    if (st != MOE_OK) {
        moe_rec_destroy(p);
        return moe_error_set(err, st, "profiler start-up failed: %s",
                             why.msg[0] != '\0' ? why.msg : moe_status_string(st));
    }
    *out = p;
    return MOE_OK;
}

moe_status_t moe_rec_create(const moe_config_t *cfg, MPI_Comm comm,
                            const moe_prof_static_t *info, moe_rec_t **out, moe_error_t *err)
{
    return prof_create(cfg, comm, info, false, out, err);
}

int moe_rec_start_sampler(moe_rec_t *p)
{
    return moe_sampler_start(&p->sampler, p->cfg->prof_memory_sample_ms, 4096,
                             p->info.device_memory);
}

int64_t moe_rec_sampler_cpu_ns(const moe_rec_t *p)
{
    return p != NULL ? moe_sampler_cpu_ns(&p->sampler) : 0;
}

int moe_rec_rank(const moe_rec_t *p)
{
    return p->rank;
}

int moe_rec_world(const moe_rec_t *p)
{
    return p->world;
}

MPI_Comm moe_rec_comm(const moe_rec_t *p)
{
    return p->pcomm;
}

const moe_config_t *moe_rec_cfg(const moe_rec_t *p)
{
    return p->cfg;
}

bool moe_rec_profiled(const moe_rec_t *p)
{
    return p->profiled;
}

double moe_rec_timeout_s(const moe_rec_t *p)
{
    return prof_timeout_s(p);
}

moe_prof_record_t *moe_rec_own(moe_rec_t *p)
{
    return &p->rec;
}

int64_t moe_rec_window_index(const moe_rec_t *p)
{
    return p->windows_gathered;
}

moe_status_t moe_rec_fire(moe_rec_t *p, const char *what, double waited_s, moe_error_t *err)
{
    return prof_fire(p, what, waited_s, err);
}

void moe_rec_destroy(moe_rec_t *p)
{
    if (p == NULL) {
        return;
    }
    moe_sampler_stop(&p->sampler);
    moe_sampler_free(&p->sampler);
    moe_prof_record_free(&p->rec);
    moe_prof_record_free(&p->mark);
    moe_wbuf_free(&p->sendbuf);
    /* a send still in flight (rank 0 gone) is abandoned with the process */
    if (p->pcomm != MPI_COMM_NULL && !moe_stop_requested()) {
        MOE_MPI(MPI_Comm_free(&p->pcomm), NULL); /* logged: destroy returns nothing */
    }
    free(p->offsets);
    free(p->uncert);
    free(p->ov_spans);
    free(p->ov_calls);
    moe_prof_record_free(&p->od_own);
    moe_step_mem_close(&p->od_mem);
    free(p->own_cfg);
    free(p->hosts);
    free(p);
}

/* What moe_prof_layer accumulates, from src into dst (same dims): a step's mark. */
static void copy_layer_figures(moe_prof_record_t *dst, const moe_prof_record_t *src)
{
    size_t ll = (size_t)src->num_layers * (size_t)src->num_local;
    size_t le = (size_t)src->num_layers * (size_t)src->num_experts;
    size_t W = (size_t)src->world_size;
    memcpy(dst->experts, src->experts, ll * sizeof(*src->experts));
    memcpy(dst->demand, src->demand, le * sizeof(uint64_t));
    memcpy(dst->kept, src->kept, le * sizeof(uint64_t));
    memcpy(dst->dropped, src->dropped, le * sizeof(uint64_t));
    memcpy(dst->bytes_sent, src->bytes_sent, W * sizeof(uint64_t));
    memcpy(dst->bytes_recv, src->bytes_recv, W * sizeof(uint64_t));
    memcpy(dst->msgs_sent, src->msgs_sent, W * sizeof(uint64_t));
    memcpy(dst->msgs_recv, src->msgs_recv, W * sizeof(uint64_t));
    memcpy(dst->wait_ns, src->wait_ns, W * sizeof(double));
    memcpy(dst->rows_sent, src->rows_sent, W * sizeof(uint64_t));
    memcpy(dst->rows_recv, src->rows_recv, W * sizeof(uint64_t));
    memcpy(dst->pairs_sent, src->pairs_sent, W * sizeof(uint64_t));
    memcpy(dst->pairs_recv, src->pairs_recv, W * sizeof(uint64_t));
    dst->exchange_ns = src->exchange_ns;
    dst->hidden_ns = src->hidden_ns;
    dst->num_exchanges = src->num_exchanges;
    dst->num_layer_lat = src->num_layer_lat;
    dst->num_metrics = src->num_metrics;
    dst->metrics_dropped = src->metrics_dropped;
    dst->num_events = src->num_events;
    dst->events_dropped = src->events_dropped;
}

/* A recorded step's layers add to the window as they run; if the step never completes (a
 * stop mid-step), the window goes back to its mark, so only completed steps count. */
static void step_abandon(moe_rec_t *p)
{
    if (p->step_open) {
        copy_layer_figures(&p->rec, &p->mark);
        p->events_budget = p->mark_budget;
        p->step_open = false;
    }
}

void moe_rec_step_begin(moe_rec_t *p, int64_t step)
{
    bool rec;
    p->step = step;
    if (p->on_demand) {
        rec = p->od_armed && step >= p->od_first && step <= p->od_last;
        p->window = rec ? p->od_w : -1;
        p->closes = rec && step == p->od_last;
    } else {
        p->window = moe_prof_schedule(p->cfg, step, &rec, &p->closes);
    }
    p->recorded = rec && p->profiled;
    memset(p->phase_acc, 0, sizeof(p->phase_acc));
    if (p->run_wall0_ns == 0) { /* the run's CPU share counts from its first step */
        p->run_wall0_ns = moe_now_ns();
        p->run_cpu0_ns = moe_cpu_ns();
    }
    if (p->recorded && p->on_demand && step == p->od_first) {
        moe_step_mem_begin(&p->od_mem); /* the window's peak counts from here */
    }
    if (p->recorded) {
        p->cpu_step_ns = moe_cpu_ns(); /* one system call per recorded step */
        copy_layer_figures(&p->mark, &p->rec);
        p->mark_budget = p->events_budget;
        p->step_open = true;
    }
}

static void add_event(moe_rec_t *p, int kind, int layer, int id, int lane, int64_t ts,
                      int64_t dur, int64_t arg)
{
    moe_prof_record_t *r = &p->rec;
    if (p->events_budget <= 0 || r->num_events >= p->cap_events) {
        r->events_dropped += p->cfg->prof_trace ? 1 : 0;
        return;
    }
    p->events_budget--;
    r->events[r->num_events++] = (moe_rec_event_t){.ts_ns = ts, .dur_ns = dur, .kind = kind,
                                                   .layer = layer, .id = id, .lane = lane,
                                                   .step = p->step, .arg = arg};
}

void moe_rec_rebalance(moe_rec_t *p, const moe_prof_rebalance_t *r)
{
    if (p->profiled && p->cfg->prof_trace) {
        int64_t keep = p->step;
        p->step = r->step;
        add_event(p, MOE_TEV_REBALANCE, 0, (int)r->moved, MOE_LANE_STEPS, r->begin_ns,
                  r->end_ns - r->begin_ns, r->bytes);
        p->step = keep;
    }
}

/* The record column of local expert le in the sample's layer (-1: none holds it). */
static int record_column(const moe_rec_t *p, const moe_prof_layer_sample_t *s, int le,
                         int expert)
{
    const moe_prof_record_t *r = &p->rec;
    int col = p->cfg->rebalance_every > 0 ? expert : le;
    if (expert < 0 || col < 0 || col >= r->num_local ||
        r->slot_ids[(size_t)s->layer * (size_t)r->num_local + (size_t)col] != expert) {
        return -1; /* not the placement the record was set up with: not booked under a lie */
    }
    return col;
}

/* One histogram entry and metrics row per expert per layer: its busy time over all the
 * layer's chunks (with chunks 1 this is its one call, as before), booked under the expert
 * the slot held in this layer at this step. */
static void record_experts(moe_rec_t *p, const moe_prof_layer_sample_t *s)
{
    moe_prof_record_t *r = &p->rec;
    for (int local = 0; local < s->num_local_experts; local++) {
        int64_t rows = s->expert_rows[local];
        int col = rows == 0 ? -1 : record_column(p, s, local, s->local_experts[local]);
        if (col < 0) {
            continue;
        }
        int64_t ns = s->expert_ns[local];
        moe_rec_expert_t *x = &r->experts[s->layer * r->num_local + col];
        x->tokens += (uint64_t)rows;
        x->calls++;
        x->flops += (double)rows * p->info.flops_per_row;
        moe_hist_add(&x->hist, ns);
        if (r->num_metrics < p->cap_metrics) {
            r->metrics[r->num_metrics++] = (moe_rec_metric_t){
                .step = p->step, .layer = s->layer, .local = col, .tokens = rows, .ns = ns};
        } else {
            r->metrics_dropped++;
        }
    }
}

/* The trace: one event per exchange span (lane 2) and per expert call (lane 3 + local). */
static void record_timeline(moe_rec_t *p, const moe_prof_layer_sample_t *s)
{
    const moe_prof_record_t *r = &p->rec;
    if (!p->cfg->prof_trace) {
        return; /* nothing to record, nothing to count as dropped */
    }
    for (int i = 0; i < s->num_spans; i++) {
        const moe_prof_span_t *x = &s->spans[i];
        add_event(p, MOE_TEV_EXCHANGE, s->layer, x->kind, MOE_LANE_EXCHANGE, x->begin_ns,
                  x->end_ns - x->begin_ns, x->chunk);
    }
    for (int i = 0; i < s->num_calls; i++) {
        const moe_prof_call_t *c = &s->calls[i];
        int id = c->local >= 0 && c->local < r->num_local && c->local < s->num_local_experts
                     ? s->local_experts[c->local]
                     : -1;
        if (id < 0) {
            continue; /* not one of ours: nothing to name it by */
        }
        add_event(p, MOE_TEV_EXPERT, s->layer, id,
                  MOE_LANE_EXPERT0 + c->local, c->begin_ns, c->end_ns - c->begin_ns, c->rows);
    }
}

/* Exchange in flight this layer (the union of its spans) and the part of it during this
 * rank's expert calls, through the scratch reserved at create. */
static void record_overlap(moe_rec_t *p, const moe_prof_layer_sample_t *s)
{
    int64_t inflight = 0, hidden = 0;
    moe_overlap_layer(s, p->ov_spans, 2 * p->chunks, p->ov_calls,
                      p->chunks * (p->rec.num_local > 0 ? p->rec.num_local : 1), &inflight,
                      &hidden);
    p->rec.exchange_ns += inflight;
    p->rec.hidden_ns += hidden;
}

static void record_comm(moe_rec_t *p, const moe_prof_layer_sample_t *s)
{
    moe_prof_record_t *r = &p->rec;
    uint64_t rb = (uint64_t)p->info.row_bytes;
    for (int j = 0; j < r->world_size; j++) {
        /* dispatch: send_rows out, recv_rows in; combine: the same rows come back */
        uint64_t rows = (uint64_t)s->send_rows[j] + (uint64_t)s->recv_rows[j];
        r->bytes_sent[j] += rows * rb;
        r->bytes_recv[j] += rows * rb;
        uint64_t msgs = (uint64_t)(s->send_rows[j] > 0) + (uint64_t)(s->recv_rows[j] > 0);
        r->rows_sent[j] += (uint64_t)s->send_rows[j];
        r->rows_recv[j] += (uint64_t)s->recv_rows[j];
        r->pairs_sent[j] += (uint64_t)(s->send_pairs != NULL ? s->send_pairs[j] : s->send_rows[j]);
        r->pairs_recv[j] += (uint64_t)(s->recv_pairs != NULL ? s->recv_pairs[j] : s->recv_rows[j]);
        r->msgs_sent[j] += msgs;
        r->msgs_recv[j] += msgs;
        /* dispatch: until j's rows arrived here; combine: until j sent ours back. The
         * runtime counts only peers with rows in that direction, over every chunk. */
        r->wait_ns[j] += (double)s->peer_wait_ns[j];
    }
}

void moe_rec_layer(moe_rec_t *p, const moe_prof_layer_sample_t *s)
{
    if (!p->recorded) {
        return;
    }
    moe_prof_record_t *r = &p->rec;
    for (int ph = 0; ph < 5; ph++) {
        int64_t d = s->phase_end_ns[ph] - s->phase_begin_ns[ph];
        p->phase_acc[ph] += d;
        add_event(p, MOE_TEV_PHASE, s->layer, ph, MOE_LANE_PHASES, s->phase_begin_ns[ph], d, 0);
    }
    record_experts(p, s);
    record_timeline(p, s);
    record_overlap(p, s);
    size_t base = (size_t)s->layer * (size_t)r->num_experts;
    for (int e = 0; e < r->num_experts; e++) {
        r->demand[base + e] += (uint64_t)s->demand[e];
        r->kept[base + e] += (uint64_t)s->kept[e];
        r->dropped[base + e] += (uint64_t)s->dropped[e];
    }
    record_comm(p, s);
    if (s->shared_rows > 0) {
        r->shared_rows[s->layer] += s->shared_rows;
        r->shared_ns[s->layer] += s->shared_end_ns - s->shared_begin_ns;
    }
    if (r->num_exchanges < p->cap_exchanges) {
        r->exchanges[r->num_exchanges++] = (moe_rec_exchange_t){
            .step = p->step, .layer = s->layer,
            .dispatch_begin_ns = s->phase_begin_ns[1], .dispatch_end_ns = s->phase_end_ns[1],
            .combine_begin_ns = s->phase_begin_ns[3], .combine_end_ns = s->phase_end_ns[3]};
    }
    if (r->num_layer_lat < p->cap_exchanges) { /* the layer's latency: gate to merge end */
        r->layer_lat[r->num_layer_lat++] = (moe_rec_lat_t){
            .step = p->step, .layer = s->layer,
            .ns = s->phase_end_ns[MOE_PHASE_MERGE] - s->phase_begin_ns[MOE_PHASE_GATE]};
    }
}

static void record_step(moe_rec_t *p, int64_t begin_ns, int64_t end_ns)
{
    moe_prof_record_t *r = &p->rec;
    p->phase_acc[5] = end_ns - begin_ns;
    for (int ph = 0; ph < MOE_PHASE_COUNT; ph++) {
        double v = (double)p->phase_acc[ph];
        bool first = r->steps_recorded == 0;
        r->phase_sum[ph] += v;
        r->phase_min[ph] = first || v < r->phase_min[ph] ? v : r->phase_min[ph];
        r->phase_max[ph] = first || v > r->phase_max[ph] ? v : r->phase_max[ph];
    }
    r->steps_recorded++;
    r->cpu_steps_ns += moe_cpu_ns() - p->cpu_step_ns;
    r->wall_steps_ns += end_ns - begin_ns;
    if (r->num_steps < p->cap_steps) {
        moe_rec_step_t *s = &r->steps[r->num_steps++];
        s->step = p->step;
        s->begin_ns = begin_ns;
        memcpy(s->phase_ns, p->phase_acc, sizeof(s->phase_ns));
    }
    add_event(p, MOE_TEV_STEP, 0, (int)p->step, MOE_LANE_STEPS, begin_ns, end_ns - begin_ns, 0);
}

/* ---- records to rank 0 ----------------------------------------------------------- */

/* Non-root: finish the previous send before reusing its buffer. */
static moe_status_t send_wait(moe_rec_t *p, int64_t deadline_ns, bool honour_stop,
                              moe_error_t *err)
{
    if (!p->sending) {
        return MOE_OK;
    }
    moe_poll_t poll;
    moe_poll_begin_at(&poll, deadline_ns, honour_stop);
    moe_status_t st = moe_poll_request(&p->sendreq, &poll, err);
    if (st == MOE_OK) {
        p->sending = false;
    } else if (st != MOE_ERR_MPI) { /* the poll's end sets no message: say it here */
        moe_error_set(err, st, "rank %d's profile part was not taken by rank 0 %s (%.1f s)",
                      p->rank, st == MOE_ERR_INTERRUPTED ? "before the stop" : "in time",
                      moe_poll_waited_s(&poll));
    }
    return st;
}

/* Send what was recorded since the last part (then cleared). flags: MOE_PROF_FLAG_*. */
static moe_status_t send_part(moe_rec_t *p, uint32_t flags, int64_t deadline_ns,
                              moe_error_t *err)
{
    bool final = (flags & MOE_PROF_FLAG_FINAL) != 0;
    moe_status_t st = send_wait(p, deadline_ns, !final, err);
    if (st != MOE_OK) {
        return st;
    }
    p->rec.window = p->windows_gathered;
    p->rec.flags = flags;
    p->sendbuf.len = 0;
    moe_prof_record_encode(&p->rec, &p->sendbuf);
    if (!p->sendbuf.ok || p->sendbuf.len > INT32_MAX) {
        /* nothing sent or cleared: the next part carries this one's data again, encoded
         * afresh in the same buffer */
        bool grown = p->sendbuf.ok;
        size_t len = p->sendbuf.len;
        p->sendbuf.ok = true;
        p->sendbuf.len = 0;
        return grown ? moe_error_set(err, MOE_ERR_NO_MEMORY, "rank %d: a profile part of %zu "
                                     "bytes passes MPI's count", p->rank, len)
                     : moe_error_set(err, MOE_ERR_NO_MEMORY, "rank %d: no memory to encode a "
                                     "profile part", p->rank);
    }
    st = MOE_MPI(MPI_Isend(p->sendbuf.data, (int)p->sendbuf.len, MPI_BYTE, 0,
                           final ? MOE_PROF_TAG_FINAL : MOE_PROF_TAG_WINDOW, p->pcomm,
                           &p->sendreq),
                 err);
    if (st != MOE_OK) {
        return st;
    }
    p->sending = true;
    p->last_send_ns = moe_now_ns();
    reset_window(p); /* the part is encoded: its data now belongs to rank 0 */
    return final ? send_wait(p, deadline_ns, false, err) : MOE_OK;
}

/* Non-root, the end of a window: its last part to rank 0. */
moe_status_t moe_rec_send_window_end(moe_rec_t *p, moe_error_t *err)
{
    int64_t deadline = prof_timeout_s(p) > 0
                           ? moe_now_ns() + (int64_t)(prof_timeout_s(p) * 1e9) : 0;
    moe_status_t st = p->profiled ? send_part(p, MOE_PROF_FLAG_WINDOW_END, deadline, err) : MOE_OK;
    if (st == MOE_ERR_TIMEOUT) {
        st = prof_fire(p, "the profile window's send to rank 0", prof_timeout_s(p), err);
    }
    return st;
}

void moe_rec_window_done(moe_rec_t *p)
{
    p->windows_gathered++;
    reset_window(p);
}

/* Between window ends: non-root ranks send a part when PART_INTERVAL_NS has passed (rank 0
 * takes whatever has arrived, so senders never wait on it). */
moe_status_t moe_rec_stream(moe_rec_t *p, int64_t now_ns, moe_error_t *err)
{
    if (p->profiled && p->rec.steps_recorded > 0 &&
        now_ns - p->last_send_ns >= PART_INTERVAL_NS) {
        int64_t deadline = prof_timeout_s(p) > 0
                               ? moe_now_ns() + (int64_t)(prof_timeout_s(p) * 1e9) : 0;
        moe_status_t st = send_part(p, 0, deadline, err);
        return st == MOE_ERR_TIMEOUT
                   ? prof_fire(p, "a profile part's send to rank 0", prof_timeout_s(p), err)
                   : st;
    }
    return MOE_OK;
}

void moe_rec_step_end(moe_rec_t *p, int64_t begin_ns, int64_t end_ns, int64_t *window,
                      bool *closes)
{
    p->step_open = false; /* completed: its layers count */
    if (p->recorded) {
        record_step(p, begin_ns, end_ns);
    }
    *window = p->window;
    *closes = p->closes;
}

/* The other ranks stay until rank 0 has written the report: a rank that exits non-zero
 * first makes mpirun kill the whole job at once, rank 0 included. */
static void await_done(moe_rec_t *p, int64_t deadline_ns)
{
    static int one;
    MPI_Request req;
    /* a failure is logged and ends the wait: this rank's part is done either way */
    if (MOE_MPI(MPI_Irecv(&one, 1, MPI_INT, 0, MOE_PROF_TAG_DONE, p->pcomm, &req), NULL) !=
        MOE_OK) {
        return;
    }
    moe_poll_t poll;
    moe_poll_begin_at(&poll, deadline_ns, false);
    if (moe_poll_request(&req, &poll, NULL) != MOE_OK) {
        /* rank 0 gone or slow: this rank's part is done */
        MOE_MPI(MPI_Cancel(&req), NULL);
        MOE_MPI(MPI_Request_free(&req), NULL);
    }
}

/* The second clock estimate, for the drift; needs every rank alive and in step. A rank that
 * does not answer within step_timeout_s is the watchdog's (err set, MOE_ERR_TIMEOUT); a stop
 * or a failed MPI call only costs the estimate (the start's is kept). */
moe_status_t moe_rec_end_sync(moe_rec_t *p, moe_error_t *err)
{
    double *end_off = calloc((size_t)p->world, sizeof(double));
    double *end_unc = calloc((size_t)p->world, sizeof(double));
    int64_t start = moe_now_ns();
    int waited_on = -1;
    moe_status_t st = end_off != NULL && end_unc != NULL
                          ? moe_prof_clock_sync(p->pcomm, 20, prof_timeout_s(p), end_off,
                                                end_unc, &waited_on, NULL)
                          : MOE_ERR_NO_MEMORY;
    if (st == MOE_OK) {
        p->rec.clock_offset_end_ns = end_off[p->rank];
    }
    free(end_off);
    free(end_unc);
    if (st == MOE_ERR_TIMEOUT) {
        return prof_fire(p, "the clock sync after the last step",
                         (double)(moe_now_ns() - start) * 1e-9, err);
    }
    return MOE_OK;
}

void moe_rec_run_end(moe_rec_t *p)
{
    if (p->run_wall0_ns > 0) { /* the run: its steps, not the end's clock sync and gather */
        p->rec.cpu_run_ns = moe_cpu_ns() - p->run_cpu0_ns;
        p->rec.wall_run_ns = moe_now_ns() - p->run_wall0_ns;
    }
    moe_sampler_stop(&p->sampler);
    step_abandon(p);
    p->rec.clock_offset_end_ns = p->rec.clock_offset_ns;
}

void moe_rec_last_part(moe_rec_t *p)
{
    p->rec.rss_peak = atomic_load(&p->sampler.rss_peak);
    p->rec.dev_peak = atomic_load(&p->sampler.dev_peak);
    moe_sampler_collect(&p->sampler, &p->rec);
    p->rec.flags = MOE_PROF_FLAG_FINAL;
}

moe_status_t moe_rec_send_final(moe_rec_t *p, int64_t deadline_ns, int64_t done_deadline_ns,
                                moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    if (p->profiled) {
        st = send_part(p, MOE_PROF_FLAG_FINAL, deadline_ns, err);
    }
    await_done(p, done_deadline_ns);
    return st == MOE_ERR_TIMEOUT
               ? moe_error_set(err, st, "rank 0 did not take the last profile record")
               : st;
}

/* ---- on-demand windows ------------------------------------------------------------ */

#define OD_GRACE_NS 10000000000LL /* a non-root rank's bound on its window's last send */

moe_status_t moe_rec_od_create(const moe_config_t *cfg, MPI_Comm comm,
                               const moe_prof_static_t *info, int64_t max_steps,
                               moe_rec_t **out, moe_error_t *err)
{
    int world = 0;
    moe_status_t st = MOE_MPI(MPI_Comm_size(comm, &world), err);
    if (st != MOE_OK) {
        return st;
    }
    moe_config_t *own = malloc(sizeof(*own));
    char (*hosts)[64] = calloc((size_t)world, sizeof(*hosts));
    if (own == NULL || hosts == NULL) {
        free(own);
        free(hosts);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate its recorder");
    }
    *own = *cfg;
    own->prof_warmup_steps = 0;
    own->prof_measurement_steps = max_steps; /* bounds the lists reserved at create */
    own->prof_sampling_rate = 1;
    own->prof_repeat = 1;
    memcpy(hosts, info->hosts, (size_t)world * sizeof(*hosts));
    moe_prof_static_t in = *info;
    in.total_steps = max_steps;
    in.device_memory = NULL;
    st = prof_create(own, comm, &in, true, out, err);
    if (st != MOE_OK) {
        free(own);
        free(hosts);
        return st;
    }
    moe_rec_t *p = *out;
    p->own_cfg = own;
    p->hosts = hosts;
    p->info.hosts = (const char (*)[64])hosts;
    p->info.config_text = NULL;
    /* a window's series: rank 0 keeps the whole window's in one record */
    p->rec.mem = calloc(MOE_STEP_MEM_MAX, sizeof(moe_rec_mem_t));
    if (p->rec.mem != NULL && moe_step_mem_open(&p->od_mem, cfg->prof_memory_sample_ms) != 0) {
        fprintf(stderr, "moed: warning: on-demand windows: /proc/self/statm not readable: no "
                        "memory series\n");
    }
    return MOE_OK;
}

void moe_rec_od_arm(moe_rec_t *p, int64_t first, int64_t last, const bool *ranks)
{
    moe_config_t *c = p->own_cfg;
    c->prof_all_ranks = ranks == NULL;
    c->prof_num_ranks = 0;
    for (int r = 0; ranks != NULL && r < p->world && r < MOE_MAX_RANKS; r++) {
        if (ranks[r]) {
            c->prof_ranks[c->prof_num_ranks++] = r;
        }
    }
    c->prof_measurement_steps = last - first + 1;
    c->steps = last - first + 1;
    p->profiled = moe_cfg_rank_profiled(c, p->rank);
    int64_t n = c->prof_all_ranks ? p->world : c->prof_num_ranks;
    p->events_budget = c->prof_trace ? c->prof_trace_max_events / (n > 0 ? n : 1) : 0;
    reset_window(p);
    moe_step_mem_restart(&p->od_mem);
    p->od_first = first;
    p->od_last = last;
    p->od_w = p->windows_gathered;
    p->od_armed = last >= first;
}

bool moe_rec_od_in_window(const moe_rec_t *p)
{
    return p->window >= 0;
}

/* Rank 0: its own record of the window, copied (encode, decode) so the recorder can go on. */
static void od_keep_own(moe_rec_t *p)
{
    moe_wbuf_t w;
    moe_error_t why;
    moe_wbuf_init(&w);
    moe_prof_record_free(&p->od_own);
    p->rec.window = p->od_w;
    p->rec.flags = MOE_PROF_FLAG_WINDOW_END;
    moe_prof_record_encode(&p->rec, &w);
    p->od_own_have = p->profiled && w.ok &&
                     moe_prof_record_decode(w.data, w.len, &p->od_own, &why) == MOE_OK;
    moe_wbuf_free(&w);
}

/* The window's last step on this rank: its last part to rank 0, or rank 0 keeps its own. */
static void od_close(moe_rec_t *p)
{
    p->od_armed = false;
    if (p->rank != 0) {
        moe_error_t err;
        moe_error_clear(&err);
        if (p->profiled) {
            int64_t deadline = moe_now_ns() + (int64_t)(OD_GRACE_NS);
            if (send_part(p, MOE_PROF_FLAG_WINDOW_END, deadline, &err) != MOE_OK) {
                fprintf(stderr, "moed: warning: on-demand window: %s\n", err.msg);
            }
        }
    } else {
        od_keep_own(p);
    }
    p->windows_gathered++;
    reset_window(p);
}

bool moe_rec_od_step_end(moe_rec_t *p, int64_t step, int64_t begin_ns, int64_t end_ns)
{
    p->step_open = false;
    if (p->window >= 0 && step == p->od_first) {
        p->od_t0_ns = begin_ns;
    }
    if (p->recorded) {
        record_step(p, begin_ns, end_ns);
        moe_step_mem_take(&p->od_mem, end_ns, step == p->od_first || p->closes, &p->rec,
                          MOE_STEP_MEM_MAX);
        if (p->closes) {
            moe_step_mem_end(&p->od_mem, &p->rec);
        }
    }
    if (p->window >= 0 && p->closes) {
        od_close(p);
        return true;
    }
    if (p->window >= 0 && p->rank != 0) {
        moe_error_t err;
        moe_error_clear(&err);
        if (moe_rec_stream(p, end_ns, &err) != MOE_OK) {
            fprintf(stderr, "moed: warning: on-demand window: %s\n", err.msg);
        }
    }
    return false;
}

void moe_rec_od_cut(moe_rec_t *p, int64_t last)
{
    if (!p->od_armed) {
        return; /* closed here already, or never armed: nothing to shorten */
    }
    int64_t l = last > p->step ? last : p->step + 1; /* p->step has begun: the next one */
    l = l > p->od_first ? l : p->od_first;
    if (l < p->od_last) {
        p->od_last = l;
        p->own_cfg->prof_measurement_steps = l - p->od_first + 1;
        p->own_cfg->steps = l - p->od_first + 1;
    }
}

bool moe_rec_od_end(moe_rec_t *p, int64_t step, int64_t deadline_ns)
{
    step_abandon(p); /* a step stopped in flight counts for nothing */
    bool closed = false;
    if (p->od_armed && step >= p->od_first && step < p->od_last) {
        p->od_last = step;
        p->own_cfg->prof_measurement_steps = step - p->od_first + 1;
        p->own_cfg->steps = step - p->od_first + 1;
        p->od_armed = false;
        moe_step_mem_end(&p->od_mem, &p->rec); /* a no-op where this rank did not record */
        if (p->rank != 0 && p->profiled) {
            /* the previous part first, then the last one: both waited for, a stop or not
             * (rank 0 takes them in its own end; the process ends after this) */
            moe_error_t err;
            moe_error_clear(&err);
            moe_status_t st = send_wait(p, deadline_ns, false, &err);
            if (st == MOE_OK) {
                st = send_part(p, MOE_PROF_FLAG_WINDOW_END, deadline_ns, &err);
            }
            if (st == MOE_OK) {
                st = send_wait(p, deadline_ns, false, &err);
            }
            if (st != MOE_OK) {
                fprintf(stderr, "moed: warning: on-demand window at the end: %s\n", err.msg);
            }
        } else if (p->rank == 0) {
            od_keep_own(p);
        }
        p->windows_gathered++;
        reset_window(p);
        closed = true;
    } else if (p->od_armed && step < p->od_first) {
        p->od_armed = false; /* not begun: nothing recorded */
        reset_window(p);
    }
    return closed;
}

void moe_rec_od_window(const moe_rec_t *p, const moe_config_t **cfg,
                       const moe_prof_static_t **info, int64_t *w, int64_t *first,
                       int64_t *last, int64_t *t0_ns)
{
    *cfg = p->own_cfg;
    *info = &p->info;
    *w = p->od_w;
    *first = p->od_first;
    *last = p->od_last;
    *t0_ns = p->od_t0_ns;
}

bool moe_rec_od_take_own(moe_rec_t *p, moe_prof_record_t *dst)
{
    if (!p->od_own_have) {
        return false;
    }
    *dst = p->od_own;
    memset(&p->od_own, 0, sizeof(p->od_own));
    p->od_own_have = false;
    return true;
}
