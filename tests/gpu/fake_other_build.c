/* A stand-in for libmoed_cuda.so built from another commit: its table has this moed's size
 * and version but another build id (plugin.sh other_build). Every slot is NULL: the
 * registry must refuse it before calling any. */
#include "expert/plugin.h"

static const moe_plugin_t k_other = {
    .size = sizeof(moe_plugin_t),
    .version = MOE_PLUGIN_VERSION,
    .build_id = "0123456789ab-other-commit",
    .name = "cuda",
};

const moe_plugin_t *moed_plugin_v2(void);

const moe_plugin_t *moed_plugin_v2(void)
{
    return &k_other;
}
