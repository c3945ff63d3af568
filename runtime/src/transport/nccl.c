/* The NCCL transport: the row exchange on device buffers, for runtime.device: cuda.
 *
 * An exchange is one NCCL group: between ncclGroupStart and ncclGroupEnd, an ncclRecv from
 * and an ncclSend to every other rank with rows. NCCL runs a group as one all-to-all
 * kernel, so every pair's transfers progress together and a rank never waits on one peer
 * before it can serve another. The own block is a device-to-device copy on the same stream.
 *
 * One communicator, one communication stream owned by the transport (non-blocking, so it
 * never waits for the legacy default stream). Slots run in start order on that stream, as
 * NCCL requires: every rank starts the same exchanges in the same order, so the groups match.
 * A CUDA event records only the last work queued before it, so each slot has its own
 * event, recorded after its group: test() asks that event whether its exchange is over.
 * NCCL completes a group as a whole, so every peer of a slot is stamped done at the same
 * time (the wait matrix shows the group's end for all of them).
 *
 * The communicator is non-blocking (config.blocking = 0): NCCL never blocks the calling
 * thread in init, ncclGroupEnd or finalize; it answers ncclInProgress and finishes in the
 * background, and nothing else may be called on the communicator until
 * ncclCommGetAsyncError says ncclSuccess. Those polls go through moe_wait_poll, and the
 * exchange waits through moe_transport_wait polling test(), so the step watchdog and a
 * stop request (Ctrl-C) interrupt every wait here, naming the peers.
 *
 * A group cannot be taken back once posted. So cancel() (after an error, the watchdog or a
 * stop) only marks the slot given up and the communicator doomed: destroy then calls
 * ncclCommAbort, which makes NCCL's kernels quit, instead of finalizing. A healthy
 * transport is finalized (flush, bounded wait) and destroyed; if that does not finish in
 * CLOSE_WAIT_NS it is aborted too. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
/* nccl.h declares ncclGroupStart() and ncclGroupEnd() without (void): harmless, but it
 * would trip -Wstrict-prototypes where the header is not on a system include path. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "moe/clock.h"
#include "moe/log.h"
#include "transport/transport.h"
#include "transport/wait.h"

/* How long destroy waits for the stream to drain and for ncclCommFinalize, each. */
#define CLOSE_WAIT_NS (5 * 1000 * 1000 * 1000LL)

/* What a peer has in a slot (nccl_slot_t.rows). */
enum { ROWS_RECV = 1, ROWS_SEND = 2 };

typedef struct nccl_slot {
    cudaEvent_t done;    /* recorded on the stream after the slot's group */
    unsigned char *rows; /* [world]: ROWS_RECV | ROWS_SEND per peer (0 for this rank) */
} nccl_slot_t;

typedef struct nccl_impl {
    ncclComm_t comm;     /* NULL until init succeeds, and after an abort */
    cudaStream_t stream; /* NULL until created (never the legacy default stream) */
    nccl_slot_t *slots;  /* [num_slots] */
    bool doomed;         /* an exchange was cancelled or failed: abort, do not finalize */
    int init_ok[2];      /* MPI_Iallreduce buffers at init: this rank's call, all ranks' */
} nccl_impl_t;

/* MOE_ERR_NCCL naming the call, NCCL's text for rc, NCCL's last error message and where.
 * ncclGetLastError's comm argument is unused by NCCL and documented as may be NULL; some
 * shims return NULL for the text. */
static moe_status_t nccl_error(moe_error_t *err, ncclResult_t rc, const char *what,
                               const char *file, int line)
{
    const char *last = ncclGetLastError(NULL);
    bool has_last = last != NULL && last[0] != '\0';
    return moe_error_set(err, MOE_ERR_NCCL, "%s failed: %s%s%s (%s:%d)", what,
                         ncclGetErrorString(rc), has_last ? "; NCCL's last error: " : "",
                         has_last ? last : "", file, line);
}

/* MOE_ERR_CUDA naming the call, CUDA's text and where; clears CUDA's last-error slot so a
 * handled error is not reported again by a later call. */
