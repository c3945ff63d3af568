/* The MPI transport. Default: one non-blocking receive and send per peer with rows to
 * move, completed with MPI_Testsome so the time each peer's rows arrive is known (the
 * profiler's wait matrix). MOED_MPI_EXCHANGE=alltoallv uses one MPI_Ialltoallv per
 * exchange instead (then every peer's arrival time is the end of the call).
 *
 * Wake-ups (transport/wake.h): a send posts its peer (a receiver napping on this node
 * tests at once), and so does a completed receive: a rendezvous send completes only when
 * the receiver has taken the rows, which MPI tells the sender by a message of its own that
 * posts nothing, so a sender napping on its send would otherwise sleep its nap out.
 *
 * Pieces: a peer's rows go as messages of at most MOE_MPI_PIECE_BYTES (MOED_MPI_PIECE_KB
 * overrides it, for measurements; 0: one message a peer), matched in order (one tag). Each
 * completed piece is progress the wait sees (it spins on instead of napping: moe/poll.h)
 * and posts the peer (its next piece can move). Without MPI's single-copy path (CMA), a
 * large message crosses shared memory in small fragments that move only while both ends
 * call into MPI; whole messages then took ~18x MPI's blocking time. A peer's rows have
 * arrived when its last piece has.
 *
 * Each slot has its own requests and its own tag (ROWS_TAG + slot); MPI's ordering of
 * messages between two ranks with one tag keeps successive uses of a slot apart. */
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "transport/transport.h"
#include "transport/wait.h"
#include "transport/wake.h"

enum { ROWS_TAG = 4242 };
#define MOE_MPI_PIECE_BYTES (256 * 1024)

typedef struct mpi_slot {
    MPI_Request *reqs; /* [cap]: receives and sends, in the order posted */
    int *req_peer;     /* [cap]: receives: the peer; sends: -2 - peer */
    int *recv_left;    /* [world]: pieces of each peer's rows not yet arrived */
    int nreq, left, cap;
    bool open;         /* sends posted, receives not yet (start_sends): not complete */
    const float *own;  /* the own block's rows in the send buffer (start_sends) */
} mpi_slot_t;

typedef struct mpi_impl {
    MPI_Datatype row_type; /* row_elems contiguous floats: counts stay in rows */
    int use_alltoallv;
    int piece_rows;        /* rows a message at most */
    mpi_slot_t *slots;     /* [num_slots] */
    int *done_idx;         /* [done_cap] scratch for MPI_Testsome */
    int done_cap;
} mpi_impl_t;

/* The messages rows[peer] make: one per piece_rows, one when there are none but the peer
 * is flagged in `each` (transport.h: one message even without rows). */
static int pieces_of(const mpi_impl_t *impl, const int *rows, const bool *each, int peer)
{
    return !moe_transport_has_message(rows, each, peer) ? 0
           : rows[peer] > 0                            ? (rows[peer] - 1) / impl->piece_rows + 1
                                                       : 1;
}

/* Room for n requests in slot s (grown only: after the first steps, nothing is allocated). */
static moe_status_t mpi_reserve(mpi_impl_t *impl, mpi_slot_t *s, int n, moe_error_t *err)
{
    if (n > s->cap) {
        MPI_Request *r = realloc(s->reqs, (size_t)n * sizeof(*r));
        s->reqs = r != NULL ? r : s->reqs;
        int *q = r != NULL ? realloc(s->req_peer, (size_t)n * sizeof(*q)) : NULL;
        s->req_peer = q != NULL ? q : s->req_peer;
        if (q == NULL) {
            return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %d MPI requests", n);
        }
        s->cap = n;
    }
    if (n > impl->done_cap) {
        int *d = realloc(impl->done_idx, (size_t)n * sizeof(*d));
        if (d == NULL) {
            return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %d MPI requests", n);
        }
        impl->done_idx = d;
        impl->done_cap = n;
    }
    return MOE_OK;
}

/* Post the receives of rows from every peer (recv_rows[p] from p at recv_displs[p]; a peer
 * flagged in `each`: one receive of up to recv_rows[p] <= piece_rows) after the slot's nreq
 * requests; the own block is not received. After a failed post the slot counts only the
 * requests posted before it, for cancel to release. */
