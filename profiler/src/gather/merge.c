/* Rank 0: merge the windows' records of every profiled rank into one report. Lists grow
 * geometrically here (rank 0, window ends only), bounded by the config. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gather/balance.h"
#include "moe/build_info.h"
#include "record/prof_int.h"

/* Kept in rank 0's memory (the rest of metrics.csv goes straight to disk): enough for the
 * trace's token counters and the step-time chart, small enough for flat memory. */
#define METRICS_BOUND 8192
#define STEPS_BOUND 4096

struct moe_merge {
    moe_report_t rep;
    char (*lost)[96];     /* [world] why a rank's last record is missing; "" if not */
    const moe_config_t *cfg;
    int W, L, E;
    double flops_per_row;
    int64_t cap_metrics, cap_steps, cap_events;
    FILE *metrics_csv;    /* <run_dir>/metrics.csv, written as windows merge */
};

static void make_run_dir(moe_report_t *r);

/* Open metrics.csv in the run folder (made at start, so rows can stream into it). */
static void open_metrics_stream(moe_merge_t *m)
{
    moe_report_t *r = &m->rep;
    make_run_dir(r);
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/metrics.csv", r->run_dir);
    m->metrics_csv = r->run_dir[0] != '\0' ? fopen(path, "w") : NULL;
    if (m->metrics_csv != NULL) {
        fputs(moe_report_metrics_header, m->metrics_csv);
        r->metrics_streamed = true;
    }
}

/* Grow *arr (of `size`-byte items) to hold n + 1, up to `limit`; false when full or OOM. */
static bool grow(void **arr, int64_t *cap, int64_t n, int64_t limit, size_t size)
{
    if (n < *cap) {
        return true;
    }
    if (n >= limit) {
        return false;
    }
    int64_t c = *cap ? *cap * 2 : 1024;
    c = c > limit ? limit : c;
    void *p = realloc(*arr, (size_t)c * size);
    if (p == NULL) {
        return false;
    }
    *arr = p;
    *cap = c;
    return true;
}

/* The same split as the runtime's (engine.c moe_tokens_of_rank): the master routes all
 * tokens in master routing; in symmetric routing every rank with a share does. */
static bool rank_routes(const moe_config_t *cfg, int world, int rank)
{
    if (cfg->routing == MOE_ROUTING_MASTER || world == 1) {
        return rank == (world == 1 ? 0 : (int)cfg->master_rank);
    }
    return cfg->tokens_per_step / world + (rank < cfg->tokens_per_step % world ? 1 : 0) > 0;
}

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

