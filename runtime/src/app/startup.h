/* Start-up steps every rank takes together before any work: the config text from rank 0,
 * and the handshake that stops a job whose ranks are not the same moed. */
#ifndef MOE_STARTUP_H
#define MOE_STARTUP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "moe/status.h"

/* Rank 0 reads `path` and broadcasts its bytes; every rank gets a malloc'd NUL-terminated
 * copy (caller frees). A read error on rank 0 is returned on every rank (moe_agree). */
moe_status_t moe_startup_config_text(MPI_Comm comm, const char *path, char **text, size_t *len,
                                     moe_error_t *err);

/* Every rank sends rank 0 its hello (protocol version, build id, config hash, host);
 * rank 0 checks them all against its own. On a mismatch every rank returns MOE_ERR_PEER
 * with the message naming the first rank that differs. Collective.
 * The test hook MOE_TESTCTL_BUILD_ID (moe/testctl.h) replaces this rank's build id: the
 * test of this check. */
moe_status_t moe_startup_handshake(MPI_Comm comm, uint64_t config_hash, moe_error_t *err);

#endif /* MOE_STARTUP_H */