static moe_status_t cuda_error(moe_error_t *err, cudaError_t rc, const char *what,
                               const char *file, int line)
{
    (void)cudaGetLastError();
    return moe_error_set(err, MOE_ERR_CUDA, "%s failed: %s (%s:%d)", what,
                         cudaGetErrorString(rc), file, line);
}

/* Convert a failed NCCL or CUDA call and jump to cleanup; expect `moe_status_t st`,
 * `moe_error_t *err` and a `cleanup` label in scope. */
#define MOE_NCCL_CHECK(call, what)                                                         \
    do {                                                                                   \
        ncclResult_t nccl_rc_ = (call);                                                    \
        if (nccl_rc_ != ncclSuccess) {                                                     \
            st = nccl_error(err, nccl_rc_, (what), __FILE__, __LINE__);                    \
            goto cleanup;                                                                  \
        }                                                                                  \
    } while (0)

#define MOE_NCCL_CUDA_CHECK(call, what)                                                    \
    do {                                                                                   \
        cudaError_t cuda_rc_ = (call);                                                     \
        if (cuda_rc_ != cudaSuccess) {                                                     \
            st = cuda_error(err, cuda_rc_, (what), __FILE__, __LINE__);                    \
            goto cleanup;                                                                  \
        }                                                                                  \
    } while (0)

/* A short sleep for the bounded teardown loops (destroy cannot use moe_wait_poll: it must
 * also finish after a stop request). */
static void nap(void)
{
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* Wait until the communicator's background work (here: a non-blocking ncclGroupEnd) has
 * finished: MOE_OK once ncclCommGetAsyncError says ncclSuccess, MOE_ERR_NCCL if it ended
 * in an error, or what moe_wait_poll says (stop request, watchdog naming `pending`). */
static moe_status_t settle(ncclComm_t comm, int64_t start_ns, const char *what,
                           const int *pending, int npending, moe_error_t *err)
{
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
        if (rc != ncclSuccess) {
            return nccl_error(err, rc, "ncclCommGetAsyncError", __FILE__, __LINE__);
        }
        if (state == ncclSuccess) {
            return MOE_OK;
        }
        if (state != ncclInProgress) {
            return nccl_error(err, state, what, __FILE__, __LINE__);
        }
        moe_status_t st = moe_wait_poll(start_ns, what, pending, npending, err);
        if (st != MOE_OK) {
            return st;
        }
    }
}

/* The peers of `slot` still owed or owing rows: all of them while its group runs (NCCL
 * completes a group as a whole), none once it is over. Each once, at most cap. */
static int nccl_pending(const moe_transport_t *t, int slot, int *out, int cap)
{
    const nccl_impl_t *impl = t->impl;
    const unsigned char *rows = impl->slots[slot].rows;
    int n = 0;
    if (!t->xfer[slot].active) {
        return 0;
    }
    for (int p = 0; p < t->world_size; p++) {
        if (rows[p] != 0) {
            n = moe_wait_note_peer(out, n, cap, p);
        }
    }
    return n;
}

/* Remember which peers have rows in `slot` (for pending() and the arrival stamps). */
static void note_rows(moe_transport_t *t, int slot, const int *send_rows, const int *recv_rows)
{
    unsigned char *rows = ((nccl_impl_t *)t->impl)->slots[slot].rows;
    for (int p = 0; p < t->world_size; p++) {
        bool other = p != t->rank;
        rows[p] = (unsigned char)((other && recv_rows[p] > 0 ? ROWS_RECV : 0) |
                                  (other && send_rows[p] > 0 ? ROWS_SEND : 0));
    }
}

/* One group: a receive from and a send to every other rank with rows, on the stream.
 * ncclGroupEnd is called even after a failed call inside, so the group is closed (NCCL then
 * drops the whole group). A non-blocking communicator may answer ncclInProgress (it is
 * connecting to new peers in the background): wait for it here, since the slot's event may
 * be recorded only once the group's kernel is on the stream. */
