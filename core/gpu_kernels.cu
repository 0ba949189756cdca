// Kernels of the memory domains: the spin kernel that keeps every SM busy
// for an emulated compute time. Launchers return the cudaError_t as an int;
// core/gpu_cuda.c converts it (the one place CUDA errors become statuses).
#include <cuda_runtime.h>

// Every thread spins on its SM's cycle counter until cycles have passed.
__global__ void kvio_spin_kernel(long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

extern "C" int kvio_cuda_launch_spin(void *stream, int blocks, long long cycles)
{
    kvio_spin_kernel<<<blocks, 128, 0, static_cast<cudaStream_t>(stream)>>>(cycles);
    return static_cast<int>(cudaGetLastError());
}
