/* The UCX transport: the same exchange as the MPI one (one receive and one send per peer
 * with rows, the own block a memcpy) over UCP tagged messages. One context (tag feature),
 * one single-threaded worker, an endpoint to every other rank; the worker addresses are
 * swapped over MPI at create. A message's tag is the exchange's sequence number (high 32
 * bits) and the sending rank (low 32), matched with the full mask, so rows of one exchange
 * never match another's. Requests are polled with ucp_request_check_status after each
 * ucp_worker_progress; when a progress call moved nothing the wait goes through
 * moe_wait_poll (stop requests, the watchdog). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "clock.h"
#include "transport.h"
#include "wait.h"

/* How long destroy keeps progressing endpoint closes before giving up on them. */
#define CLOSE_WAIT_NS (5 * 1000 * 1000 * 1000LL)

typedef struct ucx_impl {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h *eps;     /* [world]; NULL for self */
    void **reqs;       /* [2 * world]: outstanding requests, NULL once complete */
    int *req_peer;     /* [2 * world]: receives: the peer; sends: -2 - peer */
    int *pending;      /* [2 * world]: scratch for the watchdog's peer list */
    uint32_t seq;      /* exchanges so far: the high half of every tag */
    bool failed;       /* an exchange was abandoned: close endpoints by force */
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

static ucp_tag_t rows_tag(uint32_t seq, int src)
{
    return ((uint64_t)seq << 32) | (uint32_t)src;
}

/* The status of a just-posted operation: NULL = done now, an error pointer, or a request
 * (stored at reqs[*n], peer code at req_peer[*n], *n advanced). Returns UCS_OK or the error. */
static ucs_status_t keep_request(ucx_impl_t *impl, ucs_status_ptr_t sp, int peer_code, int *n)
{
    if (sp == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(sp)) {
        return UCS_PTR_STATUS(sp);
    }
    impl->reqs[*n] = sp;
    impl->req_peer[(*n)++] = peer_code;
    return UCS_OK;
}

/* Post every receive, then every send; the own block is a memcpy. A receive that completes
 * at once stamps its peer here. */
static moe_status_t post_all(moe_transport_t *t, const float *send, const int *send_rows,
                             const int *send_displs, float *recv, const int *recv_rows,
                             const int *recv_displs, int *nreq, moe_error_t *err)
{
    ucx_impl_t *impl = t->impl;
    int W = t->world_size, me = t->rank;
    size_t row_bytes = (size_t)t->row_elems * sizeof(float);
    ucp_request_param_t param = {.op_attr_mask = 0};
    moe_status_t st = MOE_OK;
    *nreq = 0;
    for (int i = 1; i <= W; i++) {
        int p = (me - i + W) % W; /* staggered like the MPI transport */
        if (p != me && recv_rows[p] > 0) {
            int before = *nreq;
            ucs_status_ptr_t sp = ucp_tag_recv_nbx(
                impl->worker, (char *)recv + (size_t)recv_displs[p] * row_bytes,
                (size_t)recv_rows[p] * row_bytes, rows_tag(impl->seq, p), UINT64_MAX, &param);
            MOE_UCX_CHECK(keep_request(impl, sp, p, nreq), "ucp_tag_recv_nbx (row exchange)");
            if (*nreq == before) {
                t->peer_done_ns[p] = moe_now_ns();
            }
        }
    }
    for (int i = 1; i <= W; i++) {
        int p = (me + i) % W;
        if (p != me && send_rows[p] > 0) {
            ucs_status_ptr_t sp = ucp_tag_send_nbx(
                impl->eps[p], (const char *)send + (size_t)send_displs[p] * row_bytes,
                (size_t)send_rows[p] * row_bytes, rows_tag(impl->seq, me), &param);
            MOE_UCX_CHECK(keep_request(impl, sp, -2 - p, nreq), "ucp_tag_send_nbx (row exchange)");
        }
    }
    if (recv_rows[me] > 0) {
        memcpy((char *)recv + (size_t)recv_displs[me] * row_bytes,
               (const char *)send + (size_t)send_displs[me] * row_bytes,
               (size_t)recv_rows[me] * row_bytes);
    }
cleanup:
    return st;
}

/* Retire the requests that have finished: stamp receives, free them. Returns how many
 * finished; *first_bad gets the first failure's status (else stays UCS_OK). */
static int retire_done(moe_transport_t *t, int nreq, ucs_status_t *first_bad)
{
    ucx_impl_t *impl = t->impl;
    int done = 0;
    int64_t now = 0;
    for (int i = 0; i < nreq; i++) {
        if (impl->reqs[i] == NULL) {
            continue;
        }
        ucs_status_t s = ucp_request_check_status(impl->reqs[i]);
        if (s == UCS_INPROGRESS) {
            continue;
        }
        ucp_request_free(impl->reqs[i]);
        impl->reqs[i] = NULL;
        done++;
        if (s != UCS_OK && *first_bad == UCS_OK) {
            *first_bad = s;
        }
        if (impl->req_peer[i] >= 0) {
            now = now != 0 ? now : moe_now_ns();
            t->peer_done_ns[impl->req_peer[i]] = now;
        }
    }
    return done;
}

/* The peers still owing rows or not yet taking ours, each once (for the watchdog). */
static int pending_peers(const ucx_impl_t *impl, int nreq, int *out)
{
    int n = 0;
    for (int i = 0; i < nreq; i++) {
        if (impl->reqs[i] == NULL) {
            continue;
        }
        int peer = impl->req_peer[i] >= 0 ? impl->req_peer[i] : -2 - impl->req_peer[i];
        n = moe_wait_note_peer(out, n, nreq, peer); /* out holds nreq */
    }
    return n;
}

/* After a failed or interrupted exchange: cancel what is still outstanding and hand the
 * requests back (UCX frees each once it completes). */
static void abandon_requests(ucx_impl_t *impl, int nreq)
{
    for (int i = 0; i < nreq; i++) {
        if (impl->reqs[i] != NULL) {
            ucp_request_cancel(impl->worker, impl->reqs[i]);
            ucp_request_free(impl->reqs[i]);
            impl->reqs[i] = NULL;
        }
    }
    impl->failed = true;
}

static moe_status_t ucx_exchange(moe_transport_t *t, const float *send, const int *send_rows,
                                 const int *send_displs, float *recv, const int *recv_rows,
                                 const int *recv_displs, moe_error_t *err)
{
    ucx_impl_t *impl = t->impl;
    int nreq = 0, left;
    t->begin_ns = moe_now_ns();
    for (int p = 0; p < t->world_size; p++) {
        t->peer_done_ns[p] = t->begin_ns;
    }
    impl->seq++;
    moe_status_t st = post_all(t, send, send_rows, send_displs, recv, recv_rows, recv_displs,
                               &nreq, err);
    left = st == MOE_OK ? nreq : 0;
    while (st == MOE_OK && left > 0) {
        unsigned moved = ucp_worker_progress(impl->worker);
        ucs_status_t bad = UCS_OK;
        int done = retire_done(t, nreq, &bad);
        left -= done;
        MOE_UCX_CHECK(bad, "a UCX row transfer");
        if (moved == 0 && done == 0 && left > 0) {
            int n = pending_peers(impl, nreq, impl->pending);
            st = moe_wait_poll(t->begin_ns, "the row exchange (ucx)", impl->pending, n, err);
        }
    }
cleanup:
    if (st != MOE_OK) {
        abandon_requests(impl, nreq);
    }
    return st;
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

static void ucx_destroy(moe_transport_t *t)
{
    ucx_impl_t *impl = t->impl;
    if (impl != NULL) {
        for (int p = 0; impl->eps != NULL && p < t->world_size; p++) {
            if (impl->eps[p] != NULL) {
                close_endpoint(impl, impl->eps[p]);
            }
        }
        if (impl->worker != NULL) {
            ucp_worker_destroy(impl->worker);
        }
        if (impl->context != NULL) {
            ucp_cleanup(impl->context);
        }
        free(impl->eps);
        free(impl->reqs);
        free(impl->req_peer);
        free(impl->pending);
        free(impl);
    }
    free(t->peer_done_ns);
    free(t);
}

static const moe_transport_ops_t k_ucx_ops = {
    .name = "ucx",
    .exchange = ucx_exchange,
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
    st = moe_mpi_check(MPI_Allgather(&my_len, 1, MPI_INT, lens, 1, MPI_INT, t->comm),
                       "MPI_Allgather (UCX address lengths)", err);
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
    st = moe_mpi_check(MPI_Allgatherv(mine, my_len, MPI_BYTE, all, lens, displs, MPI_BYTE,
                                      t->comm),
                       "MPI_Allgatherv (UCX addresses)", err);
    for (int p = 0; p < W && st == MOE_OK; p++) {
        if (p == t->rank) {
            continue;
        }
        ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                     .address = (const ucp_address_t *)(all + displs[p])};
        MOE_UCX_CHECK(ucp_ep_create(impl->worker, &ep_params, &impl->eps[p]), "ucp_ep_create");
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

moe_status_t moe_transport_ucx_create(MPI_Comm comm, int64_t row_elems, moe_transport_t **out,
                                      moe_error_t *err)
{
    moe_transport_t *t = calloc(1, sizeof(*t));
    ucx_impl_t *impl = calloc(1, sizeof(*impl));
    if (t == NULL || impl == NULL) {
        free(t);
        free(impl);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the UCX transport");
    }
    t->ops = &k_ucx_ops;
    t->comm = comm;
    MPI_Comm_rank(comm, &t->rank);
    MPI_Comm_size(comm, &t->world_size);
    t->row_elems = row_elems;
    t->impl = impl;
    size_t W = (size_t)t->world_size;
    t->peer_done_ns = calloc(W, sizeof(int64_t));
    impl->eps = calloc(W, sizeof(ucp_ep_h));
    impl->reqs = calloc(2 * W, sizeof(void *));
    impl->req_peer = calloc(2 * W, sizeof(int));
    impl->pending = calloc(2 * W, sizeof(int));
    moe_status_t st = MOE_OK;
    if (t->peer_done_ns == NULL || impl->eps == NULL || impl->reqs == NULL ||
        impl->req_peer == NULL || impl->pending == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the UCX transport");
    }
    if (st == MOE_OK) {
        st = open_worker(impl, err);
    }
    /* Every rank must agree before the collective address swap, or the others would wait
     * in it for one that failed. */
    int ok = st == MOE_OK;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (st == MOE_OK && !ok) {
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
