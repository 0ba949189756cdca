/* The CUDA side of the memory domains (built only with CUDA): device query,
 * streams, cudaMalloc/cudaHostAlloc, batched cudaMemcpyAsync on a copy
 * stream, CUDA IPC handles and the spin kernel's launch. Every CUDA call is
 * checked and its cudaError_t converted here, once, with the call named in
 * the message. Each entry point makes the domain's device current first,
 * since a domain may be used from another thread than the one that made it. */
#include "core/gpu_int.h"

#include "kvio/clock.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

static kvio_status_t from_cuda(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:
        return KVIO_OK;
    case cudaErrorNotReady:
        return KVIO_INPROGRESS;
    case cudaErrorMemoryAllocation:
        return KVIO_ERR_NOMEM;
    case cudaErrorInvalidValue:
        return KVIO_ERR_INVALID;
    default:
        return KVIO_ERR_DEVICE;
    }
}

/* Converts and records a failed call ("cudaMalloc(4096 bytes): out of
 * memory"); returns the status. */
static kvio_status_t check(kvio_device_t *device, cudaError_t error, const char *what)
{
    if (error == cudaSuccess)
        return KVIO_OK;
    kvio_device_set_error(device, "%s: %s", what, cudaGetErrorString(error));
    return from_cuda(error);
}

static kvio_status_t use(kvio_device_t *device)
{
    return check(device, cudaSetDevice(device->info.index), "cudaSetDevice");
}

kvio_status_t kvio_cuda_query(int index, kvio_device_info_t *info_p, char *error_p,
                              size_t error_len)
{
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
        snprintf(error_p, error_len, "no CUDA device: cudaGetDeviceCount: %s",
                 cudaGetErrorString(error));
        return KVIO_ERR_DEVICE;
    }
    if (count < 1) {
        snprintf(error_p, error_len, "no CUDA device: the CUDA runtime sees none");
        return KVIO_ERR_DEVICE;
    }
    int pick = index < 0 ? 0 : index;
    if (pick >= count) {
        snprintf(error_p, error_len, "CUDA device %d does not exist (%d visible)", pick, count);
        return KVIO_ERR_DEVICE;
    }
    struct cudaDeviceProp properties;
    int clock_khz = 0;
    error = cudaGetDeviceProperties(&properties, pick);
    if (error == cudaSuccess)
        error = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, pick);
    if (error != cudaSuccess) {
        snprintf(error_p, error_len, "CUDA device %d: cudaGetDeviceProperties: %s", pick,
                 cudaGetErrorString(error));
        return from_cuda(error);
    }
    kvio_device_info_t info = {.count = count, .index = pick,
                               .multiprocessors = properties.multiProcessorCount,
                               .clock_khz = clock_khz,
                               .memory_bytes = (uint64_t)properties.totalGlobalMem,
                               .major = properties.major, .minor = properties.minor};
    snprintf(info.name, sizeof(info.name), "%s", properties.name);
    *info_p = info;
    return KVIO_OK;
}

/* Measures the GPU timer's offset from kvio_time_ns(): the timer kernel's
 * reading against the midpoint of the host's times around it, from the
 * fastest of a few round trips (a launch and a wait, some microseconds).
 * Once per domain, at kvio_cuda_spin_setup or else the first spin; the two
 * clocks are assumed not to drift apart over a run. */
static kvio_status_t measure_timer(kvio_device_t *device)
{
    unsigned long long *reading = NULL, now = 0;
    kvio_status_t status = check(device, cudaMalloc((void **)&reading, sizeof(*reading)),
                                 "cudaMalloc (GPU timer)");
    uint64_t best_rtt = UINT64_MAX;
    for (int round = 0; round < 5 && status == KVIO_OK; round++) {
        uint64_t before = kvio_time_ns();
        status = check(device, (cudaError_t)kvio_cuda_launch_timer(device->compute_stream,
                                                                   reading),
                       "GPU timer kernel launch");
        if (status == KVIO_OK)
            status = check(device, cudaStreamSynchronize(device->compute_stream),
                           "cudaStreamSynchronize (GPU timer)");
        uint64_t after = kvio_time_ns();
        if (status == KVIO_OK)
            status = check(device, cudaMemcpy(&now, reading, sizeof(now), cudaMemcpyDeviceToHost),
                           "cudaMemcpy (GPU timer)");
        if (status == KVIO_OK && after - before < best_rtt) {
            best_rtt = after - before;
            device->timer_offset_ns = (int64_t)(now - (before + (after - before) / 2));
        }
    }
    if (reading != NULL)
        cudaFree(reading);
    device->timer_known = status == KVIO_OK;
    return status;
}

