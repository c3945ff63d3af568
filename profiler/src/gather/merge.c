/* Rank 0: merge the windows' records of every profiled rank into one report. Lists grow
 * geometrically here (rank 0, window ends only), bounded by the config. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gather/balance.h"
#include "moe/build_info.h"
#include "moe/file.h"
#include "moe/hash.h"
#include "gather/gather.h"
#include "report/atomic_file.h"

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
    moe_report_files_t files; /* rep.files: which report files are whole */
    /* metrics.csv streams into <run_dir>/metrics.csv.part as windows merge: whole rows
     * gathered in buf, one write() each time it fills; on a failed write the file is cut
     * back to the last whole row (at `off`) and streaming stops (fd -1, rows counted). */
    int metrics_fd;
    char *metrics_buf;
    size_t metrics_len;
    int64_t metrics_buf_rows;
    int64_t metrics_buf_step; /* the least step in buf */
    int64_t metrics_off;      /* bytes of whole rows on disk; -1: could not cut back */
    int metrics_errno;        /* why streaming stopped, when a write failed */
    char fixed_dir[MOE_PATH_MAX]; /* the run folder's exact path; "" names it by time */
    /* [W] each rank's last exchange of the window merged before, and whether it had one:
     * the first exchange of a window looks back at it (merge_prev_combine) */
    moe_rec_exchange_t *last_x;
    bool *last_have;
};

#define METRICS_BUF_BYTES (64 * 1024)

static void make_run_dir(moe_merge_t *m);
static bool metrics_flush(moe_merge_t *m);

static void metrics_path(const moe_report_t *r, char *path, size_t n)
{
    snprintf(path, n, "%s/metrics.csv", r->run_dir);
}

/* Open metrics.csv.part in the run folder (made at start, so rows can stream into it). */
static void open_metrics_stream(moe_merge_t *m)
{
    moe_report_t *r = &m->rep;
    char path[MOE_PATH_MAX + 32], part[MOE_PATH_MAX + 48];
    m->metrics_fd = -1;
    make_run_dir(m);
    metrics_path(r, path, sizeof(path));
    m->metrics_buf = malloc(METRICS_BUF_BYTES);
    if (r->dir_error[0] != '\0' || m->metrics_buf == NULL ||
        !moe_afile_part_name(part, sizeof(part), path)) {
        return; /* the writer writes metrics.csv from memory at the end, or reports why not */
    }
    m->metrics_fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (m->metrics_fd < 0) {
        return;
    }
    r->metrics_streamed = true;
    size_t n = strlen(moe_report_metrics_header);
    memcpy(m->metrics_buf, moe_report_metrics_header, n);
    m->metrics_len = n;
    /* the header now: a run that ends early (rank 0 killed) leaves a CSV with its rows */
    metrics_flush(m);
    moe_report_mark_incomplete(r); /* INCOMPLETE names the .part the rows are in */
}

/* No more rows go to disk from here: the file keeps its whole rows. */
static void metrics_stop(moe_merge_t *m, int64_t step, bool failed, const char *why)
{
    moe_report_t *r = &m->rep;
    close(m->metrics_fd);
    m->metrics_fd = -1;
    if (step != INT64_MAX && (r->metrics_stop_step < 0 || step < r->metrics_stop_step)) {
        r->metrics_stop_step = step;
    }
    r->metrics_write_failed = failed;
    snprintf(r->metrics_stop_why, sizeof(r->metrics_stop_why), "%s", why);
}

/* One write of the buffered whole rows; a short or failed one is cut back to the last
 * whole row, which also gives a full disk back the partial block. */
static bool metrics_flush(moe_merge_t *m)
{
    moe_report_t *r = &m->rep;
    size_t done = 0;
    int e = 0;
    while (done < m->metrics_len) {
        ssize_t w = write(m->metrics_fd, m->metrics_buf + done, m->metrics_len - done);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            e = w < 0 ? errno : ENOSPC;
            break;
        }
        done += (size_t)w;
    }
    if (e == 0) {
        m->metrics_off += (int64_t)m->metrics_len;
        m->metrics_len = 0;
        m->metrics_buf_rows = 0;
        return true;
    }
    if (ftruncate(m->metrics_fd, (off_t)m->metrics_off) != 0) {
        e = errno; /* cannot cut it back: the file goes (see moe_merge_finish) */
        m->metrics_off = -1;
    }
    m->metrics_errno = e;
    r->metrics_rows -= m->metrics_buf_rows;
    r->metrics_lost += m->metrics_buf_rows;
    metrics_stop(m, m->metrics_buf_rows > 0 ? m->metrics_buf_step : INT64_MAX, true,
                 strerror(e));
    m->metrics_len = 0;
    m->metrics_buf_rows = 0;
    return false;
}

/* One row to metrics.csv, whole or not at all (then counted as lost). */
static void metrics_put(moe_merge_t *m, const moe_rep_metric_t *row)
{
    moe_report_t *r = &m->rep;
    char line[256];
    int n = m->metrics_fd >= 0 ? moe_report_metrics_format(line, sizeof(line), row) : -1;
    int64_t bound = m->cfg->prof_metrics_max_mb * 1024 * 1024;
    if (n > 0 && bound > 0 && m->metrics_off + (int64_t)m->metrics_len + n > bound) {
        char why[96];
        snprintf(why, sizeof(why), "profiler.metrics_max_mb (%lld MiB) reached",
                 (long long)m->cfg->prof_metrics_max_mb);
        if (metrics_flush(m)) {
            metrics_stop(m, row->step, false, why);
        }
        n = -1;
    }
    if (n > 0 && m->metrics_len + (size_t)n > METRICS_BUF_BYTES && !metrics_flush(m)) {
        n = -1;
    }
    if (n <= 0) {
        r->metrics_lost++;
        r->metrics_stop_step = r->metrics_stop_step < 0 || row->step < r->metrics_stop_step
                                   ? row->step : r->metrics_stop_step;
        return;
    }
    memcpy(m->metrics_buf + m->metrics_len, line, (size_t)n);
    m->metrics_len += (size_t)n;
    m->metrics_buf_step = m->metrics_buf_rows == 0 || row->step < m->metrics_buf_step
                              ? row->step : m->metrics_buf_step;
    m->metrics_buf_rows++;
    r->metrics_rows++;
}

