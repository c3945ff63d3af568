/* Opening the files moed reads without waiting (moe/file.h). */
#include "moe/file.h"
#include "moe/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *moe_file_kind(mode_t mode)
{
    if (S_ISREG(mode)) {
        return "a file";
    }
    if (S_ISDIR(mode)) {
        return "a folder";
    }
    if (S_ISFIFO(mode)) {
        return "a FIFO (named pipe)";
    }
    if (S_ISCHR(mode)) {
        return "a character device";
    }
    if (S_ISBLK(mode)) {
        return "a block device";
    }
    return S_ISSOCK(mode) ? "a socket" : "another kind of file";
}

int moe_file_open_regular(const char *path, const char **kind)
{
    struct stat sb;
    *kind = NULL;
    /* O_NONBLOCK: open() on a FIFO would wait for a writer, in a call a signal restarts */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENXIO && stat(path, &sb) == 0) {
            *kind = moe_file_kind(sb.st_mode); /* a socket, a device with no driver */
        }
        errno = e;
        return -1;
    }
    int e = 0;
    if (fstat(fd, &sb) != 0) {
        e = errno;
    } else if (!S_ISREG(sb.st_mode)) {
        *kind = moe_file_kind(sb.st_mode);
        e = EINVAL;
    } else {
        int fl = fcntl(fd, F_GETFL); /* blocking again: a regular file never waits anyway */
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
            e = errno;
        }
    }
    if (e != 0) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

FILE *moe_file_fopen_regular(const char *path, const char *mode, const char **kind)
{
    int fd = moe_file_open_regular(path, kind);
    if (fd < 0) {
        return NULL;
    }
    FILE *f = fdopen(fd, mode);
    if (f == NULL) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

int moe_path_join(char *buf, size_t n, const char *dir, const char *name)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') {
        len--;
    }
    bool root = len == 1 && dir[0] == '/';
    return snprintf(buf, n, "%.*s%s%s", (int)len, dir, root ? "" : "/", name);
}

void moe_path_tried(const char *path, char *buf, size_t n)
{
    char cwd[MOE_PATH_MAX];
    if (path[0] == '/') {
        buf[0] = '\0';
        return;
    }
    while (strncmp(path, "./", 2) == 0) {
        path += 2;
    }
    if (getcwd(cwd, sizeof(cwd)) == NULL) {
        snprintf(buf, n, " (relative to a working directory that cannot be named)");
        return;
    }
    snprintf(buf, n, " (tried %s%s%s)", cwd, strcmp(cwd, "/") == 0 ? "" : "/",
             path[0] != '\0' ? path : ".");
}
