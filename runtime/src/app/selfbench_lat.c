/* `moed --bench`'s decode latency figures (selfbench_lat.h). */
#include "app/selfbench_lat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expert/expert.h"
#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe/stop.h"
#include "transport/transport.h"
#include "transport/wait.h"
#include "transport/wake.h"

enum { PP_TAG = 4611, OSU_TAG = 4612, WAKE_TAG = 4613 };
#define LAT_BLOCKS 9       /* blocks per side; the figure is their median */
#define LAT_MIN_ITERS 20   /* iterations per block, at least */
#define LAT_BLOCK_NS 20000000LL /* ... and about this long */
#define WAKE_TRIALS 25
#define WAKE_AFTER_NS 2000000LL /* the peer waits this long before the message comes */

/* The layer's messages as this rank sees them, with buffers of its own. */
typedef struct lat_case {
    MPI_Comm comm;
    int W, me;
    size_t rb;                  /* bytes of one row on the wire */
    MPI_Datatype row;           /* rb bytes: counts in rows, as the transport's (an int
                                 * count of bytes passes INT_MAX at 2 GiB a message) */
    const int *send_rows, *recv_rows;
    int *send_displs, *recv_displs; /* [W] contiguous, in rows */
    char *send, *recv, *back, *ret;
    MPI_Request *reqs;          /* [2 W] */
    int64_t timeout_ns;         /* runtime.step_timeout_s (0: no watchdog): a wait that
                                 * lasts it goes to the watchdog (spin_all) */
    const bool *each_send, *each_recv; /* [W] the layer's dispatch messages sent and awaited
                                        * rows or not (receives before the counts), or NULL */
    int pp_peer;                /* the ping-pong's other end (-1: none), and its bytes */
    int64_t pp_bytes;
    char *pp_send, *pp_recv;    /* [pp_bytes] */
} lat_case_t;

/* What a timed block runs. */
typedef enum {
    LAT_MOED = 0,
    LAT_PLAIN = 1,
    LAT_PINGPONG = 2,
    LAT_KINDS = 3, /* the exchange's three, which take turns */
    LAT_PLAN = 4,  /* the plan's collectives (timed on their own) */
} lat_kind_t;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t median_i64(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    return n > 0 ? v[n / 2] : 0;
}

/* Test `reqs` in a tight loop (as MPI_Waitall would); a stop request ends it, and a wait
 * that lasts runtime.step_timeout_s goes to the watchdog as a step's wait does: the rank
 * that does not answer is named, one rank reports, the job ends (exit 7). */
static moe_status_t spin_all(const lat_case_t *c, MPI_Request *reqs, int n, moe_error_t *err)
{
    int64_t start = moe_now_ns(), last = start;
    for (;;) {
        int done = 0;
        moe_status_t st = MOE_MPI(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), err);
        if (st != MOE_OK || done) {
            return st;
        }
        int64_t now = moe_now_ns();
        start += now - last > MOE_POLL_STOPPED_GAP_NS ? now - last : 0; /* stopped meanwhile */
        last = now;
        if (moe_stop_requested()) {
            return moe_error_set(err, MOE_ERR_INTERRUPTED, "stop requested (%s) in --bench",
                                 moe_stop_signal_name(moe_stop_signal()));
        }
        if (c->timeout_ns > 0 && now - start > c->timeout_ns) {
            st = moe_wait_timed_out((double)(now - start) * 1e-9, "the bench's latency rounds",
                                    NULL, 0, err);
            if (st != MOE_OK) {
                return st;
            }
            start = now;
        }
    }
}

/* One direction of the plain exchange: out_rows[p] rows to p, in_rows[p] rows from p (a
 * message to each peer flagged in each_out and from each in each_in, rows or not). */
