/* The UCX transport: the same exchange as the MPI one (one receive and one send per peer
 * with rows, the own block a memcpy) over UCP tagged messages. One context (tag feature),
 * one single-threaded worker, an endpoint to every other rank; the worker addresses are
 * swapped over MPI at create. A message's tag is the exchange's sequence number (high 32
 * bits) and the sending rank (low 32), matched with the full mask, so rows of one exchange
 * never match another's (every rank starts the same exchanges in the same order, so the
 * sequence numbers agree). Each slot keeps its own requests, polled with
 * ucp_request_check_status after a ucp_worker_progress.
 *
 * Endpoints use UCX's peer error handling (UCP_ERR_HANDLING_MODE_PEER): a peer that dies
 * reaches moed as an endpoint error callback and failed requests, which the exchange
 * reports as the watchdog reports a peer that does not answer (moe_wait_peer_lost: the rank
 * named, rank 0 writes the report of the completed steps, marked partial). Without it UCX
 * treats a transport error as fatal and aborts the process: a shared-memory read
 * (process_vm_readv) from a rank that was just killed took rank 0 and the report with it.
 * The price: UCX then leaves out the transports that cannot report a lost peer (UCX 1.13's
 * shared-memory mm transports), and on one node the default job measured 0.36 of the BF16
 * limit against 0.88 without; runtime.ucx_peer_errors: false buys the speed back.
 *
 * Wake-ups (transport/wake.h), as the MPI transport: a send posts its peer, and so does a
 * completed receive (a sender napping on a rendezvous send tests at once). */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdarg.h>

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include "moe/clock.h"
#include "moe/log.h"
#include "moe/mpi_check.h"
#include "moe/stop.h"
#include "transport/transport.h"
#include "transport/wait.h"
#include "transport/wake.h"

/* How long destroy keeps progressing endpoint closes before giving up on them. */
#define CLOSE_WAIT_NS (5 * 1000 * 1000 * 1000LL)

typedef struct ucx_slot {
    void **reqs;   /* [2 * world]: outstanding requests, NULL once complete */
    int *req_peer; /* [2 * world]: receives: the peer; sends: -2 - peer */
    int nreq, left;
    uint32_t seq;  /* the exchange's number (its tags) */
    bool open;     /* sends posted, receives not yet (start_sends): not complete */
    const char *own; /* the own block's rows in the send buffer */
} ucx_slot_t;

struct ucx_impl;
/* What an endpoint's error callback gets: the transport and the peer's rank. */
typedef struct ucx_peer {
    struct ucx_impl *impl;
    int rank;
} ucx_peer_t;

typedef struct ucx_impl {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h *eps;     /* [world]; NULL for self */
    ucx_peer_t *peers; /* [world]: the error callbacks' arguments */
    ucs_status_t *peer_status; /* [world]: UCS_OK, or the error an endpoint reported */
    ucx_slot_t *slots; /* [num_slots] */
    uint32_t seq;      /* exchanges started so far: the high half of every tag */
    bool failed;       /* an exchange was abandoned: close endpoints by force */
    bool peer_errors;  /* runtime.ucx_peer_errors: endpoints ask for peer error handling */
    bool no_peer_errors; /* an endpoint was made without peer error handling (said once) */
} ucx_impl_t;

/* Convert a ucs_status_t into MOE_ERR_UCX (with UCX's text and where) and jump to cleanup;
 * expects `moe_status_t st`, `moe_error_t *err` and a `cleanup` label in scope. */
#define MOE_UCX_CHECK(call, what)                                                          \
    do {                                                                                   \
        ucs_status_t ucs_rc_ = (call);                                                     \
        if (ucs_rc_ != UCS_OK) {                                                           \
            st = moe_error_set(err, MOE_ERR_UCX, "%s failed: %s (%s:%d)", (what),          \
                               ucs_status_string(ucs_rc_), __FILE__, __LINE__);            \
            goto cleanup;                                                                  \
        }                                                                                  \
    } while (0)

/* UCX calls this from ucp_worker_progress when the endpoint to a peer fails (the peer died,
 * its process went away under a shared-memory read, a connection reset). The endpoint is
 * not used again; destroy closes it by force. */
