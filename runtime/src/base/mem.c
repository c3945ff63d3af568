#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "moe/mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int moe_thp_possible(void)
{
    static int known = -1;
    if (known < 0) {
        char line[128] = "";
        FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        if (f != NULL && fgets(line, sizeof(line), f) == NULL) {
            line[0] = '\0';
        }
        if (f != NULL) {
            fclose(f);
        }
        known = strstr(line, "[never]") == NULL; /* "always [madvise] never": the choice */
    }
    return known;
}

/* madvise(DONTNEED) over the whole pages of `page` bytes inside [a, b). */
static void release_whole(uintptr_t a, uintptr_t b, uintptr_t page)
{
    uintptr_t from = (a + page - 1) / page * page, to = b / page * page;
    if (to > from) {
        (void)madvise((void *)from, to - from, MADV_DONTNEED); /* advice: a refusal keeps them */
    }
}

void moe_release_pages(void *region, size_t region_bytes, void *p, size_t bytes)
{
    if (region == NULL || p == NULL || bytes == 0) {
        return;
    }
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t small = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t a = (uintptr_t)p, b = a + bytes;
    /* the part moe_alloc_large asked huge pages for: the region's whole 2 MiB pages (it is
     * 2 MiB aligned from 2 MiB on) */
    uintptr_t huge_end = (uintptr_t)region;
    if (region_bytes >= HUGE_PAGE && moe_thp_possible()) {
        huge_end += region_bytes / HUGE_PAGE * HUGE_PAGE;
    }
    if (a < huge_end) {
        release_whole(a, b < huge_end ? b : huge_end, HUGE_PAGE);
    }
    if (b > huge_end) {
        release_whole(a > huge_end ? a : huge_end, b, small);
    }
}
