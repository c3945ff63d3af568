/* Device kernels of the gate and the permutation: dtype conversion (weights, inputs),
 * softmax and top-k per token, the gather into expert order and the weighted merge. */
#include <limits.h>
#include <math.h>

#include "cuda_int.h"

#define FULL_MASK 0xffffffffu
#define GATE_WARPS 4 /* token rows per block of the gate kernel: one warp each */

size_t moe_cuda_dtype_size(moe_dtype_t dtype)
{
    return dtype == MOE_DTYPE_F32 ? 4 : 2;
}

template <typename T>
__global__ void convert_kernel(T *dst, const float *src, int64_t n)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dst[i] = moe_cuda_from_f32<T>(src[i]);
    }
}

moe_status_t moe_cuda_convert_f32(cudaStream_t s, void *dst, const float *src, int64_t n,
                                  moe_dtype_t dtype, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    unsigned int blocks = n > 0 ? moe_cuda_blocks(n, MOE_CUDA_THREADS) : 0;
    if (n <= 0 || dst == (const void *)src) {
        return MOE_OK;
    }
    if (dtype == MOE_DTYPE_F32) {
        MOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float),
                                       cudaMemcpyDeviceToDevice, s));
    } else if (dtype == MOE_DTYPE_BF16) {
        MOE_CUDA_LAUNCH("convert_f32_bf16", convert_kernel<<<blocks, MOE_CUDA_THREADS, 0, s>>>(
                                                (__nv_bfloat16 *)dst, src, n));
    } else {
        MOE_CUDA_LAUNCH("convert_f32_f16", convert_kernel<<<blocks, MOE_CUDA_THREADS, 0, s>>>(
                                               (__half *)dst, src, n));
    }
cleanup:
    return st;
}

moe_status_t moe_cuda_upload(moe_cuda_t *c, const float *host, int64_t n, moe_dtype_t dtype,
                             void **dev, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    void *out = NULL, *tmp = NULL;
    if (n <= 0) {
        *dev = NULL;
        return n == 0 ? MOE_OK
                      : moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_cuda_upload: n = %lld",
                                      (long long)n);
    }
    st = moe_cuda_alloc(c, (size_t)n * moe_cuda_dtype_size(dtype), &out, err);
    if (st == MOE_OK && dtype != MOE_DTYPE_F32) {
        st = moe_cuda_alloc(c, (size_t)n * sizeof(float), &tmp, err); /* F32 staging */
    }
    if (st != MOE_OK) {
        goto cleanup;
    }
    MOE_CUDA_CHECK(cudaMemcpyAsync(tmp ? tmp : out, host, (size_t)n * sizeof(float),
                                   cudaMemcpyHostToDevice, s));
    st = moe_cuda_convert_f32(s, out, (const float *)(tmp ? tmp : out), n, dtype, err);
    if (st != MOE_OK) {
        goto cleanup;
    }
    MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    moe_cuda_free(c, tmp);
    *dev = out;
    return MOE_OK;
cleanup:
    (void)cudaStreamSynchronize(s);
    moe_cuda_free(c, tmp);
    moe_cuda_free(c, out);
    return st;
}

/* ---- gate: one warp per token row; lane l owns experts l, l+32, ... (E <= 1024) ---- */

/* Add the bias (when given) to the row in place; returns the row's maximum to every lane. */
__device__ float gate_bias_max(float *row, int E, const float *bias, int lane)
{
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) {
        float v = row[e];
        if (bias != NULL) {
            v += bias[e];
            row[e] = v;
        }
        mx = fmaxf(mx, v);
    }
    for (int o = 16; o > 0; o >>= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
    }
    return mx;
}

/* row = softmax(row) as moe_softmax_row: exp(v - max), sum in double, multiply by the
 * F32 reciprocal. Ends with a warp barrier, so every lane may read every entry. */
__device__ void gate_softmax(float *row, int E, float mx, int lane)
{
    double sum = 0.0;
    for (int e = lane; e < E; e += 32) {
        float ev = expf(row[e] - mx);
        row[e] = ev;
        sum += ev;
    }
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_xor_sync(FULL_MASK, sum, o);
    }
    float inv = (float)(1.0 / sum);
    for (int e = lane; e < E; e += 32) {
        row[e] *= inv;
    }
    __syncwarp();
}

/* True when (v, i) ranks before (bv, bi): larger value, or equal value and lower index.
 * NaN ranks as -inf, so a row with NaN still yields k distinct valid indices. */
__device__ __forceinline__ bool gate_before(float v, int i, float bv, int bi)
{
    v = isnan(v) ? -INFINITY : v;
    return v > bv || (v == bv && i < bi);
}

