/* BF16 GEMMs on the CPU through oneDNN (Debian libdnnl 2.x, C API): C[m, n] =
 * A[m, k] (BF16, row-major) x W[n, k]^T (BF16), accumulated in F32; C is BF16 for the up
 * projection (what the activation reads: half the bytes written and read again of an F32
 * C, as a BF16 Linear layer gives them) and F32 for the down projection (the merge's input).
 *
 * W is reordered once, at load, into the layout oneDNN's matmul prefers for its shape
 * (weights memory desc with format_tag any, then a reorder): moe_onednn_pack. A matmul
 * primitive exists per shape and per row bucket (moe_onednn_bucket: multiples of 8 up to
 * the tile), created on a bucket's first use (or all at once: moe_onednn_prepare, so no
 * step pays for oneDNN's code generation: ~16 ms for the default job's 144) and reused; A
 * must have bucket(m) readable rows (rows past m are computed and ignored: each output row depends
 * only on its input row) and C room for them.
 *
 * Threads: oneDNN's CPU runtime in Debian is OpenMP; moe_onednn_create sets the OpenMP
 * thread count to runtime.threads. */
#ifndef MOE_EXPERT_ONEDNN_H
#define MOE_EXPERT_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe/bf16.h"
#include "moe/status.h"

/* Does this CPU compute BF16 natively (oneDNN's effective ISA is avx512_core_bf16 or an AMX
 * one)? MOED_CPU_NO_BF16=1 in the environment makes it say no (to test the F32 fallback). */
bool moe_cpu_bf16_native(void);
/* Why moe_cpu_bf16_native() says no, for messages. */
const char *moe_cpu_bf16_why(void);
/* oneDNN's effective ISA, for messages ("avx512_core_bf16"). */
const char *moe_onednn_isa_name(void);

/* The two GEMM shapes of one FFN: up (n = up_n, k = hidden) and down (n = hidden, k = ffn). */
enum { MOE_ONEDNN_UP = 0, MOE_ONEDNN_DOWN = 1, MOE_ONEDNN_SHAPES = 2 };

typedef struct moe_onednn moe_onednn_t;

/* Rows a GEMM of m rows computes (m <= max_rows given to create). */
int64_t moe_onednn_bucket(int64_t m);

/* Engine, stream and the packed weights' layout for an FFN of hidden x ffn (up_n = 2 ffn
 * for SwiGLU, ffn for GELU), for at most max_rows rows per GEMM. */
moe_status_t moe_onednn_create(int64_t hidden, int64_t up_n, int64_t ffn, int64_t max_rows,
                               int threads, moe_onednn_t **out, moe_error_t *err);
void moe_onednn_destroy(moe_onednn_t *o); /* accepts NULL */

/* Bytes of shape `which`'s packed weights. */
size_t moe_onednn_packed_bytes(const moe_onednn_t *o, int which);

/* Whether shape `which`'s packed weights are in the blocked layout of model/weights.h
 * (oneDNN's "BA16a64b2a", N padded to 64 and K to 32: what it picks on avx512_core_bf16),
 * which the small-batch kernels read and the FP8 / MXFP4 dequantisation writes. */
bool moe_onednn_packed_blocked(const moe_onednn_t *o, int which);

/* w [n, k] row-major BF16 -> *packed (moe_alloc_large'd, free() it), oneDNN's layout. */
moe_status_t moe_onednn_pack(moe_onednn_t *o, int which, const uint16_t *w, void **packed,
                             moe_error_t *err);

/* Create every bucket's primitive of both shapes now (the experts' back-end, at start). */
moe_status_t moe_onednn_prepare(moe_onednn_t *o, moe_error_t *err);

/* c[bucket(m), n] = a[bucket(m), k] x W^T with W packed by moe_onednn_pack; c is uint16_t
 * (BF16) for MOE_ONEDNN_UP, float for MOE_ONEDNN_DOWN. */
moe_status_t moe_onednn_gemm(moe_onednn_t *o, int which, int64_t m, const uint16_t *a,
                             const void *packed, void *c, moe_error_t *err);

#endif /* MOE_EXPERT_ONEDNN_H */
