/* One expert's FFN on the GPU: cuBLAS GEMMs in the storage dtype with F32 accumulation and
 * an F32 activation kernel - the math of expert_cpu.c - plus the GEMM throughput probe the
 * benchmark compares expert efficiency against. */
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "cuda_int.h"
#include "expert/nvtx.h"

#define SCRATCH_ALIGN 256 /* cuBLAS wants 16-byte operands; 256 keeps every buffer on a line */

static size_t align_up(size_t bytes)
{
    return (bytes + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
}

/* Byte sizes of the three scratch buffers for `rows` rows: the input in dtype (0 for F32:
 * the GEMM reads `in` directly), the up projection in F32, the activation in dtype. */
static void scratch_parts(moe_activation_t act, int64_t hidden, int64_t ffn, int64_t rows,
                          moe_dtype_t dtype, size_t part[3])
{
    size_t esz = moe_cuda_dtype_size(dtype);
    size_t up_n = (size_t)(act == MOE_ACT_SWIGLU ? 2 * ffn : ffn);
    part[0] = dtype == MOE_DTYPE_F32 ? 0 : align_up((size_t)rows * (size_t)hidden * esz);
    part[1] = align_up((size_t)rows * up_n * sizeof(float));
    part[2] = align_up((size_t)rows * (size_t)ffn * esz);
}

size_t moe_cuda_expert_scratch_bytes(moe_activation_t act, int64_t hidden, int64_t ffn,
                                     int64_t max_rows, moe_dtype_t dtype)
{
    size_t part[3];
    if (max_rows <= 0 || hidden <= 0 || ffn <= 0) {
        return 0;
    }
    scratch_parts(act, hidden, ffn, max_rows, dtype, part);
    return part[0] + part[1] + part[2];
}

moe_status_t moe_cuda_gemm_nt(moe_cuda_t *c, moe_dtype_t dtype, int64_t m, int64_t n,
                              int64_t k, const void *a, const void *b, float *out,
                              moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = moe_cuda_data_type(dtype);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "GEMM %lld x %lld x %lld exceeds cuBLAS's "
                             "int dimensions", (long long)m, (long long)n, (long long)k);
    }
    /* Row-major C[m,n] = A B^T is column-major C^T[n,m] = op_T(B as [k,n]) * A as [k,m]. */
    MOE_CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one,
                                  b, t, (int)k, a, t, (int)k, &zero, out, CUDA_R_32F, (int)n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
cleanup:
    return st;
}

/* The same formulas as swiglu_rows/gelu_rows in expert_cpu.c, in F32, result rounded to T.
 * h is [rows, up_n] F32; act is [rows, ffn] in T. */
template <typename T>
__global__ void swiglu_kernel(T *act, const float *h, int64_t rows, int64_t ffn)
{
    int64_t n = rows * ffn, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t r = i / ffn, col = i - r * ffn;
        float v = h[r * 2 * ffn + col], b = h[r * 2 * ffn + ffn + col];
        act[i] = moe_cuda_from_f32<T>(v / (1.0f + expf(-v)) * b);
    }
}

template <typename T>
__global__ void gelu_kernel(T *act, const float *h, int64_t n)
{
    const float inv_sqrt2 = 0.70710678118654752f;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = h[i];
        act[i] = moe_cuda_from_f32<T>(0.5f * v * (1.0f + erff(v * inv_sqrt2)));
    }
}

template <typename T>
static void launch_activation(cudaStream_t s, moe_activation_t act, void *out, const float *h,
                              int64_t rows, int64_t ffn)
{
    unsigned int blocks = moe_cuda_blocks(rows * ffn, MOE_CUDA_THREADS);
    if (act == MOE_ACT_SWIGLU) {
        swiglu_kernel<T><<<blocks, MOE_CUDA_THREADS, 0, s>>>((T *)out, h, rows, ffn);
    } else {
        gelu_kernel<T><<<blocks, MOE_CUDA_THREADS, 0, s>>>((T *)out, h, rows * ffn);
    }
}

/* act[rows, F] (dtype) = activation(h[rows, up_n]), inside an NVTX range named for it. */
static moe_status_t expert_activation(moe_cuda_t *c, moe_dtype_t dtype, moe_activation_t act,
                                      int64_t rows, int64_t ffn, const float *h, void *out,
                                      moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    moe_nvtx_push(act == MOE_ACT_SWIGLU ? "swiglu" : "gelu");
    if (dtype == MOE_DTYPE_BF16) {
        MOE_CUDA_LAUNCH("activation_bf16",
                        launch_activation<__nv_bfloat16>(s, act, out, h, rows, ffn));
    } else if (dtype == MOE_DTYPE_F16) {
        MOE_CUDA_LAUNCH("activation_f16", launch_activation<__half>(s, act, out, h, rows, ffn));
    } else {
        MOE_CUDA_LAUNCH("activation_f32", launch_activation<float>(s, act, out, h, rows, ffn));
    }
cleanup:
    moe_nvtx_pop();
    return st;
}

