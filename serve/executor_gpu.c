/* gpu (emulate with the KV pool on a CUDA device): a spin kernel keeps the
 * SMs busy for the iteration's compute, so copies contend as in a real
 * server; the wait is realtime's. */
#include "serve/loop_int.h"

#include "kvio/gpu.h"

static kvio_status_t spin_kernel(kvio_executor_t *executor, int64_t duration_ns)
{
    return kvio_device_spin(executor->device, duration_ns);
}

const kvio_executor_ops_t kvio_executor_gpu = {
    .plugin = {.name = "gpu", .help = "a spin kernel on the GPU for each iteration's compute",
               .options = kvio_no_options},
    .caps = KVIO_EXECUTOR_CAP_REAL,
    .now = kvio_executor_host_now,
    .compute = spin_kernel,
    .wait_until = kvio_executor_host_wait,
};
