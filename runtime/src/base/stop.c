#include "moe/stop.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_stop_signal = 0;

static void on_stop_signal(int sig)
{
    g_stop_signal = sig;
}

void moe_stop_install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

bool moe_stop_requested(void)
{
    return g_stop_signal != 0;
}

int moe_stop_signal(void)
{
    return g_stop_signal;
}

