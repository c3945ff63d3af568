/* The CUDA context: device selection, cuBLAS handle, streams, tracked device memory,
 * pinned host memory, copies and events. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* Bytes held through moe_cuda_alloc by every context of the process, and the most ever.
 * Written by the thread that allocates, read by the profiler's sampler thread. */
static uint64_t g_mem_current;
static uint64_t g_mem_peak;

static void mem_add(size_t bytes)
{
    uint64_t now = __atomic_add_fetch(&g_mem_current, (uint64_t)bytes, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&g_mem_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&g_mem_peak, &peak, now, true,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void mem_sub(size_t bytes)
{
    __atomic_sub_fetch(&g_mem_current, (uint64_t)bytes, __ATOMIC_RELAXED);
}

void moe_cuda_mem_usage(uint64_t *current, uint64_t *peak)
{
    if (current != NULL) {
        *current = __atomic_load_n(&g_mem_current, __ATOMIC_RELAXED);
    }
    if (peak != NULL) {
        *peak = __atomic_load_n(&g_mem_peak, __ATOMIC_RELAXED);
    }
}

bool moe_cuda_available(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        if (why != NULL && why_len > 0) {
            snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount: %s",
                     cudaGetErrorString(rc));
        }
        return false;
    }
    if (n < 1) {
        if (why != NULL && why_len > 0) {
            snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount found 0 devices");
        }
        return false;
    }
    if (why != NULL && why_len > 0) {
        why[0] = '\0';
    }
    return true;
}

int moe_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* Handle and streams of a zeroed context on the current device. */
static moe_status_t ctx_init(moe_cuda_t *c, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaDeviceProp prop;
    MOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&c->streams[0], cudaStreamNonBlocking));
    MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&c->streams[1], cudaStreamNonBlocking));
    MOE_CUBLAS_CHECK(cublasCreate(&c->blas));
    MOE_CUBLAS_CHECK(cublasSetStream(c->blas, c->streams[0]));
    /* Plain FP32 for F32 GEMMs (no TF32), so F32 results track the CPU path. */
    MOE_CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
cleanup:
    return st;
}

moe_status_t moe_cuda_create(int device, moe_cuda_t **out, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    moe_cuda_t *c = (moe_cuda_t *)calloc(1, sizeof *c);
    if (c == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cuda: out of host memory for a context");
    }
    c->device = device;
    MOE_CUDA_CHECK(cudaSetDevice(device));
    st = ctx_init(c, err);
    if (st != MOE_OK) {
        goto cleanup;
    }
    *out = c;
    return MOE_OK;
cleanup:
    moe_cuda_destroy(c);
    return st;
}

void moe_cuda_destroy(moe_cuda_t *c)
{
    if (c == NULL) {
        return;
    }
    for (int i = 0; i < 2; i++) {
        if (c->streams[i] != NULL) {
            (void)cudaStreamSynchronize(c->streams[i]);
        }
    }
    if (c->blas != NULL) {
        (void)cublasDestroy(c->blas);
    }
    for (size_t i = 0; i < c->num_allocs; i++) {
        (void)cudaFree(c->allocs[i].p);
        mem_sub(c->allocs[i].bytes);
    }
    for (int i = 0; i < 2; i++) {
        if (c->streams[i] != NULL) {
            (void)cudaStreamDestroy(c->streams[i]);
        }
    }
    (void)cudaGetLastError();
    free(c->allocs);
    free(c);
}

const char *moe_cuda_device_name(const moe_cuda_t *c)
{
    return c != NULL ? c->name : "";
}

void *moe_cuda_stream(moe_cuda_t *c, moe_cuda_stream_t which)
{
    return (void *)moe_cuda_stream_of(c, which);
}

/* Remember p's size; false when the table cannot grow. */
static bool alloc_remember(moe_cuda_t *c, void *p, size_t bytes)
{
    if (c->num_allocs == c->cap_allocs) {
        size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        void *grown = realloc(c->allocs, cap * sizeof *c->allocs);
        if (grown == NULL) {
            return false;
        }
        c->allocs = (moe_cuda_alloc_rec_t *)grown;
        c->cap_allocs = cap;
    }
    c->allocs[c->num_allocs].p = p;
    c->allocs[c->num_allocs].bytes = bytes;
    c->num_allocs++;
    return true;
}

