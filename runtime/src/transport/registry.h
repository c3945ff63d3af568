/* The table of transports (registry.c): one row per runtime.transport kind, so that
 * moe_transport_create (transport.c) chooses by looking up, not by calling each back-end
 * by name. Private to the transport part. */
#ifndef MOE_TRANSPORT_REGISTRY_H
#define MOE_TRANSPORT_REGISTRY_H

#include "transport/transport.h"

typedef struct moe_transport_entry {
    moe_transport_kind_t kind;
    /* Collective over comm; NULL when this build has no such transport (then `absent`
     * says why and what to use instead). */
    moe_status_t (*create)(MPI_Comm comm, int64_t row_elems, int num_slots,
                           const moe_transport_device_t *dev, moe_transport_t **out,
                           moe_error_t *err);
    const char *absent;
} moe_transport_entry_t;

/* The row of `kind`; NULL for a kind the table does not know. */
const moe_transport_entry_t *moe_transport_find(moe_transport_kind_t kind);

#endif /* MOE_TRANSPORT_REGISTRY_H */
