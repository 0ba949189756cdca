/* Private to core/: the memory domain's state, and the CUDA side of it
 * (core/gpu_cuda.c, built only with CUDA) that core/gpu.c calls. */
#ifndef KVIO_CORE_GPU_INT_H
#define KVIO_CORE_GPU_INT_H

#include "kvio/gpu.h"

struct kvio_device {
    int kind;              /* kvio_memory_kind_t in effect */
    int requested;         /* what was asked for */
    bool fell_back;
    kvio_device_info_t info;
    void *copy_stream;     /* cudaStream_t */
    void *compute_stream;  /* cudaStream_t: the spin kernel */
    bool timer_known;      /* cuda: timer_offset_ns measured */
    void *spin_scratch;    /* cuda: what the spin streams over (NULL: none) */
    uint64_t spin_scratch_bytes;
    int64_t timer_offset_ns; /* cuda: GPU timer minus kvio_time_ns() */
    char description[640];
    char error[512];
};

/* Records the domain's last error (format like printf). */
void kvio_device_set_error(kvio_device_t *device, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef KVIO_HAVE_CUDA
kvio_status_t kvio_cuda_query(int index, kvio_device_info_t *info_p, char *error_p,
                              size_t error_len);
/* Makes info.index current on this thread and creates the streams. */
kvio_status_t kvio_cuda_open(kvio_device_t *device, char *error_p, size_t error_len);
void kvio_cuda_close(kvio_device_t *device);
kvio_status_t kvio_cuda_alloc(kvio_device_t *device, int kind, uint64_t bytes, void **buffer_p);
void kvio_cuda_free(kvio_device_t *device, int kind, void *buffer);
kvio_status_t kvio_cuda_register(kvio_device_t *device, void *buffer, uint64_t bytes);
void kvio_cuda_unregister(kvio_device_t *device, void *buffer);
kvio_status_t kvio_cuda_copy_async(kvio_device_t *device, const kvio_device_copy_t *copies,
                                   size_t count);
kvio_status_t kvio_cuda_sync(kvio_device_t *device);
kvio_status_t kvio_cuda_poll(kvio_device_t *device);
kvio_status_t kvio_cuda_spin(kvio_device_t *device, int64_t duration_ns);
kvio_status_t kvio_cuda_spin_setup(kvio_device_t *device, uint64_t bytes);
kvio_status_t kvio_cuda_ipc_export(kvio_device_t *device, void *buffer, unsigned char *handle_p);
kvio_status_t kvio_cuda_ipc_open(kvio_device_t *device, const unsigned char *handle,
                                 void **buffer_p);
void kvio_cuda_ipc_close(kvio_device_t *device, void *buffer);

/* Kernels (core/gpu_kernels.cu); they return a cudaError_t as an int, which
 * core/gpu_cuda.c converts. */
int kvio_cuda_launch_spin(void *stream, int blocks, unsigned long long deadline_ns);
int kvio_cuda_launch_timer(void *stream, unsigned long long *now_p);
int kvio_cuda_launch_stream(void *stream, int blocks, unsigned long long deadline_ns,
                            void *buffer, unsigned long long count);
#endif

#endif
