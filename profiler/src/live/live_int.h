/* The live path's private side: the shape of the run, and rank 0's view that the HTTP
 * threads read. The messages' byte layout is proto's (moe_proto/live_msg.h).
 *
 * Every rank keeps cumulative counters (so a message that is skipped loses nothing) and
 * sends them at a step boundary at most every LIVE_SEND_MS, with one MPI_Isend that is not
 * waited for; a send still in flight skips the turn. Rank 0 takes what has arrived at its
 * own step boundaries (MPI_Iprobe) and publishes it under a mutex it only try-locks, so an
 * HTTP client holding the lock never delays a step. */
#ifndef MOE_LIVE_INT_H
#define MOE_LIVE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe_proto/hist.h"
#include "moe_proto/live_msg.h"
#include "facade/facade.h"

#define LIVE_SEND_MS 200                 /* at most one periodic message per rank per this */
#define LIVE_STEP_RING 240               /* rank 0's recent step times, for the page */
#define LIVE_RATE_RING 64                /* rank 0's (time, step) samples, for tokens/s */
#define LIVE_MAX_REPORTS 64              /* window folders listed by /status: the newest */
#define LIVE_WINDOW_MAX_STEPS 100000     /* POST /profile?steps=N: N at most this */
#define LIVE_IMB_RING 12                 /* rank 0's routed-token snapshots, for imbalance */
#define LIVE_IMB_EVERY_NS 1000000000LL   /* one snapshot per second at most */
#define LIVE_IMB_WINDOW_NS 10000000000LL /* moed_layer_imbalance covers the last ~10 s */

/* The shape of the run, the same on every rank. */
typedef struct live_dims {
    int L, E, W;
    bool per_expert;            /* expert histograms per (layer, expert), else per layer */
    int64_t row_bytes;
    int64_t tokens_per_step;
} live_dims_t;

/* A received message's layout, checked against the run's shape (moe_live_layout_check);
 * false when it is malformed. */
bool live_layout_check(const live_dims_t *d, const int64_t *m, size_t n, int src,
                       moe_live_layout_t *out);

/* A window on rank 0, from the request to its folder. */
typedef enum {
    LIVE_WIN_IDLE = 0,
    LIVE_WIN_REQUESTED,  /* by POST /profile; the main thread opens it at its next step */
    LIVE_WIN_OPEN,       /* every rank told; the chosen ones record, rank 0 gathers */
    LIVE_WIN_WRITING,    /* the writer thread writes the folder */
} live_win_state_t;

/* DELETE /profile on an open window: asked (by the HTTP thread), then sent (the main
 * thread told every rank the nearer last step). */
typedef enum { LIVE_CUT_NONE = 0, LIVE_CUT_ASKED, LIVE_CUT_SENT } live_cut_t;

typedef struct live_window {
    live_win_state_t state;
    live_cut_t cut;
    int64_t id;
    int64_t steps;             /* requested */
    bool all_ranks;
    bool *ranks;               /* [W] included when !all_ranks */
    int64_t open_step, close_step; /* boundaries: after these steps */
    char folder[MOE_PATH_MAX]; /* full path: output_dir + "/" + name */
    char name[128];            /* last component */
} live_window_t;

