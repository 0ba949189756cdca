/* Levelled logging to stderr; one atomic level shared by all threads. */
#include "kvio/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static _Atomic int log_level = KVIO_LOG_WARN;

void kvio_log_set_level(kvio_log_level_t level)
{
    atomic_store(&log_level, (int)level);
}

kvio_log_level_t kvio_log_get_level(void)
{
    return (kvio_log_level_t)atomic_load(&log_level);
}

void kvio_log(kvio_log_level_t level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if ((int)level > atomic_load(&log_level))
        return;
    char line[2048];
    va_list args;
    va_start(args, fmt);
    vsnprintf(line, sizeof(line), fmt, args);
    va_end(args);
    fprintf(stderr, "kvio: %s: %s\n", names[level], line);
}
