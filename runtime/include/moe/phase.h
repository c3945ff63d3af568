/* The phases of a step, one list for the runtime that times them, the record that carries
 * them (proto/) and the reports that print them. A layer's phases tile its time in this
 * order; the step is the whole of a step (all layers), kept after them in the record and
 * in the reports. The record's byte layout stores MOE_PHASE_COUNT slots in this order: a
 * static_assert in proto/src/prof_record.c holds the two together. */
#ifndef MOE_PHASE_H
#define MOE_PHASE_H

typedef enum moe_phase {
    MOE_PHASE_GATE = 0,
    MOE_PHASE_DISPATCH = 1, /* counts + token rows out */
    MOE_PHASE_EXPERT = 2,
    MOE_PHASE_COMBINE = 3,  /* rows back */
    MOE_PHASE_MERGE = 4,    /* weighted sum + residual */
    MOE_PHASE_LAYER_COUNT = 5, /* the phases of one layer */
    MOE_PHASE_STEP = 5,     /* the whole step (records and reports only) */
    MOE_PHASE_COUNT = 6,
} moe_phase_t;

/* "gate", "dispatch", "expert", "combine", "merge", "step"; "?" out of range. */
const char *moe_phase_name(int phase);

#endif /* MOE_PHASE_H */
