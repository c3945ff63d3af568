/* The order of the report's writers (moe_report_write_all): each file whole or absent,
 * INCOMPLETE naming what is missing, summary.json written again when a later file failed.
 * It calls the writers (report_json.c, report_text.c, report_csv.c, report_html.c,
 * report_trace.c) and report.c's common part; no writer calls back into it. */
#include "report/report.h"
#include "report/atomic_file.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>

/* The last act of a complete report: nothing is missing any more. */
static void report_mark_complete(const moe_report_t *r)
{
    char path[MOE_PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/INCOMPLETE", r->run_dir);
    if (unlink(path) == 0 || errno == ENOENT) {
        moe_afile_sync_dir(r->run_dir);
    }
}

typedef moe_status_t (*report_writer_fn)(const moe_report_t *, moe_error_t *);

/* routing.safetensors through the writer the report was given (report.h). */
static moe_status_t write_routing(const moe_report_t *r, moe_error_t *err)
{
    return r->routing_write(r, r->routing_arg, err);
}

/* A writer that returned without opening its file: it had nothing to write (no rank's
 * records for summary_rank_*.txt), or it failed before (then why is its error). */
static void writer_left(const moe_report_t *r, moe_rfile_t which, moe_status_t st,
                        const moe_error_t *e)
{
    moe_report_files_t *t = r->files;
    if (t->state[which] != MOE_RFILE_PENDING) {
        return;
    }
    t->state[which] = st == MOE_OK ? MOE_RFILE_OFF : MOE_RFILE_FAILED;
    snprintf(t->why[which], sizeof(t->why[which]), "not written: %.140s", e->msg);
}

/* Run one writer; keep the first error in *first / *err. */
static void write_one(const moe_report_t *r, report_writer_fn fn, moe_rfile_t which,
                      moe_status_t *first, moe_error_t *err)
{
    moe_error_t e;
    moe_error_clear(&e);
    moe_status_t st = fn(r, &e);
    writer_left(r, which, st, &e);
    if (which == MOE_RFILE_COMM_CSV) {
        writer_left(r, MOE_RFILE_METRICS_CSV, st, &e); /* the csv writer writes both */
    }
    if (st != MOE_OK && *first == MOE_OK) {
        *first = st;
        if (err != NULL) {
            *err = e;
        }
    }
}

/* summary.json went first, before later files failed: write it again so that it says so.
 * If that fails the first one stays, whole; INCOMPLETE says the rest. */
static void rewrite_summary_json(const moe_report_t *r)
{
    moe_report_files_t *t = r->files;
    bool later_failed = false;
    for (int i = MOE_RFILE_SUMMARY_JSON + 1; i < MOE_RFILE_COUNT; i++) {
        later_failed = later_failed || t->state[i] == MOE_RFILE_FAILED;
    }
    if (!later_failed || t->state[MOE_RFILE_SUMMARY_JSON] != MOE_RFILE_WRITTEN) {
        return;
    }
    moe_report_write_json(r, NULL);
    t->state[MOE_RFILE_SUMMARY_JSON] = MOE_RFILE_WRITTEN;
}

/* Room kept for the last acts (summary.json again, INCOMPLETE) while the large files may
 * take the rest of a full disk: the size of summary.json and 16 KiB. */
static void reserve_for_last(const moe_report_t *r)
{
    char path[MOE_PATH_MAX + 32];
    struct stat st;
    snprintf(path, sizeof(path), "%s/summary.json", r->run_dir);
    moe_report_reserve(r, (stat(path, &st) == 0 ? (int64_t)st.st_size : 0) + 16 * 1024);
}

/* Writes in moe_rfile_t order, keeps going after a failure (the other files may still be
 * written and useful) and returns the first error. Each file is whole or absent; INCOMPLETE
 * stays, naming what is missing and why, unless every file was written. */
static moe_status_t write_all_files(const moe_report_t *r, moe_error_t *err)
{
    static const struct {
        report_writer_fn fn;
        moe_rfile_t file;
    } writers[] = {
        {moe_report_write_json, MOE_RFILE_SUMMARY_JSON},
        {moe_report_write_summary, MOE_RFILE_SUMMARY_TXT},
        {moe_report_write_rank_summaries, MOE_RFILE_RANK_SUMMARIES},
        {moe_report_write_config, MOE_RFILE_CONFIG},
        {moe_report_write_csv, MOE_RFILE_COMM_CSV}, /* and metrics.csv, unless streamed */
        {moe_report_write_html, MOE_RFILE_HTML},
        {write_routing, MOE_RFILE_ROUTING}, /* asked for by name: before the trace */
        {moe_report_write_trace, MOE_RFILE_TRACE}, /* last: the largest, least needed */
    };
    moe_status_t first = MOE_OK;
    r->files->state[MOE_RFILE_ROUTING] = r->routing_write != NULL ? MOE_RFILE_PENDING
                                                                  : MOE_RFILE_OFF;
    moe_report_unreserve(r); /* the room the merge kept for the summaries */
    moe_report_mark_incomplete(r); /* the merge made one already; a fixture's folder not */
    for (size_t i = 0; i < sizeof(writers) / sizeof(writers[0]); i++) {
        if ((writers[i].file == MOE_RFILE_TRACE && !r->cfg->prof_trace) ||
            (writers[i].file == MOE_RFILE_ROUTING && r->routing_write == NULL)) {
            continue;
        }
        if (writers[i].file == MOE_RFILE_HTML) {
            reserve_for_last(r); /* before the large files */
        }
        write_one(r, writers[i].fn, writers[i].file, &first, err);
        moe_report_mark_incomplete(r); /* a kill from here on leaves the right list */
    }
    moe_report_unreserve(r);
    rewrite_summary_json(r);
    if (first == MOE_OK && r->metrics_write_failed) {
        first = moe_error_set(err, MOE_ERR_IO,
                              "%s/metrics.csv: %lld rows from step %lld on not written: %s",
                              r->run_dir, (long long)r->metrics_lost,
                              (long long)r->metrics_stop_step, r->metrics_stop_why);
    }
    if (first == MOE_OK && r->files->state[MOE_RFILE_METRICS_CSV] == MOE_RFILE_FAILED) {
        first = moe_error_set(err, MOE_ERR_IO, "%s/metrics.csv: %s", r->run_dir,
                              r->files->why[MOE_RFILE_METRICS_CSV]);
    }
    if (moe_report_incomplete(r)) {
        moe_report_mark_incomplete(r);
    } else {
        report_mark_complete(r);
    }
    return first;
}

moe_status_t moe_report_write_all(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL || r->cfg == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "report: no report or no config");
    }
    if (r->dir_error[0] != '\0') {
        return moe_error_set(err, MOE_ERR_IO, "%s", r->dir_error);
    }
    if (r->files != NULL) {
        return write_all_files(r, err);
    }
    /* A report made without the merge (tests): the same, with a table of its own. */
    moe_report_files_t own;
    moe_report_files_init(&own, r->cfg);
    moe_report_t copy = *r;
    copy.files = &own;
    if (r->metrics_streamed) {
        own.state[MOE_RFILE_METRICS_CSV] = MOE_RFILE_WRITTEN; /* whoever streamed it closed it */
    }
    return write_all_files(&copy, err);
}
