/* The table of transports (registry.h): mpi always; ucx when built with libucx
 * (MOE_HAVE_UCX); nccl through the CUDA plug-in (MOED_HAVE_PLUGIN), whose constructor the
 * engine hands over in moe_transport_device_t. A new transport is one row here. */
#include <stddef.h>

#include "transport/registry.h"

static moe_status_t mpi_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                               const moe_transport_device_t *dev, moe_transport_t **out,
                               moe_error_t *err)
{
    (void)dev;
    return moe_transport_mpi_create(comm, row_elems, num_slots, out, err);
}

#ifdef MOE_HAVE_UCX
static moe_status_t ucx_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                               const moe_transport_device_t *dev, moe_transport_t **out,
                               moe_error_t *err)
{
    return moe_transport_ucx_create(comm, row_elems, num_slots,
                                    dev == NULL || dev->ucx_peer_errors, out, err);
}
#define UCX_CREATE ucx_create
#else
#define UCX_CREATE NULL
#endif

#ifdef MOED_HAVE_PLUGIN
/* NCCL lives in the plug-in: moved device buffers need runtime.device: cuda. */
static moe_status_t nccl_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                const moe_transport_device_t *dev, moe_transport_t **out,
                                moe_error_t *err)
{
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
}
#define NCCL_CREATE nccl_create
#else
#define NCCL_CREATE NULL
#endif

static const moe_transport_entry_t k_transports[] = {
    {MOE_TRANSPORT_MPI, mpi_create, NULL},
    {MOE_TRANSPORT_UCX, UCX_CREATE,
     "runtime.transport: ucx is not available in this build (built without UCX: install "
     "libucx-dev and rebuild); use mpi"},
    {MOE_TRANSPORT_NCCL, NCCL_CREATE,
     "runtime.transport: nccl is not available in this build (built without CUDA/NCCL); use "
     "mpi or ucx"},
};

const moe_transport_entry_t *moe_transport_find(moe_transport_kind_t kind)
{
    for (size_t i = 0; i < sizeof(k_transports) / sizeof(k_transports[0]); i++) {
        if (k_transports[i].kind == kind) {
            return &k_transports[i];
        }
    }
    return NULL;
}
