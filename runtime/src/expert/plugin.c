/* The plug-in registry (plugin.h): find libmoed_cuda.so, dlopen it, check its table.
 *
 * Calls back into moed: the plug-in uses moed's own functions (moe_error_set, the log,
 * moe_wait_poll, moe_transport_base_*, moe_mpi_check, ...) rather than a table of
 * callbacks. moed is linked with ENABLE_EXPORTS (-rdynamic) and takes its static parts
 * whole (runtime/CMakeLists.txt), so every one of them is in moed's dynamic symbol table
 * and the plug-in's undefined symbols bind to the one copy in the process: one watchdog,
 * one stop flag, one log. A callback table would have to list each function twice (here
 * and in the plug-in) and grow with every helper the GPU code calls; the test
 * plugin.symbols checks instead that moed exports everything the plug-in needs.
 *
 * Search order: the directory of the running moed (/proc/self/exe), then $MOED_PLUGIN_DIR,
 * then the install library directory. The first file that exists is the one loaded: a
 * plug-in that is there but cannot load (a CUDA library missing) is an error naming that
 * library, not a reason to look further. */
#include "expert/plugin.h"

#include "moe/build_info.h"
#include "moe/file.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef MOED_HAVE_PLUGIN
#include <dlfcn.h>
#endif

#ifndef MOED_HAVE_PLUGIN

moe_status_t moe_plugin_get(const char *key, const moe_plugin_t **out, moe_error_t *err)
{
    return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                         "%s is not available in this build (built without the CUDA Toolkit: "
                         "MOED_WITH_CUDA)", key);
}

#else

#ifndef MOED_PLUGIN_INSTALL_DIR
#define MOED_PLUGIN_INSTALL_DIR "/usr/local/lib"
#endif

static const moe_plugin_t *g_plugin; /* loaded once, on first use */

/* The directory of the running executable into dir ("" when unknown). */
static void exe_dir(char *dir, size_t len)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    dir[0] = '\0';
    if (n <= 0) {
        return;
    }
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (slash != NULL) {
        *slash = '\0';
        snprintf(dir, len, "%s", path);
    }
}

/* The first candidate that exists into path; false (with the places tried in tried)
 * when none does. */
static bool plugin_find(char *path, size_t len, char *tried, size_t tried_len)
{
    char dirs[3][PATH_MAX];
    exe_dir(dirs[0], sizeof(dirs[0]));
    const char *env = getenv("MOED_PLUGIN_DIR");
    snprintf(dirs[1], sizeof(dirs[1]), "%s", env != NULL ? env : "");
    snprintf(dirs[2], sizeof(dirs[2]), "%s", MOED_PLUGIN_INSTALL_DIR);
    const char *label[3] = {" (beside moed)", " (MOED_PLUGIN_DIR)", " (install)"};
    size_t used = 0;
    tried[0] = '\0';
    for (int i = 0; i < 3; i++) {
        if (dirs[i][0] == '\0') {
            continue;
        }
        int n = moe_path_join(path, len, dirs[i], MOE_PLUGIN_FILE);
        if (n > 0 && (size_t)n < len && access(path, F_OK) == 0) {
            return true;
        }
        n = snprintf(tried + used, tried_len - used, "%s%s%s", used > 0 ? ", " : "",
                         dirs[i], label[i]);
        used += n > 0 && (size_t)n < tried_len - used ? (size_t)n : 0;
    }
    return false;
}

static moe_status_t plugin_check(const moe_plugin_t *p, const char *path, moe_error_t *err)
{
    if (p == NULL || p->size != sizeof(moe_plugin_t) || p->version != MOE_PLUGIN_VERSION) {
        return moe_error_set(err, MOE_ERR_PEER,
                             "%s is from another moed (table version %u, size %u; this moed "
                             "needs version %d, size %zu): rebuild both together",
                             path, p != NULL ? p->version : 0, p != NULL ? p->size : 0,
                             MOE_PLUGIN_VERSION, sizeof(moe_plugin_t));
    }
    if (p->build_id == NULL || strcmp(p->build_id, moe_build_id()) != 0) {
        return moe_error_set(err, MOE_ERR_PEER,
                             "%s is from another moed build (plug-in built from %s, this moed "
                             "from %s): rebuild both together", path,
                             p->build_id != NULL ? p->build_id : "no build id", moe_build_id());
    }
    return MOE_OK;
}

static moe_status_t plugin_open(const char *key, const moe_plugin_t **out, moe_error_t *err)
{
    char path[PATH_MAX + 64], tried[3 * PATH_MAX];
    if (!plugin_find(path, sizeof(path), tried, sizeof(tried))) {
        return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                             "%s needs the CUDA plug-in %s, which is not in %s; install it "
                             "beside moed or set MOED_PLUGIN_DIR", key, MOE_PLUGIN_FILE, tried);
    }
    /* RTLD_LOCAL: the plug-in's CUDA symbols stay out of moed's namespace. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        return moe_error_set(err, MOE_ERR_UNSUPPORTED, "%s: cannot load the CUDA plug-in %s: %s",
                             key, path, why != NULL ? why : "dlopen failed");
    }
    moe_plugin_entry_fn entry = NULL;
    *(void **)&entry = dlsym(h, MOE_PLUGIN_ENTRY);
    if (entry == NULL) {
        dlclose(h);
        return moe_error_set(err, MOE_ERR_PEER, "%s: %s has no entry point %s (another "
                             "moed's plug-in?)", key, path, MOE_PLUGIN_ENTRY);
    }
    const moe_plugin_t *p = entry();
    moe_status_t st = plugin_check(p, path, err);
    if (st != MOE_OK) {
        dlclose(h);
        return st;
    }
    *out = p; /* the handle stays open for the life of the process */
    return MOE_OK;
}

moe_status_t moe_plugin_get(const char *key, const moe_plugin_t **out, moe_error_t *err)
{
    if (g_plugin == NULL) {
        const moe_plugin_t *p = NULL;
        moe_status_t st = plugin_open(key, &p, err);
        if (st != MOE_OK) {
            return st;
        }
        g_plugin = p;
    }
    *out = g_plugin;
    return MOE_OK;
}

#endif /* MOED_HAVE_PLUGIN */
