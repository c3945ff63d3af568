/* `moed top URL [--once]`: the live figures in a terminal, for clusters without a browser.
 * A minimal HTTP/1.0 client (getaddrinfo, connect, one GET, read to the end) with a
 * bound on time and size; the answers are parsed with jansson. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "live/live_int.h"
#include "moe/clock.h"
#include "moe_prof/prof.h"

#define TOP_MAX_BODY (64u << 20)
#define TOP_TIMEOUT_MS 5000

/* "http://host:port/..." (or "host:port/...") -> host, port; -3 for another scheme
 * (https://: moed's endpoint speaks plain HTTP), -4 without a port (moed's endpoint has no
 * usual one: 80 would only fail to connect). */
static int top_parse_url(const char *url, char *host, size_t hn, char *port, size_t pn)
{
    const char *scheme = strstr(url, "://");
    if (scheme != NULL && scheme < url + strcspn(url, "/") && strncmp(url, "http://", 7) != 0) {
        return -3; /* a scheme is before the first '/' (a query may hold "://") */
    }
    const char *p = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
    const char *end = p + strcspn(p, "/");
    const char *colon = NULL;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (rb == NULL) {
            return -1;
        }
        snprintf(host, hn, "%.*s", (int)(rb - p - 1), p + 1);
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        snprintf(host, hn, "%.*s", (int)((colon != NULL ? colon : end) - p), p);
    }
    if (colon == NULL) {
        return -4;
    }
    snprintf(port, pn, "%.*s", (int)(end - colon - 1), colon + 1);
    if (!live_port_ok(port, 1)) {
        return -2;
    }
    return host[0] != '\0' ? 0 : -1;
}

static int64_t top_now_ms(void)
{
    return moe_now_ns() / 1000000;
}

/* Milliseconds left before deadline_ms, at least 0. */
static int top_left_ms(int64_t deadline_ms)
{
    int64_t left = deadline_ms - top_now_ms();
    return left > 0 ? (int)left : 0;
}

/* Connected within the deadline (non-blocking connect, then poll), or -1. */
static int top_connect(const char *host, const char *port, int64_t deadline_ms)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            continue;
        }
        int rc = connect(fd, a->ai_addr, a->ai_addrlen), soerr = 0;
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            socklen_t sl = sizeof(soerr);
            rc = poll(&pfd, 1, top_left_ms(deadline_ms)) == 1 &&
                         getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0
                     ? 0
                     : -1;
        }
        if (rc != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

/* The first line of an answer, printable characters only, at most 60 (what a server that
 * is not moed's sent must not reach the terminal as control codes). */
static void top_first_line(const char *buf, char *out, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; buf[i] != '\0' && buf[i] != '\r' && buf[i] != '\n' && j + 1 < n && i < 60;
         i++) {
        out[j++] = isprint((unsigned char)buf[i]) ? buf[i] : '?';
    }
    out[j] = '\0';
}

/* GET path; the body as a JSON value, or NULL with why. */
static json_t *top_get(const char *host, const char *port, const char *path, char *why,
                       size_t wn)
{
    int64_t deadline_ms = top_now_ms() + TOP_TIMEOUT_MS; /* the whole request's bound */
    int fd = top_connect(host, port, deadline_ms);
    if (fd < 0) {
        snprintf(why, wn, "cannot connect to %s:%s%s", host, port,
                 top_left_ms(deadline_ms) == 0 ? " within 5 s" : "");
        return NULL;
    }
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     path, host);
    json_t *out = NULL;
    size_t len = 0, cap = 65536;
    char *buf = malloc(cap);
    struct pollfd wfd = {.fd = fd, .events = POLLOUT};
    if (buf == NULL || poll(&wfd, 1, top_left_ms(deadline_ms)) != 1 ||
        write(fd, req, (size_t)n) != n) {
        snprintf(why, wn, "cannot send the request");
        goto done;
    }
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, top_left_ms(deadline_ms)) <= 0) {
            snprintf(why, wn, "no whole answer within %d ms", TOP_TIMEOUT_MS);
            goto done;
        }
        if (len + 1 >= cap) {
            char *p = cap < TOP_MAX_BODY ? realloc(buf, cap * 2) : NULL;
            if (p == NULL) {
                snprintf(why, wn, "answer too large");
                goto done;
            }
            buf = p;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
            continue;
        }
        if (got < 0) {
            snprintf(why, wn, "read failed");
            goto done;
        }
        if (got == 0) {
            break;
        }
        len += (size_t)got;
    }
    buf[len] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 200", 4) != 0 || body == NULL) {
        char line[64];
        top_first_line(buf, line, sizeof(line));
        snprintf(why, wn, "not a moed endpoint: %s answered '%s'", path, line);
        goto done;
    }
    json_error_t jerr;
    out = json_loads(body + 4, 0, &jerr);
    if (out == NULL) {
        snprintf(why, wn, "not a moed endpoint: %s is not JSON (%.80s)", path, jerr.text);
    } else if (!json_is_object(out)) {
        snprintf(why, wn, "not a moed endpoint: %s is not a JSON object", path);
        json_decref(out);
        out = NULL;
    }
done:
    free(buf);
    close(fd);
    return out;
}