static moe_status_t post_recvs(moe_transport_t *t, mpi_slot_t *s, int tag, float *recv,
                               const int *recv_rows, const int *recv_displs, const bool *each,
                               moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    int W = t->world_size, me = t->rank, n = s->nreq, P = impl->piece_rows;
    size_t row = (size_t)t->row_elems;
    int need = n;
    for (int p = 0; p < W; p++) {
        need += p != me ? pieces_of(impl, recv_rows, each, p) : 0;
    }
    moe_status_t st = mpi_reserve(impl, s, need, err);
    for (int i = 1; i <= W && st == MOE_OK; i++) {
        int p = (me - i + W) % W; /* staggered so peers do not all hit rank 0 first */
        int pieces = p != me ? pieces_of(impl, recv_rows, each, p) : 0;
        s->recv_left[p] = 0;
        for (int64_t j = 0, r = 0; j < pieces && st == MOE_OK; j++, r += P) {
            int rows = recv_rows[p] - r < P ? (int)(recv_rows[p] - r) : P;
            st = MOE_MPI(MPI_Irecv(recv + ((size_t)recv_displs[p] + (size_t)r) * row, rows,
                                   impl->row_type, p, tag, t->comm, &s->reqs[n]),
                         err);
            if (st == MOE_OK) {
                s->req_peer[n++] = p;
                s->recv_left[p]++;
            }
        }
    }
    s->left += n - s->nreq;
    s->nreq = n;
    return st;
}

/* Post the sends of rows to every peer (and a message to each peer flagged in `each`, rows
 * or not) after the slot's nreq requests, each peer posted (a peer napping on this node
 * tests at once). */
static moe_status_t post_sends(moe_transport_t *t, mpi_slot_t *s, int tag, const float *send,
                               const int *send_rows, const int *send_displs, const bool *each,
                               moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    int W = t->world_size, me = t->rank, n = s->nreq, P = impl->piece_rows;
    size_t row = (size_t)t->row_elems;
    int need = n;
    for (int p = 0; p < W; p++) {
        need += p != me ? pieces_of(impl, send_rows, each, p) : 0;
    }
    moe_status_t st = mpi_reserve(impl, s, need, err);
    for (int i = 1; i <= W && st == MOE_OK; i++) {
        int p = (me + i) % W;
        int pieces = p != me ? pieces_of(impl, send_rows, each, p) : 0;
        for (int64_t j = 0, r = 0; j < pieces && st == MOE_OK; j++, r += P) {
            int rows = send_rows[p] - r < P ? (int)(send_rows[p] - r) : P;
            st = MOE_MPI(MPI_Isend(send + ((size_t)send_displs[p] + (size_t)r) * row, rows,
                                   impl->row_type, p, tag, t->comm, &s->reqs[n]),
                         err);
            if (st == MOE_OK) {
                s->req_peer[n++] = -2 - p;
            }
        }
        if (pieces > 0 && st == MOE_OK) {
            moe_wake_post(p);
        }
    }
    s->left += n - s->nreq;
    s->nreq = n;
    s->own = send + (size_t)send_displs[me] * row;
    return st;
}

/* Every receive, then every send, then the own block. */
static moe_status_t post_p2p(moe_transport_t *t, int slot, const float *send,
                             const int *send_rows, const int *send_displs, float *recv,
                             const int *recv_rows, const int *recv_displs, moe_error_t *err)
{
    mpi_slot_t *s = &((mpi_impl_t *)t->impl)->slots[slot];
    int tag = ROWS_TAG + slot;
    s->nreq = s->left = 0;
    s->open = false;
    moe_status_t st = post_recvs(t, s, tag, recv, recv_rows, recv_displs, NULL, err);
    if (st == MOE_OK) {
        st = post_sends(t, s, tag, send, send_rows, send_displs, NULL, err);
    }
    if (st == MOE_OK) {
        moe_transport_base_copy_own(t, s->own, recv, recv_rows, recv_displs);
    }
    return st;
}

static moe_status_t mpi_start(moe_transport_t *t, int slot, const float *send,
                              const int *send_rows, const int *send_displs, float *recv,
                              const int *recv_rows, const int *recv_displs, const void *after,
                              moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    mpi_slot_t *s = &impl->slots[slot];
    moe_transport_base_begin(t, slot);
    if (impl->use_alltoallv) {
        s->req_peer[0] = -1;
        s->nreq = s->left = 1;
        return MOE_MPI(MPI_Ialltoallv(send, send_rows, send_displs, impl->row_type, recv,
                                      recv_rows, recv_displs, impl->row_type, t->comm,
                                      &s->reqs[0]),
                       err);
    }
    return post_p2p(t, slot, send, send_rows, send_displs, recv, recv_rows, recv_displs, err);
}

