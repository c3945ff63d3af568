/* The CUDA device library: what the C runtime calls to run the gate, the permutation and
 * the experts on one GPU. C11, no CUDA types: streams, events and the context are opaque.
 *
 * Threads: a context is used by the thread that created it (the rank's main thread).
 * moe_cuda_available(), moe_cuda_device_count() and moe_cuda_mem_usage() may be called
 * from any thread at any time.
 *
 * Errors: every function that can fail returns a moe_status_t (MOE_ERR_CUDA for a failed
 * CUDA or cuBLAS call, with the call, the CUDA message and file:line in err), never exits.
 * Outputs are written only on success. Work is queued on a stream and runs asynchronously
 * unless a function says it synchronises; pointers named "device" must stay valid until the
 * stream has run the work (moe_cuda_sync or an event). */
#ifndef MOE_CUDA_H
#define MOE_CUDA_H

/* The system headers the moed headers use come first, so in C++ (the .cu files) only moed's
 * own declarations are read inside extern "C". */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "moe_config/config.h"
#include "moe/status.h"

typedef struct moe_cuda moe_cuda_t;             /* device, cuBLAS handle, two streams */
typedef struct moe_cuda_event moe_cuda_event_t; /* a timing-capable CUDA event */

/* The context's two streams: kernels and GEMMs run on COMPUTE; COMM is for copies and
 * exchanges so they can overlap compute. Both are non-blocking (no implicit sync with the
 * legacy default stream). */
typedef enum { MOE_CUDA_STREAM_COMPUTE = 0, MOE_CUDA_STREAM_COMM = 1 } moe_cuda_stream_t;

typedef enum {
    MOE_CUDA_COPY_H2D = 0,
    MOE_CUDA_COPY_D2H = 1,
    MOE_CUDA_COPY_D2D = 2
} moe_cuda_copy_kind_t;

/* One expert on the device, both matrices row-major in the storage dtype:
 *   w13 [2F, H] for swiglu (W1 rows, then W3 rows), [F, H] for gelu;  w2 [H, F]. */
typedef struct moe_cuda_expert {
    int32_t id;
    void *w13;
    void *w2;
} moe_cuda_expert_t;

/* ---- device and context ---- */

/* True when at least one CUDA device can be used. Else false, with the reason in why
 * (e.g. "no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected");
 * why may be NULL. Touches no device. */
bool moe_cuda_available(char *why, size_t why_len);

/* Number of usable CUDA devices; 0 when there is no driver or no device. */
int moe_cuda_device_count(void);

/* Select `device` for the calling thread and create a context on it: a cuBLAS handle and
 * the two streams. *out is set only on success; free with moe_cuda_destroy(). */
moe_status_t moe_cuda_create(int device, moe_cuda_t **out, moe_error_t *err);

/* Wait for both streams, free what was allocated through c and not freed (moe_cuda_alloc),
 * destroy the handle and streams. Accepts NULL. */
void moe_cuda_destroy(moe_cuda_t *c);

/* The device's name ("NVIDIA H200"); "" for NULL. Valid while c lives. */
const char *moe_cuda_device_name(const moe_cuda_t *c);

/* The cudaStream_t behind `which`, as void * (for NCCL or another CUDA library). */
void *moe_cuda_stream(moe_cuda_t *c, moe_cuda_stream_t which);

/* ---- memory ---- */

/* Device memory of `bytes` bytes (uninitialised) into *p, counted in moe_cuda_mem_usage().
 * bytes == 0 gives *p = NULL. A full device gives MOE_ERR_NO_MEMORY. Not for the hot path:
 * reserve buffers at start. */
moe_status_t moe_cuda_alloc(moe_cuda_t *c, size_t bytes, void **p, moe_error_t *err);

/* Free memory from moe_cuda_alloc(c, ...) (waits for the device: cudaFree). Accepts NULL. */
void moe_cuda_free(moe_cuda_t *c, void *p);