/* At the end: the rest of the rows, then metrics.csv.part becomes metrics.csv (whole rows,
 * however far it got); the file's state goes to the report's table. */
static void close_metrics_stream(moe_merge_t *m)
{
    moe_report_t *r = &m->rep;
    char path[MOE_PATH_MAX + 32], part[MOE_PATH_MAX + 48];
    if (!r->metrics_streamed) {
        return;
    }
    int e = 0;
    if (m->metrics_fd >= 0 && metrics_flush(m)) {
        e = fsync(m->metrics_fd) != 0 ? errno : 0;
        e = close(m->metrics_fd) != 0 && e == 0 ? errno : e;
        m->metrics_fd = -1;
    }
    metrics_path(r, path, sizeof(path));
    moe_afile_part_name(part, sizeof(part), path);
    if (e == 0 && m->metrics_off <= 0) {
        /* not even the header reached the disk, or a failed write could not be cut back
         * (the file may hold a torn row): no file rather than a wrong one */
        e = m->metrics_errno != 0 ? m->metrics_errno : EIO;
    }
    if (e == 0 && rename(part, path) != 0) {
        e = errno;
    }
    if (e != 0) {
        unlink(part);
    }
    moe_report_file_done(r, MOE_RFILE_METRICS_CSV, e);
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

/* One row per copy of every replicated expert of every layer. */
static void merge_replica_rows(moe_report_t *r, const moe_config_t *cfg)
{
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int l = 0; l < r->num_layers; l++) {
            int ne = 0;
            const moe_cfg_replica_t *x = moe_cfg_layer_entries(cfg, l, &ne);
            for (int i = 0; i < ne; i++) {
                bool rep = (i > 0 && x[i - 1].expert == x[i].expert) ||
                           (i + 1 < ne && x[i + 1].expert == x[i].expert);
                if (rep && pass == 1) {
                    r->replicas[n] = (moe_rep_replica_t){
                        .layer = l, .expert = x[i].expert, .rank = x[i].rank};
                }
                n += rep ? 1 : 0;
            }
        }
        if (pass == 0 && (n == 0 || (r->replicas = calloc((size_t)n, sizeof(*r->replicas))) == NULL)) {
            return; /* none (or no memory: the report then has no replica rows) */
        }
    }
    r->num_replicas = n;
}

/* The row of (layer, expert, rank) among the replica rows, or NULL. */
static moe_rep_replica_t *merge_replica_of(moe_report_t *r, int l, int e, int rank)
{
    for (int i = 0; i < r->num_replicas; i++) {
        moe_rep_replica_t *x = &r->replicas[i];
        if (x->layer == l && x->expert == e && x->rank == rank) {
            return x;
        }
    }
    return NULL;
}

const char *moe_merge_run_dir(const moe_merge_t *m)
{
    return m->rep.dir_error[0] == '\0' ? m->rep.run_dir : "";
}

moe_merge_t *moe_merge_create(const moe_config_t *cfg, int world_size, const char (*hosts)[64])
{
    return moe_merge_create_in(cfg, world_size, hosts, NULL);
}