moe_status_t moe_record_absorb(moe_prof_record_t *dst, const moe_prof_record_t *src)
{
    if (src->num_layers != dst->num_layers || src->num_local != dst->num_local ||
        src->num_experts != dst->num_experts || src->world_size != dst->world_size) {
        return MOE_ERR_FORMAT;
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
    }
    bool ok = append_list((void **)&dst->steps, &dst->num_steps, src->steps, src->num_steps, sizeof(*src->steps)) &&
              append_list((void **)&dst->exchanges, &dst->num_exchanges, src->exchanges, src->num_exchanges, sizeof(*src->exchanges)) &&
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

moe_merge_t *moe_merge_create(const moe_config_t *cfg, int world_size, const char (*hosts)[64])
{
    moe_merge_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return NULL;
    }
    int W = world_size, L = (int)cfg->num_layers, E = (int)cfg->num_experts;
    m->cfg = cfg;
    m->W = W;
    m->L = L;
    m->E = E;
    m->flops_per_row = 2.0 * (double)cfg->hidden_dim * (double)cfg->ffn_dim *
                       (cfg->activation == MOE_ACT_SWIGLU ? 3.0 : 2.0);
    moe_report_t *r = &m->rep;
    r->cfg = cfg;
    r->world_size = W;
    r->num_layers = L;
    r->num_experts = E;
    m->lost = calloc((size_t)W, sizeof(*m->lost));
    r->ranks = calloc((size_t)W, sizeof(*r->ranks));
    r->experts = calloc((size_t)L * (size_t)E, sizeof(*r->experts));
    r->layers = calloc((size_t)L, sizeof(*r->layers));
    r->bytes = calloc((size_t)W * (size_t)W, sizeof(uint64_t));
    r->msgs = calloc((size_t)W * (size_t)W, sizeof(uint64_t));
    r->wait_ns = calloc((size_t)W * (size_t)W, sizeof(double));
    bool ok = m->lost && r->ranks && r->experts && r->layers && r->bytes && r->msgs && r->wait_ns;
    for (int l = 0; ok && l < L; l++) {
        r->layers[l].demand = calloc((size_t)E, sizeof(uint64_t));
        r->layers[l].kept = calloc((size_t)E, sizeof(uint64_t));
        r->layers[l].dropped = calloc((size_t)E, sizeof(uint64_t));
        ok = r->layers[l].demand && r->layers[l].kept && r->layers[l].dropped;
        for (int e = 0; e < E; e++) {
            moe_rep_expert_t *x = &r->experts[l * E + e];
            x->layer = l;
            x->expert = e;
            x->rank = cfg->expert_owner[e];
        }
    }
    for (int i = 0; ok && i < W; i++) {
        r->ranks[i].bytes_sent = calloc((size_t)W, sizeof(uint64_t));
        r->ranks[i].bytes_recv = calloc((size_t)W, sizeof(uint64_t));
        ok = r->ranks[i].bytes_sent != NULL && r->ranks[i].bytes_recv != NULL;
        r->ranks[i].routes = rank_routes(cfg, W, i);
        r->ranks[i].rank = i;
        r->ranks[i].profiled = moe_cfg_rank_profiled(cfg, i);
        r->ranks[i].num_local = moe_cfg_experts_of_rank(cfg, i, NULL);
        memcpy(r->ranks[i].host, hosts[i], sizeof(r->ranks[i].host));
        r->ranks[i].host[sizeof(r->ranks[i].host) - 1] = '\0';
    }
    m->cap_events = 0;
    if (!ok) {
        moe_merge_destroy(m);
        return NULL;
    }
    /* The bounded samples are reserved and touched now, so rank 0's memory after warm-up
     * is what it stays at. */
    r->metrics = calloc(METRICS_BOUND, sizeof(*r->metrics));
    r->steps = calloc(STEPS_BOUND, sizeof(*r->steps));
    if (r->metrics == NULL || r->steps == NULL) {
        moe_merge_destroy(m);
        return NULL;
    }
    memset(r->metrics, 0, METRICS_BOUND * sizeof(*r->metrics));
    memset(r->steps, 0, STEPS_BOUND * sizeof(*r->steps));
    m->cap_metrics = METRICS_BOUND;
    m->cap_steps = STEPS_BOUND;
    open_metrics_stream(m);
    return m;
}

void moe_merge_destroy(moe_merge_t *m)
{
    if (m == NULL) {
        return;
    }
    if (m->metrics_csv != NULL) {
        fclose(m->metrics_csv);
    }
    moe_report_free(&m->rep);
    free(m->lost);
    free(m);
}

static void merge_stat(moe_rep_stat_t *s, double sum, double mn, double mx, int64_t n)
{
    if (n <= 0) {
        return;
    }
    s->min = s->n == 0 || mn < s->min ? mn : s->min;
    s->max = s->n == 0 || mx > s->max ? mx : s->max;
    s->sum += sum;
    s->n += (uint64_t)n;
}

