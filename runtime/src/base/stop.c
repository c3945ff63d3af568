#include "moe/stop.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_stop_signal = 0;
static volatile sig_atomic_t g_stop_origin = -1;

static void on_stop_signal(int sig)
{
    if (g_stop_signal == 0 || g_stop_origin >= 0) {
        g_stop_origin = -1; /* a signal of our own outranks one passed on */
        g_stop_signal = sig;
    }
}

void moe_stop_install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

bool moe_stop_requested(void)
{
    return g_stop_signal != 0;
}

int moe_stop_signal(void)
{
    return g_stop_signal;
}

int moe_stop_origin(void)
{
    return g_stop_origin;
}

void moe_stop_request(int sig)
{
    g_stop_signal = sig != 0 ? sig : SIGTERM;
}

void moe_stop_request_from(int sig, int origin)
{
    if (g_stop_signal == 0) {
        g_stop_origin = origin;
        g_stop_signal = sig != 0 ? sig : SIGTERM;
    }
}

const char *moe_stop_signal_name(int sig)
{
    switch (sig) {
    case SIGINT:
        return "SIGINT";
    case SIGTERM:
        return "SIGTERM";
    case SIGHUP:
        return "SIGHUP";
    case SIGKILL:
        return "SIGKILL";
    default:
        return "a signal";
    }
}