static moe_status_t post_group(moe_transport_t *t, int slot, const float *send,
                               const int *send_rows, const int *send_displs, float *recv,
                               const int *recv_rows, const int *recv_displs, moe_error_t *err)
{
    nccl_impl_t *impl = t->impl;
    size_t row = (size_t)t->row_elems;
    ncclResult_t first = ncclSuccess;
    const char *first_what = NULL;
    ncclResult_t rc = ncclGroupStart();
    if (rc != ncclSuccess) {
        return nccl_error(err, rc, "ncclGroupStart (row exchange)", __FILE__, __LINE__);
    }
    for (int p = 0; p < t->world_size && first == ncclSuccess; p++) {
        unsigned char rows = impl->slots[slot].rows[p];
        if ((rows & ROWS_RECV) != 0) {
            first = ncclRecv(recv + (size_t)recv_displs[p] * row, (size_t)recv_rows[p] * row,
                             ncclFloat32, p, impl->comm, impl->stream);
            first_what = "ncclRecv (row exchange)";
        }
        if ((rows & ROWS_SEND) != 0 && first == ncclSuccess) {
            first = ncclSend(send + (size_t)send_displs[p] * row, (size_t)send_rows[p] * row,
                             ncclFloat32, p, impl->comm, impl->stream);
            first_what = "ncclSend (row exchange)";
        }
    }
    rc = ncclGroupEnd();
    if (first != ncclSuccess) {
        return nccl_error(err, first, first_what, __FILE__, __LINE__);
    }
    if (rc == ncclInProgress) {
        int n = nccl_pending(t, slot, t->peer_scratch, 2 * t->world_size);
        return settle(impl->comm, t->xfer[slot].begin_ns, "ncclGroupEnd (row exchange)",
                      t->peer_scratch, n, err);
    }
    if (rc != ncclSuccess) {
        return nccl_error(err, rc, "ncclGroupEnd (row exchange)", __FILE__, __LINE__);
    }
    return MOE_OK;
}

/* Post the exchange in `slot`: wait (on the device) for `after`, copy the own block, post
 * the group, record the slot's event. Contract for `after`: NULL, or a pointer to a
 * cudaEvent_t recorded after the work that writes the send rows (const cudaEvent_t *). A
 * moe_cuda_event_t * (cuda/moe_cuda.h) qualifies: its first member is its cudaEvent_t, and
 * a pointer to a struct converted to a pointer to its first member points at that member.
 * Blocks only while a new NCCL connection is set up (the first exchanges), through
 * moe_wait_poll. On failure the slot is left inactive and the communicator doomed. */
static moe_status_t nccl_start(moe_transport_t *t, int slot, const float *send,
                               const int *send_rows, const int *send_displs, float *recv,
                               const int *recv_rows, const int *recv_displs, const void *after,
                               moe_error_t *err)
{
    nccl_impl_t *impl = t->impl;
    size_t row = (size_t)t->row_elems;
    int me = t->rank;
    moe_status_t st = MOE_OK;
    moe_transport_base_begin(t, slot);
    note_rows(t, slot, send_rows, recv_rows);
    if (impl->doomed) {
        st = moe_error_set(err, MOE_ERR_NCCL, "the NCCL communicator was given up after an "
                                              "earlier failure; no further exchange can start");
        goto cleanup;
    }
    if (after != NULL) {
        MOE_NCCL_CUDA_CHECK(cudaStreamWaitEvent(impl->stream, *(const cudaEvent_t *)after, 0),
                            "cudaStreamWaitEvent (the send rows' event)");
    }
    if (recv_rows[me] > 0) {
        MOE_NCCL_CUDA_CHECK(cudaMemcpyAsync(recv + (size_t)recv_displs[me] * row,
                                            send + (size_t)send_displs[me] * row,
                                            (size_t)recv_rows[me] * row * sizeof(float),
                                            cudaMemcpyDeviceToDevice, impl->stream),
                            "cudaMemcpyAsync (own rows)");
    }
    st = post_group(t, slot, send, send_rows, send_displs, recv, recv_rows, recv_displs, err);
    if (st == MOE_OK) {
        MOE_NCCL_CUDA_CHECK(cudaEventRecord(impl->slots[slot].done, impl->stream),
                            "cudaEventRecord (row exchange)");
    }
cleanup:
    if (st != MOE_OK) {
        t->xfer[slot].active = false;
        impl->doomed = true;
    }
    return st;
}

