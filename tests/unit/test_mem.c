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
    /* moe_release_pages: the whole pages inside the range read as zero after, the bytes of
     * the partial pages at its ends keep their values */
    size_t n = 16 * 4096;
    unsigned char *r = moe_alloc_large(n);
    CHECK(r != NULL);
    if (r != NULL) {
        memset(r, 7, n);
        size_t from = 4096 - 100, to = 5 * 4096 + 300; /* whole pages [4096, 5 * 4096) */
        size_t a = ((uintptr_t)(r + from) + 4095) / 4096 * 4096 - (uintptr_t)r;
        size_t z = ((uintptr_t)(r + to)) / 4096 * 4096 - (uintptr_t)r;
        moe_release_pages(r + from, to - from);
        CHECK(r[from] == 7 && r[a - 1] == 7 && r[to - 1] == 7 && r[z] == 7);
        CHECK(z > a && r[a] == 0 && r[z - 1] == 0);
        moe_release_pages(NULL, 100); /* nothing */
        free(r);
    }
    free(small);
    free(p);
    return moe_test_finish("test_mem");
}