/* Device bytes held through moe_cuda_alloc (all contexts of the process) now, and the most
 * ever held at once. Lock-free; callable from any thread (the profiler's memory sampler).
 * Either pointer may be NULL. */
void moe_cuda_mem_usage(uint64_t *current, uint64_t *peak);

/* Queue a copy of `bytes` bytes on stream `which`. Asynchronous for device memory and
 * pinned host memory; with pageable host memory CUDA may block the caller. */
moe_status_t moe_cuda_copy(moe_cuda_t *c, void *dst, const void *src, size_t bytes,
                           moe_cuda_copy_kind_t kind, moe_cuda_stream_t which,
                           moe_error_t *err);

/* Page-lock [p, p + bytes) of host memory for the device's copies (cudaHostRegister): a
 * copy from or to pageable memory goes through the driver's staging buffer and blocks.
 * Returns whether it is pinned now; a refusal is no error: the copies work unpinned. Unpin
 * with moe_cuda_host_unpin before freeing. */
bool moe_cuda_host_pin(void *p, size_t bytes);
void moe_cuda_host_unpin(void *p);

/* Block until all work queued on stream `which` has finished; reports its errors. */
moe_status_t moe_cuda_sync(moe_cuda_t *c, moe_cuda_stream_t which, moe_error_t *err);

/* ---- events ---- */

/* A new event that can time (cudaEventDefault). *ev set only on success. */
moe_status_t moe_cuda_event_create(moe_cuda_t *c, moe_cuda_event_t **ev, moe_error_t *err);

/* Destroy an event (safe while it is pending). Accepts NULL. */
void moe_cuda_event_destroy(moe_cuda_event_t *ev);

/* Record ev at the current end of stream `which`. */
moe_status_t moe_cuda_event_record(moe_cuda_t *c, moe_cuda_event_t *ev, moe_cuda_stream_t which,
                                   moe_error_t *err);

/* Make later work on stream `which` wait until ev has completed (no host wait). */
moe_status_t moe_cuda_stream_wait_event(moe_cuda_t *c, moe_cuda_stream_t which,
                                        moe_cuda_event_t *ev, moe_error_t *err);

/* Non-blocking: *done = whether the work before ev's last record has finished (true for an
 * event never recorded). */
moe_status_t moe_cuda_event_query(moe_cuda_event_t *ev, bool *done, moe_error_t *err);

/* Device time from begin to end in ns (CUDA resolves about 0.5 us). Both must have
 * completed. */
moe_status_t moe_cuda_event_elapsed_ns(moe_cuda_event_t *begin, moe_cuda_event_t *end,
                                       int64_t *ns, moe_error_t *err);

/* ---- weights ---- */

/* Bytes of one element stored as dtype (4 or 2). */
size_t moe_cuda_dtype_size(moe_dtype_t dtype);

/* Copy n F32 host values to new device memory (moe_cuda_alloc) stored as dtype, rounded to
 * nearest even as moe_f32_to_bf16/moe_f32_to_f16 do. Synchronises the compute stream.
 * n == 0 gives *dev = NULL. Free with moe_cuda_free(). */
moe_status_t moe_cuda_upload(moe_cuda_t *c, const float *host, int64_t n, moe_dtype_t dtype,
                             void **dev, moe_error_t *err);

/* ---- gate and permutation (compute stream; every pointer is device memory) ---- */

/* Route T tokens exactly as moe_gate_forward (gate.c): logits[T,E] = x[T,H] wg[E,H]^T
 * (+ bias[E] when not NULL), softmax per row (max subtracted), the k largest in descending
 * order with ties to the lower expert index, renormalised to sum 1 when asked.
 * logits is scratch and holds the probabilities afterwards. 1 <= k <= E <= MOE_MAX_EXPERTS;
 * tokens == 0 does nothing. */
