/* One expert's FFN in BF16 on the CPU (oneDNN, expert/onednn.h), the F32 FFN's twin
 * (expert/expert.h): the gate and up projections as one GEMM over the stacked W13, the
 * activation and biases in F32, the activated rows narrowed to BF16 for the down
 * projection; both GEMMs accumulate in F32. */
#ifndef MOE_EXPERT_BF16_H
#define MOE_EXPERT_BF16_H

#include <stdint.h>

#include "expert/backend.h"
#include "expert/onednn.h"
#include "model/weights.h"
#include "moe_config/config.h"
#include "moe/status.h"

/* Rows of one BF16 GEMM at most: the CPU back-end cuts an expert call's rows into the
 * fewest tiles of at most this many, of equal size (+-1): 520 rows are one tile, not 512 +
 * 8 (a GEMM of 8 rows reads all the expert's weights for little work), 600 are 2 x 300. */
#define MOE_BF16_TILE_ROWS 576

/* out[bucket(rows), H] (F32; rows past `rows` are junk) = FFN(in[bucket(rows), H] BF16),
 * rows <= MOE_BF16_TILE_ROWS. h [bucket, up_n] and a [bucket, F], both BF16, are scratch. w
 * holds packed weights (moe_expert_cpu_pack). */
moe_status_t moe_expert_forward_bf16(moe_onednn_t *o, const moe_expert_weights_t *w,
                                     moe_activation_t act, int64_t hidden, int64_t ffn,
                                     int64_t rows, const uint16_t *in, uint16_t *h, uint16_t *a,
                                     float *out, moe_error_t *err);

#endif /* MOE_EXPERT_BF16_H */
