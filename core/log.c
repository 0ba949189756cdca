/* Levelled logging to stderr; one atomic level shared by all threads, and
 * an optional capture of the warnings and errors for a run's run.log. */
#include "kvio/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most a capture keeps; later messages are counted. */
#define CAPTURE_MAX (64u << 10)

static _Atomic int log_level = KVIO_LOG_WARN;

/* Process-wide as the level is (a signal of the run, not of a context):
 * the capture a run started, under its lock. */
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static char *capture;
static size_t capture_length;
static size_t capture_dropped;
static bool capturing;

void kvio_log_set_level(kvio_log_level_t level)
{
    atomic_store(&log_level, (int)level);
}

kvio_log_level_t kvio_log_get_level(void)
{
    return (kvio_log_level_t)atomic_load(&log_level);
}

static void capture_line(const char *line)
{
    pthread_mutex_lock(&capture_lock);
    size_t length = strlen(line);
    if (capturing && capture != NULL && capture_length + length + 1 < CAPTURE_MAX) {
        memcpy(capture + capture_length, line, length);
        capture_length += length;
        capture[capture_length++] = '\n';
        capture[capture_length] = '\0';
    } else if (capturing) {
        capture_dropped++;
    }
    pthread_mutex_unlock(&capture_lock);
}

void kvio_log(kvio_log_level_t level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    bool printed = (int)level <= atomic_load(&log_level);
    bool captured = level <= KVIO_LOG_WARN;
    if (!printed && !captured)
        return;
    char line[2048];
    va_list args;
    va_start(args, fmt);
    int at = snprintf(line, sizeof(line), "kvio: %s: ", names[level]);
    vsnprintf(line + at, sizeof(line) - (size_t)at, fmt, args);
    va_end(args);
    if (printed)
        fprintf(stderr, "%s\n", line);
    if (captured)
        capture_line(line);
}

void kvio_log_capture_begin(void)
{
    pthread_mutex_lock(&capture_lock);
    free(capture);
    capture = calloc(1, CAPTURE_MAX);
    capture_length = 0;
    capture_dropped = 0;
    capturing = true;
    pthread_mutex_unlock(&capture_lock);
}

char *kvio_log_capture_end(size_t *dropped_p)
{
    pthread_mutex_lock(&capture_lock);
    char *text = capture;
    capture = NULL;
    capturing = false;
    if (dropped_p != NULL)
        *dropped_p = capture_dropped;
    pthread_mutex_unlock(&capture_lock);
    return text != NULL ? text : strdup("");
}
