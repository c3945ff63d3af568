/* base: the phase names (moe/phase.h). */
#include "moe/phase.h"

const char *moe_phase_name(int phase)
{
    static const char *const names[MOE_PHASE_COUNT] = {"gate",    "dispatch", "expert",
                                                       "combine", "merge",    "step"};
    return phase >= 0 && phase < MOE_PHASE_COUNT ? names[phase] : "?";
}
