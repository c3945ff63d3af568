/* What every transport back-end shares (mpi.c, ucx.c, nccl.c in the CUDA plug-in): the
 * slot bookkeeping. It calls no back-end and nothing of transport.c. */
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "transport/transport.h"

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
    t->sends = calloc((size_t)num_slots, sizeof(moe_transport_sends_t));
    if (t->xfer == NULL || t->peer_scratch == NULL || t->sends == NULL) {
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
    free(t->sends);
    t->xfer = NULL;
    t->peer_scratch = NULL;
    t->sends = NULL;
}

void moe_transport_base_copy_own(const moe_transport_t *t, const void *own, void *recv,
                                 const int *recv_rows, const int *recv_displs)
{
    size_t row_bytes = (size_t)t->row_elems * sizeof(float);
    if (recv_rows[t->rank] > 0) {
        memcpy((char *)recv + (size_t)recv_displs[t->rank] * row_bytes, own,
               (size_t)recv_rows[t->rank] * row_bytes);
    }
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