/* The k best of the row in rank order (= moe_topk_row): k rounds of a warp arg-max over the
 * experts not taken yet. Lane 0 writes idx[0..k) and w[0..k). */
__device__ void gate_topk(const float *row, int E, int k, int lane, int32_t *idx, float *w)
{
    uint32_t taken = 0; /* bit s: expert lane + 32*s is already chosen */
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int s = 0, e = lane; e < E; s++, e += 32) {
            if (!(taken & (1u << s)) && gate_before(row[e], e, bv, bi)) {
                bv = isnan(row[e]) ? -INFINITY : row[e];
                bi = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(FULL_MASK, bv, o);
            int oi = __shfl_xor_sync(FULL_MASK, bi, o);
            if (gate_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if ((bi & 31) == lane) {
            taken |= 1u << (bi >> 5);
        }
        if (lane == 0) {
            idx[j] = bi;
            w[j] = row[bi];
        }
    }
}

__global__ void gate_rows_kernel(float *logits, int64_t tokens, int E, int k, bool renormalize,
                                 const float *bias, int32_t *topk_idx, float *topk_w)
{
    int lane = threadIdx.x & 31;
    int64_t t = (int64_t)blockIdx.x * GATE_WARPS + threadIdx.x / 32;
    if (t >= tokens) {
        return; /* t is the same for the whole warp: no lane is left in a shuffle */
    }
    float *row = logits + t * E;
    float mx = gate_bias_max(row, E, bias, lane);
    gate_softmax(row, E, mx, lane);
    int32_t *idx = topk_idx + t * k;
    float *w = topk_w + t * k;
    gate_topk(row, E, k, lane, idx, w);
    if (renormalize && lane == 0) {
        float s = 0.0f; /* in order, in F32, as gate.c */
        for (int j = 0; j < k; j++) {
            s += w[j];
        }
        for (int j = 0; j < k; j++) {
            w[j] /= s;
        }
    }
}

static moe_status_t gate_check_args(int64_t tokens, int64_t hidden, int E, int k,
                                    moe_error_t *err)
{
    if (tokens < 0 || tokens > INT_MAX || hidden < 1 || hidden > INT_MAX || E < 1 ||
        E > MOE_MAX_EXPERTS || k < 1 || k > E) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG,
                             "moe_cuda_gate: tokens %lld, hidden %lld, experts %d, k %d out of "
                             "range (1 <= k <= experts <= %d)", (long long)tokens,
                             (long long)hidden, E, k, MOE_MAX_EXPERTS);
    }
    return MOE_OK;
}

moe_status_t moe_cuda_gate(moe_cuda_t *c, const float *x, int64_t tokens, int64_t hidden,
                           const float *wg, int num_experts, int k, bool renormalize,
                           const float *bias, float *logits, int32_t *topk_idx, float *topk_w,
                           moe_error_t *err)
{
    moe_status_t st = gate_check_args(tokens, hidden, num_experts, k, err);
    const float one = 1.0f, zero = 0.0f;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    unsigned int blocks = (unsigned int)((tokens + GATE_WARPS - 1) / GATE_WARPS);
    if (st != MOE_OK || tokens == 0) {
        return st;
    }
    /* Row-major logits[T,E] = x[T,H] wg[E,H]^T is column-major logits^T = wg^T' x'. */
    MOE_CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, num_experts, (int)tokens,
                                 (int)hidden, &one, wg, (int)hidden, x, (int)hidden, &zero,
                                 logits, num_experts));
    MOE_CUDA_LAUNCH("gate_rows", gate_rows_kernel<<<blocks, GATE_WARPS * 32, 0, s>>>(
                                     logits, tokens, num_experts, k, renormalize, bias,
                                     topk_idx, topk_w));
cleanup:
    return st;
}

/* ---- permutation ---- */

/* One destination row per block iteration; V is float or float4 (width in V units). */
template <typename V>
__global__ void gather_kernel(V *dst, const V *src, const int32_t *src_row, int64_t n,
                              int64_t width)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        int32_t r = src_row[i];
        V *d = dst + i * width;
        const V *sr = src + (int64_t)(r < 0 ? 0 : r) * width;
        for (int64_t h = threadIdx.x; h < width; h += blockDim.x) {
            V zero{};
            d[h] = r < 0 ? zero : sr[h];
        }
    }
}