moe_status_t moe_cuda_alloc(moe_cuda_t *c, size_t bytes, void **p, moe_error_t *err)
{
    void *d = NULL;
    if (bytes == 0) {
        *p = NULL;
        return MOE_OK;
    }
    cudaError_t rc = cudaMalloc(&d, bytes);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        uint64_t cur = 0;
        moe_cuda_mem_usage(&cur, NULL);
        return moe_error_set(err, rc == cudaErrorMemoryAllocation ? MOE_ERR_NO_MEMORY : MOE_ERR_CUDA,
                             "cudaMalloc(%zu bytes) on %s failed with %llu bytes held by moed: "
                             "%s (%s:%d)", bytes, c->name, (unsigned long long)cur,
                             cudaGetErrorString(rc), __FILE__, __LINE__);
    }
    if (!alloc_remember(c, d, bytes)) {
        (void)cudaFree(d);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cuda: out of host memory tracking %zu "
                             "device allocations", c->num_allocs);
    }
    mem_add(bytes);
    *p = d;
    return MOE_OK;
}

void moe_cuda_free(moe_cuda_t *c, void *p)
{
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < c->num_allocs; i++) {
        if (c->allocs[i].p == p) {
            mem_sub(c->allocs[i].bytes);
            c->allocs[i] = c->allocs[--c->num_allocs];
            break;
        }
    }
    if (cudaFree(p) != cudaSuccess) {
        (void)cudaGetLastError();
    }
}

moe_status_t moe_cuda_copy(moe_cuda_t *c, void *dst, const void *src, size_t bytes,
                           moe_cuda_copy_kind_t kind, moe_cuda_stream_t which,
                           moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    cudaMemcpyKind k = kind == MOE_CUDA_COPY_H2D   ? cudaMemcpyHostToDevice
                       : kind == MOE_CUDA_COPY_D2H ? cudaMemcpyDeviceToHost
                                                   : cudaMemcpyDeviceToDevice;
    if (bytes == 0) {
        return MOE_OK;
    }
    MOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, moe_cuda_stream_of(c, which)));
cleanup:
    return st;
}

bool moe_cuda_host_pin(void *p, size_t bytes)
{
    if (p == NULL || bytes == 0) {
        return false;
    }
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the copies work from pageable memory */
        return false;
    }
    return true;
}

void moe_cuda_host_unpin(void *p)
{
    if (p != NULL && cudaHostUnregister(p) != cudaSuccess) {
        (void)cudaGetLastError();
    }
}

moe_status_t moe_cuda_sync(moe_cuda_t *c, moe_cuda_stream_t which, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    MOE_CUDA_CHECK(cudaStreamSynchronize(moe_cuda_stream_of(c, which)));
cleanup:
    return st;
}

moe_status_t moe_cuda_event_create(moe_cuda_t *c, moe_cuda_event_t **ev, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    moe_cuda_event_t *e = (moe_cuda_event_t *)calloc(1, sizeof *e);
    (void)c;
    if (e == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cuda: out of host memory for an event");
    }
    MOE_CUDA_CHECK(cudaEventCreateWithFlags(&e->ev, cudaEventDefault));
    *ev = e;
    return MOE_OK;
cleanup:
    free(e);
    return st;
}

void moe_cuda_event_destroy(moe_cuda_event_t *ev)
{
    if (ev == NULL) {
        return;
    }
    if (cudaEventDestroy(ev->ev) != cudaSuccess) {
        (void)cudaGetLastError();
    }
    free(ev);
}

moe_status_t moe_cuda_event_record(moe_cuda_t *c, moe_cuda_event_t *ev, moe_cuda_stream_t which,
                                   moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    MOE_CUDA_CHECK(cudaEventRecord(ev->ev, moe_cuda_stream_of(c, which)));
cleanup:
    return st;
}

moe_status_t moe_cuda_stream_wait_event(moe_cuda_t *c, moe_cuda_stream_t which,
                                        moe_cuda_event_t *ev, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    MOE_CUDA_CHECK(cudaStreamWaitEvent(moe_cuda_stream_of(c, which), ev->ev, 0));
cleanup:
    return st;
}

moe_status_t moe_cuda_event_query(moe_cuda_event_t *ev, bool *done, moe_error_t *err)
{
    cudaError_t rc = cudaEventQuery(ev->ev);
    if (rc == cudaSuccess || rc == cudaErrorNotReady) {
        if (rc == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not an error: keep it out of later checks */
        }
        *done = rc == cudaSuccess;
        return MOE_OK;
    }
    (void)cudaGetLastError();
    return moe_error_set(err, MOE_ERR_CUDA, "cudaEventQuery failed: %s (%s:%d)",
                         cudaGetErrorString(rc), __FILE__, __LINE__);
}

moe_status_t moe_cuda_event_elapsed_ns(moe_cuda_event_t *begin, moe_cuda_event_t *end,
                                       int64_t *ns, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    float ms = 0.0f;
    MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, begin->ev, end->ev));
    *ns = (int64_t)llround((double)ms * 1e6);
cleanup:
    return st;
}
