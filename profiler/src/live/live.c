/* Part live (profiler/src/live/): the live path: every rank's small cumulative counters
 * sent to rank 0 at step boundaries, rank 0's HTTP endpoint (libmicrohttpd) serving
 * /metrics, /status, the live page and on-demand windows, and `moed top`. May include:
 * record report (and the public headers in moe/). One file of each part's folder opens
 * with such a comment; tests/lint/parts.sh holds every part to its list. */
/* The live path on every rank: counters, messages, and on rank 0 their publication and
 * the on-demand windows (moe/live_msg.h for the messages, live_int.h for rank 0's view).
 *
 * An on-demand window is a profiling window of the normal recorder (record/, a second
 * instance on its own communicator, moe_prof_od_*): rank 0 picks its first step far enough
 * ahead that every rank has polled for the control message by then, every rank arms its
 * recorder with those steps, the chosen ranks record them and send them to rank 0 in parts
 * (gather path, non-blocking), and rank 0 takes what arrived at each step boundary. Once
 * every chosen rank's last part is in, a writer thread merges them and writes the full
 * report folder, so the steps never wait for the disk or for the report's formatting.
 *
 * Only the main thread calls MPI (MPI_THREAD_FUNNELED). The HTTP threads read rank 0's
 * view under its mutex; the main thread only try-locks it, so a slow client costs a
 * step nothing: what could not be published waits for the next boundary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "live/live_int.h"
#include "moe/clock.h"
#include "moe/log.h"
#include "moe/mpi_check.h"
#include "moe/prof.h"
#include "record/prof_int.h"

#define LIVE_POLL_NS 50000000LL  /* MPI is polled (control, arrivals) at most this often */
#define LIVE_FINISH_NS 30000000000LL       /* at a normal end, for the last counters */
#define LIVE_OD_LIST_STEPS 256   /* per-step lists a window's recorder reserves */

struct moe_live {
    MPI_Comm comm;
    int rank, world;
    bool routes;
    live_dims_t dims;
    moe_live_layout_t lay;
    int nl;
    const int32_t *local_ids;
    int64_t *cur;                /* [lay.total] this rank's counters, message layout */
    int64_t *sendbuf;
    MPI_Request sreq;
    int64_t last_send_ns, last_poll_ns;
    moe_prof_t *od;              /* the on-demand windows' recorder */
    int64_t *ctrl;               /* [moe_live_ctrl_len(W)] */
    bool *od_ranks;              /* [W] scratch: a window's ranks */
    int64_t step, steps_done;
    /* rank 0 */
    live_view_t *view;
    live_http_t *http;
    int64_t **inbox;             /* [W] latest message not yet published */
    size_t *inbox_len;
    bool *dirty, *fin;
    int64_t *recvbuf;
    size_t max_len;
    MPI_Request *creq;           /* [W] control sends to each rank */
    moe_od_set_t od_set;         /* a window's records, while the writer writes them */
    pthread_t writer;
    bool writer_started;
    double step_ms[LIVE_STEP_RING];
    int64_t step_idx[LIVE_STEP_RING];
    int step_n, step_head;
    int64_t rate_t[LIVE_RATE_RING], rate_s[LIVE_RATE_RING];
    int rate_n, rate_head;
    int64_t last_rate_ns;
};

void live_layout_of(const live_dims_t *d, int rank, bool routes, moe_live_layout_t *out)
{
    int groups = d->per_expert ? d->L * d->nlocal[rank] : d->L;
    moe_live_layout_of(d->L, d->E, d->W, groups, routes, out);
}