static moe_status_t plain_dir(const lat_case_t *c, const char *out, const int *out_rows,
                              const int *out_displs, const bool *each_out, char *in,
                              const int *in_rows, const int *in_displs, const bool *each_in,
                              moe_error_t *err)
{
    int n = 0;
    moe_status_t st = MOE_OK;
    for (int p = 0; p < c->W && st == MOE_OK; p++) {
        if (p != c->me && moe_transport_has_message(in_rows, each_in, p)) {
            st = MOE_MPI(MPI_Irecv(in + (size_t)in_displs[p] * c->rb, in_rows[p], c->row, p,
                                   PP_TAG, c->comm, &c->reqs[n++]),
                         err);
        }
    }
    for (int p = 0; p < c->W && st == MOE_OK; p++) {
        if (p != c->me && moe_transport_has_message(out_rows, each_out, p)) {
            st = MOE_MPI(MPI_Isend(out + (size_t)out_displs[p] * c->rb, out_rows[p], c->row, p,
                                   PP_TAG, c->comm, &c->reqs[n++]),
                         err);
        }
    }
    if (st == MOE_OK && in_rows[c->me] > 0) {
        memcpy(in + (size_t)in_displs[c->me] * c->rb, out + (size_t)out_displs[c->me] * c->rb,
               (size_t)in_rows[c->me] * c->rb);
    }
    return st == MOE_OK ? spin_all(c, c->reqs, n, err) : st;
}

/* The layer's dispatch and combine as plain MPI messages. */
static moe_status_t plain_round(const lat_case_t *c, moe_error_t *err)
{
    moe_status_t st = plain_dir(c, c->send, c->send_rows, c->send_displs, c->each_send, c->recv,
                                c->recv_rows, c->recv_displs, c->each_recv, err);
    return st == MOE_OK ? plain_dir(c, c->back, c->recv_rows, c->recv_displs, NULL, c->ret,
                                    c->send_rows, c->send_displs, NULL, err)
                        : st;
}

/* osu_latency's loop between rank 0 and the case's ping-pong peer: pp_bytes there and
 * back, iters times (other ranks do nothing). */
static moe_status_t osu_rounds(const lat_case_t *c, int iters, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    bool first = c->me == 0;
    int other = first ? c->pp_peer : 0;
    for (int i = 0; i < iters && st == MOE_OK && (first || c->me == c->pp_peer); i++) {
        MPI_Request r[2];
        st = MOE_MPI(MPI_Irecv(c->pp_recv, (int)(c->pp_bytes / (int64_t)c->rb), c->row, other,
                               OSU_TAG, c->comm, &r[0]), err);
        if (st == MOE_OK && !first) {
            st = spin_all(c, &r[0], 1, err);
        }
        if (st == MOE_OK) {
            st = MOE_MPI(MPI_Isend(c->pp_send, (int)(c->pp_bytes / (int64_t)c->rb), c->row,
                                   other, OSU_TAG, c->comm, &r[1]), err);
        }
        if (st == MOE_OK) {
            st = first ? spin_all(c, r, 2, err) : spin_all(c, &r[1], 1, err);
        }
    }
    return st;
}

/* One block of `iters` of `kind`; *slowest the slowest rank's mean ns per iteration (for
 * the ping-pong: its two ends'). Collective. */
static moe_status_t time_block(moe_engine_t *eng, const lat_case_t *c, lat_kind_t kind,
                               int iters, int64_t *slowest, moe_error_t *err)
{
    moe_status_t st = moe_wait_barrier(eng->comm, err);
    static bool paused;
    if (kind == LAT_PLAIN && !paused) { /* MOED_TEST_PAUSE: stopped in the first plain round */
        paused = true;
        moe_engine_test_pause(eng, "bench");
    }
    int64_t t0 = moe_now_ns();
    if (kind == LAT_PINGPONG) {
        st = st == MOE_OK ? osu_rounds(c, iters, err) : st;
    }
    for (int i = 0; kind != LAT_PINGPONG && i < iters && st == MOE_OK; i++) {
        st = kind == LAT_PLAIN  ? plain_round(c, err)
             : kind == LAT_PLAN ? moe_layer_replay_plan(&eng->layer, err)
                                : moe_layer_replay_exchange(&eng->layer, err);
    }
    int64_t mine = (moe_now_ns() - t0) / iters;
    MPI_Request req;
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Iallreduce(&mine, slowest, 1, MPI_INT64_T, MPI_MAX, eng->comm, &req),
                     err);
    }
    return st == MOE_OK ? moe_wait_request(&req, "the bench's reduction", err) : st;
}

