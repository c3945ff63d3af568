/* Opening the files moed reads without ever waiting on one that is not a file. */
#ifndef MOE_FILE_H
#define MOE_FILE_H

#include <stdio.h>
#include <sys/types.h>

/* Opens `path` read-only without ever waiting (O_NONBLOCK: a FIFO with no writer, a
 * terminal) and keeps it only when it is a regular file: the descriptor, in blocking mode
 * again; or -1 with *kind naming what is there ("a FIFO (named pipe)", "a folder", ...), or
 * with *kind NULL and errno saying why it did not open. For every file moed reads: the
 * config, weights, input, a checkpoint's config.json, index and shards, and the offline
 * tools' reports and hostfiles (a FIFO's open() would wait for a writer, in a call that
 * SIGINT and SIGTERM restart rather than end). */
int moe_file_open_regular(const char *path, const char **kind);
/* The same as a stdio stream (mode "r" or "rb"): NULL with *kind or errno as above. */
FILE *moe_file_fopen_regular(const char *path, const char *mode, const char **kind);
/* What a stat mode names, for messages: "a file", "a folder", "a FIFO (named pipe)", "a
 * character device", "a block device", "a socket", else "another kind of file". */
const char *moe_file_kind(mode_t mode);
/* " (tried /abs/path)" for a relative path, "" for an absolute one: a message then shows
 * where a relative path led (from the working directory, as open() takes it). */
void moe_path_tried(const char *path, char *buf, size_t n);
/* "dir/name" into buf[n] with one slash between, however many `dir` ends with ("run/" and
 * "run" give "run/name", "/" gives "/name"): a path printed or written back reads as typed.
 * Returns snprintf's count (>= n: cut short). */
int moe_path_join(char *buf, size_t n, const char *dir, const char *name);

#endif /* MOE_FILE_H */