static int dims_init(live_dims_t *d, const moe_config_t *cfg, int world, int64_t row_bytes)
{
    memset(d, 0, sizeof(*d));
    d->L = (int)cfg->num_layers;
    d->E = (int)cfg->num_experts;
    d->W = world;
    d->row_bytes = row_bytes;
    d->tokens_per_step = cfg->tokens_per_step;
    d->per_expert = cfg->prof_expert_hist == MOE_EXPERT_HIST_EXPERT ||
                    (cfg->prof_expert_hist == MOE_EXPERT_HIST_AUTO &&
                     (int64_t)d->L * d->E <= 1024);
    d->local_ids = calloc((size_t)world * (size_t)d->E, sizeof(int32_t));
    if (d->local_ids == NULL) {
        return -1;
    }
    for (int r = 0; r < world; r++) {
        d->nlocal[r] = moe_cfg_experts_of_rank(cfg, r, d->local_ids + (size_t)r * d->E);
    }
    for (int e = 0; e < d->E; e++) {
        d->owner[e] = cfg->expert_owner[e];
    }
    return 0;
}

static void rings_add_step(moe_live_t *lv, int64_t step, int64_t ns)
{
    lv->step_ms[lv->step_head] = (double)ns * 1e-6;
    lv->step_idx[lv->step_head] = step;
    lv->step_head = (lv->step_head + 1) % LIVE_STEP_RING;
    lv->step_n += lv->step_n < LIVE_STEP_RING;
}

static void rings_add_rate(moe_live_t *lv, int64_t now)
{
    if (now - lv->last_rate_ns >= 100000000LL || lv->rate_n == 0) {
        lv->last_rate_ns = now;
        lv->rate_t[lv->rate_head] = now;
        lv->rate_s[lv->rate_head] = lv->steps_done;
        lv->rate_head = (lv->rate_head + 1) % LIVE_RATE_RING;
        lv->rate_n += lv->rate_n < LIVE_RATE_RING;
    }
}

/* ---- rank 0: receive, publish, windows ---------------------------------------------- */

static bool accept_message(moe_live_t *lv, int src, const int64_t *m, size_t n)
{
    if (n < MOE_LIVE_HDR || m[MOE_LIVE_HDR_MAGIC] != (MOE_LIVE_MAGIC ^ MOE_LIVE_VERSION) ||
        m[MOE_LIVE_HDR_RANK] != src) {
        return false;
    }
    moe_live_layout_t lay;
    live_layout_of(&lv->dims, src, m[MOE_LIVE_HDR_ROUTES] != 0, &lay);
    return lay.total == n;
}

static void store_message(moe_live_t *lv, int src, const int64_t *m, size_t n)
{
    int64_t kind = m[MOE_LIVE_HDR_KIND];
    memcpy(lv->inbox[src], m, n * sizeof(int64_t));
    lv->inbox_len[src] = n;
    lv->dirty[src] = true;
    if (kind == MOE_LIVE_KIND_FIN) {
        lv->fin[src] = true;
    }
}

