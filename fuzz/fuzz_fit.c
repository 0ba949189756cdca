/* libFuzzer target for kvio fit's readers and fit: the input is a CSV file
 * of measured iterations, read through kvio_cost_read_samples from a memfd
 * (as kvio fit reads a file: bounded rows and samples, errors naming the
 * line), then fitted; and the same bytes as any benchmark result kvio fit
 * reads (kvio_cost_read_measurements), each measurement predicted. #40
 * item 12's inputs (a row over the reader's bound, an endless file) seed
 * it (fuzz/seeds/fuzz_fit). */
#include "kvio/cost.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0 && (memfd = memfd_create("kvio-fuzz-fit", 0)) < 0)
        abort();
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
        abort();
    char path[64], error[512] = "";
    snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
    kvio_cost_sample_t *samples = NULL;
    size_t count = 0;
    if (kvio_cost_read_samples(path, &samples, &count, error, sizeof(error)) == KVIO_OK) {
        kvio_cost_fit_t fit;
        if (kvio_cost_fit_linear(samples, count, &fit, error, sizeof(error)) == KVIO_OK &&
            fit.samples != count)
            abort(); /* every sample read is one the fit used */
        free(samples);
    }
    /* The same bytes as any result kvio fit reads (by content: a vllm bench
     * JSON, SGLang's lines, a CSV), each measurement predicted: runs of a
     * shape the reader let through finish in bounded time. */
    static kvio_cost_t *cost;
    if (cost == NULL) {
        kvio_model_t model = {.preset = "llama3.2-1b", .dtype_bytes = 2};
        kvio_gpu_t gpu = {.preset = "h200"};
        kvio_cost_config_t config = {0};
        if (kvio_config_defaults(kvio_cost_options, &config, error, sizeof(error)) != KVIO_OK ||
            kvio_model_resolve(&model, error, sizeof(error)) != KVIO_OK ||
            kvio_gpu_resolve(&gpu, error, sizeof(error)) != KVIO_OK ||
            kvio_cost_create(&config, &model, &gpu, &cost, error, sizeof(error)) != KVIO_OK)
            abort();
    }
    kvio_cost_run_shape_t latency = {.batch_size = 8, .input_tokens = 32, .output_tokens = 128};
    kvio_cost_measurement_t *measurements = NULL;
    count = 0;
    if (kvio_cost_read_measurements(path, KVIO_FIT_AUTO, &latency, &measurements, &count, error,
                                    sizeof(error)) == KVIO_OK) {
        for (size_t i = 0; i < count && i < 4; i++)
            if (!(kvio_cost_measurement_predict(cost, &measurements[i]) >= 0))
                abort();
    }
    free(measurements);
    return 0;
}