kvio_status_t kvio_cuda_open(kvio_device_t *device, char *error_p, size_t error_len)
{
    cudaStream_t copy = NULL, compute = NULL;
    kvio_status_t status = use(device);
    if (status == KVIO_OK)
        status = check(device, cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking),
                       "cudaStreamCreateWithFlags (copies)");
    if (status == KVIO_OK)
        status = check(device, cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking),
                       "cudaStreamCreateWithFlags (spin)");
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "CUDA device %d: %s", device->info.index, device->error);
        if (copy != NULL)
            cudaStreamDestroy(copy);
        return status;
    }
    device->copy_stream = copy;
    device->compute_stream = compute;
    return KVIO_OK;
}

void kvio_cuda_close(kvio_device_t *device)
{
    use(device); /* failing, the streams are still destroyed (and the error kept) */
    if (device->copy_stream != NULL) {
        check(device, cudaStreamSynchronize(device->copy_stream), "cudaStreamSynchronize");
        check(device, cudaStreamDestroy(device->copy_stream), "cudaStreamDestroy");
    }
    if (device->compute_stream != NULL) {
        check(device, cudaStreamSynchronize(device->compute_stream), "cudaStreamSynchronize");
        check(device, cudaStreamDestroy(device->compute_stream), "cudaStreamDestroy");
    }
    if (device->spin_scratch != NULL)
        check(device, cudaFree(device->spin_scratch), "cudaFree (spin memory)");
    device->spin_scratch = NULL;
    device->copy_stream = device->compute_stream = NULL;
}

kvio_status_t kvio_cuda_alloc(kvio_device_t *device, int kind, uint64_t bytes, void **buffer_p)
{
    kvio_status_t status = use(device);
    if (status != KVIO_OK)
        return status;
    char what[96];
    void *buffer = NULL;
    size_t length = bytes > 0 ? (size_t)bytes : 4096;
    if (kind == KVIO_MEMORY_CUDA) {
        snprintf(what, sizeof(what), "cudaMalloc(%llu bytes)", (unsigned long long)length);
        status = check(device, cudaMalloc(&buffer, length), what);
        /* On the copy stream, so later copies there are ordered after it. */
        if (status == KVIO_OK)
            status = check(device, cudaMemsetAsync(buffer, 0, length, device->copy_stream),
                           "cudaMemsetAsync");
        if (status == KVIO_OK)
            status = check(device, cudaStreamSynchronize(device->copy_stream),
                           "cudaStreamSynchronize (copies)");
        if (status != KVIO_OK && buffer != NULL)
            cudaFree(buffer);
    } else {
        snprintf(what, sizeof(what), "cudaHostAlloc(%llu bytes)", (unsigned long long)length);
        status = check(device, cudaHostAlloc(&buffer, length, cudaHostAllocPortable), what);
        if (status == KVIO_OK)
            memset(buffer, 0, length);
    }
    if (status == KVIO_OK)
        *buffer_p = buffer;
    return status;
}

void kvio_cuda_free(kvio_device_t *device, int kind, void *buffer)
{
    if (use(device) != KVIO_OK)
        return;
    if (kind == KVIO_MEMORY_CUDA)
        check(device, cudaFree(buffer), "cudaFree");
    else
        check(device, cudaFreeHost(buffer), "cudaFreeHost");
}

kvio_status_t kvio_cuda_register(kvio_device_t *device, void *buffer, uint64_t bytes)
{
    kvio_status_t status = use(device);
    if (status == KVIO_OK)
        status = check(device, cudaHostRegister(buffer, (size_t)bytes, cudaHostRegisterPortable),
                       "cudaHostRegister");
    return status;
}

void kvio_cuda_unregister(kvio_device_t *device, void *buffer)
{
    if (use(device) == KVIO_OK)
        check(device, cudaHostUnregister(buffer), "cudaHostUnregister");
}

kvio_status_t kvio_cuda_copy_async(kvio_device_t *device, const kvio_device_copy_t *copies,
                                   size_t count)
{
    kvio_status_t status = use(device);
    for (size_t i = 0; i < count && status == KVIO_OK; i++) {
        if (copies[i].bytes == 0)
            continue;
        status = check(device, cudaMemcpyAsync(copies[i].dst, copies[i].src,
                                               (size_t)copies[i].bytes, cudaMemcpyDefault,
                                               device->copy_stream),
                       "cudaMemcpyAsync");
    }
    return status;
}

