/* The per-rank recorder: the hot-path entry points and the window gather. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof_int.h"

#define LIST_BOUND (1 << 20) /* items per list per window, whatever the config */

struct moe_prof {
    const moe_config_t *cfg;
    MPI_Comm comm;
    int rank, world;
    bool profiled;
    moe_prof_static_t info;
    int32_t *local_ids;
    moe_prof_record_t rec;       /* this window's data */
    int64_t cap_steps, cap_exchanges, cap_metrics, cap_events;
    int64_t events_budget;       /* events this rank may still record over the run */
    /* the current step */
    int64_t step;
    bool recorded, closes;
    int64_t window;
    int64_t phase_acc[MOE_PROF_PHASES];
    int64_t t0_ns;               /* first step's begin on this rank */
    bool have_t0;
    int windows_gathered;
    double *offsets, *uncert;    /* [world] clock offsets to rank 0 */
    char (*hosts)[64];           /* [world] */
    moe_sampler_t sampler;
    moe_merge_t *merge;          /* rank 0 only */
};

/* Recorded steps the run will have: bounds the per-window lists. */
static int64_t steps_per_window(const moe_config_t *cfg)
{
    return (cfg->prof_measurement_steps + cfg->prof_sampling_rate - 1) / cfg->prof_sampling_rate;
}

static int64_t bound(int64_t n)
{
    return n < 1 ? 1 : n > LIST_BOUND ? LIST_BOUND : n;
}

static moe_status_t alloc_lists(moe_prof_t *p)
{
    const moe_config_t *cfg = p->cfg;
    int64_t steps = steps_per_window(cfg), L = cfg->num_layers, nl = p->info.num_local;
    int64_t total_steps = p->info.total_steps;
    steps = steps < total_steps ? steps : total_steps;
    p->cap_steps = bound(steps);
    p->cap_exchanges = bound(steps * L);
    p->cap_metrics = bound(steps * L * nl);
    /* phases + experts per layer + the step itself */
    p->cap_events = bound(steps * (L * (5 + nl) + 1));
    int64_t profiled = cfg->prof_all_ranks ? p->world : cfg->prof_num_ranks;
    p->events_budget = cfg->prof_trace ? cfg->prof_trace_max_events / (profiled > 0 ? profiled : 1) : 0;
    p->rec.steps = calloc((size_t)p->cap_steps, sizeof(moe_rec_step_t));
    p->rec.exchanges = calloc((size_t)p->cap_exchanges, sizeof(moe_rec_exchange_t));
    p->rec.metrics = calloc((size_t)p->cap_metrics, sizeof(moe_rec_metric_t));
    p->rec.events = calloc((size_t)p->cap_events, sizeof(moe_rec_event_t));
    if (!p->rec.steps || !p->rec.exchanges || !p->rec.metrics || !p->rec.events) {
        return MOE_ERR_NO_MEMORY;
    }
    return MOE_OK;
}

