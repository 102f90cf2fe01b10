// BF16 GEMM throughput through cuBLAS, FlagPerf toolkit format: prints
//   [FlagPerf Result]computation-BF16=<TFLOPS>TFLOPS
// Random operands (a hash of the index, uniform in [-1, 1)), never zeros. 2*M*N*K FLOP per GEMM.
// Timing: CUDA events around a batch of GEMMs after a warm-up that runs for WARMUP_S seconds; the batch is
// sized from the warm-up to last about MEASURE_S seconds.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CHECK_CUBLAS(x) do { cublasStatus_t s = (x); if (s != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "%s:%d: cuBLAS status %d\n", __FILE__, __LINE__, (int)s); exit(1); } } while (0)

static const double WARMUP_S = 2.0, MEASURE_S = 5.0;

__global__ void fill_random(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
        p[i] = __float2bfloat16((x >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

int main(int argc, char **argv) {
    int m = argc > 1 ? atoi(argv[1]) : 8192, n = m, k = m;
    __nv_bfloat16 *a, *b, *c;
    CHECK_CUDA(cudaMalloc(&a, sizeof(*a) * (size_t)m * k));
    CHECK_CUDA(cudaMalloc(&b, sizeof(*b) * (size_t)k * n));
    CHECK_CUDA(cudaMalloc(&c, sizeof(*c) * (size_t)m * n));
    fill_random<<<1024, 256>>>(a, (size_t)m * k, 1u);
    fill_random<<<1024, 256>>>(b, (size_t)k * n, 2u);
    CHECK_CUDA(cudaGetLastError());
    cublasHandle_t h;
    CHECK_CUBLAS(cublasCreate(&h));
    float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t t0, t1;
    CHECK_CUDA(cudaEventCreate(&t0));
    CHECK_CUDA(cudaEventCreate(&t1));
    auto gemm = [&]() {
        CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, m, b, CUDA_R_16BF, k,
                                  &beta, c, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    // warm-up: clocks, cuBLAS heuristics; also measures one GEMM's time to size the batch
    int batch = 1;
    float ms = 0.0f, warm_ms = 0.0f;
    while (warm_ms < WARMUP_S * 1000.0) {
        CHECK_CUDA(cudaEventRecord(t0));
        for (int i = 0; i < batch; i++) gemm();
        CHECK_CUDA(cudaEventRecord(t1));
        CHECK_CUDA(cudaEventSynchronize(t1));
        CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
        warm_ms += ms;
        if (ms < 200.0f) batch *= 2;
    }
    int iters = (int)(MEASURE_S * 1000.0 / (ms / batch)) + 1;
    CHECK_CUDA(cudaEventRecord(t0));
    for (int i = 0; i < iters; i++) gemm();
    CHECK_CUDA(cudaEventRecord(t1));
    CHECK_CUDA(cudaEventSynchronize(t1));
    CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    // the result must not be zeros: a few entries of C read back
    __nv_bfloat16 probe[4];
    CHECK_CUDA(cudaMemcpy(probe, c, sizeof(probe), cudaMemcpyDeviceToHost));
    float sum = 0.0f;
    for (int i = 0; i < 4; i++) sum += __bfloat162float(probe[i]) * __bfloat162float(probe[i]);
    if (!(sum > 0.0f)) { fprintf(stderr, "GEMM result is all zeros: the measurement is invalid\n"); return 2; }
    double tflops = 2.0 * m * n * (double)k * iters / (ms / 1000.0) / 1e12;
    printf("m=n=k=%d iterations=%d time=%.3f s\n", m, iters, ms / 1000.0);
    printf("[FlagPerf Result]computation-BF16=%.3fTFLOPS\n", tflops);
    return 0;
}
