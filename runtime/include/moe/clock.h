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

#endif /* MOE_CLOCK_H */