static moe_status_t lat_case_init(moe_engine_t *eng, lat_case_t *c, moe_error_t *err)
{
    const moe_plan_t *plan = moe_layer_plan(&eng->layer);
    memset(c, 0, sizeof(*c));
    c->comm = eng->comm;
    c->W = eng->world_size;
    c->me = eng->rank;
    c->rb = (size_t)moe_wire_row_bytes(eng->cfg->hidden_dim, eng->weights.wire);
    c->row = MPI_DATATYPE_NULL;
    moe_status_t st = MOE_MPI(MPI_Type_contiguous((int)c->rb, MPI_BYTE, &c->row), err);
    st = st == MOE_OK ? MOE_MPI(MPI_Type_commit(&c->row), err) : st;
    if (st != MOE_OK) {
        return st;
    }
    c->send_rows = plan->send_rows;
    c->recv_rows = eng->layer.recv_rows;
    c->each_send = eng->layer.upto ? eng->layer.each_send : NULL;
    c->each_recv = eng->layer.upto ? eng->layer.each_recv : NULL;
    c->send_displs = calloc((size_t)c->W, sizeof(int));
    c->recv_displs = calloc((size_t)c->W, sizeof(int));
    c->reqs = calloc(2 * (size_t)c->W, sizeof(MPI_Request));
    size_t ns = 0, nr = 0;
    for (int p = 0; c->send_displs != NULL && c->recv_displs != NULL && p < c->W; p++) {
        c->send_displs[p] = (int)ns;
        c->recv_displs[p] = (int)nr;
        ns += (size_t)c->send_rows[p];
        nr += (size_t)c->recv_rows[p];
    }
    ns = ns > 0 ? ns : 1;
    nr = nr > 0 ? nr : 1;
    c->send = calloc(ns, c->rb);
    c->ret = calloc(ns, c->rb);
    c->recv = calloc(nr, c->rb);
    c->back = calloc(nr, c->rb);
    c->timeout_ns = (int64_t)(eng->cfg->step_timeout_s * 1e9);
    if (!c->send_displs || !c->recv_displs || !c->reqs || !c->send || !c->ret || !c->recv ||
        !c->back) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the bench's buffers");
    }
    return MOE_OK;
}

static void lat_case_free(lat_case_t *c)
{
    free(c->send_displs);
    free(c->recv_displs);
    free(c->reqs);
    free(c->send);
    free(c->ret);
    free(c->recv);
    free(c->back);
    free(c->pp_send);
    free(c->pp_recv);
    if (c->row != MPI_DATATYPE_NULL) {
        MOE_MPI(MPI_Type_free(&c->row), NULL); /* teardown: logged, not returned */
    }
}

/* The largest message of the layer (any pair, bytes), the messages with rows per
 * direction, the counts messages and the dispatch's empty messages. */
static moe_status_t lat_shape(moe_engine_t *eng, const lat_case_t *c, moe_bench_lat_t *out,
                              moe_error_t *err)
{
    int64_t largest = 0, most = 0, mine[3] = {0, eng->layer.count_msgs, 0}, all[3] = {0};
    for (int p = 0; p < c->W; p++) {
        if (p != c->me && c->send_rows[p] > 0) {
            int64_t b = (int64_t)c->send_rows[p] * (int64_t)c->rb;
            largest = b > largest ? b : largest;
            mine[0]++;
        }
        mine[2] += p != c->me && c->send_rows[p] == 0 && c->each_send != NULL && c->each_send[p];
    }
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Iallreduce(&largest, &most, 1, MPI_INT64_T, MPI_MAX,
                                             eng->comm, &req), err);
    st = st == MOE_OK ? moe_wait_request(&req, "the bench's reduction", err) : st;
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Iallreduce(mine, all, 3, MPI_INT64_T, MPI_SUM, eng->comm, &req), err);
    }
    st = st == MOE_OK ? moe_wait_request(&req, "the bench's reduction", err) : st;
    out->max_msg_bytes = most;
    out->msgs = all[0];
    out->count_msgs = all[1];
    out->empty_msgs = all[2];
    out->recv_upto = eng->layer.upto;
    out->yields = moe_poll_yields();
    return st;
}

