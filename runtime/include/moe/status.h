/* moed status codes: one list, one enum, one string function.
 *
 * 0 is success, every error is negative. Codes are grouped by what the caller must tear
 * down: input errors (config, weights, flags) stop the job before any step; runtime
 * errors (a lost peer, a foreign library failing) abort a running job. */
#ifndef MOE_STATUS_H
#define MOE_STATUS_H

#include <stdarg.h>

#define MOE_STATUS_MAP(X)                                                        \
    X(MOE_OK, 0, "success")                                                      \
    /* bad input: reported once by rank 0, every rank exits together */         \
    X(MOE_ERR_INVALID_ARG, -1, "invalid argument")                               \
    X(MOE_ERR_CONFIG, -2, "invalid configuration")                               \
    X(MOE_ERR_IO, -3, "cannot read or write file")                               \
    X(MOE_ERR_FORMAT, -4, "malformed data")                                      \
    X(MOE_ERR_TRUNCATED, -5, "truncated data")                                   \
    X(MOE_ERR_WEIGHTS, -6, "weights do not match the config")                    \
    X(MOE_ERR_UNSUPPORTED, -7, "not supported by this build")                    \
    /* resources */                                                              \
    X(MOE_ERR_NO_MEMORY, -20, "out of memory")                                   \
    /* runtime: the job is aborted */                                            \
    X(MOE_ERR_MPI, -30, "MPI call failed")                                       \
    X(MOE_ERR_PEER, -31, "a peer rank failed or was lost")                       \
    X(MOE_ERR_TIMEOUT, -32, "no progress before the timeout")                    \
    X(MOE_ERR_BLAS, -33, "BLAS call failed")                                     \
    X(MOE_ERR_CUDA, -34, "CUDA call failed")                                     \
    X(MOE_ERR_UCX, -35, "UCX call failed")                                       \
    X(MOE_ERR_NCCL, -36, "NCCL call failed")                                     \
    X(MOE_ERR_INTERRUPTED, -37, "interrupted by a signal")                       \
    X(MOE_ERR_INTERNAL, -99, "internal error")

typedef enum {
#define MOE_STATUS_ENUM_(name, value, text) name = value,
    MOE_STATUS_MAP(MOE_STATUS_ENUM_)
#undef MOE_STATUS_ENUM_
} moe_status_t;

/* Static text for a code; never NULL, thread-safe. */
const char *moe_status_string(moe_status_t status);
/* The enum name ("MOE_ERR_CONFIG") for a code; never NULL. */
const char *moe_status_name(moe_status_t status);

/* An error with its detail: the code and one human-readable line that says where (file:line:col
 * when there is one), what was found and what to do. Functions that can fail on user input
 * fill one; the caller decides who prints it (rank 0 only). */
#define MOE_ERROR_MSG_MAX 1024
typedef struct moe_error {
    moe_status_t code;
    char msg[MOE_ERROR_MSG_MAX];
} moe_error_t;

/* Set err (if non-NULL) to code and the formatted message; returns code, so a caller can
 * write `return moe_error_set(err, MOE_ERR_CONFIG, "...")`. The message is kept to one line:
 * control characters (from a quoted file name or tensor name) become '?'. */
moe_status_t moe_error_set(moe_error_t *err, moe_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
moe_status_t moe_error_setv(moe_error_t *err, moe_status_t code, const char *fmt, va_list ap);
/* Clear to MOE_OK and an empty message. */
void moe_error_clear(moe_error_t *err);

#endif /* MOE_STATUS_H */