/* The sends now (the slot stays open until its receives are posted); alltoallv posts the
 * whole exchange at start_recvs. */
static moe_status_t mpi_start_sends(moe_transport_t *t, int slot, const float *send,
                                    const int *send_rows, const int *send_displs,
                                    const bool *each, moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    mpi_slot_t *s = &impl->slots[slot];
    if (impl->use_alltoallv) {
        return MOE_OK;
    }
    moe_transport_base_begin(t, slot);
    s->nreq = s->left = 0;
    s->open = true;
    return post_sends(t, s, ROWS_TAG + slot, send, send_rows, send_displs, each, err);
}

static moe_status_t mpi_start_recvs(moe_transport_t *t, int slot, float *recv,
                                    const int *recv_rows, const int *recv_displs,
                                    const bool *each, moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    mpi_slot_t *s = &impl->slots[slot];
    if (impl->use_alltoallv) {
        const moe_transport_sends_t *h = &t->sends[slot];
        return mpi_start(t, slot, h->send, h->send_rows, h->send_displs, recv, recv_rows,
                         recv_displs, NULL, err);
    }
    moe_status_t st = post_recvs(t, s, ROWS_TAG + slot, recv, recv_rows, recv_displs, each,
                                 err);
    if (st == MOE_OK) {
        moe_transport_base_copy_own(t, s->own, recv, recv_rows, recv_displs);
        s->open = false;
    }
    return st;
}

static moe_status_t mpi_test(moe_transport_t *t, int slot, bool *done, moe_error_t *err)
{
    mpi_impl_t *impl = t->impl;
    mpi_slot_t *s = &impl->slots[slot];
    moe_xfer_t *x = &t->xfer[slot];
    *done = !x->active;
    if (!x->active) {
        return MOE_OK;
    }
    int ndone = 0;
    if (s->left > 0) {
        moe_status_t st = MOE_MPI(MPI_Testsome(s->nreq, s->reqs, &ndone, impl->done_idx,
                                               MPI_STATUSES_IGNORE),
                                  err);
        if (st != MOE_OK) {
            return st;
        }
    }
    int64_t now = moe_now_ns();
    if (ndone == MPI_UNDEFINED) { /* no request left active */
        s->left = 0;
    } else {
        for (int i = 0; i < ndone; i++) {
            int peer = s->req_peer[impl->done_idx[i]];
            if (peer >= 0 && --s->recv_left[peer] == 0) {
                x->peer_done_ns[peer] = now;
            }
            /* a receive: the sender may wait for it (its next piece, or its rendezvous
             * send's end); a send: the receiver can take the next piece */
            moe_wake_post(peer >= 0 ? peer : -2 - peer);
        }
        if (ndone > 0 && s->left > ndone) {
            moe_wait_progress(); /* more pieces to come: keep testing while they flow */
        }
        s->left -= ndone;
    }
    if (s->left == 0 && !s->open) {
        if (impl->use_alltoallv) {
            for (int p = 0; p < t->world_size; p++) {
                x->peer_done_ns[p] = now;
            }
        }
        x->active = false;
        x->end_ns = now;
        *done = true;
    }
    return MOE_OK;
}

/* The peers still owing this rank its rows or not yet taking its rows; each once. */
static int mpi_pending(const moe_transport_t *t, int slot, int *out, int cap)
{
    const mpi_impl_t *impl = t->impl;
    const mpi_slot_t *s = &impl->slots[slot];
    int n = 0;
    for (int i = 0; i < s->nreq; i++) {
        if (s->reqs[i] != MPI_REQUEST_NULL && s->req_peer[i] != -1) {
            int peer = s->req_peer[i] >= 0 ? s->req_peer[i] : -2 - s->req_peer[i];
            n = moe_wait_note_peer(out, n, cap, peer);
        }
    }
    return n;
}

/* The job is ending (error or stop): receives still posted are cancelled (local), so no
 * late message lands in a buffer about to be freed; sends are released to complete on
 * their own. A non-blocking collective cannot be cancelled: it is left to MPI's end.
 * The job already has its error: a failure here is logged, not returned. */
static void mpi_cancel(moe_transport_t *t, int slot)
{
    mpi_impl_t *impl = t->impl;
    mpi_slot_t *s = &impl->slots[slot];
    for (int i = 0; i < s->nreq && !impl->use_alltoallv; i++) {
        if (s->reqs[i] == MPI_REQUEST_NULL) {
            continue;
        }
        if (s->req_peer[i] >= 0) {
            MOE_MPI(MPI_Cancel(&s->reqs[i]), NULL);
        }
        MOE_MPI(MPI_Request_free(&s->reqs[i]), NULL);
    }
    s->left = 0;
    s->open = false;
    t->xfer[slot].active = false;
}

