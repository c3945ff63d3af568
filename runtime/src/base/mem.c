#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "moe/mem.h"

#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_FROM ((size_t)4 << 20) /* smaller buffers would waste up to half their size */

void *moe_alloc_large(size_t bytes)
{
    if (bytes < HUGE_FROM) {
        return aligned_alloc(64, (bytes + 63) / 64 * 64);
    }
    size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, rounded);
#ifdef MADV_HUGEPAGE
    if (p != NULL) {
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* EINVAL without THP: small pages */
    }
#endif
    return p;
}