static void ucx_peer_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ucx_peer_t *peer = arg;
    if (peer->impl->peer_status[peer->rank] == UCS_OK) {
        peer->impl->peer_status[peer->rank] = status;
    }
    peer->impl->failed = true;
}

/* The first lost peer this slot still waits on (a receive from it or a send to it), or -1.
 * A receive is matched by tag, not by endpoint: one posted before its sender died stays
 * pending, so the peer's failure is checked here rather than waited out. */
static int slot_lost_peer(const ucx_impl_t *impl, const ucx_slot_t *s)
{
    for (int i = 0; i < s->nreq; i++) {
        int peer = s->req_peer[i] >= 0 ? s->req_peer[i] : -2 - s->req_peer[i];
        if (s->reqs[i] != NULL && impl->peer_status[peer] != UCS_OK) {
            return peer;
        }
    }
    return -1;
}

static ucp_tag_t rows_tag(uint32_t seq, int src)
{
    return ((uint64_t)seq << 32) | (uint32_t)src;
}

/* The status of a just-posted operation: NULL = done now, an error pointer, or a request
 * (kept in the slot with its peer code). Returns UCS_OK or the error. */
static ucs_status_t keep_request(ucx_slot_t *s, ucs_status_ptr_t sp, int peer_code)
{
    if (sp == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(sp)) {
        return UCS_PTR_STATUS(sp);
    }
    s->reqs[s->nreq] = sp;
    s->req_peer[s->nreq++] = peer_code;
    return UCS_OK;
}

/* Post the receives of rows from every peer (a peer flagged in `each`: one receive of up to
 * recv_rows[p], rows or not), after the slot's requests. A receive that completes at once
 * stamps its peer here. */
static moe_status_t post_recvs(moe_transport_t *t, int slot, float *recv, const int *recv_rows,
                               const int *recv_displs, const bool *each, moe_error_t *err)
{
    ucx_impl_t *impl = t->impl;
    ucx_slot_t *s = &impl->slots[slot];
    int W = t->world_size, me = t->rank, before_all = s->nreq;
    size_t row_bytes = (size_t)t->row_elems * sizeof(float);
    ucp_request_param_t param = {.op_attr_mask = 0};
    moe_status_t st = MOE_OK;
    for (int i = 1; i <= W; i++) {
        int p = (me - i + W) % W; /* staggered like the MPI transport */
        if (p != me && moe_transport_has_message(recv_rows, each, p)) {
            int before = s->nreq;
            ucs_status_ptr_t sp = ucp_tag_recv_nbx(
                impl->worker, (char *)recv + (size_t)recv_displs[p] * row_bytes,
                (size_t)recv_rows[p] * row_bytes, rows_tag(s->seq, p), UINT64_MAX, &param);
            MOE_UCX_CHECK(keep_request(s, sp, p), "ucp_tag_recv_nbx (row exchange)");
            if (s->nreq == before) {
                t->xfer[slot].peer_done_ns[p] = moe_now_ns();
            }
        }
    }
cleanup:
    s->left += s->nreq - before_all;
    return st;
}

/* Post the sends of rows to every peer (and to each peer flagged in `each`, rows or not),
 * after the slot's requests, each peer posted. */
static moe_status_t post_sends(moe_transport_t *t, int slot, const float *send,
                               const int *send_rows, const int *send_displs, const bool *each,
                               moe_error_t *err)
{
    ucx_impl_t *impl = t->impl;
    ucx_slot_t *s = &impl->slots[slot];
    int W = t->world_size, me = t->rank, before_all = s->nreq;
    size_t row_bytes = (size_t)t->row_elems * sizeof(float);
    ucp_request_param_t param = {.op_attr_mask = 0};
    moe_status_t st = MOE_OK;
    s->own = (const char *)send + (size_t)send_displs[me] * row_bytes;
    for (int i = 1; i <= W; i++) {
        int p = (me + i) % W;
        if (p != me && moe_transport_has_message(send_rows, each, p)) {
            ucs_status_ptr_t sp = ucp_tag_send_nbx(
                impl->eps[p], (const char *)send + (size_t)send_displs[p] * row_bytes,
                (size_t)send_rows[p] * row_bytes, rows_tag(s->seq, me), &param);
            MOE_UCX_CHECK(keep_request(s, sp, -2 - p), "ucp_tag_send_nbx (row exchange)");
            moe_wake_post(p); /* a peer napping on this node tests at once */
        }
    }
cleanup:
    s->left += s->nreq - before_all;
    return st;
}

