/* Memory domains (host, pinned, cuda) and the GPU they may live on: buffer
 * allocation, batched asynchronous copies on a stream (GPU pool <-> host
 * tier), CUDA IPC handles, and a spin kernel that keeps every SM busy for an
 * emulated compute time. core/ owns every CUDA call; a cudaError_t never
 * leaves core/gpu_cuda.c. Built without CUDA, or run without a device, a
 * request for GPU memory fails with "CUDA not built (...)" or "no CUDA
 * device: ...", or falls back to host memory when the configuration says
 * `device.fallback: host` (the handle then says so). */
#ifndef KVIO_GPU_H
#define KVIO_GPU_H

#include "kvio/config.h"
#include "kvio/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a buffer lives, in the order of kvio_memory_kind_names. */
typedef enum {
    KVIO_MEMORY_HOST = 0,   /* pageable host memory */
    KVIO_MEMORY_PINNED = 1, /* page-locked host memory (cudaHostAlloc) */
    KVIO_MEMORY_CUDA = 2,   /* device memory (cudaMalloc) */
} kvio_memory_kind_t;

/* Where the weights buffers live: auto is cuda for the GPU transports
 * (cuda-ipc, staged) and host for the others. */
typedef enum {
    KVIO_WEIGHTS_AUTO = 0,
    KVIO_WEIGHTS_HOST = 1,
    KVIO_WEIGHTS_CUDA = 2,
} kvio_weights_memory_t;

/* What a request for GPU memory does without a device (or without CUDA). */
typedef enum { KVIO_FALLBACK_ERROR = 0, KVIO_FALLBACK_HOST = 1 } kvio_fallback_t;

extern const char *const kvio_memory_kind_names[];

/* The `device:` section. */
typedef struct kvio_device_config {
    int memory;    /* kvio_memory_kind_t: the serve ranks' KV pool (emulate) */
    int weights;   /* kvio_weights_memory_t: the trainer's and servers' weights */
    int fallback;  /* kvio_fallback_t */
    int64_t index; /* CUDA device ordinal; -1: rank index modulo the device count */
    bool spin;     /* emulate: a spin kernel keeps the SMs busy for each iteration
                      while the KV pool is on the GPU */
    uint64_t spin_bytes; /* device memory the spin streams over (0: SMs only) */
} kvio_device_config_t;

extern const kvio_opt_t kvio_device_options[];

/* What the CUDA runtime says about one device. */
typedef struct kvio_device_info {
    int count;             /* devices visible to this process */
    int index;             /* the one described */
    char name[256];
    int multiprocessors;
    int clock_khz;         /* nominal (peak) SM clock */
    uint64_t memory_bytes;
    int major, minor;      /* compute capability */
} kvio_device_info_t;

/* True when this kvio was built with CUDA. */
bool kvio_device_built(void);

/* Describes device index (-1: device 0). Errors: KVIO_ERR_UNSUPPORTED with
 * "CUDA not built (configure with KVIO_WITH_CUDA=ON)", KVIO_ERR_DEVICE with
 * "no CUDA device: <the CUDA runtime's reason>" or "CUDA device 3 of 1". */
kvio_status_t kvio_device_query(int index, kvio_device_info_t *info_p, char *error_p,
                                size_t error_len);

/* Before a run: KVIO_ERR_CONFIG with "<what>: no CUDA device: ... (set
 * device.fallback: host to run on host memory)" when kind needs a GPU that
 * is not there and fallback is error; KVIO_OK otherwise. */
kvio_status_t kvio_device_preflight(int kind, int fallback, int64_t index, const char *what,
                                    char *error_p, size_t error_len);

/* A memory domain: the kind buffers are allocated in, and for cuda the
 * device, a copy stream and a compute stream. One per rank (not shared
 * between threads). */
typedef struct kvio_device kvio_device_t;

/* Opens a domain of kind for rank (which picks the device when index is
 * -1). A host kind never touches CUDA. A pinned or cuda kind without a
 * device fails with the reason in error_p ("no CUDA device: ...", "CUDA not
 * built (...)"; callers say what asked for it), or with fallback host gives
 * a host domain whose description says why. Caller destroys. */
kvio_status_t kvio_device_create(int kind, int fallback, int64_t index, int rank,
                                 kvio_device_t **device_p, char *error_p, size_t error_len);

/* Waits for outstanding work, then frees the streams (not the buffers). */
void kvio_device_destroy(kvio_device_t *device);

