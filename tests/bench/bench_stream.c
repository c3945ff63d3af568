/* bench_stream: the machine's read bandwidth, the limit of decode (every touched expert
 * weight is read once per step). Like STREAM's read-only kernel: N threads, each pinned to
 * one CPU and summing its own slice of a buffer far larger than the caches (default 2 GiB
 * in all; the slices are first touched by their own thread), huge pages where the system
 * has them (MAP_HUGETLB if pages are reserved, else transparent huge pages by madvise), the
 * best and the median pass.
 *
 *   bench_stream [--threads N] [--mib M] [--passes P] [--cpus 0,1,...]
 *
 * N defaults to the CPUs of the process's affinity mask; the threads take its CPUs in order
 * (--cpus names them). Output, one "key value" line each (tests/bench/bench_decode.sh reads
 * them):
 *   stream: threads 2 (cpus 0,1), buffer 2048 MiB, huge pages thp (2048 MiB of it), avx2
 *   stream: read GB/s best 61.23 median 60.11 (10 passes)
 * A benchmark, not a test. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256

/* unsigned: the sums wrap by definition (only the reads matter, the sum keeps them alive) */
typedef unsigned long long v4i __attribute__((vector_size(32)));

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sum of n bytes (n a multiple of 256) with eight independent accumulators. */
__attribute__((target("avx2"))) static unsigned long long sum_avx2(const char *p, size_t n)
{
    v4i a[8] = {{0}};
    for (size_t i = 0; i < n; i += 256) {
        for (int k = 0; k < 8; k++) {
            v4i x;
            memcpy(&x, p + i + 32 * (size_t)k, 32);
            a[k] += x;
        }
    }
    v4i s = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    return s[0] + s[1] + s[2] + s[3];
}