/* Everything that has arrived, without waiting (at most a few messages per rank). */
static void drain(moe_live_t *lv)
{
    for (int i = 0; i < 4 * lv->world; i++) {
        int flag = 0, n = 0;
        MPI_Status stt;
        if (MPI_Iprobe(MPI_ANY_SOURCE, MOE_LIVE_TAG_DATA, lv->comm, &flag, &stt) != MPI_SUCCESS ||
            !flag) {
            return;
        }
        if (MOE_MPI(MPI_Get_count(&stt, MPI_INT64_T, &n), NULL) != MOE_OK) {
            return;
        }
        int64_t *buf = lv->recvbuf, *big = NULL;
        if (n < 0 || (size_t)n > lv->max_len) {
            big = malloc(((size_t)(n > 0 ? n : 1)) * sizeof(int64_t)); /* consumed, dropped */
            buf = big;
        }
        if (buf == NULL || MPI_Recv(buf, n, MPI_INT64_T, stt.MPI_SOURCE, MOE_LIVE_TAG_DATA, lv->comm,
                                    MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            free(big);
            return;
        }
        if (big == NULL && accept_message(lv, stt.MPI_SOURCE, buf, (size_t)n)) {
            store_message(lv, stt.MPI_SOURCE, buf, (size_t)n);
        } else {
            MOE_WARN("live: dropped a malformed message from rank %d (%d values)",
                     stt.MPI_SOURCE, n);
        }
        free(big);
    }
}

static void *writer_main(void *arg)
{
    moe_live_t *lv = arg;
    moe_live_window_write(lv->view, &lv->od_set);
    atomic_fetch_add(&lv->view->threads_cpu_ns, moe_thread_cpu_ns()); /* a thread a window */
    return NULL;
}

/* Steps between now and a window's first step: every rank polls for control at most
 * every LIVE_POLL_NS, so the lead covers three polls at the fastest recent step time (a
 * mean would be inflated by a slow step, and a lead too short leaves a rank out). */
static int64_t open_lead(const moe_live_t *lv)
{
    double ms = 0;
    int n = lv->step_n < 64 ? lv->step_n : 64;
    for (int i = 1; i <= n; i++) {
        double x = lv->step_ms[(lv->step_head + LIVE_STEP_RING - i) % LIVE_STEP_RING];
        ms = i == 1 || x < ms ? x : ms;
    }
    ms = n > 0 ? ms : 1e-3;
    double lead = 3.0 * (double)LIVE_POLL_NS * 1e-6 / (ms > 1e-3 ? ms : 1e-3) + 2.0;
    return lead < 100000 ? (int64_t)lead : 100000;
}

/* Arm this rank's window recorder from a control message. */
static void arm_from_ctrl(moe_live_t *lv, const int64_t *c)
{
    bool all = c[MOE_LIVE_CTRL_ALL] != 0;
    for (int r = 0; r < lv->world; r++) {
        lv->od_ranks[r] = all || ((uint64_t)c[MOE_LIVE_CTRL_MASK + r / 64] >> (r % 64)) & 1u;
    }
    moe_prof_od_arm(lv->od, c[MOE_LIVE_CTRL_FIRST], c[MOE_LIVE_CTRL_LAST],
                    all ? NULL : lv->od_ranks);
}

static void wait_or_cancel(MPI_Request *req, int64_t deadline_ns);

/* Tell every other rank the steps and ranks of a new window (small eager messages). The
 * previous window's sends must be done before their buffer is reused: they always are in
 * practice (a window lasts many polls), and the wait is bounded anyway. */
static void window_open(moe_live_t *lv, live_window_t *w)
{
    w->open_step = lv->step + open_lead(lv);
    w->close_step = w->open_step + w->steps;
    int64_t *c = lv->ctrl;
    size_t n = moe_live_ctrl_len(lv->world);
    for (int r = 1; r < lv->world; r++) {
        wait_or_cancel(&lv->creq[r], moe_now_ns() + 1000000000LL);
    }
    memset(c, 0, n * sizeof(int64_t));
    c[MOE_LIVE_CTRL_WINDOW] = w->id;
    c[MOE_LIVE_CTRL_FIRST] = w->open_step + 1;
    c[MOE_LIVE_CTRL_LAST] = w->close_step;
    c[MOE_LIVE_CTRL_ALL] = w->all_ranks;
    for (int r = 0; !w->all_ranks && r < lv->world; r++) {
        c[MOE_LIVE_CTRL_MASK + r / 64] |= w->ranks[r] ? (int64_t)(1ULL << (r % 64)) : 0;
    }
    for (int r = 1; r < lv->world; r++) {
        if (MOE_MPI(MPI_Isend(c, (int)n, MPI_INT64_T, r, MOE_LIVE_TAG_CTRL, lv->comm,
                              &lv->creq[r]), NULL) != MOE_OK) {
            lv->creq[r] = MPI_REQUEST_NULL;
        }
    }
    arm_from_ctrl(lv, c);
    w->state = LIVE_WIN_OPEN;
}

/* Rank 0: a window's records are all in: the writer thread writes its folder. */
static void window_write(moe_live_t *lv, live_window_t *w)
{
    if (lv->writer_started) {
        pthread_join(lv->writer, NULL); /* the previous window's: done (state was idle) */
        lv->writer_started = false;
    }
    w->state = LIVE_WIN_WRITING;
    lv->writer_started = pthread_create(&lv->writer, NULL, writer_main, lv) == 0;
    if (!lv->writer_started) {
        snprintf(lv->view->last_error, sizeof(lv->view->last_error),
                 "cannot start the window writer");
        moe_od_set_free(&lv->od_set);
        w->state = LIVE_WIN_IDLE;
    }
}

static void publish_locked(moe_live_t *lv)
{
    live_view_t *v = lv->view;
    int64_t now = moe_now_ns();
    for (int r = 0; r < lv->world; r++) {
        if (lv->dirty[r]) {
            memcpy(v->snap[r], lv->inbox[r], lv->inbox_len[r] * sizeof(int64_t));
            v->snap_len[r] = lv->inbox_len[r];
            v->recv_ns[r] = now;
            lv->dirty[r] = false;
        }
    }
    live_view_sample_routed(v, now);
    v->step = lv->step;
    memcpy(v->step_ms, lv->step_ms, sizeof(v->step_ms));
    memcpy(v->step_idx, lv->step_idx, sizeof(v->step_idx));
    v->step_n = lv->step_n;
    v->step_head = lv->step_head;
    memcpy(v->rate_t, lv->rate_t, sizeof(v->rate_t));
    memcpy(v->rate_s, lv->rate_s, sizeof(v->rate_s));
    v->rate_n = lv->rate_n;
    v->rate_head = lv->rate_head;
    if (v->win.state == LIVE_WIN_REQUESTED) {
        window_open(lv, &v->win);
    }
}

static void publish(moe_live_t *lv, bool wait)
{
    int rc = wait ? pthread_mutex_lock(&lv->view->mu) : pthread_mutex_trylock(&lv->view->mu);
    if (rc != 0) {
        return; /* a reader holds it: next boundary */
    }
    publish_locked(lv);
    pthread_mutex_unlock(&lv->view->mu);
}

/* ---- every rank: counters and sends ------------------------------------------------- */

static void fill_header(moe_live_t *lv, int64_t *m, int kind)
{
    memcpy(m, lv->cur, lv->lay.total * sizeof(int64_t));
    m[MOE_LIVE_HDR_MAGIC] = MOE_LIVE_MAGIC ^ MOE_LIVE_VERSION;
    m[MOE_LIVE_HDR_RANK] = lv->rank;
    m[MOE_LIVE_HDR_STEP] = lv->step;
    m[MOE_LIVE_HDR_KIND] = kind;
    m[MOE_LIVE_HDR_RESERVED0] = 0;
    m[MOE_LIVE_HDR_RESERVED1] = 0;
    m[MOE_LIVE_HDR_RSS] = (int64_t)moe_read_rss_bytes();
    m[MOE_LIVE_HDR_ROUTES] = lv->routes;
    m[MOE_LIVE_HDR_STEPS] = lv->steps_done;
}

static bool request_done(MPI_Request *req)
{
    int flag = 1;
    if (*req != MPI_REQUEST_NULL && MPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        return false;
    }
    return flag != 0;
}

/* One message to rank 0; rank 0 files its own directly. False: the buffer is still busy. */
static bool emit(moe_live_t *lv, int64_t *buf, MPI_Request *req, int kind)
{
    if (!request_done(req)) {
        return false;
    }
    fill_header(lv, buf, kind);
    if (lv->rank == 0) {
        store_message(lv, 0, buf, lv->lay.total);
        return true;
    }
    return MPI_Isend(buf, (int)lv->lay.total, MPI_INT64_T, 0, MOE_LIVE_TAG_DATA, lv->comm, req) ==
           MPI_SUCCESS;
}

/* A window's boundaries from rank 0, if one came; true when one was taken. */
static bool check_control(moe_live_t *lv)
{
    int flag = 0;
    if (MPI_Iprobe(0, MOE_LIVE_TAG_CTRL, lv->comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
        !flag) {
        return false;
    }
    if (MPI_Recv(lv->ctrl, (int)moe_live_ctrl_len(lv->world), MPI_INT64_T, 0,
                 MOE_LIVE_TAG_CTRL, lv->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        return false;
    }
    arm_from_ctrl(lv, lv->ctrl);
    return true;
}

void moe_live_step_begin(moe_live_t *lv, int64_t step)
{
    moe_prof_step_begin(lv->od, step);
}

void moe_live_layer(moe_live_t *lv, const moe_prof_layer_sample_t *s)
{
    const live_dims_t *d = &lv->dims;
    moe_prof_layer(lv->od, s);
    int64_t *bytes = lv->cur + lv->lay.bytes;
    for (int r = 0; r < d->W; r++) {
        if (r != lv->rank) {
            bytes[r] += (int64_t)(s->send_rows[r] + s->recv_rows[r]) * d->row_bytes;
        }
    }
    if (lv->routes && s->kept != NULL) {
        int64_t *routed = lv->cur + lv->lay.routed + (size_t)s->layer * d->E;
        int64_t *dropped = lv->cur + lv->lay.dropped + (size_t)s->layer * d->E;
        for (int e = 0; e < d->E; e++) {
            routed[e] += s->kept[e];
            dropped[e] += s->dropped[e];
        }
    }
    for (int le = 0; le < lv->nl; le++) {
        if (s->expert_rows[le] == 0) {
            continue;
        }
        int g = d->per_expert ? s->layer * lv->nl + le : s->layer;
        int64_t *h = lv->cur + lv->lay.ehist + (size_t)g * (MOE_LIVE_NB + 1);
        h[moe_live_bucket_of_ns(s->expert_ns[le])]++;
        h[MOE_LIVE_NB] += s->expert_ns[le];
    }
}

/* Per step: counters only, and a clock compare; MPI at most every LIVE_POLL_NS (a poll
 * can cost microseconds, and more when ranks share cores and Open MPI yields). */
void moe_live_step_end(moe_live_t *lv, int64_t step, int64_t begin_ns, int64_t end_ns)
{
    int64_t *h = lv->cur + lv->lay.step_hist;
    h[moe_live_bucket_of_ns(end_ns - begin_ns)]++;
    h[MOE_LIVE_NB] += end_ns - begin_ns;
    lv->step = step;
    lv->steps_done++;
    bool poll = end_ns - lv->last_poll_ns >= LIVE_POLL_NS;
    if (poll) {
        lv->last_poll_ns = end_ns;
        if (lv->rank != 0) {
            check_control(lv);
        }
    }
    bool done = moe_prof_od_step_end(lv->od, step, begin_ns, end_ns, &lv->od_set);
    if (end_ns - lv->last_send_ns >= LIVE_SEND_MS * 1000000LL &&
        emit(lv, lv->sendbuf, &lv->sreq, MOE_LIVE_KIND_PERIODIC)) {
        lv->last_send_ns = end_ns;
    }
    if (lv->rank != 0) {
        return;
    }
    rings_add_step(lv, step, end_ns - begin_ns);
    if (done) {
        pthread_mutex_lock(&lv->view->mu); /* rare: once per window */
        window_write(lv, &lv->view->win);
        pthread_mutex_unlock(&lv->view->mu);
    }
    if (poll) {
        rings_add_rate(lv, end_ns);
        drain(lv);
        publish(lv, false);
    }
}

/* ---- create, finish, destroy -------------------------------------------------------- */

static int alloc_rank0(moe_live_t *lv)
{
    int W = lv->world;
    lv->view = calloc(1, sizeof(*lv->view));
    lv->inbox = calloc((size_t)W, sizeof(int64_t *));
    lv->inbox_len = calloc((size_t)W, sizeof(size_t));
    lv->dirty = calloc((size_t)W, sizeof(bool));
    lv->fin = calloc((size_t)W, sizeof(bool));
    lv->creq = calloc((size_t)W, sizeof(MPI_Request));
    if (!lv->view || !lv->inbox || !lv->inbox_len || !lv->dirty || !lv->fin || !lv->creq) {
        return -1;
    }
    for (int r = 0; r < W; r++) {
        lv->creq[r] = MPI_REQUEST_NULL;
    }
    lv->max_len = MOE_LIVE_HDR;
    for (int r = 0; r < W; r++) {
        moe_live_layout_t lay;
        live_layout_of(&lv->dims, r, true, &lay);
        lv->max_len = lay.total > lv->max_len ? lay.total : lv->max_len;
        lv->inbox[r] = calloc(lay.total, sizeof(int64_t));
        if (!lv->inbox[r]) {
            return -1;
        }
    }
    lv->recvbuf = calloc(lv->max_len, sizeof(int64_t));
    if (lv->recvbuf == NULL || live_view_init(lv->view, &lv->dims) != 0) {
        return -1;
    }
    return 0;
}

static moe_status_t start_http(moe_live_t *lv, const moe_config_t *cfg, moe_error_t *err)
{
    live_view_t *v = lv->view;
    const char *env = getenv("MOED_CONTROL_TOKEN");
    const char *tok = env != NULL && env[0] != '\0' ? env : cfg->prof_control_token;
    snprintf(v->token, sizeof(v->token), "%s", strcmp(tok, "none") == 0 ? "" : tok);
    snprintf(v->output_dir, sizeof(v->output_dir), "%s", cfg->prof_output_dir);
    char why[256];
    if (live_http_start(v, cfg->prof_listen, &lv->http, why, sizeof(why)) != 0) {
        return moe_error_set(err, MOE_ERR_CONFIG, "profiler.listen: %s: %s", cfg->prof_listen,
                             why);
    }
    MOE_INFO("live: %s (GET /metrics, /status, /; POST /profile%s)", v->url,
             v->token[0] != '\0' ? "" : " off: no control token");
    fflush(stdout);
    return MOE_OK;
}

moe_status_t moe_live_create(const moe_config_t *cfg, MPI_Comm comm, bool routes,
                             const moe_prof_static_t *info, moe_live_t **out,
                             moe_error_t *err)
{
    moe_live_t *lv = calloc(1, sizeof(*lv));
    moe_status_t st = MOE_OK;
    if (lv == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate");
    }
    lv->comm = MPI_COMM_NULL;
    lv->sreq = MPI_REQUEST_NULL;
    lv->step = -1;
    st = MOE_MPI(MPI_Comm_dup(comm, &lv->comm), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_rank(comm, &lv->rank), err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &lv->world), err);
    }
    if (st == MOE_OK) {
        lv->routes = routes;
        if (dims_init(&lv->dims, cfg, lv->world, info->row_bytes) != 0) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate its tables");
        }
    }
    if (st == MOE_OK) {
        live_layout_of(&lv->dims, lv->rank, routes, &lv->lay);
        lv->nl = lv->dims.nlocal[lv->rank];
        lv->local_ids = lv->dims.local_ids + (size_t)lv->rank * lv->dims.E;
        lv->cur = calloc(lv->lay.total, sizeof(int64_t));
        lv->sendbuf = calloc(lv->lay.total, sizeof(int64_t));
        lv->ctrl = calloc(moe_live_ctrl_len(lv->world), sizeof(int64_t));
        lv->od_ranks = calloc((size_t)lv->world, sizeof(bool));
        if (!lv->cur || !lv->sendbuf || !lv->ctrl || !lv->od_ranks ||
            (lv->rank == 0 && alloc_rank0(lv) != 0)) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate its buffers");
        }
    }
    if (st == MOE_OK) { /* collective: its own communicator and clock offsets */
        st = moe_prof_od_create(cfg, comm, info, LIVE_OD_LIST_STEPS, &lv->od, err);
    }
    if (st == MOE_OK && lv->rank == 0) {
        st = start_http(lv, cfg, err);
    }
    if (st != MOE_OK) {
        moe_live_destroy(lv);
        return st;
    }
    *out = lv;
    return MOE_OK;
}