/* The kind in effect (host after a fallback), and whether it fell back. */
int kvio_device_kind(const kvio_device_t *device);
bool kvio_device_fell_back(const kvio_device_t *device);

/* "cuda (device 0: NVIDIA H200, 132 SMs, 150.0 GB)", "pinned (...)",
 * "host", or "host (fallback from cuda: no CUDA device: ...)". Borrowed. */
const char *kvio_device_describe(const kvio_device_t *device);

/* The last error text of a call on this domain ("" when none). */
const char *kvio_device_error(const kvio_device_t *device);

/* Allocates bytes in the domain (host: 4 KiB aligned and zeroed; cuda:
 * zeroed). Free with kvio_device_free on the same domain. */
kvio_status_t kvio_device_alloc(kvio_device_t *device, uint64_t bytes, void **buffer_p);
void kvio_device_free(kvio_device_t *device, void *buffer);

/* Host buffers to stage copies through: pinned when the domain is on a GPU,
 * plain 4 KiB aligned memory otherwise. Free with kvio_device_host_free. */
kvio_status_t kvio_device_host_alloc(kvio_device_t *device, uint64_t bytes, void **buffer_p);
void kvio_device_host_free(kvio_device_t *device, void *buffer);

/* Page-locks memory allocated elsewhere (e.g. by UCX) for fast copies; a
 * no-op on a host domain. Unregister before that memory is freed. */
kvio_status_t kvio_device_host_register(kvio_device_t *device, void *buffer, uint64_t bytes);
void kvio_device_host_unregister(kvio_device_t *device, void *buffer);

/* One copy of a batch; either side may be host or device memory. */
typedef struct kvio_device_copy {
    void *dst;
    const void *src;
    uint64_t bytes;
} kvio_device_copy_t;

/* Queues count copies, in order, on the domain's copy stream and returns
 * (host domain: copies at once). Sources must stay valid until
 * kvio_device_sync or a KVIO_OK from kvio_device_poll. */
kvio_status_t kvio_device_copy_async(kvio_device_t *device, const kvio_device_copy_t *copies,
                                     size_t count);

/* Waits for the copy stream; reports the first failed copy. */
kvio_status_t kvio_device_sync(kvio_device_t *device);

/* KVIO_OK when the copy stream is idle, KVIO_INPROGRESS while not. */
kvio_status_t kvio_device_poll(kvio_device_t *device);

/* Queues count copies like kvio_device_copy_async, then waits for them. */
kvio_status_t kvio_device_copy_batch(kvio_device_t *device, const kvio_device_copy_t *copies,
                                     size_t count);

/* A single copy, waited for. */
kvio_status_t kvio_device_copy(kvio_device_t *device, void *dst, const void *src,
                               uint64_t bytes);

/* Launches the spin kernel on the compute stream and returns at once; it
 * spins until duration_ns from now, on the GPU's nanosecond timer (offset
 * from the host's clock measured by kvio_device_spin_setup or this first
 * spin). A spin queued behind one that overran still ends at its own
 * deadline, not a full duration later, so overruns do not pile up.
 * KVIO_ERR_UNSUPPORTED on a host or pinned domain. */
kvio_status_t kvio_device_spin(kvio_device_t *device, int64_t duration_ns);

/* Prepares later spins, before the timed part of a run: measures the GPU
 * timer's offset (else the first spin does), and gives them bytes of device
 * memory (owned by the domain; 0: none) to stream over, reading and writing
 * it until their deadline, so copies contend for memory bandwidth as they
 * do with real, memory-bound decode kernels; without it a spin only
 * occupies the SMs. KVIO_ERR_UNSUPPORTED off a cuda domain. */
kvio_status_t kvio_device_spin_setup(kvio_device_t *device, uint64_t bytes);

/* CUDA IPC (cuda domains): the handle of a cudaMalloc'd buffer, and opening
 * another process's handle as a device pointer (closed with ipc_close). */
#define KVIO_DEVICE_IPC_HANDLE_BYTES 64
kvio_status_t kvio_device_ipc_export(kvio_device_t *device, void *buffer,
                                     unsigned char handle_p[KVIO_DEVICE_IPC_HANDLE_BYTES]);
kvio_status_t kvio_device_ipc_open(kvio_device_t *device,
                                   const unsigned char handle[KVIO_DEVICE_IPC_HANDLE_BYTES],
                                   void **buffer_p);
void kvio_device_ipc_close(kvio_device_t *device, void *buffer);

#endif
