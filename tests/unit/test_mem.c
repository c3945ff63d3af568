/* moe_alloc_large (moe/mem.h): small buffers 64-byte aligned, large ones 2 MiB aligned (so
 * they can sit on huge pages) and writable to their last byte; whether the kernel gave huge
 * pages to their whole 2 MiB pages is printed (THP may be off or memory fragmented), not
 * asserted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/mem.h"
#include "test_util.h"

/* kB of AnonHugePages of the mapping holding p, from /proc/self/smaps (-1: not found). */
static long huge_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[256];
    long kb = -1;
    int in = 0;
    uintptr_t a = (uintptr_t)p;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            in = a >= lo && a < hi;
        } else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb;
}

int main(void)
{
    char *small = moe_alloc_large(1000);
    CHECK(small != NULL && (uintptr_t)small % 64 == 0);
    size_t big = ((size_t)8 << 20) + 12345;
    char *p = moe_alloc_large(big);
    CHECK(p != NULL && (uintptr_t)p % ((size_t)2 << 20) == 0);
    if (p != NULL) {
        memset(p, 1, big);
        CHECK(p[big - 1] == 1);
        printf("test_mem: %ld kB of the buffer's 8 MiB of whole huge pages on huge pages\n",
               huge_kb(p));
    }
    /* moe_release_pages, a region under 2 MiB (small pages): the whole pages inside the
     * range read as zero after, the bytes of the partial pages at its ends keep their values */
    size_t n = 16 * 4096;
    unsigned char *r = moe_alloc_large(n);
    CHECK(r != NULL);
    if (r != NULL) {
        memset(r, 7, n);
        size_t from = 4096 - 100, to = 5 * 4096 + 300; /* whole pages [4096, 5 * 4096) */
        size_t a = ((uintptr_t)(r + from) + 4095) / 4096 * 4096 - (uintptr_t)r;
        size_t z = ((uintptr_t)(r + to)) / 4096 * 4096 - (uintptr_t)r;
        moe_release_pages(r, n, r + from, to - from);
        CHECK(r[from] == 7 && r[a - 1] == 7 && r[to - 1] == 7 && r[z] == 7);
        CHECK(z > a && r[a] == 0 && r[z - 1] == 0);
        moe_release_pages(r, n, NULL, 100); /* nothing */
        free(r);
    }
    /* A region of 3 huge pages and a 300 KiB tail on small pages: a piece across the huge
     * pages gives back only the huge page wholly inside it (its neighbours' huge pages are
     * not split: they stay huge where THP gave them), a piece reaching into the tail its
     * whole small pages there. */
    const size_t M = (size_t)1 << 20, rb = 6 * M + 300 * 1024;
    unsigned char *h = moe_alloc_large(rb);
    CHECK(h != NULL);
    if (h != NULL) {
        memset(h, 7, rb);
        long before = huge_kb(h);
        moe_release_pages(h, rb, h + M, 4 * M); /* [1, 5) MiB: huge page [2, 4) MiB */
        moe_release_pages(h, rb, h + 5 * M + M / 2, M / 2 + 200 * 1024 + 100);
        long after = huge_kb(h);
        int thp = moe_thp_possible();
        if (thp) {
            CHECK(h[M] == 7 && h[2 * M - 1] == 7 && h[2 * M] == 0 && h[4 * M - 1] == 0);
            CHECK(h[4 * M] == 7 && h[5 * M - 1] == 7 && h[6 * M - 1] == 7);
        } else { /* no huge pages: the whole small pages inside [1, 5) MiB */
            CHECK(h[M - 1] == 7 && h[M] == 0 && h[5 * M - 1] == 0 && h[5 * M] == 7);
        }
        CHECK(h[5 * M + M / 2 - 1] == 7 && h[6 * M] == 0 && h[6 * M + 200 * 1024 - 1] == 0);
        CHECK(h[6 * M + 200 * 1024] == 7 && h[rb - 1] == 7);
        printf("test_mem: huge pages of the 6 MiB region %ld kB before the releases, %ld kB "
               "after (THP %s)\n", before, after, thp ? "possible" : "off");
        if (thp && before >= 6 * 1024) { /* the kernel gave all three: two must stay */
            CHECK(after >= 4 * 1024);
        }
        free(h);
    }
    free(small);
    free(p);
    return moe_test_finish("test_mem");
}
