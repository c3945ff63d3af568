/* Rank 0's HTTP endpoint: libmicrohttpd in its own threads, bounded in connections, request
 * memory, idle time, each request's whole time and its body, so no client can hold a step
 * back (the main thread never waits for these threads: see live.c). */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "live/live_int.h"
#include "moe/clock.h"
#include "moe/file.h"
#include "moe/log.h"

/* Bounds on what a client may take (docs/live.md). */
#define HTTP_THREADS 2
/* libmicrohttpd splits the connection limit evenly between its pool's threads: 64 each, so
 * one address's whole quota (32) never fills a thread's share. At 64 (32 a thread) a thread
 * that had accepted 32 trickling clients of one address closed the next client it accepted,
 * from any address, unanswered (live.harden under ASan, 1 run in 6). */
#define HTTP_MAX_CONNECTIONS 128
#define HTTP_MAX_PER_IP 32
#define HTTP_IDLE_S 10
#define HTTP_CONN_MEMORY (32 * 1024) /* a request's headers must fit: larger gets 431 */
#define HTTP_MAX_BODY 4096           /* a request's whole body, over all its upload calls */
/* A request must arrive whole and be answered within this of its connection's opening or
 * of that connection's previous answer: the idle timeout restarts at every byte, so a
 * client trickling a byte a second would otherwise hold its connection for ever. */
#define HTTP_REQUEST_S 10
#define HTTP_SWEEP_NS 250000000LL    /* how often the deadlines are looked at */
#define HTTP_SLOTS (2 * HTTP_MAX_CONNECTIONS) /* closed ones leave their slot at once */

/* A connection's deadline clock (one slot per open connection, under mu). */
typedef struct http_conn {
    bool used, cut;
    int fd;
    int64_t since_ns;                /* opened, or its previous answer sent */
} http_conn_t;

/* A request's state between upload calls. */
typedef struct http_req {
    size_t body;                     /* body bytes seen */
    bool too_big;
} http_req_t;

struct live_http {
    struct MHD_Daemon *d;
    live_view_t *v;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping, sweeper_started;
    pthread_t sweeper;
    http_conn_t conns[HTTP_SLOTS];
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

static enum MHD_Result reply_allow(struct MHD_Connection *c, unsigned code, const char *type,
                                   char *body, bool owned, const char *allow)
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
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    }
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
                             char *body, bool owned)
{
    return reply_allow(c, code, type, body, owned, "GET");
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned code, const char *msg)
{
    char *body = malloc(strlen(msg) + 32);
    if (body != NULL) {
        sprintf(body, "{\"error\":\"%s\"}\n", msg); /* msg: our own text (no quote, no
                                                           * backslash, no control byte) */
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

/* ranks=0,2: every one a rank of the run, at most once, in decimal digits; false on
 * anything else (an empty list or an empty element, as in `ranks=` or `ranks=1,`, a sign or
 * a space included). */
static bool parse_ranks(const char *s, bool *ranks, int W)
{
    memset(ranks, 0, (size_t)W * sizeof(bool));
    for (;;) {
        char *end = NULL;
        long r = *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : -1;
        if (r < 0 || r >= W || ranks[r] || (*end != ',' && *end != '\0')) {
            return false;
        }
        ranks[r] = true;
        if (*end == '\0') {
            return true;
        }
        s = end + 1;
    }
}

static enum MHD_Result window_answer(live_view_t *v, struct MHD_Connection *c, unsigned code,
                                     const char *state)
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
    json_object_set_new(o, "state", json_string(state));
    if (w->state == LIVE_WIN_OPEN) {
        json_object_set_new(o, "first_step", json_integer(w->open_step + 1));
        json_object_set_new(o, "last_step", json_integer(w->close_step));
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return reply(c, code, "application/json", s, true);
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
    w->cut = LIVE_CUT_NONE;
    snprintf(w->name, sizeof(w->name), "live-%s-w%lld", stamp, (long long)w->id);
    moe_path_join(w->folder, sizeof(w->folder), v->output_dir, w->name);
    w->state = LIVE_WIN_REQUESTED;
}

/* The token of an Authorization header's value "Bearer TOKEN": the scheme's name in any case
 * and one or more spaces after it (RFC 7235, 2.1); "" (never a token) for another scheme. */
static const char *bearer_token(const char *auth)
{
    if (strncasecmp(auth, "Bearer", 6) != 0 || auth[6] != ' ') {
        return "";
    }
    auth += 6;
    while (*auth == ' ') {
        auth++;
    }
    return auth;
}

/* The control requests' token check: true when allowed, else false with the refusal queued. */
static bool authorized(live_view_t *v, struct MHD_Connection *c, enum MHD_Result *ret)
{
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    if (v->token[0] == '\0') {
        *ret = reply_error(c, MHD_HTTP_FORBIDDEN, "control is off: no control token");
    } else if (auth == NULL) {
        *ret = reply_error(c, MHD_HTTP_UNAUTHORIZED, "Authorization: Bearer TOKEN required");
    } else if (!live_token_equal(bearer_token(auth), strlen(bearer_token(auth)), v->token)) {
        *ret = reply_error(c, MHD_HTTP_FORBIDDEN, "wrong token");
    } else {
        return true;
    }
    return false;
}

/* The first query argument POST /profile does not read (a typo such as `rank=1` would
 * otherwise record every rank): its name into the closure, once. */
static enum MHD_Result unknown_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    (void)value;
    char *name = cls;
    if (name[0] == '\0' && strcmp(key, "steps") != 0 && strcmp(key, "ranks") != 0) {
        /* the client's bytes (URL-decoded) go back inside a JSON string that reply_error
         * writes as it is: anything but [A-Za-z0-9_.-] shown as '?' */
        size_t i = 0;
        for (; key[i] != '\0' && i < 47; i++) {
            char ch = key[i];
            bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                         (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
            name[i] = plain ? ch : '?';
        }
        name[i] = '\0';
        if (i == 0) { /* an empty name (`?=5`): still one to refuse */
            snprintf(name, 48, "?");
        }
    }
    return MHD_YES;
}

static enum MHD_Result serve_profile(live_http_t *h, struct MHD_Connection *c)
{
    live_view_t *v = h->v;
    enum MHD_Result ret;
    if (!authorized(v, c, &ret)) {
        return ret;
    }
    char other[48] = "";
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, unknown_arg, other);
    if (other[0] != '\0') {
        char msg[128];
        snprintf(msg, sizeof(msg), "unknown argument '%s' (steps=N, ranks=R,R,...)", other);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, msg);
    }
    const char *steps_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "steps");
    const char *ranks_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "ranks");
    char *end = NULL;
    bool digits = steps_s != NULL && steps_s[0] >= '0' && steps_s[0] <= '9';
    long long steps = digits ? strtoll(steps_s, &end, 10) : 0;
    if (!digits || *end != '\0' || steps < 1 || steps > LIVE_WINDOW_MAX_STEPS) {
        char msg[64];
        snprintf(msg, sizeof(msg), "steps=N (1..%d) required", LIVE_WINDOW_MAX_STEPS);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, msg);
    }
    pthread_mutex_lock(&v->mu);
    if (v->finished || v->win.state != LIVE_WIN_IDLE) {
        ret = reply_error(c, MHD_HTTP_CONFLICT,
                          v->finished ? "the run has ended" : "a window is already open");
    } else if (ranks_s != NULL && !parse_ranks(ranks_s, v->win.ranks, v->dims.W)) {
        ret = reply_error(c, MHD_HTTP_BAD_REQUEST, "ranks=R,R,... (ranks of this run)");
    } else {
        v->win.all_ranks = ranks_s == NULL;
        window_request(v, steps);
        ret = window_answer(v, c, MHD_HTTP_ACCEPTED, "requested");
    }
    pthread_mutex_unlock(&v->mu);
    return ret;
}

