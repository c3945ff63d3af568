/* Part transport (runtime/src/transport/): the exchange of rows between ranks behind one
 * interface (transport.h), the back-ends found in one table (registry.c: mpi, ucx; nccl
 * is built into the CUDA plug-in) and the watchdog-guarded waits. May include: base
 * config (and the public headers in moe/). One file of each part's folder opens with such
 * a comment; tests/lint/parts.sh holds every part to its list. */
/* Token-row transports behind one interface.
 *
 * A transport moves rows of `row_elems` floats between all ranks of a communicator in
 * all-to-all exchanges: rank r sends send_rows[d] rows starting at row send_displs[d] of
 * `send` to each rank d, and receives recv_rows[s] rows from each s at row recv_displs[s]
 * of `recv`. Both sides know the counts beforehand (exchanged over MPI by the caller).
 *
 * Exchanges are non-blocking and live in numbered slots (0 .. num_slots-1), so several can
 * be in flight at once: the chunked step (runtime.chunks) keeps the dispatch of one chunk
 * and the combine of another moving while experts compute. Every rank must start the same
 * exchanges in the same order (a rank with no rows for a slot still starts it): transports
 * match messages by that order.
 *
 * Slots (the ops table):
 *   name           short name for reports ("mpi")
 *   device_memory  send/recv are device pointers (nccl); host transports take host memory
 *   start          post the exchange in `slot`, which must be idle; never blocks, never
 *                  allocates. `after` is a device event (moe_cuda_event_t *) the send rows
 *                  depend on, for device transports; host transports get NULL. The own
 *                  block may be copied at once.
 *   start_sends, start_recvs  (optional, both or neither) the exchange in two halves: the
 *                  sends first, while the caller still waits for the counts of what it
 *                  will receive, then the receives (and the own block); the slot completes
 *                  only once both are posted. Without them moe_transport_start_sends posts
 *                  nothing and start_recvs calls start with both halves. `each` (NULL, or
 *                  [world] flags; only where recv_upto is set): one message to / from every
 *                  flagged peer even without rows, and a flagged peer's recv_rows is the
 *                  most it may send (<= recv_upto): its message, however many rows it
 *                  holds, completes the receive (the caller learns the count otherwise).
 *   recv_upto      (optional) the most rows such a receive may take (0: exact counts only)
 *   test           drive every exchange in flight once without blocking; *done tells
 *                  whether `slot` has completed (then its xfer has end_ns and every
 *                  peer_done_ns stamped and active false). Errors: MOE_ERR_MPI / _UCX / _NCCL.
 *   pending        the peers `slot` still waits on (each once, at most cap), for the
 *                  watchdog's message
 *   cancel         give up `slot` after an error or a stop request; its buffers may be
 *                  reused only after the transport is destroyed
 *   destroy        frees the transport (moe_transport_destroy); must accept a transport
 *                  with cancelled or failed exchanges
 *
 * The waits (moe_transport_wait, moe_transport_exchange) go through wait.h: quiet polling,
 * MOE_ERR_INTERRUPTED on a stop request, MOE_ERR_TIMEOUT (watchdog) naming the peers. */
#ifndef MOE_TRANSPORT_H
#define MOE_TRANSPORT_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe/mpi_check.h" /* transports and their callers check MPI with MOE_MPI */
#include "moe/status.h"

typedef struct moe_transport moe_transport_t;

/* One exchange's timing, for the profiler's wait matrix and the overlap figures. */
typedef struct moe_xfer {
    bool active;           /* started and not yet seen complete */
    int64_t begin_ns;      /* when start() posted it */
    int64_t end_ns;        /* when test() saw it complete */
    int64_t *peer_done_ns; /* [world]: when each peer's rows had arrived (begin if none) */
} moe_xfer_t;

