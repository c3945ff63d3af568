/* The memory sampler: a thread that reads this process's resident set size (and, with a
 * device, the device memory in use through the runtime's callback) every
 * profiler.memory_sample_ms into a fixed buffer, plus the peaks. When the buffer fills it
 * keeps every second sample and doubles its period, so the series always covers the whole
 * run in bounded memory. The stop takes one last sample and raises the RSS peak to the
 * process's VmHWM, the true peak (samples alone miss what happens between them). It never
 * touches MPI and takes no lock: one writer (the thread, then the stop after the join);
 * the main thread reads the buffer only after joining it. The on-demand windows' series
 * (moe_step_mem_*, at the end) has no thread: the step path reads RSS at its boundaries, and
 * its peak is VmHWM after resetting the mark at the window's start, the mark before each
 * reset kept for the run's peak. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "record/record.h"
#include "moe/clock.h"

/* RSS from /proc/self/statm (second field, in pages); 0 if unreadable. */
static uint64_t rss_from_fd(int fd)
{
    char buf[128];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    unsigned long long size = 0, resident = 0;
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2) {
        return 0;
    }
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

uint64_t moe_read_rss_bytes(void)
{
    int fd = open("/proc/self/statm", O_RDONLY);
    uint64_t v = rss_from_fd(fd);
    if (fd >= 0) {
        close(fd);
    }
    return v;
}

/* VmHWM (the process's resident high-water mark, kB in /proc/self/status) read through fd
 * (pread, no allocation): bytes, 0 if unreadable. */
static uint64_t hwm_from_fd(int fd)
{
    char buf[4096]; /* VmHWM is the status file's 17th line or so, well inside */
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    const char *line = strstr(buf, "VmHWM:");
    unsigned long long kb = 0;
    if (line == NULL || sscanf(line, "VmHWM: %llu kB", &kb) != 1) {
        return 0;
    }
    return (uint64_t)kb * 1024u;
}

/* The largest VmHWM read just before a window reset the kernel's mark (moe_step_mem_begin):
 * the mark is the process's, so the run's peak is the larger of this and VmHWM at its end. */
static atomic_ullong hwm_before_reset;

/* The run's resident peak so far: the process's high-water mark now, or a larger one that
 * a window's reset cleared; 0 if unreadable and never reset. */
static uint64_t rss_hwm_bytes(void)
{
    int fd = open("/proc/self/status", O_RDONLY);
    uint64_t now = hwm_from_fd(fd);
    if (fd >= 0) {
        close(fd);
    }
    uint64_t before = atomic_load(&hwm_before_reset);
    return now > before ? now : before;
}

static void sampler_raise(atomic_ullong *a, uint64_t v)
{
    if (v > atomic_load(a)) { /* one writer: no compare-and-swap needed */
        atomic_store(a, v);
    }
}

/* Device bytes in use now, raising dev_peak to the device's own peak; 0 without one. */
static uint64_t sample_device(moe_sampler_t *s)
{
    uint64_t cur = 0, peak = 0;
    if (s->device_memory == NULL) {
        return 0;
    }
    s->device_memory(&cur, &peak);
    sampler_raise(&s->dev_peak, peak > cur ? peak : cur);
    return cur;
}

/* One sample into the ring (halving it and doubling the period when full), raising the
 * peaks. The thread's, and the stop's last one after the join: one writer at a time. */
static void sampler_take(moe_sampler_t *s, int fd)
{
    uint64_t rss = rss_from_fd(fd);
    long long i = atomic_load(&s->count);
    if (i == s->cap) {
        for (int64_t k = 0; k < s->cap / 2; k++) {
            s->ring[k] = s->ring[2 * k];
        }
        i = s->cap / 2;
        s->period_ns *= 2;
    }
    uint64_t dev = sample_device(s);
    s->ring[i] = (moe_rec_mem_t){.t_ns = moe_now_ns(), .rss_bytes = rss, .dev_bytes = dev};
    atomic_store(&s->count, i + 1);
    sampler_raise(&s->rss_peak, rss);
}

/* Sleep one period, or less: wakes every 100 ms to see a stop, so that stopping a sampler
 * with a long period (profiler.memory_sample_ms: 60000) does not wait for its nap. */
static void sampler_nap(moe_sampler_t *s)
{
    int64_t left = s->period_ns;
    while (left > 0 && !atomic_load(&s->stop)) {
        int64_t ns = left < 100000000LL ? left : 100000000LL;
        struct timespec nap = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
        nanosleep(&nap, NULL);
        left -= ns;
    }
}

static void *sampler_main(void *arg)
{
    moe_sampler_t *s = arg;
    int fd = open("/proc/self/statm", O_RDONLY);
    while (!atomic_load(&s->stop)) {
        sampler_take(s, fd);
        atomic_store(&s->cpu_ns, moe_thread_cpu_ns()); /* the profiler's own cost */
        sampler_nap(s);
    }
    if (fd >= 0) {
        close(fd);
    }
    return NULL;
}

