/* Part live (profiler/src/live/): the live path: every rank's small cumulative counters
 * sent to rank 0 at step boundaries, rank 0's HTTP endpoint (libmicrohttpd) serving
 * /metrics, /status, the live page and on-demand windows, and `moed top`. May include:
 * record report (and the public headers in moe/). One file of each part's folder opens
 * with such a comment; tests/lint/parts.sh holds every part to its list. */
/* The live path on every rank: counters, messages, and on rank 0 their publication and
 * the on-demand windows (see live_int.h for the message).
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

enum { TAG_DATA = 4501, TAG_CTRL = 4502 };
#define LIVE_CTRL_LEN 4          /* window id, open boundary, close boundary, unused */
#define LIVE_POLL_NS 50000000LL  /* MPI is polled (control, arrivals) at most this often */
#define LIVE_WINDOW_GRACE_NS 10000000000LL /* wait for late marks after the close */
#define LIVE_FINISH_NS 30000000000LL       /* at a normal end, for the last counters */

struct moe_live {
    MPI_Comm comm;
    int rank, world;
    bool routes;
    live_dims_t dims;
    live_layout_t lay;
    int nl;
    const int32_t *local_ids;
    int64_t *cur;                /* [lay.total] this rank's counters, message layout */
    int64_t *sendbuf;
    MPI_Request sreq;
    int64_t last_send_ns, last_poll_ns;
    int64_t *markbuf[2];
    MPI_Request mreq[2];
    int64_t mark_window, mark_step[2];
    bool mark_due[2];
    int64_t step, steps_done;
    /* rank 0 */
    live_view_t *view;
    live_http_t *http;
    int64_t **inbox;             /* [W] latest message not yet published */
    size_t *inbox_len;
    bool *dirty, *fin;
    int64_t *recvbuf;
    size_t max_len;
    int64_t **wmark[2];          /* [W] the open window's marks */
    size_t *wlen;
    bool *whave[2];
    int64_t win_id, win_close_step, win_close_ns, win_open_ns;
    bool win_open;
    pthread_t writer;
    bool writer_started;
    double step_ms[LIVE_STEP_RING];
    int64_t step_idx[LIVE_STEP_RING];
    int step_n, step_head;
    int64_t rate_t[LIVE_RATE_RING], rate_s[LIVE_RATE_RING];
    int rate_n, rate_head;
    int64_t last_rate_ns;
};

const double live_bucket_s[LIVE_NB - 1] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                           2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25,
                                           0.5, 1, 2.5, 5, 10};

int live_bucket_of_ns(int64_t ns)
{
    static const int64_t bound_ns[LIVE_NB - 1] = {
        10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
        25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000LL,
        5000000000LL, 10000000000LL};
    int b = 0;
    while (b < LIVE_NB - 1 && ns > bound_ns[b]) {
        b++;
    }
    return b;
}

void live_layout_of(const live_dims_t *d, int rank, bool routes, live_layout_t *out)
{
    size_t le = (size_t)d->L * (size_t)d->E, o = LIVE_HDR;
    out->step_hist = o;
    o += LIVE_NB + 1;
    out->bytes = o;
    o += (size_t)d->W;
    out->routed = o;
    o += routes ? le : 0;
    out->dropped = o;
    o += routes ? le : 0;
    out->groups = d->per_expert ? d->L * d->nlocal[rank] : d->L;
    out->ehist = o;
    o += (size_t)out->groups * (LIVE_NB + 1);
    out->total = o;
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
    if (n < LIVE_HDR || m[LIVE_HDR_MAGIC] != (LIVE_MAGIC ^ LIVE_VERSION) ||
        m[LIVE_HDR_RANK] != src) {
        return false;
    }
    live_layout_t lay;
    live_layout_of(&lv->dims, src, m[LIVE_HDR_ROUTES] != 0, &lay);
    return lay.total == n;
}