/* Has `slot` completed? Never blocks. An asynchronous NCCL error (a peer or the network
 * lost) fails every slot: the group it hit may never finish. */
static moe_status_t nccl_test(moe_transport_t *t, int slot, bool *done, moe_error_t *err)
{
    nccl_impl_t *impl = t->impl;
    moe_xfer_t *x = &t->xfer[slot];
    *done = !x->active;
    if (!x->active) {
        return MOE_OK;
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(impl->comm, &state);
    if (rc != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
        return nccl_error(err, rc != ncclSuccess ? rc : state,
                          rc != ncclSuccess ? "ncclCommGetAsyncError"
                                            : "an NCCL row exchange (asynchronous error)",
                          __FILE__, __LINE__);
    }
    cudaError_t q = cudaEventQuery(impl->slots[slot].done);
    if (q == cudaErrorNotReady) {
        return MOE_OK;
    }
    if (q != cudaSuccess) {
        return cuda_error(err, q, "cudaEventQuery (row exchange)", __FILE__, __LINE__);
    }
    int64_t now = moe_now_ns();
    for (int p = 0; p < t->world_size; p++) {
        if ((impl->slots[slot].rows[p] & ROWS_RECV) != 0) {
            x->peer_done_ns[p] = now;
        }
    }
    x->end_ns = now;
    x->active = false;
    *done = true;
    return MOE_OK;
}

/* Give up `slot`: a posted group cannot be withdrawn, so the communicator is aborted at
 * destroy (its buffers stay in use by the device until then). */
static void nccl_cancel(moe_transport_t *t, int slot)
{
    nccl_impl_t *impl = t->impl;
    t->xfer[slot].active = false;
    impl->doomed = true;
}

/* Wait up to give_up for the stream's queued work to finish; true if it did. */
static bool stream_drained(cudaStream_t stream, int64_t give_up)
{
    for (;;) {
        cudaError_t rc = cudaStreamQuery(stream);
        if (rc == cudaSuccess) {
            return true;
        }
        if (rc != cudaErrorNotReady || moe_now_ns() >= give_up) {
            (void)cudaGetLastError();
            return false;
        }
        nap();
    }
}

/* ncclCommFinalize and wait up to give_up for it; true once the communicator is quiescent
 * (then ncclCommDestroy only frees local resources). */
static bool finalized(ncclComm_t comm, int64_t give_up)
{
    ncclResult_t rc = ncclCommFinalize(comm);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        return false;
    }
    for (;;) {
        ncclResult_t state = ncclInProgress;
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) {
            return false;
        }
        if (state == ncclSuccess) {
            return true;
        }
        if (state != ncclInProgress || moe_now_ns() >= give_up) {
            return false;
        }
        nap();
    }
}

/* Close the communicator: finalize + destroy when healthy and idle, else abort. */
static void close_comm(const moe_transport_t *t, nccl_impl_t *impl)
{
    if (impl->comm == NULL) {
        return;
    }
    bool clean = !impl->doomed;
    for (int s = 0; clean && s < t->num_slots; s++) {
        clean = !t->xfer[s].active; /* an exchange never waited for: peers may not match */
    }
    clean = clean && stream_drained(impl->stream, moe_now_ns() + CLOSE_WAIT_NS) &&
            finalized(impl->comm, moe_now_ns() + CLOSE_WAIT_NS);
    if (clean) {
        ncclResult_t rc = ncclCommDestroy(impl->comm);
        if (rc != ncclSuccess) {
            MOE_WARN("ncclCommDestroy failed: %s", ncclGetErrorString(rc));
        }
    } else {
        if (!impl->doomed) {
            MOE_WARN("the NCCL communicator was still busy or did not finalize within %lld s; "
                     "aborting it", CLOSE_WAIT_NS / 1000000000LL);
        }
        (void)ncclCommAbort(impl->comm);
    }
    impl->comm = NULL;
}

