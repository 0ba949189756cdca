/* Reference bandwidths for bench/gpu.sh, through kvio's memory domains (the
 * same calls the engine and transports make): device-to-device copies,
 * pinned host <-> device copies, and the GPU-pool <-> host swap of
 * scattered KV blocks batched on the copy stream. Prints `name value`
 * lines (GB/s, 1e9 bytes/s). Usage: gpu_bw [BYTES] [BLOCK_BYTES]
 * (default 4 GiB and 2 MiB: a Llama-3-8B block of 16 tokens). Exit 2 with
 * the reason when there is no device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/gpu.h"

#define REPEAT 5

static int fail(kvio_device_t *device, const char *what)
{
    fprintf(stderr, "gpu_bw: %s: %s\n", what, kvio_device_error(device));
    return 1;
}

/* Runs count copies REPEAT times after one warm-up; best GB/s. */
static double best_gbps(kvio_device_t *device, const kvio_device_copy_t *copies, size_t count,
                        uint64_t bytes, int *failed_p)
{
    double best = 0;
    for (int round = 0; round <= REPEAT; round++) {
        uint64_t start = kvio_time_ns();
        if (kvio_device_copy_batch(device, copies, count) != KVIO_OK) {
            *failed_p = 1;
            return 0;
        }
        double gbps = (double)bytes / (double)(kvio_time_ns() - start);
        if (round > 0 && gbps > best)
            best = gbps;
    }
    return best;
}

int main(int argc, char **argv)
{
    uint64_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (4ull << 30);
    uint64_t block = argc > 2 ? strtoull(argv[2], NULL, 0) : (2ull << 20);
    if (bytes < block || block == 0) {
        fprintf(stderr, "usage: gpu_bw [BYTES] [BLOCK_BYTES] (BYTES >= BLOCK_BYTES > 0)\n");
        return 2;
    }
    bytes = bytes / block * block;
    char error[512];
    kvio_device_t *device = NULL;
    if (kvio_device_create(KVIO_MEMORY_CUDA, KVIO_FALLBACK_ERROR, 0, 0, &device, error,
                           sizeof(error)) != KVIO_OK) {
        fprintf(stderr, "gpu_bw: %s\n", error);
        return 2;
    }
    printf("device %s\n", kvio_device_describe(device));
    void *a = NULL, *b = NULL, *host = NULL;
    if (kvio_device_alloc(device, bytes, &a) != KVIO_OK ||
        kvio_device_alloc(device, bytes, &b) != KVIO_OK)
        return fail(device, "device memory");
    if (kvio_device_host_alloc(device, bytes, &host) != KVIO_OK)
        return fail(device, "pinned memory");
    int failed = 0;
    kvio_device_copy_t copy = {.dst = b, .src = a, .bytes = bytes};
    printf("d2d_GBps %.2f\n", best_gbps(device, &copy, 1, bytes, &failed));
    copy = (kvio_device_copy_t){.dst = a, .src = host, .bytes = bytes};
    double h2d = best_gbps(device, &copy, 1, bytes, &failed);
    copy = (kvio_device_copy_t){.dst = host, .src = a, .bytes = bytes};
    double d2h = best_gbps(device, &copy, 1, bytes, &failed);
    printf("h2d_GBps %.2f\nd2h_GBps %.2f\npcie_GBps %.2f\n", h2d, d2h, h2d < d2h ? h2d : d2h);
    /* Swaps: blocks scattered over the pool (a stride coprime with the
     * count) to and from consecutive host blocks, one batch each way. */
    size_t count = (size_t)(bytes / block), stride = 7;
    while (count % stride == 0)
        stride += 2;
    kvio_device_copy_t *out = malloc(count * sizeof(*out)), *in = malloc(count * sizeof(*in));
    if (out == NULL || in == NULL)
        return 1;
    for (size_t i = 0; i < count; i++) {
        char *pool_block = (char *)a + ((i * stride) % count) * block;
        char *host_block = (char *)host + i * block;
        out[i] = (kvio_device_copy_t){.dst = host_block, .src = pool_block, .bytes = block};
        in[i] = (kvio_device_copy_t){.dst = pool_block, .src = host_block, .bytes = block};
    }
    double swap_out = best_gbps(device, out, count, bytes, &failed);
    double swap_in = best_gbps(device, in, count, bytes, &failed);
    printf("swap_block_bytes %llu\nswap_out_GBps %.2f\nswap_in_GBps %.2f\nswap_GBps %.2f\n",
           (unsigned long long)block, swap_out, swap_in,
           2.0 / (1.0 / (swap_out > 0 ? swap_out : 1e-9) + 1.0 / (swap_in > 0 ? swap_in : 1e-9)));
    free(out);
    free(in);
    if (failed)
        return fail(device, "copy");
    kvio_device_host_free(device, host);
    kvio_device_free(device, a);
    kvio_device_free(device, b);
    kvio_device_destroy(device);
    return 0;
}