/* Iterations for a block of about LAT_BLOCK_NS, from one timed round (agreed: the max). */
static moe_status_t lat_iters(moe_engine_t *eng, const lat_case_t *c, int *iters,
                              moe_error_t *err)
{
    int64_t one = 0;
    moe_status_t st = time_block(eng, c, LAT_MOED, 3, &one, err);
    int64_t n = one > 0 ? LAT_BLOCK_NS / one : 1000;
    *iters = (int)(n < LAT_MIN_ITERS ? LAT_MIN_ITERS : n > 2000 ? 2000 : n);
    return st;
}

/* The ping-pong's peer and size: rank 0's largest message and the rank it goes to (-1:
 * rank 0 sends nothing). Collective. */
static moe_status_t lat_pp_pick(moe_engine_t *eng, lat_case_t *c, moe_error_t *err)
{
    int64_t pick[2] = {-1, 0};
    for (int p = 1; c->me == 0 && p < c->W; p++) {
        int64_t b = (int64_t)c->send_rows[p] * (int64_t)c->rb;
        if (b > pick[1]) {
            pick[0] = p;
            pick[1] = b;
        }
    }
    moe_status_t st = moe_wait_bcast(pick, 2, MPI_INT64_T, 0, eng->comm, "the bench's choice",
                                     err);
    c->pp_peer = st == MOE_OK ? (int)pick[0] : -1;
    c->pp_bytes = pick[1];
    if (c->pp_peer >= 0 && (c->me == 0 || c->me == c->pp_peer)) {
        c->pp_send = calloc((size_t)c->pp_bytes, 1);
        c->pp_recv = calloc((size_t)c->pp_bytes, 1);
        if (c->pp_send == NULL || c->pp_recv == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the bench's buffers");
        }
    }
    return st;
}

/* The LAT_BLOCKS blocks' times t (ns) as the median and the best block, in us (sorts t). */
static void block_figures(int64_t *t, double *median_us, double *best_us)
{
    *median_us = (double)median_i64(t, LAT_BLOCKS) * 1e-3; /* sorts: t[0] the best */
    *best_us = (double)t[0] * 1e-3;
}

/* moed's layer exchange, the plain MPI messages and the ping-pong, in rounds of one block
 * of each (their order turning from round to round); the median and best block of each. */
static moe_status_t lat_exchange(moe_engine_t *eng, lat_case_t *c, moe_bench_lat_t *out,
                                 int *iters_out, moe_error_t *err)
{
    int64_t t[LAT_KINDS][LAT_BLOCKS];
    memset(t, 0, sizeof(t));
    int iters = LAT_MIN_ITERS;
    moe_status_t st = lat_pp_pick(eng, c, err);
    st = moe_agree(eng->comm, st, err);
    if (st == MOE_OK) {
        st = lat_iters(eng, c, &iters, err);
    }
    int kinds = c->pp_peer >= 0 ? LAT_KINDS : LAT_PINGPONG;
    for (int b = 0; b < LAT_BLOCKS && st == MOE_OK; b++) {
        for (int j = 0; j < kinds && st == MOE_OK; j++) {
            int k = (b + j) % kinds;
            st = time_block(eng, c, (lat_kind_t)k, iters, &t[k][b], err);
        }
    }
    *iters_out = iters;
    if (st != MOE_OK) {
        return st;
    }
    double *med[LAT_KINDS] = {&out->moed_us, &out->mpi_us, &out->pingpong_us};
    double *best[LAT_KINDS] = {&out->moed_best_us, &out->mpi_best_us, &out->pingpong_best_us};
    for (int k = 0; k < kinds; k++) {
        block_figures(t[k], med[k], best[k]);
    }
    out->pp_peer = c->pp_peer;
    out->pp_bytes = c->pp_peer >= 0 ? c->pp_bytes : 0;
    return MOE_OK;
}

