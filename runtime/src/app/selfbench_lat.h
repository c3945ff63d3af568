/* `moed --bench`'s decode latency figures (selfbench_lat.c), measured after the run in the
 * same job, on the same transport and the same cores:
 *   - moed's exchange of one layer (counts, dispatch and combine, replayed with the last
 *     layer's counts through the run's transport, as moe_layer_forward does them) against
 *     the same messages sent with plain MPI (MPI_Isend / MPI_Irecv, tested in a tight loop,
 *     the way OSU's benchmarks wait), and the ratio of the two;
 *   - the MPI ping-pong round trip (osu_latency x 2) of the layer's largest message between
 *     rank 0 and the rank it goes to;
 *   - the collectives a layer's plan runs besides the exchange (the capacity scan, the
 *     experts' demand sum of balanced copies with several routing ranks), replayed with the
 *     last layer's demand, where the config has any;
 *   - the wake-up latency: how much later than a spinning peer a rank napping in moed's
 *     wait (moe/poll.h) answers a message that comes after it has napped for a while, with
 *     the sender's wake-up post (transport/wake.h) and without it.
 * Each timing is the median (and the best) of blocks of iterations (the slowest rank's
 * mean per block), the exchange's three taking turns block by block so a host whose speed
 * drifts moves them alike. Collective; prints on rank 0. */
#ifndef MOE_SELFBENCH_LAT_H
#define MOE_SELFBENCH_LAT_H

#include "app/engine.h"

/* The figures rank 0 prints (every field 0 when not measured, e.g. one rank). */
typedef struct moe_bench_lat {
    double moed_us;       /* one layer's exchange through moed (median block; best below) */
    double mpi_us;        /* the same messages, plain MPI */
    double pingpong_us;   /* round trip of the largest message, rank 0 <-> pp_peer */
    double moed_best_us, mpi_best_us, pingpong_best_us;
    int64_t pp_bytes;     /* that message's bytes (0: rank 0 sends nothing) */
    int pp_peer;
    int64_t max_msg_bytes; /* the largest message of the layer, any pair */
    int64_t msgs;          /* row messages per direction (both ways: twice) */
    int64_t count_msgs;    /* counts messages of the layer (every rank's sends) */
    int64_t empty_msgs;    /* the dispatch's messages without rows (receives before the
                            * counts: every rank that gets counts gets one) */
    bool recv_upto;        /* the rows' receives went before the counts (moe_layer_agree_upto) */
    bool yields;           /* rank 0's waits yield the core while bytes flow (moe/poll.h) */
    int plan_what;         /* the plan's collectives (MOE_PLAN_*; 0: none, not timed) */
    double plan_us, plan_best_us; /* their time a layer (median block; best) */
    int64_t plan_ints;     /* integers each carries (one an expert) */
    double spin_us;        /* wake-up test: round trip with a spinning peer */
    double posted_us;      /* ... with a napping peer, the sender posting its wake-up */
    double unposted_us;    /* ... with a napping peer, no post */
} moe_bench_lat_t;

moe_status_t moe_selfbench_latency(moe_engine_t *eng, moe_bench_lat_t *out, moe_error_t *err);
/* Rank 0: the lines of `out` ("bench: ..."). */
void moe_selfbench_latency_print(const moe_bench_lat_t *out);

#endif /* MOE_SELFBENCH_LAT_H */
