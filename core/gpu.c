/* Memory domains, always built: the `device:` option table, host and
 * fallback behaviour, and the dispatch to core/gpu_cuda.c when CUDA was
 * built. A host domain never calls CUDA, so host runs behave the same in
 * every build. */
#include "core/gpu_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kvio_memory_kind_names[] = {"host", "pinned", "cuda", NULL};
static const char *const weights_names[] = {"auto", "host", "cuda", NULL};
static const char *const fallback_names[] = {"error", "host", NULL};

const kvio_opt_t kvio_device_options[] = {
    {.key = "memory", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_device_config_t, memory),
     .values = kvio_memory_kind_names, .default_value = "host",
     .help = "where the serve ranks' KV pool lives in emulate mode: host, pinned or cuda"},
    {.key = "weights", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_device_config_t, weights),
     .values = weights_names, .default_value = "auto",
     .help = "where the weights buffers live: auto (cuda for cuda-ipc and staged, else "
             "host), host, or cuda (ucx only when UCX reports CUDA memory)"},
    {.key = "fallback", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_device_config_t, fallback), .values = fallback_names,
     .default_value = "error",
     .help = "without a CUDA device: error (a clear message, exit 2) or host (run on host "
             "memory and say so)"},
    {.key = "index", .type = KVIO_OPT_INT, .offset = offsetof(kvio_device_config_t, index),
     .default_value = "-1", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = -1,
     .max = 1024, .help = "CUDA device (-1: the rank's index modulo the devices)"},
    {.key = "spin", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_device_config_t, spin),
     .default_value = "true",
     .help = "emulate with the KV pool on the GPU: a spin kernel keeps the SMs busy for "
             "each iteration's compute time"},
    {.key = "spin_bytes", .type = KVIO_OPT_SIZE,
     .offset = offsetof(kvio_device_config_t, spin_bytes), .default_value = "256MiB",
     .help = "device memory the spin kernel reads and writes while it spins, so copies "
             "contend for memory bandwidth as with real decode kernels (0: it only "
             "occupies the SMs)"},
    {.key = NULL},
};

bool kvio_device_built(void)
{
#ifdef KVIO_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

kvio_status_t kvio_device_query(int index, kvio_device_info_t *info_p, char *error_p,
                                size_t error_len)
{
#ifdef KVIO_HAVE_CUDA
    return kvio_cuda_query(index, info_p, error_p, error_len);
#else
    (void)index;
    (void)info_p;
    snprintf(error_p, error_len, "CUDA not built (configure with KVIO_WITH_CUDA=ON)");
    return KVIO_ERR_UNSUPPORTED;
#endif
}

kvio_status_t kvio_device_preflight(int kind, int fallback, int64_t index, const char *what,
                                    char *error_p, size_t error_len)
{
    if (kind == KVIO_MEMORY_HOST || fallback == KVIO_FALLBACK_HOST)
        return KVIO_OK;
    kvio_device_info_t info;
    char reason[512];
    if (kvio_device_query((int)index, &info, reason, sizeof(reason)) == KVIO_OK)
        return KVIO_OK;
    snprintf(error_p, error_len, "%s: %s (set device.fallback: host to run on host memory)",
             what, reason);
    return KVIO_ERR_CONFIG;
}

kvio_status_t kvio_device_create(int kind, int fallback, int64_t index, int rank,
                                 kvio_device_t **device_p, char *error_p, size_t error_len)
{
    if (kind < KVIO_MEMORY_HOST || kind > KVIO_MEMORY_CUDA) {
        snprintf(error_p, error_len, "unknown memory kind %d", kind);
        return KVIO_ERR_INVALID;
    }
    kvio_device_t *device = calloc(1, sizeof(*device));
    if (device == NULL) {
        snprintf(error_p, error_len, "memory domain: out of memory");
        return KVIO_ERR_NOMEM;
    }
    device->kind = kind;
    device->requested = kind;
    device->info.index = -1;
    snprintf(device->description, sizeof(device->description), "host");
    if (kind == KVIO_MEMORY_HOST) {
        *device_p = device;
        return KVIO_OK;
    }
    char reason[512] = "";
    kvio_status_t status = KVIO_OK;
    int count = 0;
    /* Which device: the rank's index modulo the count unless one is named. */
    kvio_device_info_t info;
    status = kvio_device_query(-1, &info, reason, sizeof(reason));
    if (status == KVIO_OK) {
        count = info.count;
        int pick = index >= 0 ? (int)index : rank % count;
        status = kvio_device_query(pick, &device->info, reason, sizeof(reason));
    }
#ifdef KVIO_HAVE_CUDA
    if (status == KVIO_OK)
        status = kvio_cuda_open(device, reason, sizeof(reason));
#endif
    if (status != KVIO_OK) {
        if (fallback != KVIO_FALLBACK_HOST) {
            snprintf(error_p, error_len, "%s", reason);
            free(device);
            return status;
        }
        device->kind = KVIO_MEMORY_HOST;
        device->fell_back = true;
        snprintf(device->description, sizeof(device->description),
                 "host (fallback from %s: %s)", kvio_memory_kind_names[kind], reason);
        *device_p = device;
        return KVIO_OK;
    }
    snprintf(device->description, sizeof(device->description),
             "%s (device %d of %d: %s, %d SMs, %.1f GB, sm_%d%d)", kvio_memory_kind_names[kind],
             device->info.index, count, device->info.name, device->info.multiprocessors,
             (double)device->info.memory_bytes / 1e9, device->info.major, device->info.minor);
    *device_p = device;
    return KVIO_OK;
}

void kvio_device_destroy(kvio_device_t *device)
{
    if (device == NULL)
        return;
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST)
        kvio_cuda_close(device);
#endif
    free(device);
}