/* The plan's collectives of a layer, where the config has any: blocks of the exchange's
 * iterations; the median and best block. */
static moe_status_t lat_plan(moe_engine_t *eng, const lat_case_t *c, int iters,
                             moe_bench_lat_t *out, moe_error_t *err)
{
    out->plan_what = moe_layer_plan_collectives(&eng->layer);
    out->plan_ints = eng->cfg->num_experts;
    if (out->plan_what == 0) {
        return MOE_OK;
    }
    int64_t t[LAT_BLOCKS];
    moe_status_t st = MOE_OK;
    for (int b = 0; b < LAT_BLOCKS && st == MOE_OK; b++) {
        st = time_block(eng, c, LAT_PLAN, iters, &t[b], err);
    }
    if (st == MOE_OK) {
        block_figures(t, &out->plan_us, &out->plan_best_us);
    }
    return st;
}

/* The wake-up test between ranks 0 and 1: rank 0 sleeps WAKE_AFTER_NS, sends one int and
 * spins for the answer; rank 1 waits for it (how: 0 spinning, 1 moed's wait with rank 0
 * posting its wake-up, 2 moed's wait without the post) and answers at once. Rank 0's
 * median round trip per way into ns[3]. */
static moe_status_t wake_rounds(const lat_case_t *c, int64_t ns[3], moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    int ping = 1, pong = 0;
    for (int how = 0; how < 3 && st == MOE_OK; how++) {
        int64_t rtt[WAKE_TRIALS];
        for (int t = 0; t < WAKE_TRIALS && st == MOE_OK; t++) {
            MPI_Request r[2];
            if (c->me == 1) {
                st = MOE_MPI(MPI_Irecv(&pong, 1, MPI_INT, 0, WAKE_TAG, c->comm, &r[0]), err);
                if (st == MOE_OK) {
                    st = how == 0 ? spin_all(c, &r[0], 1, err)
                                  : moe_wait_request(&r[0], "the bench's wake-up test", err);
                }
                if (st == MOE_OK) {
                    st = MOE_MPI(MPI_Isend(&pong, 1, MPI_INT, 0, WAKE_TAG, c->comm, &r[1]), err);
                }
                st = st == MOE_OK ? spin_all(c, &r[1], 1, err) : st;
                continue;
            }
            struct timespec nap = {0, (long)WAKE_AFTER_NS};
            nanosleep(&nap, NULL);
            int64_t t0 = moe_now_ns();
            st = MOE_MPI(MPI_Irecv(&pong, 1, MPI_INT, 1, WAKE_TAG, c->comm, &r[0]), err);
            if (st == MOE_OK) {
                st = MOE_MPI(MPI_Isend(&ping, 1, MPI_INT, 1, WAKE_TAG, c->comm, &r[1]), err);
            }
            if (st == MOE_OK && how == 1) {
                moe_wake_post(1);
            }
            st = st == MOE_OK ? spin_all(c, r, 2, err) : st;
            rtt[t] = moe_now_ns() - t0;
        }
        ns[how] = c->me == 0 && st == MOE_OK ? median_i64(rtt, WAKE_TRIALS) : 0;
    }
    return st;
}

static moe_status_t lat_wake(moe_engine_t *eng, const lat_case_t *c, moe_bench_lat_t *out,
                             moe_error_t *err)
{
    int64_t ns[3] = {0, 0, 0};
    moe_status_t st = moe_wait_barrier(eng->comm, err);
    if (st == MOE_OK && c->me <= 1) {
        st = wake_rounds(c, ns, err);
    }
    out->spin_us = (double)ns[0] * 1e-3;
    out->posted_us = (double)ns[1] * 1e-3;
    out->unposted_us = (double)ns[2] * 1e-3;
    return st == MOE_OK ? moe_wait_barrier(eng->comm, err) : st;
}