/* One GEMM of the expert inside an NVTX range `name`. */
static moe_status_t expert_linear(moe_cuda_t *c, const char *name, moe_dtype_t dtype, int64_t m,
                                  int64_t n, int64_t k, const void *a, const void *b, float *out,
                                  moe_error_t *err)
{
    moe_nvtx_push(name);
    moe_status_t st = moe_cuda_gemm_nt(c, dtype, m, n, k, a, b, out, err);
    moe_nvtx_pop();
    return st;
}

static moe_status_t expert_check_args(const moe_cuda_expert_t *w, int64_t hidden, int64_t ffn,
                                      int64_t rows, moe_error_t *err)
{
    if (w == NULL || hidden < 1 || ffn < 1 || rows < 0) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG,
                             "moe_cuda_expert_forward: weights %p, hidden %lld, ffn %lld, rows "
                             "%lld", (const void *)w, (long long)hidden, (long long)ffn,
                             (long long)rows);
    }
    return MOE_OK;
}

/* The FFN body: input conversion, up GEMM, activation, down GEMM. */
static moe_status_t expert_run(moe_cuda_t *c, const moe_cuda_expert_t *w, moe_dtype_t dtype,
                               moe_activation_t act, int64_t hidden, int64_t ffn, int64_t rows,
                               const float *in, float *out, void *scratch, moe_error_t *err)
{
    size_t part[3];
    scratch_parts(act, hidden, ffn, rows, dtype, part);
    char *base = (char *)scratch;
    const void *x = dtype == MOE_DTYPE_F32 ? (const void *)in : (const void *)base;
    float *h = (float *)(base + part[0]);
    void *a = base + part[0] + part[1];
    int64_t up_n = act == MOE_ACT_SWIGLU ? 2 * ffn : ffn;
    moe_status_t st = moe_cuda_convert_f32(c->streams[MOE_CUDA_STREAM_COMPUTE], base, in,
                                           dtype == MOE_DTYPE_F32 ? 0 : rows * hidden, dtype, err);
    if (st == MOE_OK) {
        st = expert_linear(c, "w13", dtype, rows, up_n, hidden, x, w->w13, h, err);
    }
    if (st == MOE_OK) {
        st = expert_activation(c, dtype, act, rows, ffn, h, a, err);
    }
    if (st == MOE_OK) {
        st = expert_linear(c, "w2", dtype, rows, hidden, ffn, a, w->w2, out, err);
    }
    return st;
}

moe_status_t moe_cuda_expert_forward(moe_cuda_t *c, const moe_cuda_expert_t *w,
                                     moe_dtype_t dtype, moe_activation_t act, int64_t hidden,
                                     int64_t ffn, int64_t rows, const float *in, float *out,
                                     void *scratch, moe_error_t *err)
{
    char name[32];
    moe_status_t st = expert_check_args(w, hidden, ffn, rows, err);
    if (st != MOE_OK || rows == 0) {
        return st;
    }
    snprintf(name, sizeof name, "expert %d", (int)w->id);
    moe_nvtx_push(name);
    st = expert_run(c, w, dtype, act, hidden, ffn, rows, in, out, scratch, err);
    moe_nvtx_pop();
    return st;
}

/* ---- GEMM throughput probe ---- */

/* Deterministic values in [-1, 1) from the index (a hash), so the probe multiplies real
 * numbers (zeros would draw less power and flatter the clock). */
template <typename T>
__global__ void fill_kernel(T *p, int64_t n, uint32_t salt)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint32_t x = (uint32_t)i * 2654435761u ^ salt;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        p[i] = moe_cuda_from_f32<T>((float)(x >> 8) * (1.0f / 8388608.0f) - 1.0f);
    }
}

static moe_status_t probe_fill(moe_cuda_t *c, moe_dtype_t dtype, void *p, int64_t n,
                               uint32_t salt, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    unsigned int blocks = moe_cuda_blocks(n, MOE_CUDA_THREADS);
    if (dtype == MOE_DTYPE_BF16) {
        MOE_CUDA_LAUNCH("probe_fill", fill_kernel<<<blocks, MOE_CUDA_THREADS, 0, s>>>(
                                          (__nv_bfloat16 *)p, n, salt));
    } else if (dtype == MOE_DTYPE_F16) {
        MOE_CUDA_LAUNCH("probe_fill", fill_kernel<<<blocks, MOE_CUDA_THREADS, 0, s>>>(
                                          (__half *)p, n, salt));
    } else {
        MOE_CUDA_LAUNCH("probe_fill", fill_kernel<<<blocks, MOE_CUDA_THREADS, 0, s>>>(
                                          (float *)p, n, salt));
    }
cleanup:
    return st;
}