int kvio_device_kind(const kvio_device_t *device) { return device->kind; }
bool kvio_device_fell_back(const kvio_device_t *device) { return device->fell_back; }
const char *kvio_device_describe(const kvio_device_t *device) { return device->description; }
const char *kvio_device_error(const kvio_device_t *device) { return device->error; }

static kvio_status_t host_alloc(kvio_device_t *device, uint64_t bytes, void **buffer_p)
{
    void *buffer = NULL;
    if (posix_memalign(&buffer, 4096, bytes > 0 ? bytes : 4096) != 0) {
        kvio_device_set_error(device, "cannot allocate %llu bytes of host memory",
                              (unsigned long long)bytes);
        return KVIO_ERR_NOMEM;
    }
    *buffer_p = buffer;
    return KVIO_OK;
}

kvio_status_t kvio_device_alloc(kvio_device_t *device, uint64_t bytes, void **buffer_p)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST)
        return kvio_cuda_alloc(device, device->kind, bytes, buffer_p);
#endif
    void *buffer = NULL;
    kvio_status_t status = host_alloc(device, bytes, &buffer);
    if (status == KVIO_OK) {
        memset(buffer, 0, bytes);
        *buffer_p = buffer;
    }
    return status;
}

void kvio_device_free(kvio_device_t *device, void *buffer)
{
    if (buffer == NULL)
        return;
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST) {
        kvio_cuda_free(device, device->kind, buffer);
        return;
    }
#endif
    free(buffer);
}

kvio_status_t kvio_device_host_alloc(kvio_device_t *device, uint64_t bytes, void **buffer_p)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST)
        return kvio_cuda_alloc(device, KVIO_MEMORY_PINNED, bytes, buffer_p);
#endif
    return host_alloc(device, bytes, buffer_p);
}

void kvio_device_host_free(kvio_device_t *device, void *buffer)
{
    if (buffer == NULL)
        return;
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST) {
        kvio_cuda_free(device, KVIO_MEMORY_PINNED, buffer);
        return;
    }
#endif
    free(buffer);
}

kvio_status_t kvio_device_host_register(kvio_device_t *device, void *buffer, uint64_t bytes)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST)
        return kvio_cuda_register(device, buffer, bytes);
