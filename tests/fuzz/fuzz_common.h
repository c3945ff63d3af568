/* Shared by moed's libFuzzer targets: a failed property prints what was violated and
 * aborts, which libFuzzer reports as a crash and saves the input (see README.md). */
#ifndef MOE_FUZZ_COMMON_H
#define MOE_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/status.h"

#define FUZZ_CHECK(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FUZZ-CHECK failed at %s:%d: %s: ", __FILE__, __LINE__,  \
                    #cond);                                                          \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* err after a failed call: the code matches the status, the message is NUL-terminated
 * inside its buffer, non-empty and starts with `prefix`. With one_line, it also holds no
 * line break (status.h: "one human-readable line"). */
static inline void fuzz_check_error(const moe_error_t *err, moe_status_t st, const char *prefix,
                                    int one_line)
{
    const char *nul = memchr(err->msg, '\0', sizeof(err->msg));
    FUZZ_CHECK(st < 0, "failure status %d is not negative", (int)st);
    FUZZ_CHECK(err->code == st, "err.code %d but the call returned %d", (int)err->code, (int)st);
    FUZZ_CHECK(nul != NULL, "err.msg is not NUL-terminated within its %zu bytes",
               sizeof(err->msg));
    FUZZ_CHECK(nul != err->msg, "err.msg is empty (status %d)", (int)st);
    FUZZ_CHECK(strncmp(err->msg, prefix, strlen(prefix)) == 0,
               "err.msg does not start with \"%s\": \"%s\"", prefix, err->msg);
    if (one_line) {
        FUZZ_CHECK(strchr(err->msg, '\n') == NULL && strchr(err->msg, '\r') == NULL,
                   "err.msg is more than one line: \"%s\"", err->msg);
    }
}

#endif /* MOE_FUZZ_COMMON_H */