/* The slot's next exchange number: its sends and receives carry it in their tags. */
static void slot_begin(moe_transport_t *t, int slot, bool open)
{
    ucx_impl_t *impl = t->impl;
    ucx_slot_t *s = &impl->slots[slot];
    moe_transport_base_begin(t, slot);
    s->seq = ++impl->seq;
    s->nreq = s->left = 0;
    s->open = open;
}

/* Every receive, then every send, then the own block. */
static moe_status_t ucx_start(moe_transport_t *t, int slot, const float *send,
                              const int *send_rows, const int *send_displs, float *recv,
                              const int *recv_rows, const int *recv_displs, const void *after,
                              moe_error_t *err)
{
    (void)after;
    const ucx_slot_t *s = &((ucx_impl_t *)t->impl)->slots[slot];
    slot_begin(t, slot, false);
    moe_status_t st = post_recvs(t, slot, recv, recv_rows, recv_displs, NULL, err);
    if (st == MOE_OK) {
        st = post_sends(t, slot, send, send_rows, send_displs, NULL, err);
    }
    if (st == MOE_OK) {
        moe_transport_base_copy_own(t, s->own, recv, recv_rows, recv_displs);
    }
    return st;
}

/* The sends now; the slot stays open until its receives are posted. */
static moe_status_t ucx_start_sends(moe_transport_t *t, int slot, const float *send,
                                    const int *send_rows, const int *send_displs,
                                    const bool *each, moe_error_t *err)
{
    slot_begin(t, slot, true);
    return post_sends(t, slot, send, send_rows, send_displs, each, err);
}

static moe_status_t ucx_start_recvs(moe_transport_t *t, int slot, float *recv,
                                    const int *recv_rows, const int *recv_displs,
                                    const bool *each, moe_error_t *err)
{
    ucx_slot_t *s = &((ucx_impl_t *)t->impl)->slots[slot];
    moe_status_t st = post_recvs(t, slot, recv, recv_rows, recv_displs, each, err);
    if (st == MOE_OK) {
        moe_transport_base_copy_own(t, s->own, recv, recv_rows, recv_displs);
        s->open = false;
    }
    return st;
}

/* Retire the slot's finished requests: stamp receives, free them. Returns how many
 * finished; *first_bad gets the first failure's status (else stays UCS_OK). */
static int retire_done(moe_transport_t *t, int slot, ucs_status_t *first_bad, int *bad_peer)
{
    ucx_impl_t *impl = t->impl;
    ucx_slot_t *s = &impl->slots[slot];
    int done = 0;
    int64_t now = 0;
    for (int i = 0; i < s->nreq; i++) {
        if (s->reqs[i] == NULL) {
            continue;
        }
        ucs_status_t rs = ucp_request_check_status(s->reqs[i]);
        if (rs == UCS_INPROGRESS) {
            continue;
        }
        ucp_request_free(s->reqs[i]);
        s->reqs[i] = NULL;
        done++;
        if (rs != UCS_OK && *first_bad == UCS_OK) {
            *first_bad = rs;
            *bad_peer = s->req_peer[i] >= 0 ? s->req_peer[i] : -2 - s->req_peer[i];
        }
        if (s->req_peer[i] >= 0) {
            now = now != 0 ? now : moe_now_ns();
            t->xfer[slot].peer_done_ns[s->req_peer[i]] = now;
            moe_wake_post(s->req_peer[i]); /* its send may wait for this receive */
        }
    }
    return done;
}

static moe_status_t ucx_test(moe_transport_t *t, int slot, bool *done, moe_error_t *err)
{
    ucx_impl_t *impl = t->impl;
    ucx_slot_t *s = &impl->slots[slot];
    moe_xfer_t *x = &t->xfer[slot];
    moe_status_t st = MOE_OK;
    *done = !x->active;
    if (!x->active) {
        return MOE_OK;
    }
    ucp_worker_progress(impl->worker);
    ucs_status_t bad = UCS_OK;
    int bad_peer = -1;
    s->left -= retire_done(t, slot, &bad, &bad_peer);
    int lost = bad_peer >= 0 && impl->peer_status[bad_peer] != UCS_OK ? bad_peer
                                                                      : slot_lost_peer(impl, s);
    if (lost >= 0) {
        char how[128];
        snprintf(how, sizeof(how), "UCX: %s", ucs_status_string(impl->peer_status[lost]));
        return moe_wait_peer_lost(lost, "the UCX row exchange", how, err);
    }
    MOE_UCX_CHECK(bad, "a UCX row transfer");
    if (s->left == 0 && !s->open) {
        x->active = false;
        x->end_ns = moe_now_ns();
        *done = true;
    }
cleanup:
    return st;
}

