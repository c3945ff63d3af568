/* NVTX ranges for Nsight Systems (nsys profile): name the step, its phases and the
 * exchanges so the GPU timeline reads like moed's own profile. In builds with CUDA these
 * call the header-only NVTX3 API, which costs an indirect call when no tool is attached
 * (no library to link); without CUDA they compile to nothing. Ranges nest per thread:
 * every push needs its pop on the same thread. */
#ifndef MOE_NVTX_H
#define MOE_NVTX_H

#if defined(MOE_HAVE_CUDA) || defined(MOE_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>

/* Open a range named `name` (copied by NVTX; the caller may reuse the buffer). */
static inline void moe_nvtx_push(const char *name)
{
    nvtxRangePushA(name);
}

/* Close the innermost range opened by moe_nvtx_push() on this thread. */
static inline void moe_nvtx_pop(void)
{
    nvtxRangePop();
}
#else
static inline void moe_nvtx_push(const char *name)
{
    (void)name;
}

static inline void moe_nvtx_pop(void)
{
}
#endif

#endif /* MOE_NVTX_H */