static void top_ranks(FILE *out, json_t *st, json_t *data)
{
    json_t *bytes = json_object_get(data, "bytes");
    fprintf(out, "\n rank  alive  last step  resident MiB  sent MiB\n");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(st, "ranks"), i, r) {
        double sent = 0;
        json_t *row = json_array_get(bytes, i), *b;
        size_t k;
        json_array_foreach(row, k, b) {
            sent += (double)json_integer_value(b);
        }
        json_t *ls = json_object_get(r, "last_step");
        fprintf(out, " %4zu  %-5s  %9lld  %12.1f  %8.1f\n", i,
                json_is_true(json_object_get(r, "alive")) ? "yes" : "NO",
                json_is_integer(ls) ? (long long)json_integer_value(ls) : -1LL,
                (double)json_integer_value(json_object_get(r, "resident_bytes")) / 1048576.0,
                sent / 1048576.0);
    }
}

static void top_layers(FILE *out, json_t *data)
{
    fprintf(out, "\n layer  imbalance  busiest experts (tokens since start)\n");
    size_t l;
    json_t *row;
    json_array_foreach(json_object_get(data, "tokens"), l, row) {
        long long best[3] = {-1, -1, -1};
        int who[3] = {-1, -1, -1};
        size_t e;
        json_t *v;
        json_array_foreach(row, e, v) {
            long long t = json_integer_value(v);
            for (int k = 0; k < 3; k++) {
                if (t > best[k]) {
                    for (int j = 2; j > k; j--) {
                        best[j] = best[j - 1];
                        who[j] = who[j - 1];
                    }
                    best[k] = t;
                    who[k] = (int)e;
                    break;
                }
            }
        }
        fprintf(out, " %5zu  %9.2f ", l,
                json_real_value(json_array_get(json_object_get(data, "imbalance"), l)));
        for (int k = 0; k < 3 && who[k] >= 0; k++) {
            fprintf(out, "  e%d:%lld", who[k], best[k]);
        }
        fprintf(out, "\n");
    }
}

static int top_frame(FILE *out, const char *host, const char *port, bool clear)
{
    char why[256];
    json_t *st = top_get(host, port, "/status", why, sizeof(why));
    if (st != NULL && (!json_is_integer(json_object_get(st, "step")) ||
                       !json_is_object(json_object_get(st, "window")))) {
        snprintf(why, sizeof(why), "not a moed endpoint: /status has no step and window");
        json_decref(st);
        st = NULL;
    }
    json_t *data = st != NULL ? top_get(host, port, "/live.json", why, sizeof(why)) : NULL;
    if (clear) {
        fprintf(out, "\033[H\033[2J");
    }
    if (st == NULL || data == NULL) {
        /* once: an error on stderr, one line; a running top shows it as its frame */
        fprintf(clear ? out : stderr, "moed top: error: %s\n", why);
        json_decref(st);
        return 1;
    }
    json_t *ms = json_object_get(data, "step_ms");
    size_t nms = json_array_size(ms);
    json_t *win = json_object_get(st, "window");
    fprintf(out, "moed top  %s:%s  step %lld  %.0f tokens/s  last step %.2f ms  %s\n", host,
            port, (long long)json_integer_value(json_object_get(st, "step")),
            json_real_value(json_object_get(st, "tokens_per_s")),
            nms > 0 ? json_real_value(json_array_get(ms, nms - 1)) : 0.0,
            json_is_true(json_object_get(st, "finished")) ? "(run ended)" : "");
    const char *state = json_string_value(json_object_get(win, "state"));
    const json_t *reps = json_object_get(st, "reports");
    const json_t *n = json_object_get(st, "reports_written");
    const char *last = json_string_value(json_array_get(reps, json_array_size(reps) - 1));
    long long written = json_is_integer(n) ? (long long)json_integer_value(n)
                                           : (long long)json_array_size(reps); /* an older moed */
    fprintf(out, "window: %s   reports: %lld written%s%s\n", state != NULL ? state : "?", written,
            last != NULL ? ", newest " : "", last != NULL ? last : "");
    top_ranks(out, st, data);
    top_layers(out, data);
    fflush(out);
    json_decref(st);
    json_decref(data);
    return 0;
}

int moe_live_top_main(int argc, char **argv, FILE *out)
{
    const char *url = NULL;
    bool once = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--once") == 0) {
            if (once) { /* as moed's own options: given twice is an error (docs/config.md) */
                fprintf(stderr, "moed top: error: --once given twice\n");
                return 2;
            }
            once = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fprintf(out, "usage: moed top URL [--once]   (URL: http://HOST:PORT/ as rank 0 "
                         "printed it)\n");
            return 0;
        } else if (url == NULL && argv[i][0] != '-') {
            url = argv[i];
        } else {
            fprintf(stderr, "moed top: error: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    char host[256], port[16];
    int parsed = url != NULL ? top_parse_url(url, host, sizeof(host), port, sizeof(port)) : -1;
    if (parsed == -3) {
        fprintf(stderr, "moed top: error: '%.*s': moed's endpoint speaks plain HTTP; give "
                        "http://HOST:PORT or HOST:PORT\n", (int)(strstr(url, "://") - url + 3),
                url);
        return 2;
    }
    if (parsed == -2) {
        fprintf(stderr, "moed top: error: port '%s' is not a number in 1..65535\n", port);
        return 2;
    }
    if (parsed == -4) {
        fprintf(stderr, "moed top: error: '%s' has no port: give HOST:PORT, the address rank 0 "
                        "printed ('live: http://HOST:PORT/')\n", url);
        return 2;
    }
    if (parsed != 0) {
        fprintf(stderr, "moed top: usage: moed top http://HOST:PORT/ [--once]\n");
        return 2;
    }
    if (once) {
        return top_frame(out, host, port, false);
    }
    for (;;) {
        top_frame(out, host, port, true);
        sleep(1);
    }
}