/* The peers still owing rows or not yet taking ours, each once (for the watchdog). */
static int ucx_pending(const moe_transport_t *t, int slot, int *out, int cap)
{
    const ucx_impl_t *impl = t->impl;
    const ucx_slot_t *s = &impl->slots[slot];
    int n = 0;
    for (int i = 0; i < s->nreq; i++) {
        if (s->reqs[i] != NULL) {
            int peer = s->req_peer[i] >= 0 ? s->req_peer[i] : -2 - s->req_peer[i];
            n = moe_wait_note_peer(out, n, cap, peer);
        }
    }
    return n;
}

/* After a failed or interrupted exchange: cancel what is still outstanding and hand the
 * requests back (UCX frees each once it completes). */
static void ucx_cancel(moe_transport_t *t, int slot)
{
    ucx_impl_t *impl = t->impl;
    ucx_slot_t *s = &impl->slots[slot];
    for (int i = 0; i < s->nreq; i++) {
        if (s->reqs[i] != NULL) {
            ucp_request_cancel(impl->worker, s->reqs[i]);
            ucp_request_free(s->reqs[i]);
            s->reqs[i] = NULL;
        }
    }
    s->left = 0;
    s->open = false;
    t->xfer[slot].active = false;
    impl->failed = true;
}

/* Close one endpoint (flushing unless an exchange failed), progressing for a bounded time. */
static void close_endpoint(ucx_impl_t *impl, ucp_ep_h ep)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = impl->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0,
    };
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &param);
    if (sp == NULL || UCS_PTR_IS_ERR(sp)) {
        return;
    }
    int64_t give_up = moe_now_ns() + CLOSE_WAIT_NS;
    while (ucp_request_check_status(sp) == UCS_INPROGRESS && moe_now_ns() < give_up) {
        ucp_worker_progress(impl->worker);
    }
    ucp_request_free(sp);
}

/* At a clean end, keep this worker answering until every rank has closed its endpoints: a
 * peer's flush towards this rank completes only while this worker still progresses (with
 * UCX's put_zcopy rendezvous, a rank that destroyed its worker first left its peers'
 * flushes to fail with "UCX ERROR ... Endpoint timeout"). Bounded like the closes; after
 * a fault or a stop no rank waits for the others. */
static void wait_peers_closed(moe_transport_t *t, ucx_impl_t *impl)
{
    MPI_Request barrier;
    if (impl->failed || moe_stop_requested() ||
        MOE_MPI(MPI_Ibarrier(t->comm, &barrier), NULL) != MOE_OK) {
        return;
    }
    int64_t give_up = moe_now_ns() + CLOSE_WAIT_NS;
    int done = 0;
    while (!done && moe_now_ns() < give_up) {
        ucp_worker_progress(impl->worker);
        if (MOE_MPI(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), NULL) != MOE_OK) {
            return;
        }
    }
}

static void ucx_destroy(moe_transport_t *t)
{
    ucx_impl_t *impl = t->impl;
    if (impl != NULL) {
        for (int p = 0; impl->eps != NULL && p < t->world_size; p++) {
            if (impl->eps[p] != NULL) {
                close_endpoint(impl, impl->eps[p]);
            }
        }
        if (impl->eps != NULL && impl->worker != NULL) {
            wait_peers_closed(t, impl);
        }
        if (impl->worker != NULL) {
            ucp_worker_destroy(impl->worker);
        }
        if (impl->context != NULL) {
            ucp_cleanup(impl->context);
        }
        for (int s = 0; impl->slots != NULL && s < t->num_slots; s++) {
            free(impl->slots[s].reqs);
            free(impl->slots[s].req_peer);
        }
        free(impl->eps);
        free(impl->peers);
        free(impl->peer_status);
        free(impl->slots);
        free(impl);
    }
    moe_transport_base_free(t);
    free(t);
}

