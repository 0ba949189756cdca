/* Measures stream generation speed: requests per second of a workload's
 * stream with nothing done to them, and when exported as JSONL to /dev/null;
 * also the bytes a request takes when an engine keeps a copy of each.
 * usage: stream_rate WORKLOAD|PRESET REQUESTS [kvio|mooncake] */
#include "kvio/run.h"
#include "kvio/stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static kvio_status_t make_stream(const char *source, const char *requests, kvio_stream_t **stream_p)
{
    char override[64], error[1024] = "";
    snprintf(override, sizeof(override), "stream.requests=%s", requests);
    const char *overrides[] = {override};
    kvio_workload_t workload;
    kvio_status_t status = kvio_workload_load(source, overrides, 1, &workload, error, sizeof(error));
    if (status == KVIO_OK) {
        status = kvio_stream_create(&workload.stream, (uint64_t)workload.seed,
                                    workload.duration_ns, stream_p, error, sizeof(error));
        kvio_workload_free(&workload);
    }
    if (status != KVIO_OK)
        fprintf(stderr, "stream_rate: %s\n", error);
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: stream_rate WORKLOAD|PRESET REQUESTS [kvio|mooncake]\n");
        return 2;
    }
    kvio_export_format_t format = argc > 3 && strcmp(argv[3], "mooncake") == 0
                                      ? KVIO_EXPORT_MOONCAKE
                                      : KVIO_EXPORT_KVIO;
    kvio_stream_t *stream = NULL;
    const kvio_request_t *request;
    /* Generation only. */
    if (make_stream(argv[1], argv[2], &stream) != KVIO_OK)
        return 1;
    uint64_t count = 0, tokens = 0, segments = 0;
    double start = now_s();
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        count++;
        tokens += request->input_tokens;
        segments += request->num_segments;
    }
    double generate_s = now_s() - start;
    kvio_stream_destroy(stream);
    /* Generation and kvio JSONL to /dev/null. */
    FILE *null = fopen("/dev/null", "w");
    if (null == NULL || make_stream(argv[1], argv[2], &stream) != KVIO_OK)
        return 1;
    uint64_t exported = 0;
    char error[256];
    start = now_s();
    kvio_status_t status = kvio_stream_export(stream, null, format, &exported, error,
                                              sizeof(error));
    double export_s = now_s() - start;
    kvio_stream_destroy(stream);
    fclose(null);
    if (status != KVIO_OK) {
        fprintf(stderr, "stream_rate: %s\n", error);
        return 1;
    }
    printf("requests %llu\nmean_input_tokens %.1f\nmean_segments %.2f\n",
           (unsigned long long)count, (double)tokens / (double)count,
           (double)segments / (double)count);
    printf("bytes_per_kept_request %.0f\n",
           (double)sizeof(kvio_request_t) + 16.0 * (double)segments / (double)count);
    printf("gen_rate %.0f\nexport_rate %.0f\n", (double)count / generate_s,
           (double)exported / export_s);
    return 0;
}