static void mpi_destroy(moe_transport_t *t)
{
    mpi_impl_t *impl = t->impl;
    if (impl != NULL) {
        if (impl->row_type != MPI_DATATYPE_NULL) {
            MOE_MPI(MPI_Type_free(&impl->row_type), NULL); /* logged: destroy returns nothing */
        }
        for (int s = 0; impl->slots != NULL && s < t->num_slots; s++) {
            free(impl->slots[s].reqs);
            free(impl->slots[s].req_peer);
            free(impl->slots[s].recv_left);
        }
        free(impl->slots);
        free(impl->done_idx);
        free(impl);
    }
    moe_transport_base_free(t);
    free(t);
}

/* A receive of up to one piece may be posted before its count: MPI completes it with the
 * shorter message (not with MOED_MPI_EXCHANGE=alltoallv, whose counts are exact). */
static int mpi_recv_upto(const moe_transport_t *t)
{
    const mpi_impl_t *impl = t->impl;
    return impl->use_alltoallv ? 0 : impl->piece_rows;
}

static const moe_transport_ops_t k_mpi_ops = {
    .name = "mpi",
    .device_memory = false,
    .start = mpi_start,
    .start_sends = mpi_start_sends,
    .start_recvs = mpi_start_recvs,
    .recv_upto = mpi_recv_upto,
    .test = mpi_test,
    .pending = mpi_pending,
    .cancel = mpi_cancel,
    .destroy = mpi_destroy,
};

static moe_status_t mpi_alloc(moe_transport_t *t, mpi_impl_t *impl, moe_error_t *err)
{
    size_t W = (size_t)t->world_size;
    impl->slots = calloc((size_t)t->num_slots, sizeof(mpi_slot_t));
    impl->done_idx = calloc(2 * W, sizeof(int));
    impl->done_cap = 2 * (int)W;
    bool failed = impl->slots == NULL || impl->done_idx == NULL;
    for (int s = 0; !failed && s < t->num_slots; s++) {
        impl->slots[s].reqs = calloc(2 * W, sizeof(MPI_Request));
        impl->slots[s].req_peer = calloc(2 * W, sizeof(int));
        impl->slots[s].recv_left = calloc(W, sizeof(int));
        impl->slots[s].cap = 2 * (int)W;
        failed = impl->slots[s].reqs == NULL || impl->slots[s].req_peer == NULL ||
                 impl->slots[s].recv_left == NULL;
    }
    return failed ? moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the MPI transport")
                  : MOE_OK;
}

moe_status_t moe_transport_mpi_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                      moe_transport_t **out, moe_error_t *err)
{
    moe_transport_t *t = calloc(1, sizeof(*t));
    mpi_impl_t *impl = calloc(1, sizeof(*impl));
    if (t == NULL || impl == NULL) {
        free(t);
        free(impl);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the MPI transport");
    }
    t->impl = impl;
    impl->row_type = MPI_DATATYPE_NULL;
    const char *mode = getenv("MOED_MPI_EXCHANGE");
    impl->use_alltoallv = mode != NULL && strcmp(mode, "alltoallv") == 0;
    /* MOED_MPI_PIECE_KB: the piece size in KiB (0: one message a peer), for measurements */
    const char *kb = getenv("MOED_MPI_PIECE_KB");
    long piece = kb != NULL && *kb != '\0' ? strtol(kb, NULL, 10) * 1024 : MOE_MPI_PIECE_BYTES;
    long row_bytes = (long)row_elems * (long)sizeof(float);
    impl->piece_rows = piece <= 0 || row_bytes <= 0 ? INT_MAX
                       : piece / row_bytes > 0      ? (int)(piece / row_bytes)
                                                    : 1;
    moe_status_t st = moe_transport_base_init(t, &k_mpi_ops, comm, row_elems, num_slots, err);
    if (st == MOE_OK) {
        st = mpi_alloc(t, impl, err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Type_contiguous((int)row_elems, MPI_FLOAT, &impl->row_type), err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Type_commit(&impl->row_type), err);
    }
    if (st != MOE_OK) {
        mpi_destroy(t);
        return st;
    }
    *out = t;
    return MOE_OK;
}