/* Bounded: a rank that is gone costs at most the deadline. */
static void wait_or_cancel(MPI_Request *req, int64_t deadline_ns)
{
    while (*req != MPI_REQUEST_NULL && !request_done(req) && moe_now_ns() < deadline_ns) {
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
    if (*req != MPI_REQUEST_NULL && !request_done(req)) {
        /* the peer is gone or stopped listening: logged, and the send given up */
        if (MOE_MPI(MPI_Cancel(req), NULL) == MOE_OK) {
            (void)MOE_MPI(MPI_Request_free(req), NULL);
        }
    }
}

void moe_live_finish(moe_live_t *lv, bool interrupted)
{
    if (lv == NULL) {
        return;
    }
    if (interrupted) {
        /* the process ends with _exit right after the report: no more messages */
        if (lv->rank == 0) {
            publish(lv, true);
        }
        return;
    }
    /* rank 0 may still be writing the profiler's report: wait as long as it may take */
    int64_t deadline = moe_now_ns() + LIVE_FINISH_NS;
    if (lv->rank != 0) {
        while (check_control(lv)) {
            /* a window asked for at the very end: taken, so no message stays unmatched */
        }
        wait_or_cancel(&lv->sreq, deadline);
        emit(lv, lv->sendbuf, &lv->sreq, MOE_LIVE_KIND_FIN);
        wait_or_cancel(&lv->sreq, deadline);
        return;
    }
    emit(lv, lv->sendbuf, &lv->sreq, MOE_LIVE_KIND_FIN);
    for (int r = 1; r < lv->world; r++) {
        wait_or_cancel(&lv->creq[r], deadline);
    }
    for (;;) {
        drain(lv);
        int fins = 0;
        for (int r = 0; r < lv->world; r++) {
            fins += lv->fin[r];
        }
        if (fins == lv->world || moe_now_ns() > deadline) {
            break;
        }
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
    pthread_mutex_lock(&lv->view->mu);
    publish_locked(lv);
    lv->view->finished = true;
    pthread_mutex_unlock(&lv->view->mu);
}

int64_t moe_live_threads_cpu_ns(const moe_live_t *lv)
{
    if (lv == NULL) {
        return 0;
    }
    int64_t ns = moe_prof_threads_cpu_ns(lv->od);
    return ns + (lv->view != NULL ? (int64_t)atomic_load(&lv->view->threads_cpu_ns) : 0);
}

void moe_live_destroy(moe_live_t *lv)
{
    if (lv == NULL) {
        return;
    }
    live_http_stop(lv->http);
    if (lv->writer_started) {
        pthread_join(lv->writer, NULL);
    }
    if (lv->view != NULL) {
        live_view_free(lv->view);
        free(lv->view);
    }
    for (int r = 0; lv->inbox != NULL && r < lv->world; r++) {
        free(lv->inbox[r]);
    }
    moe_od_set_free(&lv->od_set);
    moe_prof_destroy(lv->od);
    free(lv->inbox);
    free(lv->inbox_len);
    free(lv->creq);
    free(lv->ctrl);
    free(lv->od_ranks);
    free(lv->dirty);
    free(lv->fin);
    free(lv->recvbuf);
    free(lv->cur);
    free(lv->sendbuf);
    free(lv->dims.local_ids);
    /* MPI_Comm_free is left to MPI_Finalize: after a stop a peer may never match it */
    free(lv);
}