static void store_message(moe_live_t *lv, int src, const int64_t *m, size_t n)
{
    int64_t kind = m[LIVE_HDR_KIND];
    if (kind == LIVE_KIND_MARK) {
        int mk = m[LIVE_HDR_MARK] != 0;
        if (lv->win_open && m[LIVE_HDR_WINDOW] == lv->win_id && !lv->whave[mk][src]) {
            memcpy(lv->wmark[mk][src], m, n * sizeof(int64_t));
            lv->wlen[src] = n;
            lv->whave[mk][src] = true;
        }
        return;
    }
    memcpy(lv->inbox[src], m, n * sizeof(int64_t));
    lv->inbox_len[src] = n;
    lv->dirty[src] = true;
    if (kind == LIVE_KIND_FIN) {
        lv->fin[src] = true;
    }
}

/* Everything that has arrived, without waiting (at most a few messages per rank). */
static void drain(moe_live_t *lv)
{
    for (int i = 0; i < 4 * lv->world; i++) {
        int flag = 0, n = 0;
        MPI_Status stt;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_DATA, lv->comm, &flag, &stt) != MPI_SUCCESS ||
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
        if (buf == NULL || MPI_Recv(buf, n, MPI_INT64_T, stt.MPI_SOURCE, TAG_DATA, lv->comm,
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
    moe_live_window_write(lv->view, lv->wmark[0], lv->wmark[1], lv->wlen,
                          lv->win_close_ns - lv->win_open_ns);
    return NULL;
}

static void fill_header(moe_live_t *lv, int64_t *m, int kind, int64_t window, int mark);

/* Steps between now and a window's open boundary: every rank polls for control at most
 * every LIVE_POLL_NS, so the lead covers three polls at the recent step time. */
static int64_t open_lead(const moe_live_t *lv)
{
    double ms = 0;
    int n = lv->step_n < 16 ? lv->step_n : 16;
    for (int i = 1; i <= n; i++) {
        ms += lv->step_ms[(lv->step_head + LIVE_STEP_RING - i) % LIVE_STEP_RING];
    }
    ms = n > 0 ? ms / n : 1.0;
    double lead = 3.0 * (double)LIVE_POLL_NS * 1e-6 / (ms > 1e-3 ? ms : 1e-3) + 2.0;
    return lead < 100000 ? (int64_t)lead : 100000;
}

/* Tell every other rank the boundaries of a new window (tiny eager messages, freed). */
static void window_open(moe_live_t *lv, live_window_t *w)
{
    lv->win_id = w->id;
    w->open_step = lv->step + open_lead(lv);
    w->close_step = w->open_step + w->steps;
    lv->win_close_step = w->close_step;
    lv->win_open_ns = 0;
    lv->win_close_ns = 0;
    for (int m = 0; m < 2; m++) {
        memset(lv->whave[m], 0, (size_t)lv->world * sizeof(bool));
    }
    lv->win_open = true;
    w->state = LIVE_WIN_OPEN;
    static int64_t ctrl[LIVE_CTRL_LEN]; /* stays valid for the freed requests */
    ctrl[0] = w->id;
    ctrl[1] = w->open_step;
    ctrl[2] = w->close_step;
    for (int r = 1; r < lv->world; r++) {
        MPI_Request req;
        if (MPI_Isend(ctrl, LIVE_CTRL_LEN, MPI_INT64_T, r, TAG_CTRL, lv->comm, &req) ==
            MPI_SUCCESS) {
            (void)MOE_MPI(MPI_Request_free(&req), NULL); /* eager: completes alone */
        }
    }
    lv->mark_window = w->id;
    lv->mark_step[0] = w->open_step;
    lv->mark_step[1] = w->close_step;
    lv->mark_due[0] = lv->mark_due[1] = true;
}

/* The open window is complete when every rank's two marks are in, or after the grace. */
static void window_check(moe_live_t *lv, live_window_t *w)
{
    int missing = 0;
    for (int r = 0; r < lv->world; r++) {
        missing += !lv->whave[0][r] || !lv->whave[1][r];
    }
    bool late = lv->win_close_ns > 0 && moe_now_ns() - lv->win_close_ns > LIVE_WINDOW_GRACE_NS;
    if (missing > 0 && !late) {
        return;
    }
    lv->win_open = false;
    w->state = LIVE_WIN_WRITING;
    if (lv->writer_started) {
        pthread_join(lv->writer, NULL);
        lv->writer_started = false;
    }
    lv->writer_started = pthread_create(&lv->writer, NULL, writer_main, lv) == 0;
    if (!lv->writer_started) {
        snprintf(lv->view->last_error, sizeof(lv->view->last_error),
                 "cannot start the window writer");
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
    } else if (v->win.state == LIVE_WIN_OPEN) {
        window_check(lv, &v->win);
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

static void fill_header(moe_live_t *lv, int64_t *m, int kind, int64_t window, int mark)
{
    memcpy(m, lv->cur, lv->lay.total * sizeof(int64_t));
    m[LIVE_HDR_MAGIC] = LIVE_MAGIC ^ LIVE_VERSION;
    m[LIVE_HDR_RANK] = lv->rank;
    m[LIVE_HDR_STEP] = lv->step;
    m[LIVE_HDR_KIND] = kind;
    m[LIVE_HDR_WINDOW] = window;
    m[LIVE_HDR_MARK] = mark;
    m[LIVE_HDR_RSS] = (int64_t)moe_read_rss_bytes();
    m[LIVE_HDR_ROUTES] = lv->routes;
    m[LIVE_HDR_STEPS] = lv->steps_done;
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
static bool emit(moe_live_t *lv, int64_t *buf, MPI_Request *req, int kind, int64_t window,
                 int mark)
{
    if (!request_done(req)) {
        return false;
    }
    fill_header(lv, buf, kind, window, mark);
    if (lv->rank == 0) {
        store_message(lv, 0, buf, lv->lay.total);
        return true;
    }
    return MPI_Isend(buf, (int)lv->lay.total, MPI_INT64_T, 0, TAG_DATA, lv->comm, req) ==
           MPI_SUCCESS;
}

/* A window's boundaries from rank 0, if one came; true when one was taken. */
static bool check_control(moe_live_t *lv)
{
    int flag = 0;
    if (MPI_Iprobe(0, TAG_CTRL, lv->comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) {
        return false;
    }
    int64_t ctrl[LIVE_CTRL_LEN];
    if (MPI_Recv(ctrl, LIVE_CTRL_LEN, MPI_INT64_T, 0, TAG_CTRL, lv->comm, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS) {
        return false;
    }
    lv->mark_window = ctrl[0];
    lv->mark_step[0] = ctrl[1];
    lv->mark_step[1] = ctrl[2];
    lv->mark_due[0] = lv->mark_due[1] = true;
    return true;
}

void moe_live_layer(moe_live_t *lv, const moe_prof_layer_sample_t *s)
{
    const live_dims_t *d = &lv->dims;
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
        int64_t *h = lv->cur + lv->lay.ehist + (size_t)g * (LIVE_NB + 1);
        h[live_bucket_of_ns(s->expert_ns[le])]++;
        h[LIVE_NB] += s->expert_ns[le];
    }
}

/* Per step: counters only, and a clock compare; MPI at most every LIVE_POLL_NS (a poll
 * can cost microseconds, and more when ranks share cores and Open MPI yields). */
void moe_live_step_end(moe_live_t *lv, int64_t step, int64_t begin_ns, int64_t end_ns)
{
    int64_t *h = lv->cur + lv->lay.step_hist;
    h[live_bucket_of_ns(end_ns - begin_ns)]++;
    h[LIVE_NB] += end_ns - begin_ns;
    lv->step = step;
    lv->steps_done++;
    bool poll = end_ns - lv->last_poll_ns >= LIVE_POLL_NS;
    if (poll) {
        lv->last_poll_ns = end_ns;
        if (lv->rank != 0) {
            check_control(lv);
        }
    }
    for (int m = 0; m < 2; m++) {
        if (lv->mark_due[m] && step >= lv->mark_step[m] &&
            emit(lv, lv->markbuf[m], &lv->mreq[m], LIVE_KIND_MARK, lv->mark_window, m)) {
            lv->mark_due[m] = false;
        }
    }
    if (end_ns - lv->last_send_ns >= LIVE_SEND_MS * 1000000LL &&
        emit(lv, lv->sendbuf, &lv->sreq, LIVE_KIND_PERIODIC, 0, 0)) {
        lv->last_send_ns = end_ns;
    }
    if (lv->rank != 0) {
        return;
    }
    rings_add_step(lv, step, end_ns - begin_ns);
    if (lv->win_open && lv->win_open_ns == 0 && step >= lv->mark_step[0]) {
        lv->win_open_ns = end_ns;
    }
    if (lv->win_open && lv->win_close_ns == 0 && step >= lv->win_close_step) {
        lv->win_close_ns = end_ns;
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
    lv->wlen = calloc((size_t)W, sizeof(size_t));
    lv->dirty = calloc((size_t)W, sizeof(bool));
    lv->fin = calloc((size_t)W, sizeof(bool));
    for (int m = 0; m < 2; m++) {
        lv->wmark[m] = calloc((size_t)W, sizeof(int64_t *));
        lv->whave[m] = calloc((size_t)W, sizeof(bool));
        if (lv->wmark[m] == NULL || lv->whave[m] == NULL) {
            return -1;
        }
    }
    if (!lv->view || !lv->inbox || !lv->inbox_len || !lv->wlen || !lv->dirty || !lv->fin) {
        return -1;
    }
    lv->max_len = LIVE_HDR;
    for (int r = 0; r < W; r++) {
        live_layout_t lay;
        live_layout_of(&lv->dims, r, true, &lay);
        lv->max_len = lay.total > lv->max_len ? lay.total : lv->max_len;
        lv->inbox[r] = calloc(lay.total, sizeof(int64_t));
        lv->wmark[0][r] = calloc(lay.total, sizeof(int64_t));
        lv->wmark[1][r] = calloc(lay.total, sizeof(int64_t));
        if (!lv->inbox[r] || !lv->wmark[0][r] || !lv->wmark[1][r]) {
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
                             int64_t row_bytes, moe_live_t **out, moe_error_t *err)
{
    moe_live_t *lv = calloc(1, sizeof(*lv));
    moe_status_t st = MOE_OK;
    if (lv == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate");
    }
    lv->comm = MPI_COMM_NULL;
    lv->sreq = lv->mreq[0] = lv->mreq[1] = MPI_REQUEST_NULL;
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
        if (dims_init(&lv->dims, cfg, lv->world, row_bytes) != 0) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate its tables");
        }
    }
    if (st == MOE_OK) {
        live_layout_of(&lv->dims, lv->rank, routes, &lv->lay);
        lv->nl = lv->dims.nlocal[lv->rank];
        lv->local_ids = lv->dims.local_ids + (size_t)lv->rank * lv->dims.E;
        lv->cur = calloc(lv->lay.total, sizeof(int64_t));
        lv->sendbuf = calloc(lv->lay.total, sizeof(int64_t));
        lv->markbuf[0] = calloc(lv->lay.total, sizeof(int64_t));
        lv->markbuf[1] = calloc(lv->lay.total, sizeof(int64_t));
        if (!lv->cur || !lv->sendbuf || !lv->markbuf[0] || !lv->markbuf[1] ||
            (lv->rank == 0 && alloc_rank0(lv) != 0)) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate its buffers");
        }
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
        emit(lv, lv->sendbuf, &lv->sreq, LIVE_KIND_FIN, 0, 0);
        for (int m = 0; m < 2; m++) {
            wait_or_cancel(&lv->mreq[m], deadline);
        }
        wait_or_cancel(&lv->sreq, deadline);
        return;
    }
    emit(lv, lv->sendbuf, &lv->sreq, LIVE_KIND_FIN, 0, 0);
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
    for (int m = 0; m < 2; m++) {
        for (int r = 0; lv->wmark[m] != NULL && r < lv->world; r++) {
            free(lv->wmark[m][r]);
        }
        free(lv->wmark[m]);
        free(lv->whave[m]);
        free(lv->markbuf[m]);
    }
    free(lv->inbox);
    free(lv->inbox_len);
    free(lv->wlen);
    free(lv->dirty);
    free(lv->fin);
    free(lv->recvbuf);
    free(lv->cur);
    free(lv->sendbuf);
    free(lv->dims.local_ids);
    /* MPI_Comm_free is left to MPI_Finalize: after a stop a peer may never match it */
    free(lv);
}
