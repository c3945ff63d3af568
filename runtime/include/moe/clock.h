/* Monotonic nanoseconds: clock_gettime(CLOCK_MONOTONIC) is served from the vDSO on Linux,
 * so reading it on the hot path costs tens of ns and no system call. */
#ifndef MOE_CLOCK_H
#define MOE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t moe_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CPU time of this whole process (every thread, user + system), ns. A system call (about
 * a microsecond, not the vDSO): read it per step, not per layer. cpu / wall over a span is
 * the cores the process kept busy. */
static inline int64_t moe_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) {
        return 0;
    }
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CPU time of the calling thread, ns (a system call, like moe_cpu_ns). */
static inline int64_t moe_thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        return 0;
    }
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#endif /* MOE_CLOCK_H */
