/* What a caller of any transport uses: the wrappers of the table's slots (the one file
 * outside the back-ends that calls t->ops), the quiet watchdog-guarded wait, progress, the
 * blocking exchange, and create/destroy (the back-end found in registry.c's table). The
 * slot bookkeeping the back-ends share is common.c's: no back-end calls into this file. */
#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "transport/wait.h"

const char *moe_transport_name(const moe_transport_t *t)
{
    return t->ops->name;
}

bool moe_transport_device_memory(const moe_transport_t *t)
{
    return t->ops->device_memory;
}

moe_status_t moe_transport_start(moe_transport_t *t, int slot, const float *send,
                                 const int *send_rows, const int *send_displs, float *recv,
                                 const int *recv_rows, const int *recv_displs,
                                 const void *after, moe_error_t *err)
{
    return t->ops->start(t, slot, send, send_rows, send_displs, recv, recv_rows, recv_displs,
                         after, err);
}

int moe_transport_recv_upto(const moe_transport_t *t)
{
    return t->ops->recv_upto != NULL ? t->ops->recv_upto(t) : 0;
}

/* `each` needs a transport that takes receives before their counts are known, and a
 * flagged peer's rows within what one such receive takes (more would post several receives
 * for one message: the spare ones would take the next exchange's). */
static moe_status_t each_refused(const moe_transport_t *t, const bool *each, const int *rows,
                                 moe_error_t *err)
{
    int upto = each != NULL ? moe_transport_recv_upto(t) : 0;
    if (each != NULL && upto <= 0) {
        return moe_error_set(err, MOE_ERR_INTERNAL, "the %s transport takes exact counts only "
                             "(a receive posted before its count)", t->ops->name);
    }
    for (int p = 0; each != NULL && p < t->world_size; p++) {
        if (each[p] && p != t->rank && rows[p] > upto) {
            return moe_error_set(err, MOE_ERR_INTERNAL, "%d rows flagged for rank %d, more than "
                                 "the %d a receive posted before its count takes (%s)", rows[p],
                                 p, upto, t->ops->name);
        }
    }
    return MOE_OK;
}

moe_status_t moe_transport_start_sends(moe_transport_t *t, int slot, const float *send,
                                       const int *send_rows, const int *send_displs,
                                       const bool *each, const void *after, moe_error_t *err)
{
    moe_status_t st = each_refused(t, each, send_rows, err);
    if (st != MOE_OK) {
        return st;
    }
    t->sends[slot] = (moe_transport_sends_t){send, send_rows, send_displs, after};
    return t->ops->start_sends != NULL
               ? t->ops->start_sends(t, slot, send, send_rows, send_displs, each, err)
               : MOE_OK;
}

moe_status_t moe_transport_start_recvs(moe_transport_t *t, int slot, float *recv,
                                       const int *recv_rows, const int *recv_displs,
                                       const bool *each, moe_error_t *err)
{
    moe_status_t st = each_refused(t, each, recv_rows, err);
    if (st != MOE_OK) {
        return st;
    }
    const moe_transport_sends_t *h = &t->sends[slot];
    return t->ops->start_recvs != NULL
               ? t->ops->start_recvs(t, slot, recv, recv_rows, recv_displs, each, err)
               : t->ops->start(t, slot, h->send, h->send_rows, h->send_displs, recv, recv_rows,
                               recv_displs, h->after, err);
}

void moe_transport_cancel(moe_transport_t *t, int slot)
{
    t->ops->cancel(t, slot);
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
    } else {
        moe_wait_ended(what, since);
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
    const moe_transport_entry_t *e = moe_transport_find(kind);
    if (e == NULL) {
        return moe_error_set(err, MOE_ERR_INTERNAL, "unknown transport kind %d", (int)kind);
    }
    if (e->create == NULL) {
        return moe_error_set(err, MOE_ERR_UNSUPPORTED, "%s", e->absent);
    }
    return e->create(comm, row_elems, num_slots, dev, out, err);
}

void moe_transport_destroy(moe_transport_t *t)
{
    if (t != NULL) {
        t->ops->destroy(t);
    }
}