static unsigned long long sum_plain(const char *p, size_t n)
{
    unsigned long long a[8] = {0};
    for (size_t i = 0; i < n; i += 64) {
        for (int k = 0; k < 8; k++) {
            unsigned long long x;
            memcpy(&x, p + i + 8 * (size_t)k, 8);
            a[k] += x;
        }
    }
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

typedef struct shared {
    char *buf;
    size_t slice;
    int threads, passes;
    int cpus[MAX_THREADS];
    bool avx2;
    pthread_barrier_t bar;
    int64_t *pass_ns;       /* [passes] thread 0's barrier-to-barrier time */
    volatile unsigned long long sink;
} shared_t;

typedef struct worker {
    shared_t *sh;
    int id;
} worker_t;

static void *run(void *arg)
{
    worker_t *w = arg;
    shared_t *sh = w->sh;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(sh->cpus[w->id], &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    char *mine = sh->buf + (size_t)w->id * sh->slice;
    memset(mine, w->id + 1, sh->slice); /* first touch by the thread that reads it */
    unsigned long long acc = 0;
    for (int p = -1; p < sh->passes; p++) { /* pass -1 warms */
        pthread_barrier_wait(&sh->bar);
        int64_t t0 = now_ns();
        acc += sh->avx2 ? sum_avx2(mine, sh->slice) : sum_plain(mine, sh->slice);
        pthread_barrier_wait(&sh->bar);
        if (w->id == 0 && p >= 0) {
            sh->pass_ns[p] = now_ns() - t0;
        }
    }
    sh->sink += acc;
    return NULL;
}

/* The buffer: reserved huge pages, else THP by madvise, else plain pages; *how says which. */
static char *alloc_buffer(size_t bytes, const char **how)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
        *how = "hugetlb";
        return p;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    *how = madvise(p, bytes, MADV_HUGEPAGE) == 0 ? "thp" : "none";
    return p;
}

/* AnonHugePages of this process, MiB (what THP actually gave); -1 when unknown. */
static long anon_huge_mib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb >= 0 ? kb / 1024 : -1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int parse_cpus(const char *s, int *out)
{
    int n = 0;
    while (*s != '\0' && n < MAX_THREADS) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= CPU_SETSIZE) {
            return -1;
        }
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') {
            return -1;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    shared_t sh;
    memset(&sh, 0, sizeof(sh));
    long mib = 2048;
    int threads = 0, ncpus = 0;
    sh.passes = 10;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--threads") == 0 && v != NULL) {
            threads = atoi(v);
        } else if (strcmp(argv[i], "--mib") == 0 && v != NULL) {
            mib = atol(v);
        } else if (strcmp(argv[i], "--passes") == 0 && v != NULL) {
            sh.passes = atoi(v);
        } else if (strcmp(argv[i], "--cpus") == 0 && v != NULL) {
            ncpus = parse_cpus(v, sh.cpus);
            if (ncpus <= 0) {
                fprintf(stderr, "bench_stream: --cpus wants a list of CPU numbers: %s\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_stream [--threads N] [--mib M] [--passes P] "
                            "[--cpus 0,1,...]\n");
            return 2;
        }
        i++;
    }
    if (ncpus == 0) { /* the affinity mask's CPUs, in order */
        cpu_set_t set;
        sched_getaffinity(0, sizeof(set), &set);
        for (int c = 0; c < CPU_SETSIZE && ncpus < MAX_THREADS; c++) {
            if (CPU_ISSET(c, &set)) {
                sh.cpus[ncpus++] = c;
            }
        }
    }
    threads = threads > 0 ? threads : ncpus;
    if (threads > MAX_THREADS || threads > ncpus || sh.passes < 1 || mib < 1) {
        fprintf(stderr, "bench_stream: %d threads on %d CPUs, %d passes, %ld MiB: no\n",
                threads, ncpus, sh.passes, mib);
        return 2;
    }
    __builtin_cpu_init();
    sh.avx2 = __builtin_cpu_supports("avx2");
    sh.threads = threads;
    sh.slice = ((size_t)mib << 20) / (size_t)threads / 256 * 256;
    const char *how = "none";
    sh.buf = alloc_buffer(sh.slice * (size_t)threads, &how);
    sh.pass_ns = calloc((size_t)sh.passes, sizeof(int64_t));
    if (sh.buf == NULL || sh.pass_ns == NULL) {
        fprintf(stderr, "bench_stream: cannot allocate %ld MiB: %s\n", mib, strerror(errno));
        return 1;
    }
    pthread_barrier_init(&sh.bar, NULL, (unsigned)threads);
    pthread_t tid[MAX_THREADS];
    worker_t w[MAX_THREADS];
    for (int i = 0; i < threads; i++) {
        w[i] = (worker_t){.sh = &sh, .id = i};
        if (pthread_create(&tid[i], NULL, run, &w[i]) != 0) {
            fprintf(stderr, "bench_stream: cannot start thread %d\n", i);
            return 1;
        }
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
    }
    double bytes = (double)sh.slice * (double)threads;
    qsort(sh.pass_ns, (size_t)sh.passes, sizeof(int64_t), cmp_i64);
    printf("stream: threads %d (cpus ", threads);
    for (int i = 0; i < threads; i++) {
        printf("%s%d", i > 0 ? "," : "", sh.cpus[i]);
    }
    long huge = anon_huge_mib();
    printf("), buffer %.0f MiB, huge pages %s", bytes / (1 << 20), how);
    if (strcmp(how, "thp") == 0 && huge >= 0) {
        printf(" (%ld MiB of it)", huge);
    }
    printf(", %s\n", sh.avx2 ? "avx2" : "scalar");
    printf("stream: read GB/s best %.2f median %.2f (%d passes)\n", bytes / (double)sh.pass_ns[0],
           bytes / (double)sh.pass_ns[sh.passes / 2], sh.passes);
    free(sh.pass_ns);
    return sh.sink == 42 ? 3 : 0; /* never: keeps the sums alive */
}