typedef struct moe_transport_ops {
    const char *name;
    bool device_memory;
    moe_status_t (*start)(moe_transport_t *t, int slot, const float *send, const int *send_rows,
                          const int *send_displs, float *recv, const int *recv_rows,
                          const int *recv_displs, const void *after, moe_error_t *err);
    moe_status_t (*start_sends)(moe_transport_t *t, int slot, const float *send,
                                const int *send_rows, const int *send_displs, const bool *each,
                                moe_error_t *err);
    moe_status_t (*start_recvs)(moe_transport_t *t, int slot, float *recv, const int *recv_rows,
                                const int *recv_displs, const bool *each, moe_error_t *err);
    int (*recv_upto)(const moe_transport_t *t);
    moe_status_t (*test)(moe_transport_t *t, int slot, bool *done, moe_error_t *err);
    int (*pending)(const moe_transport_t *t, int slot, int *out, int cap);
    void (*cancel)(moe_transport_t *t, int slot);
    void (*destroy)(moe_transport_t *t);
} moe_transport_ops_t;

/* A slot's send half, kept from moe_transport_start_sends until its receives are posted. */
typedef struct moe_transport_sends {
    const float *send;
    const int *send_rows, *send_displs;
    const void *after;
} moe_transport_sends_t;

/* One transport. Fields in groups (the libuv way): callers (the layer, the engine) read
 * the public ones and write none; the back-ends own the rest. Callers reach the table only
 * through the moe_transport_* functions below. */
struct moe_transport {
    /* public, read-only to callers (moe_transport_base_init sets them) */
    MPI_Comm comm;
    int rank;
    int world_size;
    int64_t row_elems;
    int num_slots;
    moe_xfer_t *xfer;  /* [num_slots]: written by the back-end (start, test), read-only to
                        * callers (the layer's wait matrix and overlap figures) */
    /* private: the back-ends' files, common.c and transport.c (the wrappers) */
    const moe_transport_ops_t *ops;
    int *peer_scratch; /* [2 * world]: the watchdog's peer list (transport.c's wait) */
    moe_transport_sends_t *sends; /* [num_slots]: start_sends' arguments, for start_recvs */
    void *impl;        /* the back-end's own state */
};

/* The NCCL transport's constructor, which lives in the CUDA plug-in (expert/plugin.h). */
typedef moe_status_t (*moe_transport_create_fn)(MPI_Comm comm, int64_t row_elems, int num_slots,
                                                void *cuda, struct moe_transport **out,
                                                moe_error_t *err);

/* What a transport needs from the runtime beyond the communicator: the device and the NCCL
 * constructor from the plug-in the engine loaded (so transport/ never includes expert/),
 * and UCX's choice of peer error handling (runtime.ucx_peer_errors). */
typedef struct moe_transport_device {
    void *cuda;                          /* moe_cuda_t * of this rank */
    moe_transport_create_fn nccl_create; /* NULL when the plug-in was built without NCCL */
    bool ucx_peer_errors;                /* ucx: endpoints with peer error handling */
} moe_transport_device_t;

/* Create the transport `kind` over comm (collective) with `num_slots` exchange slots. */
moe_status_t moe_transport_create(moe_transport_kind_t kind, MPI_Comm comm, int64_t row_elems,
                                  int num_slots, const moe_transport_device_t *dev,
                                  moe_transport_t **out, moe_error_t *err);
void moe_transport_destroy(moe_transport_t *t); /* accepts NULL */

/* The calls into a transport: callers go through these (and the waits below), never
 * through t->ops; only the back-ends' own files touch the table (tests/lint/ops_calls.sh).
 * name and device_memory: the slots of the same name. start, cancel: the slots. */
const char *moe_transport_name(const moe_transport_t *t);
bool moe_transport_device_memory(const moe_transport_t *t);
moe_status_t moe_transport_start(moe_transport_t *t, int slot, const float *send,
                                 const int *send_rows, const int *send_displs, float *recv,
                                 const int *recv_rows, const int *recv_displs,
                                 const void *after, moe_error_t *err);
