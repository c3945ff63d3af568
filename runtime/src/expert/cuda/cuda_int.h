/* Private to the .cu files of the CUDA device library: the context, the check macros that
 * turn CUDA and cuBLAS failures into moe_status_t, and small shared helpers. */
#ifndef MOE_CUDA_INT_H
#define MOE_CUDA_INT_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "moe_cuda.h"

#define MOE_CUDA_NAME_MAX 256

/* A device allocation and its size, so moe_cuda_free can subtract what it gave back. */
typedef struct moe_cuda_alloc_rec {
    void *p;
    size_t bytes;
} moe_cuda_alloc_rec_t;

struct moe_cuda {
    int device;
    cublasHandle_t blas;
    cudaStream_t streams[2]; /* indexed by moe_cuda_stream_t */
    char name[MOE_CUDA_NAME_MAX];
    moe_cuda_alloc_rec_t *allocs; /* live allocations, unordered */
    size_t num_allocs;
    size_t cap_allocs;
};

/* ev stays the first member: transport_nccl.c reads a moe_cuda_event_t * as a
 * const cudaEvent_t * (a struct pointer converted to a pointer to its first member). */
struct moe_cuda_event {
    cudaEvent_t ev;
};

/* The check macros need `moe_status_t st` and `moe_error_t *err` in scope and a `cleanup`
 * label. C++ forbids a goto across an initialised declaration: declare locals first.
 * On failure they also clear CUDA's last-error slot, so a handled error is not reported
 * again by the next launch check. */
#define MOE_CUDA_CHECK(call)                                                              \
    do {                                                                                  \
        cudaError_t cu_rc_ = (call);                                                      \
        if (cu_rc_ != cudaSuccess) {                                                      \
            (void)cudaGetLastError();                                                     \
            st = moe_error_set(err, MOE_ERR_CUDA, "%s failed: %s (%s:%d)", #call,         \
                               cudaGetErrorString(cu_rc_), __FILE__, __LINE__);           \
            goto cleanup;                                                                 \
        }                                                                                 \
    } while (0)

#define MOE_CUBLAS_CHECK(call)                                                            \
    do {                                                                                  \
        cublasStatus_t cb_rc_ = (call);                                                   \
        if (cb_rc_ != CUBLAS_STATUS_SUCCESS) {                                            \
            (void)cudaGetLastError();                                                     \
            st = moe_error_set(err, MOE_ERR_CUDA, "%s failed: %s (%s:%d)", #call,         \
                               cublasGetStatusString(cb_rc_), __FILE__, __LINE__);        \
            goto cleanup;                                                                 \
        }                                                                                 \
    } while (0)

/* Launch a kernel (the launch expression is the variadic part: it holds commas) and check
 * the launch. The last-error slot is cleared first so an older, already handled error is
 * not blamed on this kernel; a sticky error (a crashed kernel) still shows. */
#define MOE_CUDA_LAUNCH(what, ...)                                                        \
    do {                                                                                  \
        (void)cudaGetLastError();                                                         \
        __VA_ARGS__;                                                                      \
        cudaError_t cu_rc_ = cudaGetLastError();                                          \
        if (cu_rc_ != cudaSuccess) {                                                      \
            st = moe_error_set(err, MOE_ERR_CUDA, "launch of kernel %s failed: %s (%s:%d)", \
                               (what), cudaGetErrorString(cu_rc_), __FILE__, __LINE__);   \
            goto cleanup;                                                                 \
        }                                                                                 \
    } while (0)

/* Threads per block for the element-wise kernels. */
#define MOE_CUDA_THREADS 256

/* Blocks for a grid-stride loop over n items: enough to fill the device, never more than
 * the items need. n > 0. */
static inline unsigned int moe_cuda_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned int)(b < 65536 ? b : 65536);
}

/* The stream behind `which` (COMPUTE for an unknown value). */
static inline cudaStream_t moe_cuda_stream_of(const moe_cuda_t *c, moe_cuda_stream_t which)
{
    return c->streams[which == MOE_CUDA_STREAM_COMM ? 1 : 0];
}

/* cuBLAS's name for a storage dtype. */
static inline cudaDataType_t moe_cuda_data_type(moe_dtype_t dtype)
{
    return dtype == MOE_DTYPE_BF16 ? CUDA_R_16BF : dtype == MOE_DTYPE_F16 ? CUDA_R_16F
                                                                          : CUDA_R_32F;
}

/* v rounded to nearest even in the storage type T (the same rounding as moe_f32_to_bf16
 * and moe_f32_to_f16 on the CPU). */
template <typename T> __device__ __forceinline__ T moe_cuda_from_f32(float v);
template <> __device__ __forceinline__ float moe_cuda_from_f32<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 moe_cuda_from_f32<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half moe_cuda_from_f32<__half>(float v)
{
    return __float2half_rn(v);
}

/* Threads for a kernel that walks one row of `width` items per block: a whole number of
 * warps, at most MOE_CUDA_THREADS. */
static inline int moe_cuda_row_threads(int64_t width)
{
    return width >= MOE_CUDA_THREADS ? MOE_CUDA_THREADS : (int)((width + 31) / 32) * 32;
}

/* dst[0..n) = src[0..n) rounded to dtype (nearest even), queued on stream s. dst may be src
 * only for F32 (then nothing is done). */
moe_status_t moe_cuda_convert_f32(cudaStream_t s, void *dst, const float *src, int64_t n,
                                  moe_dtype_t dtype, moe_error_t *err);

/* Row-major C[m,n] (F32, leading dimension n) = A[m,k] * B[n,k]^T, A and B stored as dtype
 * with leading dimension k, F32 accumulation, on c's compute stream. */
moe_status_t moe_cuda_gemm_nt(moe_cuda_t *c, moe_dtype_t dtype, int64_t m, int64_t n,
                              int64_t k, const void *a, const void *b, float *out,
                              moe_error_t *err);

#endif /* MOE_CUDA_INT_H */
