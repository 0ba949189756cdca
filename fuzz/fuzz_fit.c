/* libFuzzer target for kvio fit's reader and fit: the input is a CSV file
 * of measured iterations, read through kvio_cost_read_samples from a memfd
 * (as kvio fit reads a file: bounded rows and samples, errors naming the
 * line), then fitted. #40 item 12's inputs (a row over the reader's bound,
 * an endless file) seed it (fuzz/seeds/fuzz_fit). */
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
    return 0;
}
