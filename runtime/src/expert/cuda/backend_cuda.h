/* The GPU expert back-end (backend_cuda.c), inside the CUDA plug-in; moed reaches it
 * through the plug-in's table (expert/plugin.h: expert_attach). */
#ifndef MOE_EXPERT_BACKEND_CUDA_H
#define MOE_EXPERT_BACKEND_CUDA_H

#include "expert/backend.h"

/* Make be the GPU back-end over io: uploads io->weights in io->cfg->dtype to the device of
 * `cuda` (moe_cuda_t *), sizes the device buffers for the worst case and, with a device
 * transport, points io's x* rows at them. On failure be may be half built:
 * moe_expert_backend_destroy frees it. */
moe_status_t moe_expert_cuda_attach(moe_expert_backend_t *be, moe_expert_io_t *io, void *cuda,
                                    moe_error_t *err);

#endif /* MOE_EXPERT_BACKEND_CUDA_H */