#endif
    (void)buffer;
    (void)bytes;
    return KVIO_OK;
}

void kvio_device_host_unregister(kvio_device_t *device, void *buffer)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST && buffer != NULL)
        kvio_cuda_unregister(device, buffer);
#endif
    (void)buffer;
}

kvio_status_t kvio_device_copy_async(kvio_device_t *device, const kvio_device_copy_t *copies,
                                     size_t count)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST)
        return kvio_cuda_copy_async(device, copies, count);
#endif
    for (size_t i = 0; i < count; i++)
        if (copies[i].bytes > 0)
            memcpy(copies[i].dst, copies[i].src, copies[i].bytes);
    return KVIO_OK;
}

kvio_status_t kvio_device_sync(kvio_device_t *device)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST)
        return kvio_cuda_sync(device);
#endif
    (void)device;
    return KVIO_OK;
}

kvio_status_t kvio_device_poll(kvio_device_t *device)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind != KVIO_MEMORY_HOST)
        return kvio_cuda_poll(device);
#endif
    (void)device;
    return KVIO_OK;
}

kvio_status_t kvio_device_copy_batch(kvio_device_t *device, const kvio_device_copy_t *copies,
                                     size_t count)
{
    kvio_status_t status = kvio_device_copy_async(device, copies, count);
    return status == KVIO_OK ? kvio_device_sync(device) : status;
}

kvio_status_t kvio_device_copy(kvio_device_t *device, void *dst, const void *src,
                               uint64_t bytes)
{
    kvio_device_copy_t copy = {.dst = dst, .src = src, .bytes = bytes};
    return kvio_device_copy_batch(device, &copy, 1);
}

kvio_status_t kvio_device_spin(kvio_device_t *device, int64_t duration_ns)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind == KVIO_MEMORY_CUDA)
        return kvio_cuda_spin(device, duration_ns);
#endif
    (void)duration_ns;
    kvio_device_set_error(device, "spin kernel: the %s domain has no GPU",
                          kvio_memory_kind_names[device->kind]);
    return KVIO_ERR_UNSUPPORTED;
}

kvio_status_t kvio_device_spin_setup(kvio_device_t *device, uint64_t bytes)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind == KVIO_MEMORY_CUDA)
        return kvio_cuda_spin_setup(device, bytes);
#endif
    (void)bytes;
    kvio_device_set_error(device, "spin kernel: the %s domain has no GPU",
                          kvio_memory_kind_names[device->kind]);
    return KVIO_ERR_UNSUPPORTED;
}

kvio_status_t kvio_device_ipc_export(kvio_device_t *device, void *buffer,
                                     unsigned char handle_p[KVIO_DEVICE_IPC_HANDLE_BYTES])
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind == KVIO_MEMORY_CUDA)
        return kvio_cuda_ipc_export(device, buffer, handle_p);
#endif
    (void)buffer;
    (void)handle_p;
    kvio_device_set_error(device, "CUDA IPC: the %s domain has no GPU",
                          kvio_memory_kind_names[device->kind]);
    return KVIO_ERR_UNSUPPORTED;
}

kvio_status_t kvio_device_ipc_open(kvio_device_t *device,
                                   const unsigned char handle[KVIO_DEVICE_IPC_HANDLE_BYTES],
                                   void **buffer_p)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind == KVIO_MEMORY_CUDA)
        return kvio_cuda_ipc_open(device, handle, buffer_p);
#endif
    (void)handle;
    (void)buffer_p;
    kvio_device_set_error(device, "CUDA IPC: the %s domain has no GPU",
                          kvio_memory_kind_names[device->kind]);
    return KVIO_ERR_UNSUPPORTED;
}

void kvio_device_ipc_close(kvio_device_t *device, void *buffer)
{
#ifdef KVIO_HAVE_CUDA
    if (device->kind == KVIO_MEMORY_CUDA && buffer != NULL)
        kvio_cuda_ipc_close(device, buffer);
#endif
    (void)device;
    (void)buffer;
}