static void merge_rank(moe_merge_t *m, const moe_prof_record_t *rec, int64_t t0)
{
    moe_rep_rank_t *rk = &m->rep.ranks[rec->rank];
    rk->present = true;
    rk->steps += rec->steps_recorded;
    for (int p = 0; p < MOE_PHASE_COUNT; p++) {
        merge_stat(&rk->phase[p], rec->phase_sum[p], rec->phase_min[p], rec->phase_max[p],
                   rec->steps_recorded);
    }
    rk->compute_ns += rec->phase_sum[MOE_PHASE_GATE] + rec->phase_sum[MOE_PHASE_EXPERT] +
                      rec->phase_sum[MOE_PHASE_MERGE];
    rk->exchange_ns += rec->phase_sum[MOE_PHASE_DISPATCH] + rec->phase_sum[MOE_PHASE_COMBINE];
    rk->inflight_ns += (double)rec->exchange_ns;
    rk->hidden_ns += (double)rec->hidden_ns;
    for (int l = 0; l < rec->num_layers && l < m->rep.num_layers; l++) {
        m->rep.layers[l].shared_rows += (uint64_t)rec->shared_rows[l];
        m->rep.layers[l].shared_ns += (double)rec->shared_ns[l];
    }
    if (rec->chunks > 0) {
        rk->chunks = rec->chunks;
    }
    if (rec->device[0] != '\0') {
        snprintf(rk->device, sizeof(rk->device), "%.63s", rec->device);
    }
    rk->expert_weight_bytes = rec->expert_weight_bytes;
    rk->exchange_buffer_bytes = rec->exchange_buffer_bytes;
    rk->clock_offset_ns = rec->clock_offset_ns;
    rk->clock_uncertainty_ns = rec->clock_uncertainty_ns;
    if (rec->flags & MOE_PROF_FLAG_FINAL) {
        rk->clock_offset_end_ns = rec->clock_offset_end_ns;
        rk->rss_peak = rec->rss_peak;
        rk->dev_peak = rec->dev_peak;
        free(rk->mem);
        rk->mem = calloc((size_t)(rec->num_mem > 0 ? rec->num_mem : 1), sizeof(*rk->mem));
        rk->num_mem = 0;
        for (int64_t i = 0; rk->mem != NULL && i < rec->num_mem; i++) {
            rk->mem[i].t_ns = rec->mem[i].t_ns - (int64_t)rec->clock_offset_ns - t0;
            rk->mem[i].rss_bytes = rec->mem[i].rss_bytes;
            rk->mem[i].dev_bytes = rec->mem[i].dev_bytes;
            rk->num_mem++;
        }
    }
}

static void merge_experts_routing(moe_merge_t *m, const moe_prof_record_t *rec)
{
    int E = m->E;
    for (int l = 0; l < m->L && l < rec->num_layers; l++) {
        for (int le = 0; le < rec->num_local; le++) {
            const moe_rec_expert_t *src = &rec->experts[l * rec->num_local + le];
            moe_rep_expert_t *x = &m->rep.experts[l * E + rec->local_ids[le]];
            x->tokens += src->tokens;
            x->calls += src->calls;
            x->flops += src->flops;
            moe_hist_merge(&x->hist, &src->hist);
        }
        for (int e = 0; e < E && e < rec->num_experts; e++) {
            m->rep.layers[l].demand[e] += rec->demand[l * rec->num_experts + e];
            m->rep.layers[l].kept[e] += rec->kept[l * rec->num_experts + e];
            m->rep.layers[l].dropped[e] += rec->dropped[l * rec->num_experts + e];
        }
    }
}

static void merge_comm(moe_merge_t *m, const moe_prof_record_t *rec, const bool *have)
{
    int W = m->W, i = rec->rank;
    for (int j = 0; j < W && j < rec->world_size; j++) {
        m->rep.bytes[i * W + j] += rec->bytes_sent[j];
        m->rep.ranks[i].bytes_sent[j] += rec->bytes_sent[j];
        m->rep.ranks[i].bytes_recv[j] += rec->bytes_recv[j];
        m->rep.msgs[i * W + j] += rec->msgs_sent[j];
        m->rep.wait_ns[i * W + j] += rec->wait_ns[j];
        if (!have[j]) { /* j sent no record: what i received from it stands for it */
            m->rep.bytes[j * W + i] += rec->bytes_recv[j];
            m->rep.msgs[j * W + i] += rec->msgs_recv[j];
        }
    }
}

