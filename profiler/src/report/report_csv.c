/* metrics.csv (one row per recorded expert call group: step, layer, expert) and comm.csv
 * (one row per ordered rank pair). Plain RFC 4180 CSV: a header line, numbers only, so a
 * spreadsheet or pandas reads them without options. */
#include "report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char moe_report_metrics_header[] = "step,layer,expert,rank,tokens,compute_ms,gflops\n";

int moe_report_metrics_format(char *buf, size_t n, const moe_rep_metric_t *m)
{
    double g = m->ns > 0 ? m->flops / (double)m->ns : 0.0; /* flops per ns = GFLOP/s */
    int k = snprintf(buf, n, "%" PRId64 ",%d,%d,%d,%" PRId64 ",%.6f,%.3f\n", m->step, m->layer,
                     m->expert, m->rank, m->tokens, (double)m->ns / 1e6, g);
    return k >= 0 && (size_t)k < n ? k : -1;
}

void moe_report_metrics_row(FILE *f, const moe_rep_metric_t *m)
{
    char line[256];
    int k = moe_report_metrics_format(line, sizeof(line), m);
    if (k > 0) {
        fwrite(line, 1, (size_t)k, f); /* a short write shows in ferror at close */
    }
}

static moe_status_t csv_metrics(const moe_report_t *r, moe_error_t *err)
{
    if (r->metrics_streamed) {
        return MOE_OK; /* written row by row during the run */
    }
    FILE *f = moe_report_open(r, "metrics.csv", err);
    if (f == NULL) {
        return MOE_ERR_IO;
    }
    fputs(moe_report_metrics_header, f);
    for (int64_t i = 0; r->metrics != NULL && i < r->num_metrics; i++) {
        moe_report_metrics_row(f, &r->metrics[i]);
    }
    return moe_report_close(f, r, "metrics.csv", err);
}

static moe_status_t csv_comm(const moe_report_t *r, moe_error_t *err)
{
    FILE *f = moe_report_open(r, "comm.csv", err);
    if (f == NULL) {
        return MOE_ERR_IO;
    }
    fputs("src,dst,bytes,messages,wait_ms,local\n", f);
    int w = r->world_size;
    for (int i = 0; i < w; i++) {
        for (int j = 0; j < w; j++) {
            size_t at = (size_t)i * (size_t)w + (size_t)j;
            /* local 1: the diagonal, a rank's rows to its own experts (not sent); wait_ms
             * empty where unknown (src's records did not come), never 0 */
            double wait = moe_report_wait_ms(r, i, j);
            char ms[32] = "";
            if (isfinite(wait)) {
                snprintf(ms, sizeof(ms), "%.6f", wait);
            }
            fprintf(f, "%d,%d,%" PRIu64 ",%" PRIu64 ",%s,%d\n", i, j,
                    r->bytes != NULL ? r->bytes[at] : 0, r->msgs != NULL ? r->msgs[at] : 0, ms,
                    i == j);
        }
    }
    return moe_report_close(f, r, "comm.csv", err);
}

moe_status_t moe_report_write_csv(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "metrics.csv: no report");
    }
    /* comm.csv first: it is small; metrics.csv may be large */
    moe_status_t st = csv_comm(r, err);
    moe_error_t e2;
    moe_error_clear(&e2);
    moe_status_t st2 = csv_metrics(r, &e2);
    if (st == MOE_OK && st2 != MOE_OK && err != NULL) {
        *err = e2;
    }
    return st != MOE_OK ? st : st2;
}
