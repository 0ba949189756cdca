/* Progress: "<label> done/total (pct%) elapsed, about N s left" (the time
 * left from the rate so far), or "done elapsed" without a total; redrawn in
 * place on a terminal, a line every 10 s elsewhere (a log file). */
#include "kvio/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/log.h"

struct kvio_progress {
    char label[64];
    uint64_t total;
    uint64_t start_ns;
    uint64_t last_draw_ns;
    uint64_t interval_ns; /* not on a terminal */
    bool enabled;
    bool terminal;
    bool drawn;
};

kvio_status_t kvio_progress_create(const char *label, uint64_t total,
                                   kvio_progress_t **progress_p)
{
    kvio_progress_t *progress = calloc(1, sizeof(*progress));
    if (progress == NULL)
        return KVIO_ERR_NOMEM;
    snprintf(progress->label, sizeof(progress->label), "%s", label);
    progress->total = total;
    progress->start_ns = kvio_time_ns();
    progress->terminal = isatty(STDERR_FILENO);
    progress->interval_ns = 10000000000u;
    progress->enabled = kvio_log_get_level() > KVIO_LOG_ERROR;
    progress->last_draw_ns = progress->start_ns;
    *progress_p = progress;
    return KVIO_OK;
}

void kvio_progress_set_interval(kvio_progress_t *progress, uint64_t interval_ns)
{
    progress->interval_ns = interval_ns;
}

void kvio_progress_update(kvio_progress_t *progress, uint64_t done)
{
    if (!progress->enabled)
        return;
    uint64_t now = kvio_time_ns();
    uint64_t every = progress->terminal ? 100000000u : progress->interval_ns;
    if (now - progress->last_draw_ns < every)
        return;
    progress->last_draw_ns = now;
    progress->drawn = true;
    double elapsed = (double)(now - progress->start_ns) / 1e9;
    char line[192];
    if (progress->total > 0 && done > 0 && done < progress->total)
        snprintf(line, sizeof(line), "%s %llu/%llu (%.0f%%) %.1fs, about %.0fs left",
                 progress->label, (unsigned long long)done, (unsigned long long)progress->total,
                 100.0 * (double)done / (double)progress->total, elapsed,
                 elapsed * (double)(progress->total - done) / (double)done);
    else if (progress->total > 0)
        snprintf(line, sizeof(line), "%s %llu/%llu (%.0f%%) %.1fs", progress->label,
                 (unsigned long long)done, (unsigned long long)progress->total,
                 100.0 * (double)done / (double)progress->total, elapsed);
    else
        snprintf(line, sizeof(line), "%s %llu %.1fs", progress->label, (unsigned long long)done,
                 elapsed);
    if (progress->terminal)
        fprintf(stderr, "\r%s ", line);
    else
        fprintf(stderr, "kvio: progress: %s\n", line);
    fflush(stderr);
}

void kvio_progress_destroy(kvio_progress_t *progress)
{
    if (progress == NULL)
        return;
    if (progress->drawn && progress->terminal)
        fprintf(stderr, "\r%*s\r", 79, "");
    free(progress);
}