/* DELETE /profile: a window not opened yet is dropped; an open one is closed early (rank 0
 * tells every rank a nearer last step at its next poll) and written as far as it got,
 * marked partial. */
static enum MHD_Result serve_profile_close(live_http_t *h, struct MHD_Connection *c)
{
    live_view_t *v = h->v;
    enum MHD_Result ret;
    if (!authorized(v, c, &ret)) {
        return ret;
    }
    pthread_mutex_lock(&v->mu);
    live_window_t *w = &v->win;
    if (v->finished) { /* no rank listens any more: the open window ends with the run */
        ret = reply_error(c, MHD_HTTP_CONFLICT, "the run has ended");
    } else if (w->state == LIVE_WIN_REQUESTED) {
        w->state = LIVE_WIN_IDLE;
        ret = window_answer(v, c, MHD_HTTP_OK, "cancelled");
    } else if (w->state == LIVE_WIN_OPEN) {
        w->cut = w->cut == LIVE_CUT_NONE ? LIVE_CUT_ASKED : w->cut;
        ret = window_answer(v, c, MHD_HTTP_ACCEPTED, "closing");
    } else {
        ret = reply_error(c, MHD_HTTP_CONFLICT, w->state == LIVE_WIN_WRITING
                                                    ? "the window is being written"
                                                    : "no window is open");
    }
    pthread_mutex_unlock(&v->mu);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *upload, size_t *upload_size,
                              void **state)
{
    (void)upload;
    live_http_t *h = cls;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    bool del = strcmp(method, MHD_HTTP_METHOD_DELETE) == 0;
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    http_req_t *rq = *state;
    if (rq == NULL) {
        rq = calloc(1, sizeof(*rq)); /* freed when the request completes (on_completed) */
        if (rq == NULL) {
            return MHD_NO;
        }
        *state = rq;
        const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (len != NULL && strtoull(len, NULL, 10) > HTTP_MAX_BODY) {
            /* said at once, before the body is read */
            return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body over 4096 bytes");
        }
        return MHD_YES; /* answered once the body (ignored, bounded) has been read */
    }
    if (*upload_size > 0) {
        /* the whole body is bounded, whatever its chunks: the rest is read and dropped (the
         * request's deadline bounds that), then 413 */
        rq->body += *upload_size;
        rq->too_big = rq->too_big || rq->body > HTTP_MAX_BODY;
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big) {
        return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body over 4096 bytes");
    }
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
    if (strcmp(url, "/profile") == 0) {
        return post ? serve_profile(h, c)
               : del ? serve_profile_close(h, c)
                     : reply_allow(c, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json",
                                   strdup("{\"error\":\"POST or DELETE /profile\"}\n"),
                                   true, "POST, DELETE");
    }
    return reply_error(c, get || post || del ? MHD_HTTP_NOT_FOUND : MHD_HTTP_METHOD_NOT_ALLOWED,
                       get || post || del ? "not found" : "method not allowed");
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

/* A request is over (answered, or its connection closed): its state freed, and its
 * connection's deadline starts again for the next request. */
static void on_completed(void *cls, struct MHD_Connection *c, void **state,
                         enum MHD_RequestTerminationCode why)
{
    (void)why;
    live_http_t *h = cls;
    free(*state);
    *state = NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    http_conn_t *hc = ci != NULL ? ci->socket_context : NULL;
    if (hc != NULL) {
        pthread_mutex_lock(&h->mu);
        hc->since_ns = moe_now_ns();
        pthread_mutex_unlock(&h->mu);
    }
}

/* A connection opened or closed: its slot in the deadline table (closed is told before
 * libmicrohttpd closes the socket, so the sweeper never touches a reused descriptor). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    live_http_t *h = cls;
    pthread_mutex_lock(&h->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = NULL;
        for (size_t i = 0; ci != NULL && i < HTTP_SLOTS; i++) {
            if (!h->conns[i].used) {
                h->conns[i] = (http_conn_t){.used = true, .fd = ci->connect_fd,
                                            .since_ns = moe_now_ns()};
                *socket_context = &h->conns[i];
                break;
            }
        }
    } else if (*socket_context != NULL) {
        ((http_conn_t *)*socket_context)->used = false;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&h->mu);
}

/* Every HTTP_SWEEP_NS: a connection past its request's deadline is shut down (both ways);
 * libmicrohttpd sees the socket end and closes it, which frees its slot and its place in
 * the per-address limit. */
static void *sweeper_main(void *arg)
{
    live_http_t *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stopping) {
        int64_t now = moe_now_ns();
        for (size_t i = 0; i < HTTP_SLOTS; i++) {
            http_conn_t *hc = &h->conns[i];
            if (hc->used && !hc->cut && now - hc->since_ns > HTTP_REQUEST_S * 1000000000LL) {
                shutdown(hc->fd, SHUT_RDWR);
                hc->cut = true;
            }
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until); /* the cv's clock: see its init */
        until.tv_nsec += HTTP_SWEEP_NS;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&h->cv, &h->mu, &until);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Whether a bound address is this host's loopback only (127.0.0.0/8, ::1). */
bool live_addr_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
    }
    return false;
}