/* Clear what a window accumulates; keep identity and static facts. */
static void reset_window(moe_prof_t *p)
{
    moe_prof_record_t *r = &p->rec;
    size_t le = (size_t)r->num_layers * (size_t)r->num_experts;
    size_t ll = (size_t)r->num_layers * (size_t)r->num_local;
    size_t W = (size_t)r->world_size;
    r->steps_recorded = 0;
    for (int i = 0; i < MOE_PROF_PHASES; i++) {
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
    r->num_steps = r->num_exchanges = r->num_metrics = r->num_events = 0;
    r->metrics_dropped = r->events_dropped = 0;
}

static moe_status_t gather_hosts(moe_prof_t *p)
{
    char me[64] = {0};
    if (gethostname(me, sizeof(me) - 1) != 0) {
        snprintf(me, sizeof(me), "unknown");
    }
    p->hosts = calloc((size_t)p->world, sizeof(*p->hosts));
    if (p->hosts == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    memcpy(p->rec.host, me, sizeof(me));
    int rc = MPI_Allgather(me, 64, MPI_CHAR, p->hosts, 64, MPI_CHAR, p->comm);
    return rc == MPI_SUCCESS ? MOE_OK : MOE_ERR_MPI;
}

static moe_status_t prof_setup(moe_prof_t *p, const moe_prof_static_t *info)
{
    const moe_config_t *cfg = p->cfg;
    int nl = info->num_local;
    moe_status_t st = moe_prof_record_alloc(&p->rec, p->world, (int)cfg->num_layers,
                                            (int)cfg->num_experts, nl);
    if (st != MOE_OK) {
        return st;
    }
    p->rec.rank = p->rank;
    memcpy(p->rec.local_ids, info->local_ids, sizeof(int32_t) * (size_t)nl);
    p->rec.expert_weight_bytes = info->expert_weight_bytes;
    p->rec.exchange_buffer_bytes = info->exchange_buffer_bytes;
    p->offsets = calloc((size_t)p->world, sizeof(double));
    p->uncert = calloc((size_t)p->world, sizeof(double));
    if (p->offsets == NULL || p->uncert == NULL || alloc_lists(p) != MOE_OK) {
        return MOE_ERR_NO_MEMORY;
    }
    st = gather_hosts(p);
    if (st == MOE_OK) {
        st = moe_prof_clock_sync(p->comm, 20, p->offsets, p->uncert);
    }
    p->rec.clock_offset_ns = p->offsets[p->rank];
    p->rec.clock_uncertainty_ns = p->uncert[p->rank];
    if (st == MOE_OK && p->rank == 0) {
        p->merge = moe_merge_create(cfg, p->world, p->hosts);
        st = p->merge != NULL ? MOE_OK : MOE_ERR_NO_MEMORY;
    }
    if (st == MOE_OK &&
        moe_sampler_start(&p->sampler, cfg->prof_memory_sample_ms, 4096) != 0) {
        st = MOE_ERR_INTERNAL;
    }
    return st;
}

moe_status_t moe_prof_create(const moe_config_t *cfg, MPI_Comm comm,
                             const moe_prof_static_t *info, moe_prof_t **out, moe_error_t *err)
{
    moe_prof_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the profiler");
    }
    p->cfg = cfg;
    p->comm = comm;
    MPI_Comm_rank(comm, &p->rank);
    MPI_Comm_size(comm, &p->world);
    p->profiled = moe_cfg_rank_profiled(cfg, p->rank);
    p->info = *info;
    p->step = -1;
    moe_status_t st = prof_setup(p, info);
    if (st != MOE_OK) {
        moe_prof_destroy(p);
        return moe_error_set(err, st, "profiler start-up failed: %s", moe_status_string(st));
    }
    *out = p;
    return MOE_OK;
}

void moe_prof_destroy(moe_prof_t *p)
{
    if (p == NULL) {
        return;
    }
    moe_sampler_stop(&p->sampler);
    moe_sampler_free(&p->sampler);
    moe_prof_record_free(&p->rec);
    moe_merge_destroy(p->merge);
    free(p->offsets);
    free(p->uncert);
    free(p->hosts);
    free(p);
}

bool moe_prof_step_recorded(const moe_prof_t *p, int64_t step)
{
    bool rec, closes;
    moe_prof_schedule(p->cfg, step, &rec, &closes);
    return rec && p->profiled;
}

void moe_prof_step_begin(moe_prof_t *p, int64_t step)
{
    bool rec;
    p->step = step;
    p->window = moe_prof_schedule(p->cfg, step, &rec, &p->closes);
    p->recorded = rec && p->profiled;
    memset(p->phase_acc, 0, sizeof(p->phase_acc));
}

static void add_event(moe_prof_t *p, int kind, int layer, int id, int lane, int64_t ts,
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

static void record_experts(moe_prof_t *p, const moe_prof_layer_sample_t *s)
{
    moe_prof_record_t *r = &p->rec;
    for (int le = 0; le < r->num_local; le++) {
        int64_t rows = s->expert_rows[le];
        if (rows == 0) {
            continue;
        }
        int64_t ns = s->expert_end_ns[le] - s->expert_begin_ns[le];
        moe_rec_expert_t *x = &r->experts[s->layer * r->num_local + le];
        x->tokens += (uint64_t)rows;
        x->calls++;
        x->flops += (double)rows * p->info.flops_per_row;
        moe_hist_add(&x->hist, ns);
        if (r->num_metrics < p->cap_metrics) {
            r->metrics[r->num_metrics++] = (moe_rec_metric_t){
                .step = p->step, .layer = s->layer, .local = le, .tokens = rows, .ns = ns};
        } else {
            r->metrics_dropped++;
        }
        add_event(p, 1, s->layer, r->local_ids[le], 2 + le, s->expert_begin_ns[le], ns, rows);
    }
}

static void record_comm(moe_prof_t *p, const moe_prof_layer_sample_t *s)
{
    moe_prof_record_t *r = &p->rec;
    uint64_t rb = (uint64_t)p->info.row_bytes;
    for (int j = 0; j < r->world_size; j++) {
        /* dispatch: send_rows out, recv_rows in; combine: the same rows come back */
        uint64_t rows = (uint64_t)s->send_rows[j] + (uint64_t)s->recv_rows[j];
        r->bytes_sent[j] += rows * rb;
        r->bytes_recv[j] += rows * rb;
        uint64_t msgs = (uint64_t)(s->send_rows[j] > 0) + (uint64_t)(s->recv_rows[j] > 0);
        r->msgs_sent[j] += msgs;
        r->msgs_recv[j] += msgs;
        if (s->recv_rows[j] > 0) { /* dispatch: j's rows arrive here */
            r->wait_ns[j] += (double)(s->dispatch_peer_done_ns[j] - s->dispatch_begin_ns);
        }
        if (s->send_rows[j] > 0) { /* combine: j sends our rows back */
            r->wait_ns[j] += (double)(s->combine_peer_done_ns[j] - s->combine_begin_ns);
        }
    }
}

void moe_prof_layer(moe_prof_t *p, const moe_prof_layer_sample_t *s)
{
    if (!p->recorded) {
        return;
    }
    moe_prof_record_t *r = &p->rec;
    for (int ph = 0; ph < 5; ph++) {
        int64_t d = s->phase_end_ns[ph] - s->phase_begin_ns[ph];
        p->phase_acc[ph] += d;
        add_event(p, 0, s->layer, ph, 1, s->phase_begin_ns[ph], d, 0);
    }
    record_experts(p, s);
    size_t base = (size_t)s->layer * (size_t)r->num_experts;
    for (int e = 0; e < r->num_experts; e++) {
        r->demand[base + e] += (uint64_t)s->demand[e];
        r->kept[base + e] += (uint64_t)s->kept[e];
        r->dropped[base + e] += (uint64_t)s->dropped[e];
    }
    record_comm(p, s);
    if (r->num_exchanges < p->cap_exchanges) {
        r->exchanges[r->num_exchanges++] = (moe_rec_exchange_t){
            .step = p->step, .layer = s->layer,
            .dispatch_begin_ns = s->phase_begin_ns[1], .dispatch_end_ns = s->phase_end_ns[1],
            .combine_begin_ns = s->phase_begin_ns[3], .combine_end_ns = s->phase_end_ns[3]};
    }
}

static void record_step(moe_prof_t *p, int64_t begin_ns, int64_t end_ns)
{
    moe_prof_record_t *r = &p->rec;
    p->phase_acc[5] = end_ns - begin_ns;
    for (int ph = 0; ph < MOE_PROF_PHASES; ph++) {
        double v = (double)p->phase_acc[ph];
        bool first = r->steps_recorded == 0;
        r->phase_sum[ph] += v;
        r->phase_min[ph] = first || v < r->phase_min[ph] ? v : r->phase_min[ph];
        r->phase_max[ph] = first || v > r->phase_max[ph] ? v : r->phase_max[ph];
    }
    r->steps_recorded++;
    if (r->num_steps < p->cap_steps) {
        moe_rec_step_t *s = &r->steps[r->num_steps++];
        s->step = p->step;
        s->begin_ns = begin_ns;
        memcpy(s->phase_ns, p->phase_acc, sizeof(s->phase_ns));
    }
    add_event(p, 2, 0, (int)p->step, 0, begin_ns, end_ns - begin_ns, 0);
}

/* Encode this rank's window (profiled ranks) and gather every record on rank 0. */
static moe_status_t gather_window(moe_prof_t *p, bool final, moe_error_t *err)
{
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    p->rec.window = p->windows_gathered;
    p->rec.flags = final ? MOE_PROF_FLAG_FINAL : 0;
    if (p->profiled) {
        moe_prof_record_encode(&p->rec, &w);
    }
    long long mine = w.ok ? (long long)w.len : -1, *sizes = NULL;
    int *counts = NULL, *displs = NULL;
    uint8_t *all = NULL;
    moe_status_t st = MOE_OK;
    if (p->rank == 0) {
        sizes = calloc((size_t)p->world, sizeof(long long));
        counts = calloc((size_t)p->world, sizeof(int));
        displs = calloc((size_t)p->world, sizeof(int));
    }
    MPI_Gather(&mine, 1, MPI_LONG_LONG, sizes, 1, MPI_LONG_LONG, 0, p->comm);
    if (p->rank == 0) {
        long long total = 0;
        for (int r = 0; r < p->world; r++) {
            long long n = sizes[r] > 0 ? sizes[r] : 0;
            counts[r] = (int)n;
            displs[r] = (int)total;
            total += n;
        }
        all = total < (1LL << 31) ? malloc((size_t)total + 1) : NULL;
        if (all == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot receive %lld bytes of profile", total);
        }
    }
    MPI_Gatherv(w.data, (int)(mine > 0 ? mine : 0), MPI_BYTE, all, counts, displs, MPI_BYTE, 0,
                p->comm);
    moe_wbuf_free(&w);
    if (p->rank == 0 && st == MOE_OK) {
        moe_prof_record_t *recs = calloc((size_t)p->world, sizeof(*recs));
        bool *have = calloc((size_t)p->world, sizeof(bool));
        for (int r = 0; recs != NULL && have != NULL && r < p->world; r++) {
            moe_error_t derr;
            have[r] = counts[r] > 0 &&
                      moe_prof_record_decode(all + displs[r], (size_t)counts[r], &recs[r], &derr) == MOE_OK;
            if (counts[r] > 0 && !have[r]) {
                fprintf(stderr, "moed: warning: %s\n", derr.msg);
            }
        }
        st = recs && have ? moe_merge_window(p->merge, recs, have, p->t0_ns, err) : MOE_ERR_NO_MEMORY;
        for (int r = 0; recs != NULL && r < p->world; r++) {
            moe_prof_record_free(&recs[r]);
        }
        free(recs);
        free(have);
    }
    free(all);
    free(sizes);
    free(counts);
    free(displs);
    p->windows_gathered++;
    reset_window(p);
    return st;
}

moe_status_t moe_prof_step_end(moe_prof_t *p, int64_t step, int64_t begin_ns, int64_t end_ns,
                               moe_error_t *err)
{
    if (!p->have_t0) {
        p->t0_ns = begin_ns;
        p->have_t0 = true;
    }
    if (p->recorded) {
        record_step(p, begin_ns, end_ns);
    }
    if (p->window >= 0 && p->closes) {
        return gather_window(p, false, err);
    }
    return MOE_OK;
}

moe_status_t moe_prof_finish(moe_prof_t *p, const moe_prof_run_t *run, char *run_dir,
                             size_t run_dir_len, moe_error_t *err)
{
    moe_sampler_stop(&p->sampler);
    double *end_off = calloc((size_t)p->world, sizeof(double));
    double *end_unc = calloc((size_t)p->world, sizeof(double));
    moe_status_t st = end_off && end_unc ? moe_prof_clock_sync(p->comm, 20, end_off, end_unc)
                                         : MOE_ERR_NO_MEMORY;
    p->rec.clock_offset_end_ns = end_off ? end_off[p->rank] : 0;
    free(end_off);
    free(end_unc);
    p->rec.rss_peak = atomic_load(&p->sampler.rss_peak);
    p->rec.dev_peak = atomic_load(&p->sampler.dev_peak);
    if (moe_sampler_collect(&p->sampler, &p->rec) != 0) {
        st = MOE_ERR_NO_MEMORY;
    }
    /* Whatever the last (partial) window holds, plus the memory series. */
    moe_status_t gs = gather_window(p, true, err);
    st = st == MOE_OK ? gs : st;
    if (p->rank == 0 && st == MOE_OK) {
        moe_report_t *rep = moe_merge_finish(p->merge, run, &p->info);
        st = rep != NULL ? moe_report_write_all(rep, err) : MOE_ERR_NO_MEMORY;
        if (st == MOE_OK) {
            moe_report_print_headline(rep, stdout);
            if (run_dir != NULL) {
                snprintf(run_dir, run_dir_len, "%s", rep->run_dir);
            }
        }
    }
    return st;
}

int moe_prof_compare(const char *dir_a, const char *dir_b, FILE *out)
{
    return moe_report_compare(dir_a, dir_b, out);
}
