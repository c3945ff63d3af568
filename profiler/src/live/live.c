/* Part live (profiler/src/live/): the live path: every rank's small cumulative counters
 * sent to rank 0 at step boundaries, rank 0's HTTP endpoint (libmicrohttpd) serving
 * /metrics, /status, the live page and on-demand windows, and `moed top`. May include:
 * facade record report (and the public headers in moe/; facade.h brings gather/'s
 * moe_od_set_t). One file of each part's folder opens with such a comment;
 * tests/lint/parts.sh holds every part to its list. */
/* The live path on every rank: counters, messages, and on rank 0 their publication and
 * the on-demand windows (moe_proto/live_msg.h for the messages, live_int.h for rank 0's view).
 *
 * An on-demand window is a profiling window of the normal recorder (record/, a second
 * instance on its own communicator, moe_prof_od_* in facade/): rank 0 picks its first
 * step far enough ahead that every rank has polled for the control message by then, every
 * rank arms its recorder with those steps, the chosen ranks record them and send them to
 * rank 0 in parts (gather/, non-blocking), and rank 0 takes what arrived at each step
 * boundary. Once every chosen rank's last part is in, a writer thread merges them and
 * writes the full report folder, so the steps never wait for the disk or for the report's
 * formatting.
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
#include "moe_prof/prof.h"
#include "record/record.h"

#define LIVE_POLL_NS 50000000LL  /* MPI is polled (control, arrivals) at most this often */
#define LIVE_FINISH_NS 30000000000LL       /* at a normal end, for the last counters */
#define LIVE_OD_LIST_STEPS 256   /* per-step lists a window's recorder reserves */

/* Counters keyed by what ran, appended as new keys appear (never removed): one chain per
 * (layer, expert) through next, so a lookup walks the few ranks that ever held it. */
typedef struct live_keys {
    int64_t *key;                /* [cap] */
    int64_t *val;                /* [cap * width] */
    int32_t *next;               /* [cap] the next key of the same (layer, expert), or -1 */
    int32_t *head;               /* [L*E] its first key, or -1 */
    int64_t n, cap;
    int width;
} live_keys_t;

struct moe_live {
    MPI_Comm comm;
    int rank, world;
    bool routes;
    live_dims_t dims;
    /* this rank's cumulative counters */
    int64_t step_hist[MOE_LIVE_NB + 1];
    int64_t *bytes;              /* [W] */
    int64_t *dropped;            /* [L*E] when it routes */
    live_keys_t rk;              /* rows routed to (layer, expert, rank), when it routes */
    live_keys_t hk;              /* busy time per (layer, expert) hosted, when keyed */
    int64_t *lhist;              /* [L * (NB + 1)] busy time per layer, when not keyed */
    bool keys_failed;            /* a key could not be added: warned once */
    int64_t *sendbuf;
    size_t send_cap;
    MPI_Request sreq;
    int64_t last_send_ns, last_poll_ns;
    moe_prof_t *od;              /* the on-demand windows' recorder */
    int64_t *ctrl;               /* [moe_live_ctrl_len(W)] */
    bool *od_ranks;              /* [W] scratch: a window's ranks */
    int64_t step, steps_done;
    int64_t last_end_ns;         /* the last completed step's end */
    int64_t armed_id;            /* the window this rank's recorder was last armed for */
    /* rank 0 */
    live_view_t *view;
    live_http_t *http;
    int64_t **inbox;             /* [W] latest message not yet published */
    size_t *inbox_len, *inbox_cap;
    bool *dirty, *fin;
    int64_t *recvbuf;
    size_t recv_cap, max_len;    /* max_len: the largest message the run's shape allows */
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
    moe_hist_t *lat;             /* [L + 1] its layers' and steps' times (live_view_t.lat) */
};

bool live_layout_check(const live_dims_t *d, const int64_t *m, size_t n, int src,
                       moe_live_layout_t *out)
{
    return moe_live_layout_check(m, n, src, d->L, d->E, d->W, d->per_expert, out);
}

static void dims_init(live_dims_t *d, const moe_config_t *cfg, int world, int64_t row_bytes)
{
    memset(d, 0, sizeof(*d));
    d->L = (int)cfg->num_layers;
    d->E = (int)cfg->num_experts;
    d->W = world;
    d->row_bytes = row_bytes;
    d->tokens_per_step = cfg->tokens_per_step;
    d->per_expert = moe_cfg_expert_hist_per_expert(cfg);
}