moe_status_t moe_selfbench_latency(moe_engine_t *eng, moe_bench_lat_t *out, moe_error_t *err)
{
    memset(out, 0, sizeof(*out));
    if (eng->world_size < 2 || eng->cuda != NULL) {
        return MOE_OK; /* nothing crosses ranks; device buffers are not plain MPI's */
    }
    lat_case_t c;
    moe_status_t st = lat_case_init(eng, &c, err);
    st = moe_agree(eng->comm, st, err);
    if (st == MOE_OK) {
        st = lat_shape(eng, &c, out, err);
    }
    int iters = LAT_MIN_ITERS;
    if (st == MOE_OK) {
        st = lat_exchange(eng, &c, out, &iters, err);
    }
    if (st == MOE_OK) {
        st = lat_plan(eng, &c, iters, out, err);
    }
    if (st == MOE_OK) {
        st = lat_wake(eng, &c, out, err);
    }
    lat_case_free(&c);
    return st;
}

void moe_selfbench_latency_print(const moe_bench_lat_t *o)
{
    if (o->moed_us <= 0) {
        return;
    }
    printf("bench: layer exchange, moed           %.1f us, best %.1f us  (counts, dispatch, "
           "combine of the last layer, replayed; %lld counts messages, %lld row messages each "
           "way and %lld empty, largest %.1f kB; rows received %s the counts, waits %s)\n",
           o->moed_us, o->moed_best_us, (long long)o->count_msgs, (long long)o->msgs,
           (long long)o->empty_msgs, (double)o->max_msg_bytes / 1e3,
           o->recv_upto ? "while awaiting" : "after",
           o->yields ? "yielding the core (cores shared)" : "spinning (a core each)");
    printf("bench: same messages, plain MPI       %.1f us, best %.1f us  (MPI_Isend/Irecv, "
           "spinning; the empty ones too)\n", o->mpi_us, o->mpi_best_us);
    if (o->pp_bytes > 0) {
        printf("bench: MPI ping-pong round trip       %.1f us, best %.1f us  (%.1f kB, rank 0 "
               "<-> rank %d, osu_latency x 2)\n", o->pingpong_us, o->pingpong_best_us,
               (double)o->pp_bytes / 1e3, o->pp_peer);
    }
    printf("bench: layer exchange / plain MPI     %.2fx, best %.2fx\n",
           o->mpi_us > 0 ? o->moed_us / o->mpi_us : 0.0,
           o->mpi_best_us > 0 ? o->moed_best_us / o->mpi_best_us : 0.0);
    if (o->pp_bytes > 0) {
        printf("bench: layer exchange / ping-pong     %.2fx, best %.2fx\n",
               o->moed_us / o->pingpong_us, o->moed_best_us / o->pingpong_best_us);
    }
    if (o->plan_what != 0) {
        bool scan = (o->plan_what & MOE_PLAN_CAPACITY_SCAN) != 0;
        bool sum = (o->plan_what & MOE_PLAN_DEMAND_SUM) != 0;
        printf("bench: plan collectives, moed         %.1f us, best %.1f us  (the last layer's "
               "%s%s%s, replayed: %lld integers each, every rank; not in the exchange above: "
               "%.2fx of it)\n", o->plan_us, o->plan_best_us,
               scan ? "capacity scan (MPI_Iexscan)" : "", scan && sum ? " and " : "",
               sum ? "experts' demand sum of balanced copies (MPI_Iallreduce)" : "",
               (long long)o->plan_ints, o->moed_us > 0 ? o->plan_us / o->moed_us : 0.0);
    }
    if (o->spin_us > 0) {
        printf("bench: wake-up after %.0f ms napping   %.1f us posted, %.1f us not posted "
               "(over a spinning peer's %.1f us round trip)\n", (double)WAKE_AFTER_NS * 1e-6,
               o->posted_us - o->spin_us, o->unposted_us - o->spin_us, o->spin_us);
    }
}