kvio_status_t kvio_cuda_sync(kvio_device_t *device)
{
    kvio_status_t status = use(device);
    if (status == KVIO_OK)
        status = check(device, cudaStreamSynchronize(device->copy_stream),
                       "cudaStreamSynchronize (copies)");
    return status;
}

kvio_status_t kvio_cuda_poll(kvio_device_t *device)
{
    kvio_status_t status = use(device);
    if (status != KVIO_OK)
        return status;
    cudaError_t error = cudaStreamQuery(device->copy_stream);
    if (error == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* not a failure: keep it from the next check */
        return KVIO_INPROGRESS;
    }
    return check(device, error, "cudaStreamQuery (copies)");
}

kvio_status_t kvio_cuda_spin(kvio_device_t *device, int64_t duration_ns)
{
    if (duration_ns <= 0)
        return KVIO_OK;
    kvio_status_t status = use(device);
    if (status == KVIO_OK && !device->timer_known)
        status = measure_timer(device);
    if (status != KVIO_OK)
        return status;
    /* A deadline on the GPU's timer, not a duration: see gpu_kernels.cu. */
    unsigned long long deadline = (unsigned long long)((int64_t)kvio_time_ns() + duration_ns +
                                                       device->timer_offset_ns);
    int blocks = device->info.multiprocessors > 0 ? device->info.multiprocessors : 1;
    if (device->spin_scratch != NULL)
        return check(device,
                     (cudaError_t)kvio_cuda_launch_stream(device->compute_stream, 4 * blocks,
                                                          deadline, device->spin_scratch,
                                                          device->spin_scratch_bytes / 16),
                     "spin kernel launch (streaming memory)");
    return check(device, (cudaError_t)kvio_cuda_launch_spin(device->compute_stream, blocks,
                                                           deadline),
                 "spin kernel launch");
}

kvio_status_t kvio_cuda_spin_setup(kvio_device_t *device, uint64_t bytes)
{
    kvio_status_t status = use(device);
    if (status == KVIO_OK && !device->timer_known)
        status = measure_timer(device);
    if (status != KVIO_OK)
        return status;
    if (device->spin_scratch != NULL) {
        status = check(device, cudaFree(device->spin_scratch), "cudaFree (spin memory)");
        device->spin_scratch = NULL;
        device->spin_scratch_bytes = 0;
    }
    bytes = bytes / 16 * 16; /* whole float4s */
    if (status != KVIO_OK || bytes == 0)
        return status;
    char what[96];
    snprintf(what, sizeof(what), "cudaMalloc(%llu bytes, spin memory)", (unsigned long long)bytes);
    /* Its contents do not matter: the kernel only reads and writes it. */
    status = check(device, cudaMalloc(&device->spin_scratch, (size_t)bytes), what);
    if (status == KVIO_OK)
        device->spin_scratch_bytes = bytes;
    else
        device->spin_scratch = NULL;
    return status;
}

kvio_status_t kvio_cuda_ipc_export(kvio_device_t *device, void *buffer, unsigned char *handle_p)
{
    cudaIpcMemHandle_t handle;
    _Static_assert(sizeof(handle) <= KVIO_DEVICE_IPC_HANDLE_BYTES, "IPC handle size");
    kvio_status_t status = use(device);
    if (status == KVIO_OK)
        status = check(device, cudaIpcGetMemHandle(&handle, buffer), "cudaIpcGetMemHandle");
    if (status == KVIO_OK) {
        memset(handle_p, 0, KVIO_DEVICE_IPC_HANDLE_BYTES);
        memcpy(handle_p, &handle, sizeof(handle));
    }
    return status;
}

kvio_status_t kvio_cuda_ipc_open(kvio_device_t *device, const unsigned char *handle,
                                 void **buffer_p)
{
    cudaIpcMemHandle_t ipc;
    memcpy(&ipc, handle, sizeof(ipc));
    void *buffer = NULL;
    kvio_status_t status = use(device);
    if (status == KVIO_OK)
        status = check(device, cudaIpcOpenMemHandle(&buffer, ipc,
                                                    cudaIpcMemLazyEnablePeerAccess),
                       "cudaIpcOpenMemHandle");
    if (status == KVIO_OK)
        *buffer_p = buffer;
    return status;
}

void kvio_cuda_ipc_close(kvio_device_t *device, void *buffer)
{
    if (use(device) == KVIO_OK)
        check(device, cudaIpcCloseMemHandle(buffer), "cudaIpcCloseMemHandle");
}
