// NCCL all-reduce bandwidth across every GPU of the node from one process (ncclCommInitAll), FlagPerf toolkit
// format. Prints, for a float32 sum of BYTES per GPU:
//   [FlagPerf Result]interconnect-NCCL-allreduce-algbw=<GB/s>GB/s     bytes / time
//   [FlagPerf Result]interconnect-NCCL-allreduce-busbw=<GB/s>GB/s     algbw * 2(n-1)/n (nccl-tests' bus bandwidth)
// On one GPU the bus factor is 0: busbw is not printed (nothing crosses a link).
// Random data (a hash of the index); the result is checked against the expected sum on a few elements.
// Timing: CUDA events on GPU 0 around ITERS all-reduces after WARMUP of them.
#include <cuda_runtime.h>
#include <nccl.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r = (x); if (r != ncclSuccess) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(1); } } while (0)

__host__ __device__ float value(size_t i, int dev) {
    unsigned x = (unsigned)i * 2654435761u ^ (unsigned)(dev + 1) * 0x9e3779b9u;
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15;
    return (float)(x & 1023) / 1024.0f;     // exact in float: sums of a few are exact too
}

__global__ void fill(float *p, size_t n, int dev) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = value(i, dev);
}

int main(int argc, char **argv) {
    size_t bytes = (argc > 1 ? atoll(argv[1]) : 1024) * (size_t)1 << 20;      // MiB
    int warmup = 5, iters = argc > 2 ? atoi(argv[2]) : 20;
    int n = 0;
    CHECK_CUDA(cudaGetDeviceCount(&n));
    size_t count = bytes / sizeof(float);
    std::vector<int> devs(n);
    std::vector<float *> buf(n);
    std::vector<cudaStream_t> stream(n);
    std::vector<ncclComm_t> comm(n);
    for (int d = 0; d < n; d++) {
        devs[d] = d;
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaMalloc(&buf[d], bytes));
        CHECK_CUDA(cudaStreamCreate(&stream[d]));
        fill<<<1024, 256, 0, stream[d]>>>(buf[d], count, d);
    }
    CHECK_NCCL(ncclCommInitAll(comm.data(), n, devs.data()));
    auto all_reduce = [&](float *const *in, float *const *out) {
        CHECK_NCCL(ncclGroupStart());
        for (int d = 0; d < n; d++)
            CHECK_NCCL(ncclAllReduce(in[d], out[d], count, ncclFloat, ncclSum, comm[d], stream[d]));
        CHECK_NCCL(ncclGroupEnd());
    };
    // correctness first, on the random data: every element is the sum over GPUs of value(i, d)
    std::vector<float *> out(n);
    for (int d = 0; d < n; d++) { CHECK_CUDA(cudaSetDevice(d)); CHECK_CUDA(cudaMalloc(&out[d], bytes)); }
    all_reduce(buf.data(), out.data());
    for (int d = 0; d < n; d++) { CHECK_CUDA(cudaSetDevice(d)); CHECK_CUDA(cudaStreamSynchronize(stream[d])); }
    for (size_t i : {(size_t)0, count / 3, count - 1}) {
        float expect = 0.0f, got = 0.0f;
        for (int d = 0; d < n; d++) expect += value(i, d);
        CHECK_CUDA(cudaSetDevice(n - 1));
        CHECK_CUDA(cudaMemcpy(&got, out[n - 1] + i, sizeof(got), cudaMemcpyDeviceToHost));
        if (std::fabs(got - expect) > 1e-3f) {
            fprintf(stderr, "all-reduce result wrong at %zu: %g, expected %g\n", i, got, expect);
            return 2;
        }
    }
    for (int i = 0; i < warmup; i++) all_reduce(buf.data(), out.data());
    cudaEvent_t t0, t1;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaEventCreate(&t0));
    CHECK_CUDA(cudaEventCreate(&t1));
    for (int d = 0; d < n; d++) { CHECK_CUDA(cudaSetDevice(d)); CHECK_CUDA(cudaStreamSynchronize(stream[d])); }
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaEventRecord(t0, stream[0]));
    for (int i = 0; i < iters; i++) all_reduce(buf.data(), out.data());
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaEventRecord(t1, stream[0]));
    for (int d = 0; d < n; d++) { CHECK_CUDA(cudaSetDevice(d)); CHECK_CUDA(cudaStreamSynchronize(stream[d])); }
    float ms = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    double t = ms / 1000.0 / iters, algbw = bytes / t / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
    printf("gpus=%d bytes=%zu iterations=%d time=%.3f ms per all-reduce\n", n, bytes, iters, t * 1000.0);
    printf("[FlagPerf Result]interconnect-NCCL-allreduce-algbw=%.2fGB/s\n", algbw);
    if (n > 1) printf("[FlagPerf Result]interconnect-NCCL-allreduce-busbw=%.2fGB/s\n", busbw);
    for (int d = 0; d < n; d++) ncclCommDestroy(comm[d]);
    return 0;
}