static void merge_lists(moe_merge_t *m, const moe_prof_record_t *rec, int64_t t0)
{
    moe_report_t *r = &m->rep;
    int64_t off = (int64_t)rec->clock_offset_ns;
    for (int64_t i = 0; i < rec->num_metrics; i++) {
        const moe_rec_metric_t *s = &rec->metrics[i];
        moe_rep_metric_t row = {.step = s->step, .layer = s->layer,
                                .expert = rec->local_ids[s->local], .rank = rec->rank,
                                .tokens = s->tokens, .ns = s->ns,
                                .flops = (double)s->tokens * m->flops_per_row};
        if (m->metrics_csv != NULL) {
            moe_report_metrics_row(m->metrics_csv, &row);
            r->metrics_rows++;
        }
        if (grow((void **)&r->metrics, &m->cap_metrics, r->num_metrics, METRICS_BOUND,
                 sizeof(*r->metrics))) {
            r->metrics[r->num_metrics++] = row;
        } else if (m->metrics_csv == NULL) {
            r->metrics_dropped++; /* neither on disk nor in memory */
        }
    }
    r->metrics_dropped += rec->metrics_dropped;
    for (int64_t i = 0; i < rec->num_steps; i++) {
        if (!grow((void **)&r->steps, &m->cap_steps, r->num_steps, STEPS_BOUND, sizeof(*r->steps))) {
            break;
        }
        moe_rep_step_t *d = &r->steps[r->num_steps++];
        d->step = rec->steps[i].step;
        d->rank = rec->rank;
        d->begin_ns = rec->steps[i].begin_ns - off - t0;
        memcpy(d->phase_ns, rec->steps[i].phase_ns, sizeof(d->phase_ns));
    }
    /* Spans take at most 4/5 of the bound: the writer needs the rest for the memory and
     * token counter tracks, which would otherwise be dropped on every long run. */
    int64_t limit = m->cfg->prof_trace_max_events / 5 * 4;
    for (int64_t i = 0; i < rec->num_events; i++) {
        const moe_rec_event_t *e = &rec->events[i];
        if (!grow((void **)&r->events, &m->cap_events, r->num_events, limit, sizeof(*r->events))) {
            r->events_dropped += rec->num_events - i;
            break;
        }
        r->events[r->num_events++] = (moe_rep_event_t){
            .ts_ns = e->ts_ns - off - t0, .dur_ns = e->dur_ns, .rank = rec->rank,
            .kind = (int16_t)e->kind, .layer = (int16_t)e->layer, .id = e->id, .lane = e->lane,
            .step = e->step, .arg = e->arg};
    }
    r->events_dropped += rec->events_dropped;
}

/* Idle: the part of each exchange a rank spent before the last (profiled) rank had arrived
 * at it, on rank 0's clock; capped by the exchange's own length. */
static void merge_idle(moe_merge_t *m, const moe_prof_record_t *recs, const bool *have)
{
    int64_t n = INT64_MAX;
    for (int r = 0; r < m->W; r++) {
        if (have[r]) {
            n = recs[r].num_exchanges < n ? recs[r].num_exchanges : n;
        }
    }
    for (int64_t i = 0; n != INT64_MAX && i < n; i++) {
        double last_d = -INFINITY, last_c = -INFINITY;
        for (int r = 0; r < m->W; r++) {
            if (have[r]) {
                const moe_rec_exchange_t *x = &recs[r].exchanges[i];
                double off = recs[r].clock_offset_ns;
                last_d = fmax(last_d, (double)x->dispatch_begin_ns - off);
                last_c = fmax(last_c, (double)x->combine_begin_ns - off);
            }
        }
        for (int r = 0; r < m->W; r++) {
            if (!have[r]) {
                continue;
            }
            const moe_rec_exchange_t *x = &recs[r].exchanges[i];
            double off = recs[r].clock_offset_ns;
            double d_len = (double)(x->dispatch_end_ns - x->dispatch_begin_ns);
            double c_len = (double)(x->combine_end_ns - x->combine_begin_ns);
            double idle = fmin(fmax(last_d - ((double)x->dispatch_begin_ns - off), 0.0), d_len) +
                          fmin(fmax(last_c - ((double)x->combine_begin_ns - off), 0.0), c_len);
            m->rep.ranks[r].idle_ns += idle;
            m->rep.ranks[r].exchange_ns -= idle;
        }
    }
}