moe_status_t moe_cuda_gate(moe_cuda_t *c, const float *x, int64_t tokens, int64_t hidden,
                           const float *wg, int num_experts, int k, bool renormalize,
                           const float *bias, float *logits, int32_t *topk_idx, float *topk_w,
                           moe_error_t *err);

/* dst[i, :] = src[src_row[i], :] for i < n, rows of `hidden` floats (the permutation to
 * expert order). A negative src_row[i] zeroes row i. */
moe_status_t moe_cuda_gather_rows(moe_cuda_t *c, float *dst, const float *src,
                                  const int32_t *src_row, int64_t n, int64_t hidden,
                                  moe_error_t *err);

/* BF16 rows on the wire, on c's compute stream: rows of `hidden` F32 values (dense) to and
 * from BF16 rows `ld` elements apart (round to nearest even; widening is exact). */
moe_status_t moe_cuda_rows_to_bf16(moe_cuda_t *c, void *dst, int64_t ld, const float *src,
                                   int64_t rows, int64_t hidden, moe_error_t *err);
moe_status_t moe_cuda_rows_from_bf16(moe_cuda_t *c, float *dst, const void *src, int64_t ld,
                                     int64_t rows, int64_t hidden, moe_error_t *err);

/* x[t] += sum over j = 0..k-1, in that order, of topk_w[t*k+j] * ret[slot_pos[t*k+j], :],
 * skipping slot_pos < 0 (dropped) - layer_merge in moe_layer.c, with the same rounding
 * steps (F32 accumulator, no fused multiply-add). x is [tokens, hidden], in place. */
moe_status_t moe_cuda_merge(moe_cuda_t *c, float *x, int64_t tokens, int64_t hidden, int k,
                            const int32_t *slot_pos, const float *topk_w, const float *ret,
                            moe_error_t *err);

/* ---- experts (compute stream) ---- */

/* Device scratch bytes moe_cuda_expert_forward needs for up to max_rows rows (0 for
 * max_rows <= 0): the input in dtype (not for F32), the up projection [rows, 2F or F] in
 * F32 and the activated [rows, F] in dtype, each rounded up to 256 bytes. */
size_t moe_cuda_expert_scratch_bytes(moe_activation_t act, int64_t hidden, int64_t ffn,
                                     int64_t max_rows, moe_dtype_t dtype);

/* out[rows, H] (F32) = FFN(in[rows, H] (F32)) with w's matrices stored as dtype - the math
 * of moe_expert_forward (expert_cpu.c): in is rounded to dtype, both GEMMs accumulate in
 * F32 (cuBLAS, CUBLAS_COMPUTE_32F), the activation (silu(a)*b or exact-erf gelu) is
 * computed in F32 and rounded to dtype. scratch holds moe_cuda_expert_scratch_bytes() for
 * at least `rows` rows. rows == 0 does nothing. NVTX ranges "expert <id>", "w13",
 * "swiglu"/"gelu", "w2". */
moe_status_t moe_cuda_expert_forward(moe_cuda_t *c, const moe_cuda_expert_t *w,
                                     moe_dtype_t dtype, moe_activation_t act, int64_t hidden,
                                     int64_t ffn, int64_t rows, const float *in, float *out,
                                     void *scratch, moe_error_t *err);

/* The reference for expert efficiency: the best TFLOP/s cuBLAS reaches on the expert's two
 * GEMM shapes ([rows,H] x [2F or F,H]^T and [rows,F] x [H,F]^T, operands in dtype, F32
 * accumulate), timed with events over `reps` repetitions (best one) after a warm-up.
 * Allocates and frees its own buffers; synchronises the compute stream. */
moe_status_t moe_cuda_gemm_probe(moe_cuda_t *c, moe_dtype_t dtype, moe_activation_t act,
                                 int64_t hidden, int64_t ffn, int64_t rows, int reps,
                                 double *tflops, moe_error_t *err);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CUDA_H */