moe_status_t moe_cuda_gather_rows(moe_cuda_t *c, float *dst, const float *src,
                                  const int32_t *src_row, int64_t n, int64_t hidden,
                                  moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    bool vec = hidden % 4 == 0 && ((uintptr_t)dst | (uintptr_t)src) % 16 == 0;
    int64_t width = vec ? hidden / 4 : hidden;
    unsigned int blocks = (unsigned int)(n < 65536 ? n : 65536);
    if (n < 0 || hidden < 0) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_cuda_gather_rows: n %lld, hidden %lld",
                             (long long)n, (long long)hidden);
    }
    if (n == 0 || hidden == 0) {
        return MOE_OK;
    }
    if (vec) {
        MOE_CUDA_LAUNCH("gather_rows", gather_kernel<<<blocks, moe_cuda_row_threads(width), 0, s>>>(
                                           (float4 *)dst, (const float4 *)src, src_row, n, width));
    } else {
        MOE_CUDA_LAUNCH("gather_rows", gather_kernel<<<blocks, moe_cuda_row_threads(width), 0, s>>>(
                                           dst, src, src_row, n, width));
    }
cleanup:
    return st;
}

/* x[t,h] += sum_j w[t,j] * ret[pos[t,j], h]. __fmul_rn/__fadd_rn keep the multiply and the
 * add separately rounded (no FMA contraction), as the CPU loop in moe_layer.c computes. */
__global__ void merge_kernel(float *x, int64_t tokens, int64_t hidden, int k,
                             const int32_t *slot_pos, const float *topk_w, const float *ret)
{
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const int32_t *pos = slot_pos + t * k;
        const float *w = topk_w + t * k;
        float *xr = x + t * hidden;
        for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                int32_t p = pos[j];
                if (p >= 0) {
                    acc = __fadd_rn(acc, __fmul_rn(w[j], ret[(int64_t)p * hidden + h]));
                }
            }
            xr[h] = __fadd_rn(xr[h], acc);
        }
    }
}

moe_status_t moe_cuda_merge(moe_cuda_t *c, float *x, int64_t tokens, int64_t hidden, int k,
                            const int32_t *slot_pos, const float *topk_w, const float *ret,
                            moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    unsigned int blocks = (unsigned int)(tokens < 65536 ? tokens : 65536);
    if (tokens < 0 || hidden < 0 || k < 1) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_cuda_merge: tokens %lld, hidden "
                             "%lld, k %d", (long long)tokens, (long long)hidden, k);
    }
    if (tokens == 0 || hidden == 0) {
        return MOE_OK;
    }
    MOE_CUDA_LAUNCH("merge", merge_kernel<<<blocks, moe_cuda_row_threads(hidden), 0, s>>>(
                                 x, tokens, hidden, k, slot_pos, topk_w, ret));
cleanup:
    return st;
}

/* BF16 rows on the wire (runtime.wire_dtype bf16): one block per row, `hidden` values, the
 * wire row `ld` BF16 elements long (H rounded up to even). */
__global__ void rows_to_bf16_kernel(__nv_bfloat16 *dst, int64_t ld, const float *src,
                                    int64_t rows, int64_t hidden)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
            dst[r * ld + h] = __float2bfloat16_rn(src[r * hidden + h]);
        }
    }
}

__global__ void rows_from_bf16_kernel(float *dst, const __nv_bfloat16 *src, int64_t ld,
                                      int64_t rows, int64_t hidden)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
            dst[r * hidden + h] = __bfloat162float(src[r * ld + h]);
        }
    }
}

moe_status_t moe_cuda_rows_to_bf16(moe_cuda_t *c, void *dst, int64_t ld, const float *src,
                                   int64_t rows, int64_t hidden, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    unsigned int blocks = (unsigned int)(rows < 65536 ? rows : 65536);
    if (rows <= 0 || hidden <= 0) {
        return MOE_OK;
    }
    MOE_CUDA_LAUNCH("rows_to_bf16", rows_to_bf16_kernel<<<blocks, moe_cuda_row_threads(hidden), 0,
                                                           s>>>((__nv_bfloat16 *)dst, ld, src,
                                                                rows, hidden));
cleanup:
    return st;
}

moe_status_t moe_cuda_rows_from_bf16(moe_cuda_t *c, float *dst, const void *src, int64_t ld,
                                     int64_t rows, int64_t hidden, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaStream_t s = c->streams[MOE_CUDA_STREAM_COMPUTE];
    unsigned int blocks = (unsigned int)(rows < 65536 ? rows : 65536);
    if (rows <= 0 || hidden <= 0) {
        return MOE_OK;
    }
    MOE_CUDA_LAUNCH("rows_from_bf16",
                    rows_from_bf16_kernel<<<blocks, moe_cuda_row_threads(hidden), 0, s>>>(
                        dst, (const __nv_bfloat16 *)src, ld, rows, hidden));
cleanup:
    return st;
}