moe_status_t moe_merge_window(moe_merge_t *m, moe_prof_record_t *recs, const bool *have,
                              int64_t t0_ns, moe_error_t *err)
{
    for (int r = 0; r < m->W; r++) {
        if (!have[r]) {
            continue;
        }
        if (recs[r].num_layers != m->L || recs[r].num_experts != m->E ||
            recs[r].world_size != m->W || recs[r].rank != r) {
            return moe_error_set(err, MOE_ERR_FORMAT,
                                 "profile record of rank %d does not match the job's shape", r);
        }
        merge_rank(m, &recs[r], t0_ns);
        merge_experts_routing(m, &recs[r]);
        merge_comm(m, &recs[r], have);
        merge_lists(m, &recs[r], t0_ns);
    }
    merge_idle(m, recs, have);
    bool recorded = false;
    for (int r = 0; r < m->W; r++) {
        recorded = recorded || (have[r] && recs[r].steps_recorded > 0);
    }
    m->rep.windows += recorded; /* a last record may carry only the memory series */
    return MOE_OK;
}

static int mkdir_p(const char *path)
{
    char tmp[MOE_PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
                return -1;
            }
            *p = '/';
        }
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* <output_dir>/<YYYY-MM-DD__HH-MM-SS>_<hash>, with -2, -3... if two runs share a second. */
static void make_run_dir(moe_report_t *r)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y-%m-%d__%H-%M-%S", &tm);
    strftime(r->started_at, sizeof(r->started_at), "%Y-%m-%dT%H:%M:%S", &tm);
    mkdir_p(r->cfg->prof_output_dir);
    for (int k = 1; k < 100; k++) {
        char suffix[8] = "";
        if (k > 1) {
            snprintf(suffix, sizeof(suffix), "-%d", k);
        }
        int n = snprintf(r->run_dir, sizeof(r->run_dir), "%s/%s_%08llx%s",
                         r->cfg->prof_output_dir, stamp,
                         (unsigned long long)(r->cfg->text_hash & 0xffffffffULL), suffix);
        if (n < 0 || (size_t)n >= sizeof(r->run_dir)) {
            return; /* too long a path: the writers report it */
        }
        if (mkdir(r->run_dir, 0755) == 0) {
            return;
        }
        if (errno != EEXIST) {
            return; /* the writers report the failure with the path */
        }
    }
}