/* The probe's operands: 0 x [rows,H], 1 w13 [up_n,H], 2 h [rows,up_n] F32, 3 act [rows,F],
 * 4 w2 [H,F], 5 out [rows,H] F32. */
typedef struct probe_bufs {
    void *p[6];
} probe_bufs_t;

static moe_status_t probe_alloc(moe_cuda_t *c, moe_dtype_t dtype, int64_t H, int64_t F,
                                int64_t up_n, int64_t rows, probe_bufs_t *b, moe_error_t *err)
{
    size_t esz = moe_cuda_dtype_size(dtype);
    const int64_t elems[6] = {rows * H, up_n * H, rows * up_n, rows * F, H * F, rows * H};
    const bool is_f32[6] = {false, false, true, false, false, true};
    moe_status_t st = MOE_OK;
    for (int i = 0; i < 6 && st == MOE_OK; i++) {
        st = moe_cuda_alloc(c, (size_t)elems[i] * (is_f32[i] ? sizeof(float) : esz), &b->p[i],
                            err);
        if (st == MOE_OK && !is_f32[i]) {
            st = probe_fill(c, dtype, b->p[i], elems[i], (uint32_t)i * 0x9E3779B9u, err);
        }
    }
    return st;
}

/* Time one up + down GEMM pair between two events; *ms gets the device time. */
static moe_status_t probe_once(moe_cuda_t *c, moe_dtype_t dtype, int64_t H, int64_t F,
                               int64_t up_n, int64_t rows, const probe_bufs_t *b,
                               cudaEvent_t ev[2], float *ms, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    MOE_CUDA_CHECK(cudaEventRecord(ev[0], s));
    st = moe_cuda_gemm_nt(c, dtype, rows, up_n, H, b->p[0], b->p[1], (float *)b->p[2], err);
    if (st == MOE_OK) {
        st = moe_cuda_gemm_nt(c, dtype, rows, H, F, b->p[3], b->p[4], (float *)b->p[5], err);
    }
    if (st != MOE_OK) {
        goto cleanup;
    }
    MOE_CUDA_CHECK(cudaEventRecord(ev[1], s));
    MOE_CUDA_CHECK(cudaEventSynchronize(ev[1]));
    MOE_CUDA_CHECK(cudaEventElapsedTime(ms, ev[0], ev[1]));
cleanup:
    return st;
}

/* Best (shortest) time over `reps` timed runs after one untimed warm-up. */
static moe_status_t probe_best_ms(moe_cuda_t *c, moe_dtype_t dtype, int64_t H, int64_t F,
                                  int64_t up_n, int64_t rows, const probe_bufs_t *b, int reps,
                                  float *best, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    float ms = 0.0f;
    MOE_CUDA_CHECK(cudaEventCreate(&ev[0]));
    MOE_CUDA_CHECK(cudaEventCreate(&ev[1]));
    *best = INFINITY;
    for (int r = -1; r < reps && st == MOE_OK; r++) {
        st = probe_once(c, dtype, H, F, up_n, rows, b, ev, &ms, err);
        if (st == MOE_OK && r >= 0 && ms < *best) {
            *best = ms;
        }
    }
cleanup:
    for (int i = 0; i < 2; i++) {
        if (ev[i] != NULL) {
            (void)cudaEventDestroy(ev[i]);
        }
    }
    return st;
}

moe_status_t moe_cuda_gemm_probe(moe_cuda_t *c, moe_dtype_t dtype, moe_activation_t act,
                                 int64_t hidden, int64_t ffn, int64_t rows, int reps,
                                 double *tflops, moe_error_t *err)
{
    probe_bufs_t b = {{NULL}};
    int64_t up_n = act == MOE_ACT_SWIGLU ? 2 * ffn : ffn;
    float best = INFINITY;
    moe_status_t st = MOE_OK;
    if (hidden < 1 || ffn < 1 || rows < 1 || reps < 1) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_cuda_gemm_probe: hidden %lld, ffn "
                             "%lld, rows %lld, reps %d", (long long)hidden, (long long)ffn,
                             (long long)rows, reps);
    }
    st = probe_alloc(c, dtype, hidden, ffn, up_n, rows, &b, err);
    if (st == MOE_OK) {
        st = probe_best_ms(c, dtype, hidden, ffn, up_n, rows, &b, reps, &best, err);
    }
    if (st == MOE_OK) {
        double flops = 2.0 * (double)rows * (double)hidden * (double)(up_n + ffn);
        *tflops = best > 0.0f ? flops / ((double)best * 1e-3) / 1e12 : 0.0;
    }
    (void)cudaStreamSynchronize(c->streams[MOE_CUDA_STREAM_COMPUTE]);
    for (int i = 0; i < 6; i++) {
        moe_cuda_free(c, b.p[i]);
    }
    return st;
}
