/* The MPI transport. Default: one non-blocking receive and send per peer with rows to
 * move, completed with MPI_Testsome so the time each peer's rows arrive is known (the
 * profiler's wait matrix), and waited for quietly. MOED_MPI_EXCHANGE=alltoallv uses one
 * MPI_Alltoallv instead (then every peer's arrival time is the end of the call). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "transport.h"
#include "wait.h"

enum { ROWS_TAG = 4242 };

typedef struct mpi_impl {
    MPI_Datatype row_type; /* row_elems contiguous floats: counts stay in rows */
    int use_alltoallv;
    MPI_Request *reqs;     /* [2 * world]: receives first, then sends */
    int *req_peer;         /* [2 * world]: receives: the peer; sends: -2 - peer */
    int *done_idx;         /* [2 * world] */
} mpi_impl_t;

moe_status_t moe_mpi_check(int mpi_rc, const char *what, moe_error_t *err)
{
    if (mpi_rc == MPI_SUCCESS) {
        return MOE_OK;
    }
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(mpi_rc, text, &len);
    return moe_error_set(err, MOE_ERR_MPI, "%s failed: %s", what, text);
}

static moe_status_t exchange_alltoallv(moe_transport_t *t, const float *send,
                                       const int *send_rows, const int *send_displs,
                                       float *recv, const int *recv_rows,
                                       const int *recv_displs, moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    MPI_Request req;
    int rc = MPI_Ialltoallv(send, send_rows, send_displs, impl->row_type, recv, recv_rows,
                            recv_displs, impl->row_type, t->comm, &req);
    moe_status_t st = rc == MPI_SUCCESS ? moe_wait_request(&req, "the row exchange", err)
                                        : moe_mpi_check(rc, "MPI_Ialltoallv", err);
    int64_t end = moe_now_ns();
    for (int p = 0; p < t->world_size; p++) {
        t->peer_done_ns[p] = recv_rows[p] > 0 ? end : t->begin_ns;
    }
    return st;
}

/* Post every receive, then every send; the own block is a memcpy. Returns requests. */
static int post_p2p(moe_transport_t *t, const float *send, const int *send_rows,
                    const int *send_displs, float *recv, const int *recv_rows,
                    const int *recv_displs, int *nreq)
{
    mpi_impl_t *impl = t->impl;
    int W = t->world_size, me = t->rank, n = 0, rc = MPI_SUCCESS;
    size_t row_bytes = (size_t)t->row_elems * sizeof(float);
    for (int i = 1; i <= W && rc == MPI_SUCCESS; i++) {
        int p = (me - i + W) % W; /* staggered so peers do not all hit rank 0 first */
        if (p != me && recv_rows[p] > 0) {
            rc = MPI_Irecv(recv + (size_t)recv_displs[p] * (size_t)t->row_elems, recv_rows[p],
                           impl->row_type, p, ROWS_TAG, t->comm, &impl->reqs[n]);
            impl->req_peer[n++] = p;
        }
    }
    for (int i = 1; i <= W && rc == MPI_SUCCESS; i++) {
        int p = (me + i) % W;
        if (p != me && send_rows[p] > 0) {
            rc = MPI_Isend(send + (size_t)send_displs[p] * (size_t)t->row_elems, send_rows[p],
                           impl->row_type, p, ROWS_TAG, t->comm, &impl->reqs[n]);
            impl->req_peer[n++] = -2 - p;
        }
    }
    if (recv_rows[me] > 0) {
        memcpy(recv + (size_t)recv_displs[me] * (size_t)t->row_elems,
               send + (size_t)send_displs[me] * (size_t)t->row_elems,
               (size_t)recv_rows[me] * row_bytes);
    }
    *nreq = n;
    return rc;
}

/* The peers still owing this rank its rows or not yet taking its rows (for the watchdog's
 * message); a peer appears once. */
static int pending_peers(const mpi_impl_t *impl, int nreq, int *out)
{
    int n = 0;
    for (int i = 0; i < nreq; i++) {
        if (impl->reqs[i] == MPI_REQUEST_NULL) {
            continue;
        }
        int peer = impl->req_peer[i] >= 0 ? impl->req_peer[i] : -2 - impl->req_peer[i];
        n = moe_wait_note_peer(out, n, nreq, peer); /* out holds nreq */
    }
    return n;
}