bool live_port_ok(const char *port, long min)
{
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || port[digits] != '\0' || digits > 5) {
        return false;
    }
    long v = strtol(port, NULL, 10);
    return v >= min && v <= 65535;
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
    const char *port = colon + 1;
    if (!live_port_ok(port, 0)) {
        snprintf(why, why_len, "port '%s' is not a number in 0..65535 (0: any free port)", port);
        return -1;
    }
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
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca; /* the sweeper's wake-up does not move with the wall clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_SUPPRESS_DATE_NO_CLOCK;
    if (ai->ai_family == AF_INET6) {
        flags |= MHD_USE_IPv6;
    }
    bool exposed = !live_addr_loopback(ai->ai_addr);
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)HTTP_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)HTTP_MAX_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, h, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->d != NULL) {
        h->sweeper_started = pthread_create(&h->sweeper, NULL, sweeper_main, h) == 0;
    }
    if (h->d == NULL || !h->sweeper_started) {
        snprintf(why, why_len, h->d == NULL
                                   ? "cannot listen there (in use, or not an address of this host)"
                                   : "cannot start its deadline thread");
        live_http_stop(h);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = info != NULL ? info->port : 0;
    bool v6 = strchr(host, ':') != NULL;
    snprintf(v->url, sizeof(v->url), "http://%s%.100s%s:%u/", v6 ? "[" : "", host, v6 ? "]" : "",
             port);
    if (exposed) {
        MOE_WARN("live: %s is reachable from the network, not only from this host: anyone "
                 "who reaches it reads /metrics, /status and the page (plain HTTP); bind "
                 "127.0.0.1 and use an SSH tunnel or a reverse proxy with TLS", v->url);
    }
    *out = h;
    return 0;
}

void live_http_stop(live_http_t *h)
{
    if (h == NULL) {
        return;
    }
    if (h->sweeper_started) {
        pthread_mutex_lock(&h->mu);
        h->stopping = true;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->sweeper, NULL);
    }
    if (h->d != NULL) {
        MHD_stop_daemon(h->d);
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}
