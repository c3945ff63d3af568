#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "moe/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *moe_alloc_large(size_t bytes)
{
    size_t align = bytes >= HUGE_PAGE ? HUGE_PAGE : 64;
    void *p = NULL;
    if (posix_memalign(&p, align, bytes > 0 ? bytes : 1) != 0) {
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    /* Only the whole 2 MiB pages inside the buffer: a huge page over its tail would take
     * memory past its end (an expert of 6.3 MB would hold 8). */
    size_t whole = bytes / HUGE_PAGE * HUGE_PAGE;
    if (whole > 0) {
        (void)madvise(p, whole, MADV_HUGEPAGE); /* EINVAL without THP: small pages */
    }
#endif
    return p;
}

void moe_release_pages(void *p, size_t bytes)
{
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page;
    uintptr_t b = ((uintptr_t)p + bytes) / page * page;
    if (p != NULL && b > a) {
        (void)madvise((void *)a, b - a, MADV_DONTNEED); /* advice: a refusal keeps them */
    }
}