/* Rank 0's published view: what the HTTP threads read, under mu. */
typedef struct live_view {
    pthread_mutex_t mu;
    live_dims_t dims;
    int64_t **snap;            /* [W] the latest message of each rank */
    size_t *snap_len;          /* [W] int64s in it (0: none yet) */
    size_t *snap_cap;          /* [W] int64s allocated */
    int64_t *recv_ns;          /* [W] when it arrived */
    int64_t step;              /* rank 0's last completed step */
    int64_t start_ns;
    int64_t rate_t[LIVE_RATE_RING], rate_s[LIVE_RATE_RING];
    int rate_n, rate_head;
    double step_ms[LIVE_STEP_RING];
    int64_t step_idx[LIVE_STEP_RING];
    int step_n, step_head;
    /* [L + 1] rank 0's own latency histograms since the start: each layer's time (gate
     * begin to merge end), then the step's: moed_layer_latency_seconds and
     * moed_step_latency_seconds (summaries: p50, p90, p99) */
    moe_hist_t *lat;
    /* routed tokens summed over the routing ranks, [LIVE_IMB_RING][L*E], one per second:
     * the imbalance is over the counts since the newest one at least 10 s old */
    int64_t *imb_base;
    int64_t imb_t[LIVE_IMB_RING];
    int imb_n, imb_head;
    live_window_t win;
    char reports[LIVE_MAX_REPORTS][128];
    int num_reports;
    int64_t reports_written;   /* every folder written, listed or no longer */
    char last_error[256];
    char output_dir[MOE_PATH_MAX];
    char token[MOE_PATH_MAX];  /* "" when control is off */
    char url[128];
    bool finished;
    char *routing;             /* moe_prof_static_t.routing_source copied (NULL: the router):
                                  moed_routing_info */
    /* CPU time of the HTTP handlers and window writers so far (the live path's threads'
     * cost: they add to it, the summary reads it) */
    atomic_llong threads_cpu_ns;
} live_view_t;

int live_view_init(live_view_t *v, const live_dims_t *d);
/* Rank r's snapshot becomes m[n] (grown as needed); -1 when it cannot grow (kept as was). */
int live_view_store(live_view_t *v, int r, const int64_t *m, size_t n);
void live_view_free(live_view_t *v);

/* A growable text buffer; on allocation failure it keeps failed set and stops growing. */
typedef struct live_buf {
    char *p;
    size_t len, cap;
    bool failed;
} live_buf_t;
void live_buf_printf(live_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void live_buf_free(live_buf_t *b);

/* Rank 0's main thread, holding v->mu, after new counters were published: keeps a
 * snapshot of the routed counts once a second (the baseline of the recent imbalance). */
void live_view_sample_routed(live_view_t *v, int64_t now_ns);

/* A window's folder written (ok: its name added to the newest LIVE_MAX_REPORTS and counted;
 * an on-demand window's or one of the schedule's "RUN/window-N", id its number) or not (msg
 * into last_error, with no path in it: the folder by its name, output_dir by its last
 * component); the caller holds v->mu. */
void live_window_result_locked(live_view_t *v, int64_t id, const char *name, const char *folder,
                               bool ok, const char *msg);

/* Renderers; the caller holds v->mu. */
void live_render_metrics(const live_view_t *v, live_buf_t *out);
char *live_render_status(const live_view_t *v);   /* malloc'd JSON, or NULL */
/* v->output_dir without its trailing slashes into dir[n] ("out/" is "out"); returns its last
 * component (in dir, or dir itself): /status, read without a token, names it by that. */
const char *live_output_dir_name(const live_view_t *v, char *dir, size_t n);
char *live_render_data(const live_view_t *v);     /* malloc'd JSON for the page, or NULL */
extern const char live_page_html[];

/* The HTTP server (rank 0). */
typedef struct live_http live_http_t;
int live_http_start(live_view_t *v, const char *listen, live_http_t **out, char *why,
                    size_t why_len);
void live_http_stop(live_http_t *h);

/* The window writer thread's work: the full report folder from the gathered records
 * (then freed), then the view updated. */
void moe_live_window_write(live_view_t *v, moe_od_set_t *set);

/* Whether a bound address is this host's loopback only (127.0.0.0/8, ::1). */
struct sockaddr;
bool live_addr_loopback(const struct sockaddr *sa);

/* Constant-time comparison of a presented token with the expected one. */
bool live_token_equal(const char *given, size_t given_len, const char *want);

/* A port as written: digits only, a number in min..65535. Checked here, not left to
 * getaddrinfo, which takes "70000" as 70000 mod 65536 (4464). */
bool live_port_ok(const char *port, long min);

#endif /* MOE_LIVE_INT_H */