/* Free the transport; accepts one in any state of creation, with cancelled or failed
 * exchanges. */
static void nccl_destroy(moe_transport_t *t)
{
    nccl_impl_t *impl = t->impl;
    if (impl != NULL) {
        close_comm(t, impl);
        if (impl->stream != NULL) {
            (void)stream_drained(impl->stream, moe_now_ns() + CLOSE_WAIT_NS);
        }
        for (int s = 0; impl->slots != NULL && s < t->num_slots; s++) {
            if (impl->slots[s].done != NULL) {
                (void)cudaEventDestroy(impl->slots[s].done); /* safe while pending */
            }
            free(impl->slots[s].rows);
        }
        if (impl->stream != NULL) {
            (void)cudaStreamDestroy(impl->stream);
        }
        free(impl->slots);
        free(impl);
    }
    moe_transport_base_free(t);
    free(t);
}

static const moe_transport_ops_t k_nccl_ops = {
    .name = "nccl",
    .device_memory = true,
    .start = nccl_start,
    .test = nccl_test,
    .pending = nccl_pending,
    .cancel = nccl_cancel,
    .destroy = nccl_destroy,
};

/* The host-side tables: per slot the peers' row flags. */
static moe_status_t nccl_alloc(moe_transport_t *t, nccl_impl_t *impl, moe_error_t *err)
{
    impl->slots = calloc((size_t)t->num_slots, sizeof(nccl_slot_t));
    bool failed = impl->slots == NULL;
    for (int s = 0; !failed && s < t->num_slots; s++) {
        impl->slots[s].rows = calloc((size_t)t->world_size, 1);
        failed = impl->slots[s].rows == NULL;
    }
    return failed ? moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the NCCL transport")
                  : MOE_OK;
}

/* The communication stream and one event per slot, on the current device. */
static moe_status_t make_stream(moe_transport_t *t, nccl_impl_t *impl, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    MOE_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking),
                        "cudaStreamCreateWithFlags (NCCL stream)");
    for (int s = 0; s < t->num_slots; s++) {
        MOE_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&impl->slots[s].done,
                                                     cudaEventDisableTiming),
                            "cudaEventCreateWithFlags (NCCL slot event)");
    }
cleanup:
    return st;
}

/* Rank 0 makes the NCCL unique id and every rank gets it over MPI. Collective; st is this
 * rank's state so far. Every rank first agrees that all got this far, so none waits in the
 * broadcast (or later in NCCL's set-up) for a rank that failed. */
static moe_status_t share_id(moe_transport_t *t, moe_status_t st, ncclUniqueId *id,
                             moe_error_t *err)
{
    int ok = 0;
    memset(id, 0, sizeof(*id));
    if (st == MOE_OK && t->rank == 0) {
        MOE_NCCL_CHECK(ncclGetUniqueId(id), "ncclGetUniqueId");
    }
cleanup:
    ok = st == MOE_OK;
    moe_status_t agreed = MOE_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, t->comm),
                                  st == MOE_OK ? err : NULL);
    if (st == MOE_OK && agreed != MOE_OK) {
        st = agreed;
    } else if (st == MOE_OK && !ok) {
        st = moe_error_set(err, MOE_ERR_NCCL,
                           "the NCCL transport failed to start on another rank");
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Bcast(id, (int)sizeof(*id), MPI_BYTE, 0, t->comm), err);
    }
    return st;
}

/* Wait for this rank's non-blocking init to finish. Meanwhile an MPI_Iallreduce of whether
 * each rank's init call was accepted tells it when another rank's call failed at once: that
 * rank will never join, and waiting for it would last until the watchdog. */
