/* Every MPI result is looked at: the one checked form of an MPI call.
 *
 *     st = MOE_MPI(MPI_Allreduce(&a, &b, 1, MPI_INT, MPI_MIN, comm), err);
 *     if (st != MOE_OK) goto fail;
 *
 * turns a failed call into MOE_ERR_MPI with one line naming the function, where it was
 * called and MPI's own error class and string, e.g.
 *     "MPI_Allreduce failed (engine.c:212): MPI_ERR_TRUNCATE: message truncated".
 * Communicators must use MPI_ERRORS_RETURN for a failure to come back at all (main sets
 * it on MPI_COMM_WORLD, the profiler on its duplicate). When err is NULL the line is
 * logged as an error instead. Only teardown (MPI_Abort, MPI_Finalize) is called bare. */
#ifndef MOE_MPI_CHECK_H
#define MOE_MPI_CHECK_H

#include "moe/status.h"

moe_status_t moe_mpi_check(int rc, const char *call, const char *file, int line,
                           moe_error_t *err);

#define MOE_MPI(call, err) moe_mpi_check((call), #call, __FILE__, __LINE__, (err))

#endif /* MOE_MPI_CHECK_H */