/* The exchange of `slot` in two halves (a rank's sends do not wait for the counts of what
 * it receives): start_sends posts the sends where the back-end can (mpi, ucx; nccl and
 * mpi's alltoallv post the whole exchange at start_recvs), start_recvs the receives; the
 * arrays and buffers start_sends was given must stay as they are until then. Where the
 * sends were posted the slot is active from start_sends on: cancel it if the receives are
 * never posted. `each` (NULL: exact counts): the ops table's; both ends of a pair must flag
 * each other alike. A transport without recv_upto refuses it (MOE_ERR_INTERNAL). */
moe_status_t moe_transport_start_sends(moe_transport_t *t, int slot, const float *send,
                                       const int *send_rows, const int *send_displs,
                                       const bool *each, const void *after, moe_error_t *err);
moe_status_t moe_transport_start_recvs(moe_transport_t *t, int slot, float *recv,
                                       const int *recv_rows, const int *recv_displs,
                                       const bool *each, moe_error_t *err);
/* The most rows a receive posted before its count is known may take (the ops table's
 * recv_upto; 0: the transport needs exact counts). */
int moe_transport_recv_upto(const moe_transport_t *t);
void moe_transport_cancel(moe_transport_t *t, int slot);

/* Wait for `slot` to complete (test + moe_wait_poll); on failure the slot is cancelled. */
moe_status_t moe_transport_wait(moe_transport_t *t, int slot, const char *what,
                                 moe_error_t *err);
/* Drive every exchange in flight once (between compute tiles); never blocks. */
moe_status_t moe_transport_progress(moe_transport_t *t, moe_error_t *err);
/* start + wait in slot 0: one blocking exchange. */
moe_status_t moe_transport_exchange(moe_transport_t *t, const float *send, const int *send_rows,
                                    const int *send_displs, float *recv, const int *recv_rows,
                                    const int *recv_displs, moe_error_t *err);

/* For implementations (common.c): fill the common fields and allocate the slots; *t must be zeroed.
 * moe_transport_base_free frees what base_init allocated (not t itself). */
moe_status_t moe_transport_base_init(moe_transport_t *t, const moe_transport_ops_t *ops,
                                     MPI_Comm comm, int64_t row_elems, int num_slots,
                                     moe_error_t *err);
void moe_transport_base_free(moe_transport_t *t);
/* Mark slot started now: active, begin_ns, every peer_done_ns = begin. */
void moe_transport_base_begin(moe_transport_t *t, int slot);
/* The own block: recv_rows[rank] rows from `own` (where the send buffer holds them) to row
 * recv_displs[rank] of recv, a memcpy. */
void moe_transport_base_copy_own(const moe_transport_t *t, const void *own, void *recv,
                                 const int *recv_rows, const int *recv_displs);
/* Whether a host transport's exchange has a message for peer p: rows to move, or p
 * flagged in `each` (NULL: none; start_sends / start_recvs). */
static inline bool moe_transport_has_message(const int *rows, const bool *each, int p)
{
    return rows[p] > 0 || (each != NULL && each[p]);
}

moe_status_t moe_transport_mpi_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                      moe_transport_t **out, moe_error_t *err);
#ifdef MOE_HAVE_UCX
/* UCP tagged messages (ucx.c); collective over comm (swaps worker addresses). */
moe_status_t moe_transport_ucx_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                      bool peer_errors, moe_transport_t **out,
                                      moe_error_t *err);
#endif
#ifdef MOE_HAVE_NCCL
/* Grouped ncclSend/ncclRecv on device buffers (nccl.c, in the CUDA plug-in: moed reaches
 * it through the plug-in's table); collective over comm (the NCCL unique id travels over
 * MPI). */
moe_status_t moe_transport_nccl_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                       const moe_transport_device_t *dev,
                                       moe_transport_t **out, moe_error_t *err);
#endif

#endif /* MOE_TRANSPORT_H */
