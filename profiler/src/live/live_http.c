/* Rank 0's HTTP endpoint: libmicrohttpd in its own threads, bounded in connections, request
 * memory and idle time, so no client can hold a step back (the main thread never waits
 * for these threads: see live.c). */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "live/live_int.h"
#include "moe/clock.h"

/* Bounds on what a client may take (README "Live endpoint"). */
#define HTTP_THREADS 2
#define HTTP_MAX_CONNECTIONS 64
#define HTTP_MAX_PER_IP 32
#define HTTP_IDLE_S 10
#define HTTP_CONN_MEMORY (32 * 1024) /* a request's headers must fit: larger gets 431 */
#define HTTP_MAX_BODY 4096

struct live_http {
    struct MHD_Daemon *d;
    live_view_t *v;
};

bool live_token_equal(const char *given, size_t given_len, const char *want)
{
    size_t want_len = strlen(want);
    unsigned diff = (unsigned)(given_len != want_len);
    /* every byte of the given token is read whatever matches, so the time says nothing */
    for (size_t i = 0; i < given_len; i++) {
        unsigned char w = want_len > 0 ? (unsigned char)want[i % want_len] : 0;
        diff |= (unsigned)((unsigned char)given[i] ^ w);
    }
    return diff == 0 && want_len > 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
                             char *body, bool owned)
{
    if (body == NULL) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        body = (char *)oom;
        owned = false;
        code = MHD_HTTP_INTERNAL_SERVER_ERROR;
        type = "application/json";
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (owned) {
            free(body);
        }
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (code == MHD_HTTP_UNAUTHORIZED) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned code, const char *msg)
{
    char *body = malloc(strlen(msg) + 32);
    if (body != NULL) {
        sprintf(body, "{\"error\":\"%s\"}\n", msg); /* msg: our own constant text */
    }
    return reply(c, code, "application/json", body, true);
}

static enum MHD_Result serve_metrics(live_http_t *h, struct MHD_Connection *c)
{
    live_buf_t b = {0};
    pthread_mutex_lock(&h->v->mu);
    live_render_metrics(h->v, &b);
    pthread_mutex_unlock(&h->v->mu);
    if (b.failed) {
        live_buf_free(&b);
        return reply(c, 500, "", NULL, false);
    }
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.p, true);
}

static enum MHD_Result serve_json(live_http_t *h, struct MHD_Connection *c, bool status)
{
    pthread_mutex_lock(&h->v->mu);
    char *s = status ? live_render_status(h->v) : live_render_data(h->v);
    pthread_mutex_unlock(&h->v->mu);
    return reply(c, MHD_HTTP_OK, "application/json", s, true);
}

/* ranks=0,2: every one a rank of the run, at most once; false on anything else. */
static bool parse_ranks(const char *s, bool *ranks, int W)
{
    memset(ranks, 0, (size_t)W * sizeof(bool));
    while (*s != '\0') {
        char *end = NULL;
        long r = strtol(s, &end, 10);
        if (end == s || r < 0 || r >= W || ranks[r] || (*end != ',' && *end != '\0')) {
            return false;
        }
        ranks[r] = true;
        s = *end == ',' ? end + 1 : end;
    }
    return true;
}

static enum MHD_Result window_answer(live_view_t *v, struct MHD_Connection *c)
{
    const live_window_t *w = &v->win;
    json_t *o = json_object();
    json_object_set_new(o, "folder", json_string(w->name));
    json_object_set_new(o, "path", json_string(w->folder));
    json_object_set_new(o, "window", json_integer(w->id));
    json_object_set_new(o, "steps", json_integer(w->steps));
    json_t *ranks = json_array();
    for (int r = 0; r < v->dims.W; r++) {
        if (w->all_ranks || w->ranks[r]) {
            json_array_append_new(ranks, json_integer(r));
        }
    }
    json_object_set_new(o, "ranks", ranks);
    json_object_set_new(o, "state", json_string("requested"));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return reply(c, MHD_HTTP_ACCEPTED, "application/json", s, true);
}

/* Under v->mu: a new window, named now so the answer can say where it will be. */
static void window_request(live_view_t *v, long long steps)
{
    live_window_t *w = &v->win;
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
    w->id++;
    w->steps = steps;
    snprintf(w->name, sizeof(w->name), "live-%s-w%lld", stamp, (long long)w->id);
    snprintf(w->folder, sizeof(w->folder), "%.380s/%.120s", v->output_dir, w->name);
    w->state = LIVE_WIN_REQUESTED;
}