static int keys_init(live_keys_t *t, int64_t le, int width)
{
    memset(t, 0, sizeof(*t));
    t->width = width;
    t->head = malloc((size_t)le * sizeof(int32_t));
    if (t->head == NULL) {
        return -1;
    }
    for (int64_t i = 0; i < le; i++) {
        t->head[i] = -1;
    }
    return 0;
}

static void keys_free(live_keys_t *t)
{
    free(t->key);
    free(t->val);
    free(t->next);
    free(t->head);
    memset(t, 0, sizeof(*t));
}

/* The index of key (of (layer, expert) le), added with zero counts if new; -1 when it
 * cannot grow. */
static int64_t keys_find(live_keys_t *t, int64_t le, int64_t key)
{
    for (int32_t i = t->head[le]; i >= 0; i = t->next[i]) {
        if (t->key[i] == key) {
            return i;
        }
    }
    if (t->n == t->cap) {
        int64_t cap = t->cap < 64 ? 64 : t->cap * 2;
        int64_t *k = realloc(t->key, (size_t)cap * sizeof(int64_t));
        t->key = k != NULL ? k : t->key;
        int64_t *v = realloc(t->val, (size_t)cap * (size_t)t->width * sizeof(int64_t));
        t->val = v != NULL ? v : t->val;
        int32_t *nx = realloc(t->next, (size_t)cap * sizeof(int32_t));
        t->next = nx != NULL ? nx : t->next;
        if (k == NULL || v == NULL || nx == NULL || cap > INT32_MAX) {
            return -1;
        }
        t->cap = cap;
    }
    int64_t i = t->n++;
    t->key[i] = key;
    memset(t->val + i * t->width, 0, (size_t)t->width * sizeof(int64_t));
    t->next[i] = t->head[le];
    t->head[le] = (int32_t)i;
    return i;
}

static void keys_lost(moe_live_t *lv)
{
    if (!lv->keys_failed) {
        MOE_WARN("live: no memory for a new (layer, expert) key: its counts are not sent");
        lv->keys_failed = true;
    }
}

/* The keys of the configured placement, so that every series exists from the start. */
static void keys_prefill(moe_live_t *lv, const moe_config_t *cfg)
{
    const live_dims_t *d = &lv->dims;
    for (int l = 0; l < d->L; l++) {
        int n = 0;
        const moe_cfg_replica_t *slots = moe_cfg_layer_entries(cfg, l, &n);
        for (int i = 0; i < n; i++) {
            int64_t le = (int64_t)l * d->E + slots[i].expert;
            if (lv->routes && keys_find(&lv->rk, le, le * d->W + slots[i].rank) < 0) {
                keys_lost(lv);
            }
            if (d->per_expert && slots[i].rank == lv->rank && keys_find(&lv->hk, le, le) < 0) {
                keys_lost(lv);
            }
        }
    }
}

/* This rank's message layout now. */
static void own_layout(const moe_live_t *lv, moe_live_layout_t *lay)
{
    const live_dims_t *d = &lv->dims;
    moe_live_layout_of(d->L, d->E, d->W, lv->routes, lv->rk.n, d->per_expert,
                       d->per_expert ? lv->hk.n : d->L, lay);
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
    moe_live_layout_t lay;
    return live_layout_check(&lv->dims, m, n, src, &lay);
}

