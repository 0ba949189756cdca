/* Levelled logging to stderr. The level is the one process-wide setting in
 * kvio (set once by main from -v/-q, read by every thread), with the
 * capture of warnings a run keeps in its run.log; everything else hangs off
 * contexts passed in. */
#ifndef KVIO_LOG_H
#define KVIO_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    KVIO_LOG_ERROR = 0,
    KVIO_LOG_WARN = 1,
    KVIO_LOG_INFO = 2,
    KVIO_LOG_DEBUG = 3,
} kvio_log_level_t;

/* Sets the most verbose level that is printed (default KVIO_LOG_WARN). */
void kvio_log_set_level(kvio_log_level_t level);
kvio_log_level_t kvio_log_get_level(void);

/* Prints "kvio: <level>: message" when level is enabled. */
void kvio_log(kvio_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* From now on, every warning and error is also kept (whatever the printed
 * level), up to 64 KiB, for a run's run.log; a second begin starts over.
 * Process-wide, as the level is. */
void kvio_log_capture_begin(void);

/* Ends the capture: what it kept (malloc'd text, one message a line, the
 * caller frees) and, in *dropped_p (may be NULL), how many did not fit. */
char *kvio_log_capture_end(size_t *dropped_p);

#define kvio_error(...) kvio_log(KVIO_LOG_ERROR, __VA_ARGS__)
#define kvio_warn(...) kvio_log(KVIO_LOG_WARN, __VA_ARGS__)
#define kvio_info(...) kvio_log(KVIO_LOG_INFO, __VA_ARGS__)
#define kvio_debug(...) kvio_log(KVIO_LOG_DEBUG, __VA_ARGS__)

#endif
