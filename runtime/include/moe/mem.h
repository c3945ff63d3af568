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

/* Gives the memory of [p, p + bytes), a part of `region` (a moe_alloc_large buffer of
 * region_bytes) no longer used while the rest is, back to the kernel (madvise
 * MADV_DONTNEED: it reads as zero if touched again) without splitting the region's huge
 * pages: where the region asked for them (its whole 2 MiB pages, when THP is not off) only
 * the 2 MiB pages wholly inside the range go; elsewhere (its tail, a region under 2 MiB,
 * THP off) the whole 4 KiB pages inside it. A huge page split by a partial release would
 * leave the neighbours' bytes on 4 KiB pages (and khugepaged, collapsing it again, would
 * take the released memory back). The bytes kept keep their values. */
void moe_release_pages(void *region, size_t region_bytes, void *p, size_t bytes);

/* Whether the kernel may give huge pages to a buffer that asks (THP not "never"; true where
 * it cannot be told). */
int moe_thp_possible(void);

#endif /* MOE_MEM_H */
