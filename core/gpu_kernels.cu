// Kernels of the memory domains: the spin kernels that keep every SM (and,
// streaming a buffer, the memory) busy until a deadline, and a one-thread
// kernel that reads the GPU's clock so the host can turn its own times into
// deadlines. Both read %globaltimer,
// the GPU's nanosecond timer, not clock64: SM cycles run slower than the
// nominal clock whenever the GPU is below its boost clock, and a spin timed
// in cycles would then overrun. Launchers clear the thread's last error
// first (a NotReady from an earlier stream query would read as this
// launch's failure) and return the cudaError_t as an int; core/gpu_cuda.c
// converts it (the one place CUDA errors become statuses).
#include <cuda_runtime.h>

__device__ static unsigned long long global_timer_ns()
{
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return now;
}

// Every thread spins until the GPU's timer passes deadline_ns. A kernel
// queued behind one that overran starts past its deadline and ends at once,
// so spins never pile up.
__global__ void kvio_spin_kernel(unsigned long long deadline_ns)
{
    while (global_timer_ns() < deadline_ns) {
    }
}

// The same deadline, while every thread reads and writes its share of
// buffer (count float4s) pass after pass: the SMs are busy and so is the
// memory, which the copy engines then share, as with memory-bound decode
// kernels. The deadline is checked once per pass (a pass of 256 MiB takes
// well under a millisecond on HBM).
__global__ void kvio_stream_kernel(unsigned long long deadline_ns, float4 *buffer,
                                   unsigned long long count)
{
    unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = gridDim.x * (unsigned long long)blockDim.x;
    while (global_timer_ns() < deadline_ns) {
        for (unsigned long long i = first; i < count; i += stride) {
            float4 value = buffer[i];
            value.x += 1.0f;
            buffer[i] = value;
        }
    }
}

__global__ void kvio_timer_kernel(unsigned long long *now_p)
{
    *now_p = global_timer_ns();
}

extern "C" int kvio_cuda_launch_spin(void *stream, int blocks, unsigned long long deadline_ns)
{
    (void)cudaGetLastError();
    kvio_spin_kernel<<<blocks, 128, 0, static_cast<cudaStream_t>(stream)>>>(deadline_ns);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int kvio_cuda_launch_stream(void *stream, int blocks, unsigned long long deadline_ns,
                                       void *buffer, unsigned long long count)
{
    (void)cudaGetLastError();
    kvio_stream_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        deadline_ns, static_cast<float4 *>(buffer), count);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int kvio_cuda_launch_timer(void *stream, unsigned long long *now_p)
{
    (void)cudaGetLastError();
    kvio_timer_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(now_p);
    return static_cast<int>(cudaGetLastError());
}
