/* The CUDA plug-in's one entry point (expert/plugin.h): the table moed's registry checks
 * and calls. Thin adapters from the table's opaque `void *cu` to moe_cuda.h. */
#include <stdint.h>

#include "build_id.h" /* generated: MOED_BUILD_ID_STRING, this build's own copy */

#include "expert/cuda/backend_cuda.h"
#include "expert/cuda/moe_cuda.h"
#include "expert/plugin.h"
#include "transport/transport.h"

static moe_status_t plugin_open(int device, void **cu, moe_error_t *err)
{
    moe_cuda_t *c = NULL;
    moe_status_t st = moe_cuda_create(device, &c, err);
    if (st == MOE_OK) {
        *cu = c;
    }
    return st;
}

static void plugin_close(void *cu)
{
    moe_cuda_destroy(cu);
}

static const char *plugin_device_name(const void *cu)
{
    return moe_cuda_device_name(cu);
}

static moe_status_t plugin_alloc(void *cu, size_t bytes, void **p, moe_error_t *err)
{
    return moe_cuda_alloc(cu, bytes, p, err);
}

static void plugin_free(void *cu, void *p)
{
    moe_cuda_free(cu, p);
}

static moe_status_t plugin_copy_sync(void *cu, void *dst, const void *src, size_t bytes,
                                     bool to_device, moe_error_t *err)
{
    moe_status_t st = moe_cuda_copy(cu, dst, src, bytes,
                                    to_device ? MOE_CUDA_COPY_H2D : MOE_CUDA_COPY_D2H,
                                    MOE_CUDA_STREAM_COMPUTE, err);
    return st == MOE_OK ? moe_cuda_sync(cu, MOE_CUDA_STREAM_COMPUTE, err) : st;
}

static moe_status_t plugin_gemm_probe(void *cu, moe_dtype_t dtype, moe_activation_t act,
                                      int64_t hidden, int64_t ffn, int64_t rows, int reps,
                                      double *tflops, moe_error_t *err)
{
    return moe_cuda_gemm_probe(cu, dtype, act, hidden, ffn, rows, reps, tflops, err);
}

#ifdef MOE_HAVE_NCCL
static moe_status_t plugin_nccl_create(MPI_Comm comm, int64_t row_elems, int num_slots,
                                       void *cu, struct moe_transport **out, moe_error_t *err)
{
    moe_transport_device_t dev = {.cuda = cu};
    return moe_transport_nccl_create(comm, row_elems, num_slots, &dev, out, err);
}
#endif

static const moe_plugin_t k_plugin = {
    .size = sizeof(moe_plugin_t),
    .version = MOE_PLUGIN_VERSION,
    .build_id = MOED_BUILD_ID_STRING,
    .name = "cuda",
    .available = moe_cuda_available,
    .device_count = moe_cuda_device_count,
    .open = plugin_open,
    .close = plugin_close,
    .device_name = plugin_device_name,
    .alloc = plugin_alloc,
    .free = plugin_free,
    .copy_sync = plugin_copy_sync,
    .mem_usage = moe_cuda_mem_usage,
    .gemm_probe = plugin_gemm_probe,
    .expert_attach = moe_expert_cuda_attach,
#ifdef MOE_HAVE_NCCL
    .nccl_create = plugin_nccl_create,
#endif
};

/* The versioned entry point (MOE_PLUGIN_ENTRY); the only symbol moed looks up. */
const moe_plugin_t *moed_plugin_v2(void);

const moe_plugin_t *moed_plugin_v2(void)
{
    return &k_plugin;
}