/* A tagged receive takes a message shorter than its buffer (its tag names the exchange and
 * the sender, so it matches nothing else): any count. */
static int ucx_recv_upto(const moe_transport_t *t)
{
    (void)t;
    return INT_MAX;
}

static const moe_transport_ops_t k_ucx_ops = {
    .name = "ucx",
    .device_memory = false,
    .start = ucx_start,
    .start_sends = ucx_start_sends,
    .start_recvs = ucx_start_recvs,
    .recv_upto = ucx_recv_upto,
    .test = ucx_test,
    .pending = ucx_pending,
    .cancel = ucx_cancel,
    .destroy = ucx_destroy,
};

static moe_status_t open_worker(ucx_impl_t *impl, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    ucp_config_t *config = NULL;
    MOE_UCX_CHECK(ucp_config_read(NULL, NULL, &config), "ucp_config_read");
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    MOE_UCX_CHECK(ucp_init(&params, config, &impl->context), "ucp_init");
    ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = UCS_THREAD_MODE_SINGLE};
    MOE_UCX_CHECK(ucp_worker_create(impl->context, &wparams, &impl->worker), "ucp_worker_create");
cleanup:
    if (config != NULL) {
        ucp_config_release(config);
    }
    return st;
}

/* A UCX log handler that drops every message (pushed around one call only). */
static ucs_log_func_rc_t ucx_log_quiet(const char *file, unsigned line, const char *function,
                                       ucs_log_level_t level,
                                       const ucs_log_component_config_t *comp_conf,
                                       const char *message, va_list ap)
{
    (void)file, (void)line, (void)function, (void)level, (void)comp_conf, (void)message;
    (void)ap;
    return UCS_LOG_FUNC_RC_STOP;
}

/* Swap worker addresses over MPI (lengths, then bytes) and open an endpoint to every
 * other rank. */
static moe_status_t connect_peers(moe_transport_t *t, moe_error_t *err)
{
    ucx_impl_t *impl = t->impl;
    int W = t->world_size;
    ucp_address_t *mine = NULL;
    size_t mine_len = 0;
    int *lens = calloc((size_t)W, sizeof(int)), *displs = calloc((size_t)W, sizeof(int));
    char *all = NULL;
    moe_status_t st = MOE_OK;
    if (lens == NULL || displs == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the UCX address table");
        goto cleanup;
    }
    MOE_UCX_CHECK(ucp_worker_get_address(impl->worker, &mine, &mine_len), "ucp_worker_get_address");
    int my_len = (int)mine_len;
    MPI_Request req;
    st = MOE_MPI(MPI_Iallgather(&my_len, 1, MPI_INT, lens, 1, MPI_INT, t->comm, &req), err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the UCX address sizes exchange", err);
    }
    if (st != MOE_OK) {
        goto cleanup;
    }
    size_t total = 0;
    for (int p = 0; p < W; p++) {
        displs[p] = (int)total;
        total += (size_t)lens[p];
    }
    all = malloc(total > 0 ? total : 1);
    if (all == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the UCX address table");
        goto cleanup;
    }
    st = MOE_MPI(MPI_Iallgatherv(mine, my_len, MPI_BYTE, all, lens, displs, MPI_BYTE, t->comm,
                                 &req),
                 err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the UCX address exchange", err);
    }
    for (int p = 0; p < W && st == MOE_OK; p++) {
        if (p == t->rank) {
            continue;
        }
        impl->peers[p] = (ucx_peer_t){.impl = impl, .rank = p};
        ucp_ep_params_t ep_params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = (const ucp_address_t *)(all + displs[p]),
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = ucx_peer_failed, .arg = &impl->peers[p]},
        };
        ucs_status_t rc = UCS_ERR_UNREACHABLE;
        if (impl->peer_errors) {
            /* UCX logs an ERROR when no allowed transport handles peer failures, before
             * ucp_ep_create returns UNREACHABLE: that attempt's log is held back (the
             * warning below says what it means); another failure is tried again unmuted,
             * so UCX's own words for it are logged. */
            ucs_log_push_handler(ucx_log_quiet);
            rc = ucp_ep_create(impl->worker, &ep_params, &impl->eps[p]);
            ucs_log_pop_handler();
            if (rc != UCS_OK && rc != UCS_ERR_UNREACHABLE) {
                rc = ucp_ep_create(impl->worker, &ep_params, &impl->eps[p]);
            }
        }
        if (rc == UCS_ERR_UNREACHABLE) {
            /* Asked not to (runtime.ucx_peer_errors: false), or the transports UCX_TLS
             * allows cannot report a peer's failure (UCX 1.13's shared-memory mm
             * transports: UCX_TLS=sm,self): connect without; in the latter case say once
             * that a lost rank can then end this process inside UCX. */
            ep_params.field_mask &= ~(uint64_t)(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                                UCP_EP_PARAM_FIELD_ERR_HANDLER);
            rc = ucp_ep_create(impl->worker, &ep_params, &impl->eps[p]);
            if (rc == UCS_OK && impl->peer_errors && !impl->no_peer_errors) {
                impl->no_peer_errors = true;
                if (t->rank == 0) { /* the ranks share UCX_TLS: said once, by rank 0 */
                    MOE_WARN("UCX: the transports in use cannot report a lost peer (UCX_TLS="
                             "%s): a rank's death may end a rank inside UCX without a report; "
                             "unset UCX_TLS (UCX then picks transports that can) or add tcp",
                             getenv("UCX_TLS") != NULL ? getenv("UCX_TLS") : "unset");
                }
            }
        }
        MOE_UCX_CHECK(rc, "ucp_ep_create");
    }