moe_merge_t *moe_merge_create_in(const moe_config_t *cfg, int world_size,
                                 const char (*hosts)[64], const char *dir)
{
    moe_merge_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return NULL;
    }
    m->metrics_fd = -1;
    snprintf(m->fixed_dir, sizeof(m->fixed_dir), "%s", dir != NULL ? dir : "");
    int W = world_size, L = (int)cfg->num_layers, E = (int)cfg->num_experts;
    m->cfg = cfg;
    m->W = W;
    m->L = L;
    m->E = E;
    m->flops_per_row = moe_cfg_ffn_flops(cfg->activation, cfg->hidden_dim,
                                         moe_cfg_expert_ffn(cfg), 1);
    moe_report_t *r = &m->rep;
    r->cfg = cfg;
    r->world_size = W;
    r->num_layers = L;
    r->num_experts = E;
    m->lost = calloc((size_t)W, sizeof(*m->lost));
    r->ranks = calloc((size_t)W, sizeof(*r->ranks));
    r->experts = calloc((size_t)L * (size_t)E, sizeof(*r->experts));
    r->layers = calloc((size_t)L, sizeof(*r->layers));
    merge_replica_rows(r, cfg);
    r->bytes = calloc((size_t)W * (size_t)W, sizeof(uint64_t));
    r->msgs = calloc((size_t)W * (size_t)W, sizeof(uint64_t));
    r->rows = calloc((size_t)W * (size_t)W, sizeof(uint64_t));
    r->pairs = calloc((size_t)W * (size_t)W, sizeof(uint64_t));
    r->wait_ns = calloc((size_t)W * (size_t)W, sizeof(double));
    r->idle_for_ns = calloc((size_t)W * (size_t)W, sizeof(double));
    m->last_x = calloc((size_t)W, sizeof(*m->last_x));
    m->last_have = calloc((size_t)W, sizeof(*m->last_have));
    bool ok = m->lost && r->ranks && r->experts && r->layers && r->bytes && r->msgs &&
              r->rows && r->pairs &&
              r->wait_ns && r->idle_for_ns && m->last_x && m->last_have;
    for (int l = 0; ok && l < L; l++) {
        r->layers[l].demand = calloc((size_t)E, sizeof(uint64_t));
        r->layers[l].kept = calloc((size_t)E, sizeof(uint64_t));
        r->layers[l].dropped = calloc((size_t)E, sizeof(uint64_t));
        ok = r->layers[l].demand && r->layers[l].kept && r->layers[l].dropped;
        int nent = 0; /* layer l's own placement (placement.layers) or the shared one */
        const moe_cfg_replica_t *ent = moe_cfg_layer_entries(cfg, l, &nent);
        for (int e = 0; e < E; e++) {
            moe_rep_expert_t *x = &r->experts[l * E + e];
            x->layer = l;
            x->expert = e;
            x->rank = -1;
        }
        for (int i = 0; i < nent; i++) { /* sorted by expert, rank: the lowest copy's rank */
            moe_rep_expert_t *x = &r->experts[l * E + ent[i].expert];
            x->rank = x->rank < 0 ? ent[i].rank : x->rank;
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
    moe_report_files_init(&m->files, cfg);
    if (dir == NULL && cfg->prof_record_routing && moe_cfg_recorded_steps(cfg) != 0) {
        /* the run's end report writes the routing (moe_gather_finish): its INCOMPLETE,
         * made with the folder, lists it from the start */
        m->files.state[MOE_RFILE_ROUTING] = MOE_RFILE_PENDING;
    }
    r->files = &m->files;
    r->metrics_stop_step = -1;
    open_metrics_stream(m);
    return m;
}

void moe_merge_destroy(moe_merge_t *m)
{
    if (m == NULL) {
        return;
    }
    if (m->metrics_fd >= 0) {
        close(m->metrics_fd); /* the .part stays: INCOMPLETE says metrics.csv is missing */
    }
    free(m->metrics_buf);
    if (m->rep.run_dir[0] != '\0' && m->rep.dir_error[0] == '\0') {
        moe_report_unreserve(&m->rep); /* no report written: the room is not needed */
    }
    moe_report_free(&m->rep);
    free(m->lost);
    free(m->last_x);
    free(m->last_have);
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
    rk->cpu_steps_ns += (double)rec->cpu_steps_ns;
    rk->wall_steps_ns += (double)rec->wall_steps_ns;
    if (rec->wall_run_ns > 0) {
        rk->cpu_run_ns = (double)rec->cpu_run_ns;
        rk->wall_run_ns = (double)rec->wall_run_ns;
    }
    for (int l = 0; l < rec->num_layers && l < m->rep.num_layers; l++) {
        m->rep.layers[l].shared_rows += (uint64_t)rec->shared_rows[l];
        m->rep.layers[l].shared_ns += (double)rec->shared_ns[l];
        rk->weights_ns += (double)rec->shared_ns[l];
    }
    for (int i = 0; i < rec->num_layers * rec->num_local; i++) {
        rk->weights_ns += rec->experts[i].hist.sum; /* expert calls' busy time */
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
        rk->peak_known = true;
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

/* The expert of a record's (layer, column): what the rank recorded it ran, else (a record
 * without that section) the config's placement: the layer's own set or the shared one. */
static int record_expert(const moe_merge_t *m, const moe_prof_record_t *rec, int layer,
                         int col)
{
    int id = rec->slot_ids[(size_t)layer * (size_t)rec->num_local + (size_t)col];
    if (id >= 0) {
        return id;
    }
    return m->cfg->placement_per_layer ? moe_cfg_local_expert(m->cfg, layer, rec->rank, col)
                                       : rec->local_ids[col];
}

static void merge_experts_routing(moe_merge_t *m, const moe_prof_record_t *rec)
{
    int E = m->E;
    for (int l = 0; l < m->L && l < rec->num_layers; l++) {
        for (int le = 0; le < rec->num_local; le++) {
            const moe_rec_expert_t *src = &rec->experts[l * rec->num_local + le];
            int id = record_expert(m, rec, l, le);
            if (id < 0 || id >= E) {
                continue; /* this layer has fewer experts on the rank */
            }
            moe_rep_expert_t *x = &m->rep.experts[l * E + id];
            moe_rep_replica_t *y =
                m->rep.num_replicas > 0 ? merge_replica_of(&m->rep, l, id, rec->rank) : NULL;
            if (y != NULL) {
                y->tokens += src->tokens;
                y->calls += src->calls;
                y->busy_ns += src->hist.sum;
            }
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
        m->rep.rows[i * W + j] += rec->rows_sent[j];
        m->rep.pairs[i * W + j] += rec->pairs_sent[j];
        m->rep.wait_ns[i * W + j] += rec->wait_ns[j];
        if (!have[j]) { /* j sent no record: what i received from it stands for it */
            m->rep.bytes[j * W + i] += rec->bytes_recv[j];
            m->rep.msgs[j * W + i] += rec->msgs_recv[j];
            m->rep.rows[j * W + i] += rec->rows_recv[j];
            m->rep.pairs[j * W + i] += rec->pairs_recv[j];
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
                                .expert = record_expert(m, rec, (int)s->layer, s->local),
                                .rank = rec->rank,
                                .tokens = s->tokens, .ns = s->ns,
                                .flops = (double)s->tokens * m->flops_per_row};
        if (r->metrics_streamed) {
            metrics_put(m, &row);
        }
        if (grow((void **)&r->metrics, &m->cap_metrics, r->num_metrics, METRICS_BOUND,
                 sizeof(*r->metrics))) {
            r->metrics[r->num_metrics++] = row;
        } else if (!r->metrics_streamed) {
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

/* One phase of one exchange on rank 0's clock: where rank r arrived and how long it took. */
typedef struct {
    double arrive, len;
} merge_phase_t;

static merge_phase_t merge_phase_at(const moe_prof_record_t *rec, const moe_rec_exchange_t *x,
                                    bool combine)
{
    int64_t b = combine ? x->combine_begin_ns : x->dispatch_begin_ns;
    int64_t e = combine ? x->combine_end_ns : x->dispatch_end_ns;
    return (merge_phase_t){(double)b - rec->clock_offset_ns, (double)(e - b)};
}

static merge_phase_t merge_phase_of(const moe_prof_record_t *rec, int64_t i, bool combine)
{
    return merge_phase_at(rec, &rec->exchanges[i], combine);
}

/* A rank whose wait in this phase is by design: in the combine, a rank hosting no experts
 * (it waits for the expert ranks to compute); in the dispatch, a rank that routes nothing
 * (it waits for the routing ranks' gate). The ranks it waits for are those for which this
 * is false. */
static bool merge_waits_by_design(const moe_rep_rank_t *k, bool combine)
{
    return combine ? k->num_local == 0 : !k->routes;
}

/* Book `ns` of rank r's wait as idle (imbalance) spent waiting for rank `peer`. */
static void merge_book_idle(moe_merge_t *m, int r, int peer, double ns)
{
    m->rep.ranks[r].idle_ns += ns;
    if (peer >= 0 && m->rep.idle_for_ns != NULL) {
        m->rep.idle_for_ns[(size_t)r * (size_t)m->W + (size_t)peer] += ns;
    }
}

/* Rank r's exchange before exchange i of this window: i - 1, or for the window's first the
 * last one of the window merged before (clocks: the same rank's offset); NULL if none. */
static const moe_rec_exchange_t *merge_prev_x(const moe_merge_t *m,
                                              const moe_prof_record_t *recs, int64_t i, int r)
{
    return i > 0 ? &recs[r].exchanges[i - 1] : m->last_have[r] ? &m->last_x[r] : NULL;
}

/* Whether exchange i directly follows the one before it on every present rank (the next
 * layer of the step, or the first layer of the next step after the last one), and every
 * present rank has that one. */
static bool merge_follows(const moe_merge_t *m, const moe_prof_record_t *recs, const bool *have,
                          int64_t i)
{
    for (int r = 0; r < m->W; r++) {
        if (!have[r]) {
            continue;
        }
        const moe_rec_exchange_t *a = merge_prev_x(m, recs, i, r), *b = &recs[r].exchanges[i];
        bool next = a != NULL && ((a->step == b->step && a->layer + 1 == b->layer) ||
                                  (a->step + 1 == b->step && b->layer == 0 &&
                                   a->layer == m->L - 1));
        if (!next) {
            return false;
        }
    }
    return true;
}

/* The previous exchange's combine as the dispatch of exchange i sees it: the expert rank
 * that arrived last at it (done with its experts last: the slowest), when it arrived, and
 * when the routing ranks had every row back (the last routing rank's combine end). */
typedef struct {
    int slowest;
    double slowest_arrive, last_arrive, rows_back;
} merge_prev_t;

static bool merge_prev_combine(const moe_merge_t *m, const moe_prof_record_t *recs,
                               const bool *have, int64_t i, merge_prev_t *pv)
{
    *pv = (merge_prev_t){-1, -INFINITY, -INFINITY, -INFINITY};
    if (!merge_follows(m, recs, have, i)) {
        return false;
    }
    for (int r = 0; r < m->W; r++) {
        if (!have[r]) {
            continue;
        }
        merge_phase_t c = merge_phase_at(&recs[r], merge_prev_x(m, recs, i, r), true);
        pv->last_arrive = fmax(pv->last_arrive, c.arrive);
        if (m->rep.ranks[r].num_local > 0 && c.arrive > pv->slowest_arrive) {
            pv->slowest = r;
            pv->slowest_arrive = c.arrive;
        }
        if (m->rep.ranks[r].routes) {
            pv->rows_back = fmax(pv->rows_back, c.arrive + c.len);
        }
    }
    if (!isfinite(pv->rows_back)) {
        pv->slowest = -1; /* no routing rank present: nothing to look back at */
    }
    return pv->slowest >= 0;
}

/* The part of expert rank r's designed wait in the dispatch of exchange i (for the routing
 * ranks' next dispatch) that was a wait for a slower expert rank: while the routing ranks
 * still waited for the slowest rank's rows of the previous exchange, the routing rank's
 * merge and gate had not even begun. It is the part of the wait before the routing ranks
 * had every row back, at most the lead the slowest rank had over r in finishing its experts
 * less what r already booked as idle in that combine (what a balanced placement would have
 * saved); the rest (the rows' travel, the routing rank's merge and gate) stays designed. */
static double merge_prev_lag(const moe_merge_t *m, const moe_prof_record_t *recs, int64_t i,
                             int r, const merge_prev_t *pv, double arrive, double designed)
{
    if (pv->slowest < 0 || pv->slowest == r || m->rep.ranks[r].num_local == 0) {
        return 0.0;
    }
    merge_phase_t c = merge_phase_at(&recs[r], merge_prev_x(m, recs, i, r), true);
    double booked = fmin(fmax(pv->last_arrive - c.arrive, 0.0), c.len);
    double lead = pv->slowest_arrive - c.arrive - booked;
    return fmin(fmax(fmin(pv->rows_back - arrive, lead), 0.0), designed);
}

/* The wait of every present rank in one phase of exchange i, split in two:
 *   wait       = clamp(last arrival - own arrival, 0, phase length)
 *   structural = for a rank that waits by design, clamp(mean arrival of the ranks it waits
 *                for by design - own arrival, 0, wait): what a perfectly balanced placement
 *                would still make it wait; when none of those ranks is present the wait is
 *                not split at all and stays in the rank's exchange; less, in
 *                the dispatch, an expert rank's wait for the slowest rank of the previous
 *                combine (merge_prev_lag)
 *   imbalance  = wait - structural (waiting for a slower peer: idle), booked against the
 *                rank that arrived last, or the slowest rank of the previous combine */
static void merge_idle_phase(moe_merge_t *m, const moe_prof_record_t *recs, const bool *have,
                             int64_t i, bool combine)
{
    double last = -INFINITY, role_sum = 0.0;
    int role_n = 0, last_rank = -1;
    for (int r = 0; r < m->W; r++) {
        if (!have[r]) {
            continue;
        }
        double a = merge_phase_of(&recs[r], i, combine).arrive;
        if (a > last) {
            last = a;
            last_rank = r;
        }
        if (!merge_waits_by_design(&m->rep.ranks[r], combine)) {
            role_sum += a;
            role_n++;
        }
    }
    merge_prev_t pv = {-1, 0.0, 0.0, 0.0};
    if (!combine) {
        (void)merge_prev_combine(m, recs, have, i, &pv);
    }
    for (int r = 0; r < m->W; r++) {
        if (!have[r]) {
            continue;
        }
        moe_rep_rank_t *k = &m->rep.ranks[r];
        if (role_n == 0 && merge_waits_by_design(k, combine)) {
            continue; /* it waits for ranks whose records are missing: its wait cannot be
                       * split, and the present rank that came last is not what it waited
                       * for; the wait stays in its exchange (the findings say so) */
        }
        merge_phase_t p = merge_phase_of(&recs[r], i, combine);
        double wait = fmin(fmax(last - p.arrive, 0.0), p.len), designed = 0.0, lag = 0.0;
        if (role_n > 0 && merge_waits_by_design(k, combine)) {
            designed = fmin(fmax(role_sum / role_n - p.arrive, 0.0), wait);
            lag = combine ? 0.0 : merge_prev_lag(m, recs, i, r, &pv, p.arrive, designed);
        }
        k->structural_wait_ns += designed - lag;
        merge_book_idle(m, r, last_rank != r ? last_rank : -1, wait - designed);
        merge_book_idle(m, r, pv.slowest, lag);
        k->exchange_ns -= wait;
    }
}

/* The ranks whose times the latency percentiles take: the routing ranks, when all of them
 * sent this window's records (a token's layer runs from its routing rank's gate to that
 * rank's merge; an expert rank's own layer boundaries fall elsewhere: it may wait for the
 * next layer's rows while the routing rank still waits for a slow expert of the last), or
 * every present rank when no routing rank's record is here. With some routing ranks' and
 * not others' (symmetric routing, some not profiled or lost) none: the longest of a part
 * would pass for the longest of all, so the window adds no sample (unknown). */
static void merge_latency_ranks(const moe_merge_t *m, const bool *have, bool *use)
{
    bool any = false, all = true;
    for (int r = 0; r < m->W; r++) {
        bool routes = rank_routes(m->cfg, m->W, r);
        use[r] = have[r] && routes;
        any = any || use[r];
        all = all && (have[r] || !routes);
    }
    for (int r = 0; r < m->W; r++) {
        use[r] = any ? use[r] && all : have[r];
    }
}

/* The least list length over the ranks used that recorded any; 0 when none did. */
static int64_t merge_common_len(const moe_merge_t *m, const moe_prof_record_t *recs,
                                const bool *use, bool layers)
{
    int64_t n = INT64_MAX;
    for (int r = 0; r < m->W; r++) {
        int64_t len = !use[r] ? 0 : layers ? recs[r].num_layer_lat : recs[r].num_steps;
        n = len > 0 && len < n ? len : n;
    }
    return n == INT64_MAX ? 0 : n;
}

/* The latency percentiles' samples: per recorded step, the longest of the routing ranks'
 * times of the step and of each layer (merge_latency_ranks). Ranks record the same steps
 * and layers in the same order (a window's steps are every rank's); an entry whose step or
 * layer differs between ranks is skipped rather than mixed. */
static void merge_latency(moe_merge_t *m, const moe_prof_record_t *recs, const bool *have)
{
    bool *use = calloc((size_t)m->W, sizeof(bool));
    if (use == NULL) {
        return; /* no percentiles for this window */
    }
    merge_latency_ranks(m, have, use);
    int64_t ns = merge_common_len(m, recs, use, false);
    int64_t nl = merge_common_len(m, recs, use, true);
    for (int64_t i = 0; i < ns; i++) {
        int64_t step = -1, most = -1;
        bool same = true;
        for (int r = 0; r < m->W; r++) {
            if (use[r] && recs[r].num_steps > 0) {
                const moe_rec_step_t *s = &recs[r].steps[i];
                same = same && (step < 0 || s->step == step);
                step = s->step;
                most = s->phase_ns[MOE_PHASE_STEP] > most ? s->phase_ns[MOE_PHASE_STEP] : most;
            }
        }
        if (same && most >= 0) {
            moe_hist_add(&m->rep.step_latency, most);
        }
    }
    for (int64_t i = 0; i < nl; i++) {
        const moe_rec_lat_t *first = NULL;
        int64_t most = -1;
        bool same = true;
        for (int r = 0; r < m->W; r++) {
            if (use[r] && recs[r].num_layer_lat > 0) {
                const moe_rec_lat_t *x = &recs[r].layer_lat[i];
                same = same && (first == NULL || (x->step == first->step &&
                                                  x->layer == first->layer));
                first = first != NULL ? first : x;
                most = x->ns > most ? x->ns : most;
            }
        }
        if (same && first != NULL && first->layer < m->rep.num_layers) {
            moe_hist_add(&m->rep.layers[first->layer].latency, most);
        }
    }
    free(use);
}

static int x_cmp(const moe_rec_exchange_t *a, const moe_rec_exchange_t *b)
{
    return a->step != b->step ? (a->step < b->step ? -1 : 1)
                              : (a->layer < b->layer ? -1 : a->layer > b->layer);
}

/* The exchanges every present rank recorded, matched by (step, layer), into al (shallow
 * copies of the records whose exchanges are those, in order: al[r].exchanges allocated).
 * A rank's list may stop early or have a gap (a part of it lost): an exchange some present
 * rank lacks is left out, its waits unsplit (they stay in the exchange), and counted in
 * *unsplit; *total counts every present rank's exchanges. false: no memory. */
static bool merge_align(const moe_merge_t *m, const moe_prof_record_t *recs, const bool *have,
                        moe_prof_record_t *al, int64_t *unsplit, int64_t *total)
{
    int64_t *at = calloc((size_t)m->W, sizeof(int64_t));
    bool ok = at != NULL, any = false;
    for (int r = 0; ok && r < m->W; r++) {
        if (have[r]) {
            al[r] = recs[r];
            al[r].num_exchanges = 0;
            al[r].exchanges = malloc((size_t)(recs[r].num_exchanges > 0
                                                  ? recs[r].num_exchanges : 1) *
                                     sizeof(moe_rec_exchange_t));
            ok = al[r].exchanges != NULL;
            *total += recs[r].num_exchanges;
            any = true;
        }
    }
    for (bool more = ok && any; more;) {
        const moe_rec_exchange_t *key = NULL; /* the largest of the ranks' next ones */
        for (int r = 0; r < m->W && more; r++) {
            if (have[r]) {
                more = at[r] < recs[r].num_exchanges;
                const moe_rec_exchange_t *x = more ? &recs[r].exchanges[at[r]] : NULL;
                key = x != NULL && (key == NULL || x_cmp(x, key) > 0) ? x : key;
            }
        }
        bool all = more;
        for (int r = 0; r < m->W && more; r++) {
            if (have[r] && x_cmp(&recs[r].exchanges[at[r]], key) < 0) {
                at[r]++; /* an exchange the rank with the largest next one lacks */
                all = false;
            }
        }
        for (int r = 0; r < m->W && all; r++) {
            if (have[r]) {
                al[r].exchanges[al[r].num_exchanges++] = recs[r].exchanges[at[r]++];
            }
        }
    }
    for (int r = 0; ok && r < m->W; r++) {
        *unsplit += have[r] ? recs[r].num_exchanges - al[r].num_exchanges : 0;
    }
    free(at);
    return ok;
}

/* Idle and designed wait of each exchange every present rank recorded (merge_align), on rank
 * 0's clock. */
static void merge_idle(moe_merge_t *m, const moe_prof_record_t *recs, const bool *have)
{
    moe_prof_record_t *al = calloc((size_t)m->W, sizeof(*al));
    int64_t unsplit = 0, total = 0;
    bool ok = al != NULL && merge_align(m, recs, have, al, &unsplit, &total);
    int64_t n = INT64_MAX;
    for (int r = 0; ok && r < m->W; r++) {
        if (have[r]) {
            n = al[r].num_exchanges; /* the same on every present rank */
        }
    }
    for (int64_t i = 0; ok && n != INT64_MAX && i < n; i++) {
        merge_idle_phase(m, al, have, i, false);
        merge_idle_phase(m, al, have, i, true);
    }
    m->rep.exchanges_unsplit += ok ? unsplit : total;
    m->rep.exchanges_recorded += total;
    for (int r = 0; r < m->W; r++) { /* the next window's first exchange looks back here */
        m->last_have[r] = ok && have[r] && n != INT64_MAX && n > 0;
        if (m->last_have[r]) {
            m->last_x[r] = al[r].exchanges[n - 1];
        }
    }
    for (int r = 0; al != NULL && r < m->W; r++) {
        free(have[r] ? al[r].exchanges : NULL);
    }
    free(al);
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
    merge_latency(m, recs, have);
    bool recorded = false;
    for (int r = 0; r < m->W; r++) {
        recorded = recorded || (have[r] && recs[r].steps_recorded > 0);
    }
    m->rep.windows += recorded; /* a last record may carry only the memory series */
    if (m->metrics_fd >= 0 && m->metrics_len > 0) {
        /* the window's rows on disk now: a rank 0 lost later leaves them in the .part
         * (a failed write is the stream's, as when the buffer fills) */
        metrics_flush(m);
    }
    return MOE_OK;
}

/* mkdir of one component; EEXIST counts only for a folder (or a link to one): a dangling
 * symbolic link or a file there is its stat's error (ENOENT, ENOTDIR). */
static int mkdir_one(const char *path)
{
    struct stat sb;
    if (mkdir(path, 0755) == 0) {
        return 0;
    }
    if (errno != EEXIST) {
        return errno;
    }
    if (stat(path, &sb) != 0) {
        return errno;
    }
    return S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
}

/* mkdir -p; 0, or the errno of the component that could not be made. */
static int mkdir_p(const char *path)
{
    char tmp[MOE_PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            int e = mkdir_one(tmp);
            if (e != 0) {
                return e;
            }
            *p = '/';
        }
    }
    return mkdir_one(tmp);
}

/* The folder's hash: the resolved configuration, i.e. the config text and every
 * command-line override (--steps is the one there is), so two runs that differ only in
 * an override do not share a name. */
static uint64_t run_dir_hash(const moe_config_t *cfg)
{
    char over[64];
    int n = snprintf(over, sizeof(over), "\nsteps=%lld\n", (long long)cfg->steps);
    return moe_hash64_update(cfg->text_hash, over, (size_t)n);
}

#define RUN_DIR_RESERVE (64 * 1024)
#define RUN_DIR_TRIES 100000 /* -2 ... -99999: a name is taken only by a run that made it */

/* <output_dir>/<YYYY-MM-DD__HH-MM-SS>_<hash>, with -2, -3... if the name is taken. mkdir
 * fails when the folder exists, so a folder is never shared with another run. On failure
 * r->dir_error says why, with the real errno. Then INCOMPLETE lists every file, not yet
 * written: it goes when the report is complete. */
static void make_run_dir(moe_merge_t *m)
{
    moe_report_t *r = &m->rep;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    r->run_dir[0] = r->dir_error[0] = '\0';
    strftime(stamp, sizeof(stamp), "%Y-%m-%d__%H-%M-%S", &tm);
    strftime(r->started_at, sizeof(r->started_at), "%Y-%m-%dT%H:%M:%S", &tm);
    const char *out = r->cfg->prof_output_dir;
    int e = mkdir_p(out);
    if (e != 0) {
        snprintf(r->dir_error, sizeof(r->dir_error), "%s: cannot create the output folder: %s",
                 out, strerror(e));
        return;
    }
    if (m->fixed_dir[0] != '\0') { /* an on-demand window's folder, named when asked for */
        snprintf(r->run_dir, sizeof(r->run_dir), "%s", m->fixed_dir);
        if (mkdir(r->run_dir, 0755) != 0) {
            snprintf(r->dir_error, sizeof(r->dir_error), "%s: cannot create the folder: %s",
                     r->run_dir, strerror(errno));
            return;
        }
        moe_report_mark_incomplete(r);
        moe_report_reserve(r, RUN_DIR_RESERVE);
        return;
    }
    unsigned long long h = (unsigned long long)(run_dir_hash(r->cfg) & 0xffffffffULL);
    for (int k = 1; k < RUN_DIR_TRIES; k++) {
        char name[64];
        snprintf(name, sizeof(name), k > 1 ? "%s_%08llx-%d" : "%s_%08llx", stamp, h, k);
        int n = moe_path_join(r->run_dir, sizeof(r->run_dir), out, name);
        if (n < 0 || (size_t)n >= sizeof(r->run_dir)) {
            snprintf(r->dir_error, sizeof(r->dir_error), "%s: path too long for a run folder",
                     out);
            return;
        }
        if (mkdir(r->run_dir, 0755) == 0) {
            moe_report_mark_incomplete(r);
            /* metrics.csv may fill the disk: the summaries' room is kept from the start */
            moe_report_reserve(r, RUN_DIR_RESERVE);
            return;
        }
        if (errno != EEXIST) {
            snprintf(r->dir_error, sizeof(r->dir_error), "%s: cannot create the run folder: %s",
                     r->run_dir, strerror(errno));
            return;
        }
    }
    char name[64];
    snprintf(name, sizeof(name), "%s_%08llx", stamp, h);
    moe_path_join(r->run_dir, sizeof(r->run_dir), out, name);
    snprintf(r->dir_error, sizeof(r->dir_error), "%s: every suffix up to -%d is taken",
             r->run_dir, RUN_DIR_TRIES - 1);
}

/* Whether rank i's records are all here: present, and not lost after some of its parts
 * came (a rank that died mid-run streamed the steps before, not the rest). */
static bool rank_whole(const moe_merge_t *m, int i)
{
    return i >= 0 && i < m->W && m->rep.ranks[i].present && m->lost[i][0] == '\0';
}

static void finish_facts(moe_merge_t *m, const moe_prof_run_t *run, const moe_prof_static_t *info)
{
    moe_report_t *r = &m->rep;
    r->config_text = run->config_text;
    r->config_len = run->config_len;
    snprintf(r->version, sizeof(r->version), "%s", moe_version());
    snprintf(r->build_id, sizeof(r->build_id), "%s", moe_build_id());
    snprintf(r->blas, sizeof(r->blas), "%s", info->blas ? info->blas : "");
    snprintf(r->weights, sizeof(r->weights), "%s", info->weights ? info->weights : "");
    for (int i = 0; i < MOE_PROF_RESOLVED_COUNT; i++) {
        snprintf(r->resolved[i], sizeof(r->resolved[i]), "%s",
                 info->resolved[i] ? info->resolved[i] : "");
    }
    snprintf(r->transport, sizeof(r->transport), "%s", info->transport ? info->transport : "");
    snprintf(r->device, sizeof(r->device), "%.63s", info->device ? info->device : "");
    snprintf(r->routing_source, sizeof(r->routing_source), "%s",
             info->routing_source ? info->routing_source : "");
    r->chunks = info->chunks;
    r->steps_run = run->steps_run;
    r->steps_planned = run->steps_planned;
    /* a fault's report (missing_why: the watchdog ended the run) is partial, not a stop */
    r->interrupted = run->interrupted && run->missing_why == NULL;
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
    if (run->job_steps) {
        /* a rank ends its part of a step before the job does (master routing: an expert
         * rank once its rows went back): after a fault its records may hold the step in
         * flight, which the job never completed (rank 0's steps_run, the routing trace) */
        int64_t job = run->job_recorded;
        r->recorded_steps = r->recorded_steps < job ? r->recorded_steps : job;
        /* a step is the job's once every routing rank merged its tokens' rows: rank 0 may
         * have ended its own part (symmetric routing, or master routing with another
         * master) of a step another routing rank never ended. A rank whose last records
         * are lost holds fewer than it completed: it cannot say. */
        for (int i = 0; i < m->W; i++) {
            const moe_rep_rank_t *rk = &r->ranks[i];
            if (rk->routes && rank_whole(m, i) &&
                rk->steps < r->recorded_steps) {
                r->recorded_steps = rk->steps;
            }
        }
    }
}

/* Whether the routing ranks' counts (demand, kept, dropped) are whole: every rank that
 * routes tokens sent all its records. In symmetric routing each rank counts only its own
 * tokens' choices, so a sum over some of them is a part that would pass for the layer's. */
static bool routing_counts_whole(const moe_merge_t *m)
{
    bool any = false;
    for (int i = 0; i < m->W; i++) {
        const moe_rep_rank_t *k = &m->rep.ranks[i];
        if (k->routes && !rank_whole(m, i)) {
            return false;
        }
        any = any || k->routes;
    }
    return any;
}

/* Without whole routing counts, a part of them is dropped rather than shown: the layers
 * then read as having no routing rank's records (demand_unknown), for every writer. */
static void drop_routing_part(moe_merge_t *m)
{
    size_t n = (size_t)m->E * sizeof(uint64_t);
    for (int l = 0; l < m->L; l++) {
        memset(m->rep.layers[l].demand, 0, n);
        memset(m->rep.layers[l].kept, 0, n);
        memset(m->rep.layers[l].dropped, 0, n);
    }
}

/* Whether every host of expert e of layer l sent its records: its row's rank and, for an
 * expert with copies, every copy's rank. Its tokens, calls and flops sum the copies
 * present, so with a copy's host missing they are a part. */
static bool expert_hosts_present(const moe_merge_t *m, int l, int e)
{
    const moe_report_t *r = &m->rep;
    if (!rank_whole(m, r->experts[l * m->E + e].rank)) {
        return false;
    }
    for (int i = 0; i < r->num_replicas; i++) {
        const moe_rep_replica_t *c = &r->replicas[i];
        if (c->layer == l && c->expert == e && !rank_whole(m, c->rank)) {
            return false;
        }
    }
    return true;
}

/* Experts with a host (or a copy's host) that sent no records (not profiled, or lost)
 * would show 0 tokens, or the present copies' part: with whole routing counts, the choices
 * the routing ranks kept for them stand in, marked; else their tokens are unknown. Either
 * way their calls and flops are unknown. */
static void fill_router_counts(moe_merge_t *m, bool routed)
{
    moe_report_t *r = &m->rep;
    for (int i = 0; i < m->L * m->E; i++) {
        moe_rep_expert_t *x = &r->experts[i];
        if (x->rank >= 0 && !expert_hosts_present(m, i / m->E, i % m->E)) {
            x->tokens = routed ? r->layers[i / m->E].kept[i % m->E] : 0;
            x->router_count = routed;
            x->tokens_unknown = !routed;
            x->calls = 0; /* the present copies' part, if any: replicas[] keeps it */
            x->flops = 0;
            moe_hist_reset(&x->hist);
        }
    }
}

/* Whether every host of layer l's experts and of their copies sent its records, so the
 * experts' rows (experts[].tokens) are whole. */
static bool layer_hosts_present(const moe_merge_t *m, int l)
{
    for (int e = 0; e < m->E; e++) {
        if (!expert_hosts_present(m, l, e)) {
            return false;
        }
    }
    return true;
}

/* Layer l's balance of kept. Only the routing ranks count demand, kept and dropped (all of
 * them: `routed`); without those counts the experts' hosts still know the rows they
 * computed, which are the choices kept: kept and the balance come from those (all 0 would
 * read "perfectly even"), and with a host missing too they are unknown (NAN). */
static void layer_balance(moe_merge_t *m, int l, bool routed)
{
    moe_report_t *r = &m->rep;
    moe_rep_layer_t *y = &r->layers[l];
    y->demand_unknown = !routed;
    y->kept_unknown = !routed && !layer_hosts_present(m, l);
    if (!routed && !y->kept_unknown) {
        for (int e = 0; e < m->E; e++) {
            y->kept[e] = r->experts[l * m->E + e].tokens;
        }
    }
    moe_balance_t b = {NAN, NAN, NAN, NAN};
    uint64_t kept = 0;
    for (int e = 0; !y->kept_unknown && e < m->E; e++) {
        kept += y->kept[e];
    }
    if (kept > 0) { /* none kept (no step recorded): no balance to speak of, unknown */
        moe_balance_compute(y->kept, m->E, &b);
    }
    y->gini = b.gini;
    y->cv = b.cv;
    y->entropy_norm = b.entropy_norm;
    y->max_mean = b.max_mean;
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
    bool routed = routing_counts_whole(m);
    if (!routed) {
        drop_routing_part(m);
    }
    fill_router_counts(m, routed);
    r->all_warmup = r->recorded_steps == 0 && r->steps_run > 0 &&
                    r->steps_run <= m->cfg->prof_warmup_steps;
    for (int l = 0; l < m->L; l++) {
        layer_balance(m, l, routed);
    }
    if (r->run_dir[0] == '\0' || r->dir_error[0] != '\0') {
        make_run_dir(m); /* one more try: the folder may be writable by now */
    }
    close_metrics_stream(m);
    return r;
}
