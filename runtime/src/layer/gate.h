/* The router moved to expert/gate.h (it is the CPU back-end's gate); this name stays for
 * the files that still include it. */
#ifndef MOE_LAYER_GATE_H
#define MOE_LAYER_GATE_H

#include "expert/gate.h"

#endif /* MOE_LAYER_GATE_H */