cleanup:
    if (mine != NULL) {
        ucp_worker_release_address(impl->worker, mine);
    }
    free(all);
    free(lens);
    free(displs);
    return st;
}

moe_status_t moe_transport_ucx_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                      bool peer_errors, moe_transport_t **out,
                                      moe_error_t *err)
{
    moe_transport_t *t = calloc(1, sizeof(*t));
    ucx_impl_t *impl = calloc(1, sizeof(*impl));
    if (t == NULL || impl == NULL) {
        free(t);
        free(impl);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the UCX transport");
    }
    t->impl = impl;
    impl->peer_errors = peer_errors;
    moe_status_t st = moe_transport_base_init(t, &k_ucx_ops, comm, row_elems, num_slots, err);
    size_t W = (size_t)t->world_size;
    if (st == MOE_OK) {
        impl->eps = calloc(W, sizeof(ucp_ep_h));
        impl->peers = calloc(W, sizeof(ucx_peer_t));
        impl->peer_status = calloc(W, sizeof(ucs_status_t)); /* UCS_OK is 0 */
        impl->slots = calloc((size_t)num_slots, sizeof(ucx_slot_t));
        bool failed = impl->eps == NULL || impl->peers == NULL || impl->peer_status == NULL ||
                      impl->slots == NULL;
        for (int s = 0; !failed && s < num_slots; s++) {
            impl->slots[s].reqs = calloc(2 * W, sizeof(void *));
            impl->slots[s].req_peer = calloc(2 * W, sizeof(int));
            failed = impl->slots[s].reqs == NULL || impl->slots[s].req_peer == NULL;
        }
        if (failed) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the UCX transport");
        }
    }
    if (st == MOE_OK) {
        st = open_worker(impl, err);
    }
    /* Every rank must agree before the collective address swap, or the others would wait
     * in it for one that failed. */
    int ok = st == MOE_OK;
    MPI_Request req;
    moe_error_t *mine = st == MOE_OK ? err : NULL; /* keep this rank's own error */
    moe_status_t agreed =
        MOE_MPI(MPI_Iallreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm, &req), mine);
    if (agreed == MOE_OK) {
        agreed = moe_wait_request(&req, "the UCX start-up agreement", mine);
    }
    if (st == MOE_OK && agreed != MOE_OK) {
        st = agreed;
    } else if (st == MOE_OK && !ok) {
        st = moe_error_set(err, MOE_ERR_UCX, "UCX failed to start on another rank");
    }
    if (st == MOE_OK) {
        st = connect_peers(t, err);
    }
    if (st != MOE_OK) {
        ucx_destroy(t);
        return st;
    }
    *out = t;
    return MOE_OK;
}