static void finish_facts(moe_merge_t *m, const moe_prof_run_t *run, const moe_prof_static_t *info)
{
    moe_report_t *r = &m->rep;
    r->config_text = run->config_text;
    r->config_len = run->config_len;
    snprintf(r->version, sizeof(r->version), "%s", moe_version());
    snprintf(r->build_id, sizeof(r->build_id), "%s", moe_build_id());
    snprintf(r->blas, sizeof(r->blas), "%s", info->blas ? info->blas : "");
    snprintf(r->transport, sizeof(r->transport), "%s", info->transport ? info->transport : "");
    snprintf(r->device, sizeof(r->device), "%.63s", info->device ? info->device : "");
    r->chunks = info->chunks;
    r->steps_run = run->steps_run;
    r->steps_planned = run->steps_planned;
    r->interrupted = run->interrupted;
    r->tokens_per_step = m->cfg->tokens_per_step;
    r->run_s = run->run_s;
    r->tokens_per_s = run->run_s > 0 ? (double)run->steps_run * (double)r->tokens_per_step / run->run_s : 0;
    size_t used = 0;
    for (int i = 0; i < m->W; i++) {
        moe_rep_rank_t *rk = &r->ranks[i];
        bool new_host = true;
        for (int j = 0; j < i; j++) {
            new_host = new_host && strcmp(r->ranks[j].host, rk->host) != 0;
        }
        r->num_hosts += new_host;
        r->recorded_steps = rk->steps > r->recorded_steps ? rk->steps : r->recorded_steps;
        if (rk->profiled && (!rk->present || m->lost[i][0] != '\0')) {
            r->partial = true;
            const char *why = m->lost[i][0] != '\0' ? m->lost[i] : "no records";
            used += (size_t)snprintf(r->missing + used, used < sizeof(r->missing) ? sizeof(r->missing) - used : 0,
                                     "%srank %d (%s): %s", used ? "; " : "", i, rk->host, why);
            used = used < sizeof(r->missing) ? used : sizeof(r->missing);
        }
        if (rk->present) {
            r->chunks = r->chunks > 0 ? r->chunks : rk->chunks;
            if (r->device[0] == '\0') {
                memcpy(r->device, rk->device, sizeof(r->device));
            }
            r->clock_skew_max_ns = fmax(r->clock_skew_max_ns, fabs(rk->clock_offset_ns));
            r->clock_uncertainty_max_ns = fmax(r->clock_uncertainty_max_ns, rk->clock_uncertainty_ns);
            r->clock_drift_max_ns = fmax(r->clock_drift_max_ns,
                                         fabs(rk->clock_offset_end_ns - rk->clock_offset_ns));
        }
    }
    r->chunks = r->chunks > 0 ? r->chunks : (int)m->cfg->chunks;
}

/* Experts whose host sent no records (not profiled, or lost) would show 0 tokens; the
 * routing ranks counted the choices they kept for them, so those stand in, marked. */
static void fill_router_counts(moe_merge_t *m)
{
    moe_report_t *r = &m->rep;
    bool routed = false;
    for (int i = 0; i < m->W; i++) {
        routed = routed || (r->ranks[i].routes && r->ranks[i].present);
    }
    for (int i = 0; routed && i < m->L * m->E; i++) {
        moe_rep_expert_t *x = &r->experts[i];
        if (x->rank >= 0 && x->rank < m->W && !r->ranks[x->rank].present) {
            x->tokens = r->layers[i / m->E].kept[i % m->E];
            x->router_count = true;
        }
    }
}

void moe_merge_note_missing(moe_merge_t *m, int rank, const char *why)
{
    if (rank >= 0 && rank < m->W) {
        snprintf(m->lost[rank], sizeof(m->lost[rank]), "%s", why);
    }
}

moe_report_t *moe_merge_finish(moe_merge_t *m, const moe_prof_run_t *run,
                               const moe_prof_static_t *info)
{
    moe_report_t *r = &m->rep;
    finish_facts(m, run, info);
    fill_router_counts(m);
    r->all_warmup = r->recorded_steps == 0 && r->steps_run > 0 &&
                    r->steps_run <= m->cfg->prof_warmup_steps;
    for (int l = 0; l < m->L; l++) {
        moe_balance_t b;
        moe_balance_compute(r->layers[l].kept, m->E, &b);
        r->layers[l].gini = b.gini;
        r->layers[l].cv = b.cv;
        r->layers[l].entropy_norm = b.entropy_norm;
        r->layers[l].max_mean = b.max_mean;
    }
    if (r->run_dir[0] == '\0') {
        make_run_dir(r);
    }
    if (m->metrics_csv != NULL) {
        if (ferror(m->metrics_csv) || fclose(m->metrics_csv) != 0) {
            fprintf(stderr, "moed: warning: %s/metrics.csv: write failed (disk full?)\n",
                    r->run_dir);
        }
        m->metrics_csv = NULL;
    }
    return r;
}
