/* Large buffers on transparent huge pages where the kernel offers them.
 *
 * Debian's kernels default to THP "madvise": a buffer gets 2 MiB pages only when asked.
 * Expert weights (tens of MiB an expert, streamed by every GEMM) and the step's row buffers
 * are such buffers; on 4 KiB pages their GEMMs miss the TLB at every page. Measured on the
 * default BF16 job (AMD EPYC Zen 5, 2 cores, 3 pairs of runs): expert compute 89.6% of the
 * GEMM limit against 87.7% on 4 KiB pages. */
#ifndef MOE_MEM_H
#define MOE_MEM_H

#include <stddef.h>

/* `bytes`, 64-byte aligned; from 2 MiB on, 2 MiB aligned with huge pages asked for over
 * its whole 2 MiB pages (the tail stays on small pages: no memory past the end is taken; a
 * refusal is ignored: the buffer works on small pages). free() frees it. NULL when out of
 * memory. */
void *moe_alloc_large(size_t bytes);

/* Gives the whole 4 KiB pages inside [p, p + bytes) back to the kernel (madvise
 * MADV_DONTNEED: they read as zero if touched again), for a part of a moe_alloc_large buffer
 * that is no longer used while the rest is. */
void moe_release_pages(void *p, size_t bytes);

#endif /* MOE_MEM_H */