int moe_sampler_start(moe_sampler_t *s, int64_t period_ms, int64_t cap,
                      void (*device_memory)(uint64_t *current, uint64_t *peak))
{
    memset(s, 0, sizeof(*s));
    s->device_memory = device_memory;
    s->period_ns = period_ms * 1000000LL;
    s->cap = cap;
    s->ring = calloc((size_t)cap, sizeof(moe_rec_mem_t));
    if (s->ring == NULL) {
        return -1;
    }
    memset(s->ring, 0, (size_t)cap * sizeof(moe_rec_mem_t)); /* resident now, not as it fills */
    atomic_init(&s->stop, 0);
    atomic_init(&s->count, 0);
    atomic_init(&s->rss_peak, moe_read_rss_bytes());
    atomic_init(&s->dev_peak, 0);
    atomic_init(&s->cpu_ns, 0);
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
        free(s->ring);
        s->ring = NULL;
        return -1;
    }
    s->running = true;
    return 0;
}

void moe_sampler_stop(moe_sampler_t *s)
{
    if (s->running) {
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
        s->running = false;
        /* The series ends at the stop, not up to a period before it; and the peak is the
         * process's high-water mark, which samples alone can miss (a buffer touched
         * between two samples, or after the last). */
        int fd = open("/proc/self/statm", O_RDONLY);
        sampler_take(s, fd);
        if (fd >= 0) {
            close(fd);
        }
        sampler_raise(&s->rss_peak, rss_hwm_bytes());
    }
}

int64_t moe_sampler_cpu_ns(const moe_sampler_t *s)
{
    return (int64_t)atomic_load(&s->cpu_ns);
}

void moe_sampler_free(moe_sampler_t *s)
{
    moe_sampler_stop(s);
    free(s->ring);
    s->ring = NULL;
}

int moe_sampler_collect(moe_sampler_t *s, moe_prof_record_t *rec)
{
    int64_t n = (int64_t)atomic_load(&s->count);
    free(rec->mem);
    rec->mem = calloc((size_t)(n > 0 ? n : 1), sizeof(moe_rec_mem_t));
    rec->num_mem = 0;
    if (rec->mem == NULL) {
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        rec->mem[i] = s->ring[i];
    }
    rec->num_mem = n;
    return 0;
}

/* ---- the on-demand windows' series: read at step boundaries, no thread ---------- */

int moe_step_mem_open(moe_step_mem_t *s, int64_t period_ms)
{
    memset(s, 0, sizeof(*s));
    s->fd = open("/proc/self/statm", O_RDONLY);
    s->status_fd = open("/proc/self/status", O_RDONLY);
    s->clear_fd = open("/proc/self/clear_refs", O_WRONLY); /* -1: the samples' peak only */
    s->period0_ns = period_ms * 1000000LL;
    moe_step_mem_restart(s);
    return s->fd >= 0 ? 0 : -1;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
    }
    *fd = -1;
}

void moe_step_mem_close(moe_step_mem_t *s)
{
    close_fd(&s->fd);
    close_fd(&s->status_fd);
    close_fd(&s->clear_fd);
}

void moe_step_mem_restart(moe_step_mem_t *s)
{
    s->period_ns = s->period0_ns;
    s->taken = 0;
    s->have_last = false;
    s->hwm_reset = false;
}

void moe_step_mem_begin(moe_step_mem_t *s)
{
    s->hwm_reset = false;
    uint64_t before = hwm_from_fd(s->status_fd);
    if (s->clear_fd < 0 || before == 0) {
        return;
    }
    /* kept first: the run's peak must not lose what the reset clears (a peak of another
     * thread between this read and the reset is lost to both); the step path is its one
     * writer */
    sampler_raise(&hwm_before_reset, before);
    /* "5": the mark becomes the resident size now (Linux 4.0 and later) */
    s->hwm_reset = pwrite(s->clear_fd, "5", 1, 0) == 1;
}

void moe_step_mem_end(moe_step_mem_t *s, moe_prof_record_t *rec)
{
    uint64_t hwm = s->hwm_reset ? hwm_from_fd(s->status_fd) : 0;
    rec->rss_peak = hwm > rec->rss_peak ? hwm : rec->rss_peak;
    s->hwm_reset = false;
}

void moe_step_mem_take(moe_step_mem_t *s, int64_t now_ns, bool force, moe_prof_record_t *rec,
                       int64_t cap)
{
    if (s->fd < 0 || s->taken >= MOE_STEP_MEM_MAX || rec->mem == NULL || rec->num_mem >= cap ||
        (!force && s->have_last && now_ns - s->last_ns < s->period_ns)) {
        return;
    }
    uint64_t rss = rss_from_fd(s->fd);
    if (rss == 0) {
        return; /* unreadable: no sample rather than a false 0 */
    }
    rec->mem[rec->num_mem++] = (moe_rec_mem_t){.t_ns = now_ns, .rss_bytes = rss, .dev_bytes = 0};
    rec->rss_peak = rss > rec->rss_peak ? rss : rec->rss_peak;
    s->last_ns = now_ns;
    s->have_last = true;
    if (++s->taken % MOE_STEP_MEM_HALVE == 0) {
        s->period_ns *= 2; /* a long window: half the rate, so its series stays bounded */
    }
}
