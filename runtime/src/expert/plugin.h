/* The CUDA plug-in: libmoed_cuda.so holds the CUDA device library (the .cu files of
 * expert/cuda), the GPU expert back-end (expert/cuda/backend_cuda.c) and the NCCL transport
 * (transport/nccl.c). moed links none of cudart, cuBLAS or NCCL: the registry (plugin.c)
 * dlopens the plug-in only when the config asks for runtime.device: cuda or
 * runtime.transport: nccl, so a CPU rank never maps them (the ggml GGML_BACKEND_DL model).
 *
 * The plug-in exports one symbol, MOE_PLUGIN_ENTRY, a function returning a const table.
 * The registry checks the table's size, version and build id before using any slot: the
 * plug-in binds moed's own internal functions (plugin.c), so one built from another commit
 * could call them with another layout even when the table's shape agrees; it is refused
 * with a message naming both versions or both build ids.
 *
 * Slots (moe_plugin_t). `cu` is the plug-in's device context (moe_cuda_t *), opaque here.
 * Functions returning moe_status_t fill err on failure and never exit.
 *   size, version   sizeof(moe_plugin_t) and MOE_PLUGIN_VERSION as the plug-in was built
 *   build_id        the build id of the plug-in's build (MOED_BUILD_ID_STRING), which must
 *                   equal moed's moe_build_id()
 *   name            "cuda"
 *   available       true when a CUDA device can be used, else false with the reason in
 *                   why; touches no device
 *   device_count    usable CUDA devices (0 without a driver)
 *   open / close    a context on device `device` (close accepts NULL; waits for the device)
 *   device_name     "NVIDIA H200"; valid while cu lives
 *   alloc / free    device memory (free accepts NULL); not for the hot path
 *   copy_sync       copy bytes host<->device (to_device selects the way) on the compute
 *                   stream and wait for it
 *   mem_usage       device bytes held now and at peak; any thread (the memory sampler)
 *   gemm_probe      the best cuBLAS TFLOP/s on the expert's GEMM shapes (selfbench)
 *   expert_attach   make be the GPU expert back-end of a layer: uploads the weights
 *                   io->weights in io->cfg->dtype, sizes the device buffers; on failure be
 *                   may be half built and moe_expert_backend_destroy frees it
 *   nccl_create     the NCCL transport over comm (collective); NULL when the plug-in was
 *                   built without NCCL */
#ifndef MOE_EXPERT_PLUGIN_H
#define MOE_EXPERT_PLUGIN_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "expert/backend.h"
#include "transport/transport.h"
#include "moe_config/config.h"
#include "moe/status.h"

/* Bump when a slot is added, removed or changes meaning. */
#define MOE_PLUGIN_VERSION 2
#define MOE_PLUGIN_ENTRY "moed_plugin_v2"
#define MOE_PLUGIN_FILE "libmoed_cuda.so"


typedef struct moe_plugin {
    uint32_t size;
    uint32_t version;
    const char *build_id;
    const char *name;
    bool (*available)(char *why, size_t why_len);
    int (*device_count)(void);
    moe_status_t (*open)(int device, void **cu, moe_error_t *err);
    void (*close)(void *cu);
    const char *(*device_name)(const void *cu);
    moe_status_t (*alloc)(void *cu, size_t bytes, void **p, moe_error_t *err);
    void (*free)(void *cu, void *p);
    moe_status_t (*copy_sync)(void *cu, void *dst, const void *src, size_t bytes,
                              bool to_device, moe_error_t *err);
    void (*mem_usage)(uint64_t *current, uint64_t *peak);
    moe_status_t (*gemm_probe)(void *cu, moe_dtype_t dtype, moe_activation_t act,
                               int64_t hidden, int64_t ffn, int64_t rows, int reps,
                               double *tflops, moe_error_t *err);
    moe_status_t (*expert_attach)(moe_expert_backend_t *be, moe_expert_io_t *io, void *cu,
                                  moe_error_t *err);
    moe_transport_create_fn nccl_create;
} moe_plugin_t;

/* The entry point's type: the plug-in defines `const moe_plugin_t *moed_plugin_v2(void)`. */
typedef const moe_plugin_t *(*moe_plugin_entry_fn)(void);

/* The plug-in's table, loading it on first use (thread-safe for the first call only from
 * the main thread, as moed does at start-up). `key` is the config setting that asks for
 * it ("runtime.device: cuda"), named in the error. Errors: MOE_ERR_UNSUPPORTED when this
 * build has no plug-in, or when the plug-in or a library it needs cannot be loaded (the
 * message names the library, as dlopen reports it, and the key); MOE_ERR_PEER when the
 * plug-in is from another moed (size, version or build id). */
moe_status_t moe_plugin_get(const char *key, const moe_plugin_t **out, moe_error_t *err);


#endif /* MOE_EXPERT_PLUGIN_H */