static moe_status_t exchange_p2p(moe_transport_t *t, const float *send, const int *send_rows,
                                 const int *send_displs, float *recv, const int *recv_rows,
                                 const int *recv_displs, moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    int nreq = 0, left;
    for (int p = 0; p < t->world_size; p++) {
        t->peer_done_ns[p] = t->begin_ns;
    }
    int rc = post_p2p(t, send, send_rows, send_displs, recv, recv_rows, recv_displs, &nreq);
    if (rc != MPI_SUCCESS) {
        return moe_mpi_check(rc, "posting the row exchange", err);
    }
    left = nreq;
    moe_status_t st = MOE_OK;
    while (st == MOE_OK && left > 0) {
        int ndone = 0;
        rc = MPI_Testsome(nreq, impl->reqs, &ndone, impl->done_idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || ndone == MPI_UNDEFINED) {
            st = rc != MPI_SUCCESS ? moe_mpi_check(rc, "MPI_Testsome (row exchange)", err) : MOE_OK;
            break;
        }
        int64_t now = moe_now_ns();
        for (int i = 0; i < ndone; i++) {
            int peer = impl->req_peer[impl->done_idx[i]];
            if (peer >= 0) {
                t->peer_done_ns[peer] = now;
            }
        }
        left -= ndone;
        if (ndone == 0 && left > 0) {
            int n = pending_peers(impl, nreq, impl->done_idx);
            st = moe_wait_poll(t->begin_ns, "the row exchange", impl->done_idx, n, err);
        }
    }
    return st;
}

static moe_status_t mpi_exchange(moe_transport_t *t, const float *send, const int *send_rows,
                                 const int *send_displs, float *recv, const int *recv_rows,
                                 const int *recv_displs, moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    t->begin_ns = moe_now_ns();
    if (impl->use_alltoallv) {
        return exchange_alltoallv(t, send, send_rows, send_displs, recv, recv_rows,
                                  recv_displs, err);
    }
    return exchange_p2p(t, send, send_rows, send_displs, recv, recv_rows, recv_displs, err);
}

static void mpi_destroy(moe_transport_t *t)
{
    mpi_impl_t *impl = t->impl;
    if (impl != NULL) {
        if (impl->row_type != MPI_DATATYPE_NULL) {
            MPI_Type_free(&impl->row_type);
        }
        free(impl->reqs);
        free(impl->req_peer);
        free(impl->done_idx);
        free(impl);
    }
    free(t->peer_done_ns);
    free(t);
}

static const moe_transport_ops_t k_mpi_ops = {
    .name = "mpi",
    .exchange = mpi_exchange,
    .destroy = mpi_destroy,
};

moe_status_t moe_transport_mpi_create(MPI_Comm comm, int64_t row_elems, moe_transport_t **out,
                                      moe_error_t *err)
{
    moe_transport_t *t = calloc(1, sizeof(*t));
    mpi_impl_t *impl = calloc(1, sizeof(*impl));
    if (t == NULL || impl == NULL) {
        free(t);
        free(impl);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the MPI transport");
    }
    t->ops = &k_mpi_ops;
    t->comm = comm;
    MPI_Comm_rank(comm, &t->rank);
    MPI_Comm_size(comm, &t->world_size);
    t->row_elems = row_elems;
    t->impl = impl;
    impl->row_type = MPI_DATATYPE_NULL;
    const char *mode = getenv("MOED_MPI_EXCHANGE");
    impl->use_alltoallv = mode != NULL && strcmp(mode, "alltoallv") == 0;
    size_t W = (size_t)t->world_size;
    t->peer_done_ns = calloc(W, sizeof(int64_t));
    impl->reqs = calloc(2 * W, sizeof(MPI_Request));
    impl->req_peer = calloc(2 * W, sizeof(int));
    impl->done_idx = calloc(2 * W, sizeof(int));
    moe_status_t st = MOE_OK;
    if (t->peer_done_ns == NULL || impl->reqs == NULL || impl->req_peer == NULL ||
        impl->done_idx == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the MPI transport");
    }
    if (st == MOE_OK) {
        st = moe_mpi_check(MPI_Type_contiguous((int)row_elems, MPI_FLOAT, &impl->row_type),
                           "MPI_Type_contiguous", err);
    }
    if (st == MOE_OK) {
        st = moe_mpi_check(MPI_Type_commit(&impl->row_type), "MPI_Type_commit", err);
    }
    if (st != MOE_OK) {
        mpi_destroy(t);
        return st;
    }
    *out = t;
    return MOE_OK;
}

moe_status_t moe_transport_create(moe_transport_kind_t kind, MPI_Comm comm, int64_t row_elems,
                                  moe_transport_t **out, moe_error_t *err)
{
    switch (kind) {
    case MOE_TRANSPORT_MPI:
        return moe_transport_mpi_create(comm, row_elems, out, err);
    case MOE_TRANSPORT_UCX:
#ifdef MOE_HAVE_UCX
        return moe_transport_ucx_create(comm, row_elems, out, err);
#else
        break;
#endif
    case MOE_TRANSPORT_NCCL:
        break;
    }
    return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                         "runtime.transport: '%s' is not available in this build; use mpi",
                         kind == MOE_TRANSPORT_UCX ? "ucx" : "nccl");
}

void moe_transport_destroy(moe_transport_t *t)
{
    if (t != NULL) {
        t->ops->destroy(t);
    }
}