static moe_status_t await_init(nccl_impl_t *impl, MPI_Request *req, moe_error_t *err)
{
    int64_t start = moe_now_ns();
    int heard = 0;
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t rc = ncclCommGetAsyncError(impl->comm, &state);
        if (rc != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
            return nccl_error(err, rc != ncclSuccess ? rc : state,
                              "ncclCommInitRankConfig (non-blocking set-up)", __FILE__,
                              __LINE__);
        }
        if (state == ncclSuccess) {
            return MOE_OK;
        }
        moe_status_t st = heard ? MOE_OK : MOE_MPI(MPI_Test(req, &heard, MPI_STATUS_IGNORE), err);
        if (st != MOE_OK) {
            return st;
        }
        if (heard && !impl->init_ok[1]) {
            return moe_error_set(err, MOE_ERR_NCCL, "NCCL failed to start on another rank");
        }
        st = moe_wait_poll(start, "the NCCL communicator set-up", NULL, 0, err);
        if (st != MOE_OK) {
            return st;
        }
    }
}

/* Create this rank's communicator (non-blocking) on the current device. On failure it is
 * aborted at once, so peers still connecting to it see it go instead of waiting. */
static moe_status_t init_comm(moe_transport_t *t, nccl_impl_t *impl, const ncclUniqueId *id,
                              moe_error_t *err)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&impl->comm, t->world_size, *id, t->rank, &config);
    impl->init_ok[0] = rc == ncclSuccess || rc == ncclInProgress;
    MPI_Request req = MPI_REQUEST_NULL;
    moe_status_t st = MOE_MPI(MPI_Iallreduce(&impl->init_ok[0], &impl->init_ok[1], 1, MPI_INT,
                                             MPI_MIN, t->comm, &req),
                              err);
    if (st == MOE_OK && !impl->init_ok[0]) {
        st = nccl_error(err, rc, "ncclCommInitRankConfig", __FILE__, __LINE__);
    } else if (st == MOE_OK) {
        st = await_init(impl, &req, err);
    }
    /* Every rank posts the reduction right after its init call, which returns at once on a
     * non-blocking communicator, so this wait is short. */
    if (req != MPI_REQUEST_NULL) {
        moe_status_t waited = MOE_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE), st == MOE_OK ? err : NULL);
        st = st == MOE_OK ? waited : st;
    }
    if (st != MOE_OK && impl->comm != NULL) {
        (void)ncclCommAbort(impl->comm);
        impl->comm = NULL;
    }
    return st;
}

moe_status_t moe_transport_nccl_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                       const moe_transport_device_t *dev,
                                       moe_transport_t **out, moe_error_t *err)
{
    (void)dev; /* the caller selected this rank's device (cudaSetDevice) already */
    moe_transport_t *t = calloc(1, sizeof(*t));
    nccl_impl_t *impl = calloc(1, sizeof(*impl));
    if (t == NULL || impl == NULL) {
        free(t);
        free(impl);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the NCCL transport");
    }
    t->impl = impl;
    moe_status_t st = moe_transport_base_init(t, &k_nccl_ops, comm, row_elems, num_slots, err);
    if (st == MOE_OK) {
        st = nccl_alloc(t, impl, err);
    }
    if (st == MOE_OK) {
        st = make_stream(t, impl, err);
    }
    ncclUniqueId id;
    st = share_id(t, st, &id, err);
    if (st == MOE_OK) {
        st = init_comm(t, impl, &id, err);
    }
    /* NCCL's set-up may fail on one rank only (its device, its network): agree before the
     * first exchange (failures before the set-up were agreed in share_id). */
    int ok = st == MOE_OK;
    moe_status_t agreed = MOE_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm),
                                  st == MOE_OK ? err : NULL);
    if (st == MOE_OK && agreed != MOE_OK) {
        st = agreed;
    } else if (st == MOE_OK && !ok) {
        st = moe_error_set(err, MOE_ERR_NCCL, "the NCCL communicator failed on another rank");
    }
    if (st != MOE_OK) {
        nccl_destroy(t);
        return st;
    }
    *out = t;
    return MOE_OK;
}
