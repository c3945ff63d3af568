/* What every transport shares: slot bookkeeping, the quiet watchdog-guarded wait, and the
 * choice of transport by config. */
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "transport/transport.h"
#include "transport/wait.h"

moe_status_t moe_transport_base_init(moe_transport_t *t, const moe_transport_ops_t *ops,
                                     MPI_Comm comm, int64_t row_elems, int num_slots,
                                     moe_error_t *err)
{
    t->ops = ops;
    t->comm = comm;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &t->rank), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &t->world_size), err);
    }
    if (st != MOE_OK) {
        return st;
    }
    t->row_elems = row_elems;
    t->num_slots = num_slots;
    size_t W = (size_t)t->world_size;
    t->xfer = calloc((size_t)num_slots, sizeof(moe_xfer_t));
    t->peer_scratch = calloc(2 * W, sizeof(int));
    if (t->xfer == NULL || t->peer_scratch == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the %s transport",
                             ops->name);
    }
    for (int s = 0; s < num_slots; s++) {
        t->xfer[s].peer_done_ns = calloc(W, sizeof(int64_t));
        if (t->xfer[s].peer_done_ns == NULL) {
            return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the %s transport",
                                 ops->name);
        }
    }
    return MOE_OK;
}

void moe_transport_base_free(moe_transport_t *t)
{
    for (int s = 0; t->xfer != NULL && s < t->num_slots; s++) {
        free(t->xfer[s].peer_done_ns);
    }
    free(t->xfer);
    free(t->peer_scratch);
    t->xfer = NULL;
    t->peer_scratch = NULL;
}

void moe_transport_base_begin(moe_transport_t *t, int slot)
{
    moe_xfer_t *x = &t->xfer[slot];
    x->active = true;
    x->begin_ns = moe_now_ns();
    x->end_ns = 0;
    for (int p = 0; p < t->world_size; p++) {
        x->peer_done_ns[p] = x->begin_ns;
    }
}

moe_status_t moe_transport_wait(moe_transport_t *t, int slot, const char *what,
                                moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    /* The watchdog counts from when this rank began to wait, not from the start: with
     * chunks the rank computes between the two. */
    int64_t since = moe_now_ns();
    since = since > t->xfer[slot].begin_ns ? since : t->xfer[slot].begin_ns;
    for (;;) {
        bool done = false;
        st = t->ops->test(t, slot, &done, err);
        if (st != MOE_OK || done) {
            break;
        }
        int n = t->ops->pending(t, slot, t->peer_scratch, 2 * t->world_size);
        st = moe_wait_poll(since, what, t->peer_scratch, n, err);
        if (st != MOE_OK) {
            break;
        }
    }
    if (st != MOE_OK) {
        t->ops->cancel(t, slot);
    }
    return st;
}

moe_status_t moe_transport_progress(moe_transport_t *t, moe_error_t *err)
{
    for (int s = 0; s < t->num_slots; s++) {
        if (t->xfer[s].active) {
            bool done;
            moe_status_t st = t->ops->test(t, s, &done, err);
            if (st != MOE_OK) {
                return st;
            }
        }
    }
    return MOE_OK;
}

moe_status_t moe_transport_exchange(moe_transport_t *t, const float *send, const int *send_rows,
                                    const int *send_displs, float *recv, const int *recv_rows,
                                    const int *recv_displs, moe_error_t *err)
{
    moe_status_t st = t->ops->start(t, 0, send, send_rows, send_displs, recv, recv_rows,
                                    recv_displs, NULL, err);
    if (st != MOE_OK) {
        t->ops->cancel(t, 0);
        return st;
    }
    return moe_transport_wait(t, 0, "the row exchange", err);
}

moe_status_t moe_transport_create(moe_transport_kind_t kind, MPI_Comm comm, int64_t row_elems,
                                  int num_slots, const moe_transport_device_t *dev,
                                  moe_transport_t **out, moe_error_t *err)
{
    switch (kind) {
    case MOE_TRANSPORT_MPI:
        return moe_transport_mpi_create(comm, row_elems, num_slots, out, err);
    case MOE_TRANSPORT_UCX:
#ifdef MOE_HAVE_UCX
        return moe_transport_ucx_create(comm, row_elems, num_slots, out, err);
#else
        return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                             "runtime.transport: ucx is not available in this build (built "
                             "without UCX: install libucx-dev and rebuild); use mpi");
#endif
    case MOE_TRANSPORT_NCCL:
#ifdef MOED_HAVE_PLUGIN
        if (dev == NULL || dev->cuda == NULL) {
            return moe_error_set(err, MOE_ERR_CONFIG,
                                 "runtime.transport: nccl moves device buffers; it needs "
                                 "runtime.device: cuda");
        }
        if (dev->nccl_create == NULL) {
            return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                                 "runtime.transport: nccl is not available: the CUDA plug-in "
                                 "was built without NCCL; use mpi or ucx");
        }
        return dev->nccl_create(comm, row_elems, num_slots, dev->cuda, out, err);
#else
        (void)dev;
        return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                             "runtime.transport: nccl is not available in this build (built "
                             "without CUDA/NCCL); use mpi or ucx");
#endif
    }
    return moe_error_set(err, MOE_ERR_INTERNAL, "unknown transport kind %d", (int)kind);
}

void moe_transport_destroy(moe_transport_t *t)
{
    if (t != NULL) {
        t->ops->destroy(t);
    }
}