static enum MHD_Result serve_profile(live_http_t *h, struct MHD_Connection *c)
{
    live_view_t *v = h->v;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    if (v->token[0] == '\0') {
        return reply_error(c, MHD_HTTP_FORBIDDEN, "control is off: no control token");
    }
    if (auth == NULL) {
        return reply_error(c, MHD_HTTP_UNAUTHORIZED, "Authorization: Bearer TOKEN required");
    }
    if (strncmp(auth, "Bearer ", 7) != 0 || !live_token_equal(auth + 7, strlen(auth + 7),
                                                              v->token)) {
        return reply_error(c, MHD_HTTP_FORBIDDEN, "wrong token");
    }
    const char *steps_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "steps");
    const char *ranks_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "ranks");
    char *end = NULL;
    long long steps = steps_s != NULL ? strtoll(steps_s, &end, 10) : 0;
    if (steps_s == NULL || end == steps_s || *end != '\0' || steps < 1 || steps > 1000000) {
        return reply_error(c, MHD_HTTP_BAD_REQUEST, "steps=N (1..1000000) required");
    }
    pthread_mutex_lock(&v->mu);
    enum MHD_Result ret;
    if (v->finished || v->win.state != LIVE_WIN_IDLE) {
        ret = reply_error(c, MHD_HTTP_CONFLICT,
                          v->finished ? "the run has ended" : "a window is already open");
    } else if (ranks_s != NULL && !parse_ranks(ranks_s, v->win.ranks, v->dims.W)) {
        ret = reply_error(c, MHD_HTTP_BAD_REQUEST, "ranks=R,R,... (ranks of this run)");
    } else {
        v->win.all_ranks = ranks_s == NULL;
        window_request(v, steps);
        ret = window_answer(v, c);
    }
    pthread_mutex_unlock(&v->mu);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *upload, size_t *upload_size,
                              void **state)
{
    (void)upload;
    static int seen;
    live_http_t *h = cls;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (post && *state == NULL) {
        *state = &seen; /* answered once the body (ignored, bounded) has been read */
        return MHD_YES;
    }
    if (post && *upload_size > 0) {
        if (*upload_size > HTTP_MAX_BODY) {
            return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    if (get && strcmp(url, "/metrics") == 0) {
        return serve_metrics(h, c);
    }
    if (get && strcmp(url, "/status") == 0) {
        return serve_json(h, c, true);
    }
    if (get && strcmp(url, "/live.json") == 0) {
        return serve_json(h, c, false);
    }
    if (get && strcmp(url, "/") == 0) {
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8", (char *)live_page_html, false);
    }
    if (post && strcmp(url, "/profile") == 0) {
        return serve_profile(h, c);
    }
    return reply_error(c, get || post ? MHD_HTTP_NOT_FOUND : MHD_HTTP_METHOD_NOT_ALLOWED,
                       get || post ? "not found" : "method not allowed");
}

/* Every request, its handler's CPU time added to the live path's threads' cost (the
 * sockets' own work in libmicrohttpd is not in it: reading and writing a few kB). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **state)
{
    (void)version;
    live_http_t *h = cls;
    int64_t t = moe_thread_cpu_ns();
    enum MHD_Result r = handle(cls, c, url, method, upload, upload_size, state);
    atomic_fetch_add(&h->v->threads_cpu_ns, moe_thread_cpu_ns() - t);
    return r;
}

/* "HOST:PORT" -> its first address; the port may be 0. */
static int resolve(const char *listen, struct addrinfo **out, char *host, size_t host_len,
                   char *why, size_t why_len)
{
    const char *colon = strrchr(listen, ':');
    if (colon == NULL || colon == listen || colon[1] == '\0') {
        snprintf(why, why_len, "expected HOST:PORT such as 127.0.0.1:9464");
        return -1;
    }
    size_t n = (size_t)(colon - listen);
    if (listen[0] == '[' && n >= 2 && listen[n - 1] == ']') {
        listen++;
        n -= 2;
    }
    snprintf(host, host_len, "%.*s", (int)n, listen);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    int rc = getaddrinfo(host, colon + 1, &hints, out);
    if (rc != 0) {
        snprintf(why, why_len, "%s", gai_strerror(rc));
        return -1;
    }
    return 0;
}

int moe_live_listen_check(const char *addr, char *why, size_t why_len)
{
    struct addrinfo *ai = NULL;
    char host[128];
    if (resolve(addr, &ai, host, sizeof(host), why, why_len) != 0) {
        return -1;
    }
    /* bind and listen as libmicrohttpd will (SO_REUSEADDR: a port in TIME_WAIT is not "in
     * use"), then let go: the run binds it again at start-up */
    int e = 0, one = 1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        e = errno;
    } else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
               bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1) != 0) {
        e = errno;
    }
    if (fd >= 0) {
        close(fd);
    }
    freeaddrinfo(ai);
    if (e != 0) {
        snprintf(why, why_len, "cannot listen there: %s%s", strerror(e),
                 e == EADDRINUSE ? " (another program has the port: pick another, or 0 for "
                                   "any free port)"
                 : e == EADDRNOTAVAIL ? " (not an address of this host)" : "");
        return -1;
    }
    return 0;
}

int live_http_start(live_view_t *v, const char *listen, live_http_t **out, char *why,
                    size_t why_len)
{
    struct addrinfo *ai = NULL;
    char host[128];
    if (resolve(listen, &ai, host, sizeof(host), why, why_len) != 0) {
        return -1;
    }
    live_http_t *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        freeaddrinfo(ai);
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    h->v = v;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_SUPPRESS_DATE_NO_CLOCK;
    if (ai->ai_family == AF_INET6) {
        flags |= MHD_USE_IPv6;
    }
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)HTTP_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)HTTP_MAX_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->d == NULL) {
        snprintf(why, why_len, "cannot listen there (in use, or not an address of this host)");
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = info != NULL ? info->port : 0;
    bool v6 = strchr(host, ':') != NULL;
    snprintf(v->url, sizeof(v->url), "http://%s%.100s%s:%u/", v6 ? "[" : "", host, v6 ? "]" : "",
             port);
    *out = h;
    return 0;
}

void live_http_stop(live_http_t *h)
{
    if (h == NULL) {
        return;
    }
    MHD_stop_daemon(h->d);
    free(h);
}