static void store_message(moe_live_t *lv, int src, const int64_t *m, size_t n)
{
    int64_t kind = m[MOE_LIVE_HDR_KIND];
    if (n > lv->inbox_cap[src]) {
        int64_t *p = realloc(lv->inbox[src], n * sizeof(int64_t));
        if (p == NULL) {
            MOE_WARN("live: no memory for rank %d's counters (%zu values)", src, n);
            return;
        }
        lv->inbox[src] = p;
        lv->inbox_cap[src] = n;
    }
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
        if (n > 0 && (size_t)n > lv->recv_cap && (size_t)n <= lv->max_len) {
            int64_t *p = realloc(lv->recvbuf, (size_t)n * sizeof(int64_t));
            lv->recvbuf = p != NULL ? p : lv->recvbuf;
            lv->recv_cap = p != NULL ? (size_t)n : lv->recv_cap;
        }
        int64_t *buf = lv->recvbuf, *big = NULL;
        if (n < 0 || (size_t)n > lv->recv_cap) {
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

/* Arm this rank's window recorder from a control message; a second message for the window
 * already armed brings its last step nearer (DELETE /profile). */
static void arm_from_ctrl(moe_live_t *lv, const int64_t *c)
{
    if (c[MOE_LIVE_CTRL_WINDOW] == lv->armed_id) {
        moe_prof_od_cut(lv->od, c[MOE_LIVE_CTRL_LAST]);
        return;
    }
    lv->armed_id = c[MOE_LIVE_CTRL_WINDOW];
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

/* Rank 0, DELETE /profile on an open window: every rank is told a last step far enough
 * ahead that each has polled for it (as at the open), its own recorder first. */
static void window_cut(moe_live_t *lv, live_window_t *w)
{
    int64_t last = lv->step + open_lead(lv);
    last = last > w->open_step + 1 ? last : w->open_step + 1;
    if (last >= w->close_step) {
        w->cut = LIVE_CUT_NONE; /* it ends as soon anyway: whole */
        return;
    }
    int64_t *c = lv->ctrl;
    for (int r = 1; r < lv->world; r++) {
        wait_or_cancel(&lv->creq[r], moe_now_ns() + 1000000000LL);
    }
    c[MOE_LIVE_CTRL_LAST] = last; /* the rest as the open sent it: the same window */
    for (int r = 1; r < lv->world; r++) {
        if (MOE_MPI(MPI_Isend(c, (int)moe_live_ctrl_len(lv->world), MPI_INT64_T, r,
                              MOE_LIVE_TAG_CTRL, lv->comm, &lv->creq[r]), NULL) != MOE_OK) {
            lv->creq[r] = MPI_REQUEST_NULL;
        }
    }
    moe_prof_od_cut(lv->od, last);
    w->close_step = last;
    w->cut = LIVE_CUT_SENT;
}

/* What the window's folder says of its length: the steps asked for, and why it is short. */
static void window_label(moe_live_t *lv, const live_window_t *w, const char *why)
{
    moe_od_set_t *set = &lv->od_set;
    set->planned = w->steps;
    int64_t got = set->last - set->first + 1;
    if (why != NULL && got < w->steps) {
        snprintf(set->short_why, sizeof(set->short_why),
                 "steps %lld..%lld of the window's %lld (%s at step %lld)",
                 (long long)set->last + 1, (long long)(set->first + w->steps - 1),
                 (long long)w->steps, why, (long long)set->last);
    }
}

/* Rank 0: a window's records are all in: the writer thread writes its folder. */
static void window_write(moe_live_t *lv, live_window_t *w)
{
    if (lv->writer_started) {
        pthread_join(lv->writer, NULL); /* the previous window's: done (state was idle) */
        lv->writer_started = false;
    }
    window_label(lv, w, w->cut == LIVE_CUT_SENT ? "closed early by DELETE /profile" : NULL);
    w->state = LIVE_WIN_WRITING;
    lv->writer_started = pthread_create(&lv->writer, NULL, writer_main, lv) == 0;
    if (!lv->writer_started) {
        snprintf(lv->view->last_error, sizeof(lv->view->last_error),
                 "cannot start the window writer");
        moe_prof_od_free(&lv->od_set);
        w->state = LIVE_WIN_IDLE;
    }
}

static void publish_locked(moe_live_t *lv)
{
    live_view_t *v = lv->view;
    int64_t now = moe_now_ns();
    for (int r = 0; r < lv->world; r++) {
        if (lv->dirty[r] && live_view_store(v, r, lv->inbox[r], lv->inbox_len[r]) == 0) {
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
    memcpy(v->lat, lv->lat, ((size_t)lv->dims.L + 1) * sizeof(moe_hist_t));
    if (v->finished) {
        /* the run is ending: no rank polls for a window any more (one asked for now is
         * dropped by window_end, an open one ends with the run) */
    } else if (v->win.state == LIVE_WIN_REQUESTED) {
        window_open(lv, &v->win);
    } else if (v->win.state == LIVE_WIN_OPEN && v->win.cut == LIVE_CUT_ASKED) {
        window_cut(lv, &v->win);
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

/* This rank's counters as one message into lv->sendbuf (grown while no send uses it);
 * false when it cannot grow. */
static bool fill_message(moe_live_t *lv, int kind, moe_live_layout_t *lay)
{
    const live_dims_t *d = &lv->dims;
    own_layout(lv, lay);
    if (lay->total > lv->send_cap) {
        int64_t *p = realloc(lv->sendbuf, lay->total * sizeof(int64_t));
        if (p == NULL) {
            return false;
        }
        lv->sendbuf = p;
        lv->send_cap = lay->total;
    }
    int64_t *m = lv->sendbuf;
    m[MOE_LIVE_HDR_MAGIC] = MOE_LIVE_MAGIC ^ MOE_LIVE_VERSION;
    m[MOE_LIVE_HDR_RANK] = lv->rank;
    m[MOE_LIVE_HDR_STEP] = lv->step;
    m[MOE_LIVE_HDR_KIND] = kind;
    m[MOE_LIVE_HDR_RKEYS] = lay->rkeys;
    m[MOE_LIVE_HDR_GROUPS] = lay->groups;
    m[MOE_LIVE_HDR_RSS] = (int64_t)moe_read_rss_bytes();
    m[MOE_LIVE_HDR_ROUTES] = lv->routes;
    m[MOE_LIVE_HDR_STEPS] = lv->steps_done;
    size_t le = (size_t)d->L * (size_t)d->E, hb = sizeof(int64_t) * (MOE_LIVE_NB + 1);
    memcpy(m + lay->step_hist, lv->step_hist, sizeof(lv->step_hist));
    memcpy(m + lay->bytes, lv->bytes, (size_t)d->W * sizeof(int64_t));
    if (lv->routes) {
        memcpy(m + lay->dropped, lv->dropped, le * sizeof(int64_t));
    }
    if (lay->rkeys > 0) { /* a table with no key has no arrays yet */
        memcpy(m + lay->rkey, lv->rk.key, (size_t)lay->rkeys * sizeof(int64_t));
        memcpy(m + lay->rrows, lv->rk.val, (size_t)lay->rkeys * sizeof(int64_t));
    }
    if (d->per_expert && lay->groups > 0) {
        memcpy(m + lay->hkey, lv->hk.key, (size_t)lay->groups * sizeof(int64_t));
        memcpy(m + lay->ehist, lv->hk.val, (size_t)lay->groups * hb);
    } else if (!d->per_expert) {
        memcpy(m + lay->ehist, lv->lhist, (size_t)d->L * hb);
    }
    return true;
}

static bool request_done(MPI_Request *req)
{
    int flag = 1;
    if (*req != MPI_REQUEST_NULL && MPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        return false;
    }
    return flag != 0;
}

/* One message to rank 0; rank 0 files its own directly. False: the buffer is still busy
 * (or could not grow). */
static bool emit(moe_live_t *lv, MPI_Request *req, int kind)
{
    moe_live_layout_t lay;
    if (!request_done(req) || !fill_message(lv, kind, &lay)) {
        return false;
    }
    if (lv->rank == 0) {
        store_message(lv, 0, lv->sendbuf, lay.total);
        return true;
    }
    return MPI_Isend(lv->sendbuf, (int)lay.total, MPI_INT64_T, 0, MOE_LIVE_TAG_DATA, lv->comm,
                     req) == MPI_SUCCESS;
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
    if (lv->lat != NULL) { /* rank 0: the layer's time, gate begin to merge end */
        moe_hist_add(&lv->lat[s->layer],
                     s->phase_end_ns[MOE_PHASE_MERGE] - s->phase_begin_ns[MOE_PHASE_GATE]);
    }
    for (int r = 0; r < d->W; r++) {
        if (r != lv->rank) {
            lv->bytes[r] += (int64_t)(s->send_rows[r] + s->recv_rows[r]) * d->row_bytes;
        }
    }
    int64_t le0 = (int64_t)s->layer * d->E;
    if (lv->routes && s->kept != NULL) {
        for (int e = 0; e < d->E; e++) {
            lv->dropped[le0 + e] += s->dropped[e];
        }
        for (int i = 0; i < s->num_slots && s->slot_rows != NULL; i++) {
            int64_t le = le0 + s->slots[i].expert;
            int64_t k = keys_find(&lv->rk, le, le * d->W + s->slots[i].rank);
            if (k < 0) {
                keys_lost(lv);
                continue;
            }
            lv->rk.val[k] += s->slot_rows[i];
        }
    }
    for (int local = 0; local < s->num_local_experts; local++) {
        if (s->expert_rows[local] == 0) {
            continue;
        }
        int64_t *h = lv->lhist + (size_t)s->layer * (MOE_LIVE_NB + 1);
        if (d->per_expert) {
            int64_t key = le0 + s->local_experts[local], k = keys_find(&lv->hk, key, key);
            if (k < 0) {
                keys_lost(lv);
                continue;
            }
            h = lv->hk.val + (size_t)k * (MOE_LIVE_NB + 1);
        }
        h[moe_live_bucket_of_ns(s->expert_ns[local])]++;
        h[MOE_LIVE_NB] += s->expert_ns[local];
    }
}

/* Per step: counters only, and a clock compare; MPI at most every LIVE_POLL_NS (a poll
 * can cost microseconds, and more when ranks share cores and Open MPI yields). */
void moe_live_step_end(moe_live_t *lv, int64_t step, int64_t begin_ns, int64_t end_ns)
{
    int64_t *h = lv->step_hist;
    h[moe_live_bucket_of_ns(end_ns - begin_ns)]++;
    h[MOE_LIVE_NB] += end_ns - begin_ns;
    lv->step = step;
    lv->last_end_ns = end_ns;
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
        emit(lv, &lv->sreq, MOE_LIVE_KIND_PERIODIC)) {
        lv->last_send_ns = end_ns;
    }
    if (lv->rank != 0) {
        return;
    }
    rings_add_step(lv, step, end_ns - begin_ns);
    moe_hist_add(&lv->lat[lv->dims.L], end_ns - begin_ns); /* the step */
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
    lv->inbox_cap = calloc((size_t)W, sizeof(size_t));
    lv->dirty = calloc((size_t)W, sizeof(bool));
    lv->fin = calloc((size_t)W, sizeof(bool));
    lv->creq = calloc((size_t)W, sizeof(MPI_Request));
    lv->lat = calloc((size_t)lv->dims.L + 1, sizeof(moe_hist_t));
    if (!lv->view || !lv->inbox || !lv->inbox_len || !lv->inbox_cap || !lv->dirty || !lv->fin ||
        !lv->creq || !lv->lat) {
        return -1;
    }
    for (int r = 0; r < W; r++) {
        lv->creq[r] = MPI_REQUEST_NULL;
    }
    const live_dims_t *d = &lv->dims;
    int64_t le = (int64_t)d->L * d->E;
    moe_live_layout_t most;
    moe_live_layout_of(d->L, d->E, W, true, le * W, d->per_expert, d->per_expert ? le : d->L,
                       &most);
    lv->max_len = most.total; /* every key of every (layer, expert, rank): a bound, not a size */
    return live_view_init(lv->view, d);
}

moe_status_t moe_live_control_token(const moe_config_t *cfg, const char **out,
                                    moe_error_t *err)
{
    const char *env = getenv("MOED_CONTROL_TOKEN");
    *out = env != NULL && env[0] != '\0' ? env : cfg->prof_control_token;
    if (env != NULL && *out == env && strlen(env) < MOE_CFG_TOKEN_MIN) { /* the file's: at parse */
        return moe_error_set(err, MOE_ERR_CONFIG, "MOED_CONTROL_TOKEN: %zu byte%s; a control "
                             "token needs at least %d (e.g. `openssl rand -hex 16`)",
                             strlen(env), strlen(env) == 1 ? "" : "s", MOE_CFG_TOKEN_MIN);
    }
    return MOE_OK;
}

static moe_status_t start_http(moe_live_t *lv, const moe_config_t *cfg, moe_error_t *err)
{
    live_view_t *v = lv->view;
    const char *tok = NULL;
    moe_status_t st = moe_live_control_token(cfg, &tok, err);
    if (st != MOE_OK) {
        return st;
    }
    /* the file's token "<redacted>": a report's config.yaml, run again */
    if (tok == cfg->prof_control_token && strcmp(tok, "<redacted>") == 0) {
        MOE_WARN("live: profiler.control_token is \"<redacted>\" (a report's copy): control "
                 "off; set MOED_CONTROL_TOKEN");
        tok = "none";
    }
    snprintf(v->token, sizeof(v->token), "%s", strcmp(tok, "none") == 0 ? "" : tok);
    snprintf(v->output_dir, sizeof(v->output_dir), "%s", cfg->prof_output_dir);
    char why[256];
    if (live_http_start(v, cfg->prof_listen, &lv->http, why, sizeof(why)) != 0) {
        return moe_error_set(err, MOE_ERR_CONFIG, "profiler.listen: %s: %s", cfg->prof_listen,
                             why);
    }
    MOE_INFO("live: %s (GET /metrics, /status, /; POST, DELETE /profile%s)", v->url,
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
    lv->armed_id = -1;
    st = MOE_MPI(MPI_Comm_dup(comm, &lv->comm), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_rank(comm, &lv->rank), err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &lv->world), err);
    }
    if (st == MOE_OK) {
        lv->routes = routes;
        dims_init(&lv->dims, cfg, lv->world, info->row_bytes);
        const live_dims_t *d = &lv->dims;
        int64_t le = (int64_t)d->L * d->E;
        lv->bytes = calloc((size_t)lv->world, sizeof(int64_t));
        lv->dropped = calloc((size_t)le, sizeof(int64_t));
        lv->lhist = calloc((size_t)d->L * (MOE_LIVE_NB + 1), sizeof(int64_t));
        lv->ctrl = calloc(moe_live_ctrl_len(lv->world), sizeof(int64_t));
        lv->od_ranks = calloc((size_t)lv->world, sizeof(bool));
        if (!lv->bytes || !lv->dropped || !lv->lhist || !lv->ctrl || !lv->od_ranks ||
            keys_init(&lv->rk, le, 1) != 0 || keys_init(&lv->hk, le, MOE_LIVE_NB + 1) != 0 ||
            (lv->rank == 0 && alloc_rank0(lv) != 0)) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate its buffers");
        } else {
            keys_prefill(lv, cfg);
        }
    }
    if (st == MOE_OK && lv->rank == 0 && info->routing_source != NULL &&
        (lv->view->routing = strdup(info->routing_source)) == NULL) { /* moed_routing_info */
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "live: cannot allocate its buffers");
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

/* Rank 0: a window asked for or open goes back to IDLE (one hold from the state's check on:
 * the HTTP threads see either), /status's last_error set to why when given. Whether there
 * was one; *id and name: its id and folder. */
static bool window_drop(moe_live_t *lv, const char *why, int64_t *id, char *name, size_t n)
{
    live_window_t *w = &lv->view->win;
    pthread_mutex_lock(&lv->view->mu);
    bool open = w->state == LIVE_WIN_REQUESTED || w->state == LIVE_WIN_OPEN;
    *id = w->id;
    snprintf(name, n, "%s", w->name);
    if (open) {
        w->state = LIVE_WIN_IDLE;
        if (why != NULL) {
            snprintf(lv->view->last_error, sizeof(lv->view->last_error),
                     "window %lld: %.128s not written: %.96s", (long long)*id, name, why);
        }
    }
    pthread_mutex_unlock(&lv->view->mu);
    return open;
}

/* The run's end with a window open: each rank closes it at its last completed step and
 * sends what it recorded; rank 0 gathers for at most `wait_ns` and writes the folder, marked
 * partial, before the process ends (a window that had not begun is dropped, and said). */
static void window_end(moe_live_t *lv, bool interrupted, int64_t wait_ns)
{
    int64_t deadline = moe_now_ns() + wait_ns;
    bool gathering = moe_prof_od_end(lv->od, lv->step, lv->last_end_ns, deadline);
    if (lv->rank != 0) {
        return;
    }
    live_window_t *w = &lv->view->win;
    if (!gathering) {
        int64_t id = 0;
        char name[sizeof(w->name)];
        if (window_drop(lv, NULL, &id, name, sizeof(name))) {
            MOE_WARN("live: window %lld had not begun when the run ended: nothing recorded, "
                     "%s not written", (long long)id, name);
        }
        return;
    }
    if (lv->writer_started) {
        pthread_join(lv->writer, NULL); /* a previous window's: its set is free then */
        lv->writer_started = false;
    }
    if (!moe_prof_od_collect(lv->od, deadline, &lv->od_set)) {
        /* nothing to write: the window is over all the same, and /status says why */
        pthread_mutex_lock(&lv->view->mu);
        int64_t id = w->id;
        snprintf(lv->view->last_error, sizeof(lv->view->last_error),
                 "window %lld: its records could not be gathered at the run's end; %.128s "
                 "not written", (long long)id, w->name);
        w->state = LIVE_WIN_IDLE;
        pthread_mutex_unlock(&lv->view->mu);
        MOE_WARN("live: window %lld: its records could not be gathered at the run's end: "
                 "not written", (long long)id);
        return;
    }
    pthread_mutex_lock(&lv->view->mu);
    window_label(lv, w, w->cut == LIVE_CUT_SENT ? "closed early by DELETE /profile"
                        : interrupted           ? "the run was stopped"
                                                : "the run ended");
    lv->od_set.interrupted = interrupted && lv->od_set.short_why[0] != '\0'; /* cut by it */
    w->state = LIVE_WIN_WRITING;
    pthread_mutex_unlock(&lv->view->mu);
    if (interrupted) { /* while the end report is written; finish joins it */
        lv->writer_started = pthread_create(&lv->writer, NULL, writer_main, lv) == 0;
    }
    if (!lv->writer_started) {
        moe_live_window_write(lv->view, &lv->od_set);
    }
}

/* Rank 0: from here no window opens nor is cut (the ranks stop polling for one); POST and
 * DELETE /profile get 409. */
static void mark_finished(moe_live_t *lv)
{
    if (lv->rank == 0) {
        pthread_mutex_lock(&lv->view->mu);
        lv->view->finished = true;
        pthread_mutex_unlock(&lv->view->mu);
    }
}

void moe_live_stopped(moe_live_t *lv)
{
    if (lv != NULL) {
        mark_finished(lv);
        window_end(lv, true, 400000000LL);
    }
}

void moe_live_abandon(moe_live_t *lv, const char *why)
{
    if (lv == NULL || lv->rank != 0) {
        return;
    }
    int64_t id = 0;
    char name[sizeof(lv->view->win.name)];
    if (window_drop(lv, why, &id, name, sizeof(name))) {
        MOE_WARN("live: window %lld: %s not written: %s", (long long)id, name, why);
    }
}

void moe_live_finish(moe_live_t *lv, bool interrupted)
{
    if (lv == NULL) {
        return;
    }
    mark_finished(lv);
    if (interrupted) {
        /* the process ends with _exit right after the report: no more messages; the open
         * window's folder (moe_live_stopped) written */
        if (lv->writer_started) {
            pthread_join(lv->writer, NULL);
            lv->writer_started = false;
        }
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
    }
    window_end(lv, false, 10000000000LL);
    if (lv->rank != 0) {
        wait_or_cancel(&lv->sreq, deadline);
        emit(lv, &lv->sreq, MOE_LIVE_KIND_FIN);
        wait_or_cancel(&lv->sreq, deadline);
        return;
    }
    emit(lv, &lv->sreq, MOE_LIVE_KIND_FIN);
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
    publish(lv, true);
}

int64_t moe_live_threads_cpu_ns(const moe_live_t *lv)
{
    if (lv == NULL) {
        return 0;
    }
    int64_t ns = moe_prof_threads_cpu_ns(lv->od);
    return ns + (lv->view != NULL ? (int64_t)atomic_load(&lv->view->threads_cpu_ns) : 0);
}

void moe_live_folder_written(moe_live_t *lv, int64_t window, const char *name, const char *dir,
                             const char *error)
{
    if (lv == NULL || lv->view == NULL) {
        return;
    }
    pthread_mutex_lock(&lv->view->mu);
    live_window_result_locked(lv->view, window, name, dir, error == NULL, error);
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
    moe_prof_od_free(&lv->od_set);
    moe_prof_destroy(lv->od);
    free(lv->inbox);
    free(lv->inbox_len);
    free(lv->inbox_cap);
    free(lv->creq);
    free(lv->ctrl);
    free(lv->od_ranks);
    free(lv->dirty);
    free(lv->fin);
    free(lv->recvbuf);
    free(lv->bytes);
    free(lv->dropped);
    free(lv->lhist);
    free(lv->lat);
    keys_free(&lv->rk);
    keys_free(&lv->hk);
    free(lv->sendbuf);
    /* MPI_Comm_free is left to MPI_Finalize: after a stop a peer may never match it */
    free(lv);
}
