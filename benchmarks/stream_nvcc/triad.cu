// STREAM-style triad a[i] = b[i] + s * c[i] in fp32, built at case time by benchmarks/stream_nvcc/main.py:
//   nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -cudart=static <arch flags> -o libtriad.so triad.cu
// and called through ctypes with torch tensors' data_ptr() and torch's current stream.
//
// C ABI (every function returns a cudaError_t as int; 0 = cudaSuccess):
//   triad_info(device, &runtime_version, &driver_version, &sm_count, &grid, &block)
//   triad_launch(device, a, b, c, s, n, stream)                  one launch, asynchronous
//   triad_timed(device, a, b, c, s, n, iters, stream, &ms)       iters back-to-back launches between two
//                                                                cudaEvents on `stream`; ms = total time
//                                                                (launch plan computed before the start event)
//   triad_error_string(err)                                      cudaGetErrorString
//   triad_vectorized(a, b, c, n)                                 1 when the float4 path is taken
// Warm-up is the caller's business (triad_launch), outside the timed region.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kBlock = 256;

// Grid-stride triad over float4: each thread moves 16 B per array per iteration (one LDG.128 per input,
// one STG.128 for the output). fmaf gives a single rounding: a = RN(b + s * c).
__global__ void __launch_bounds__(kBlock)
triad_vec4_kernel(float4* __restrict__ a, const float4* __restrict__ b, const float4* __restrict__ c, float s,
                  long long n4, float* __restrict__ a_tail, const float* __restrict__ b_tail,
                  const float* __restrict__ c_tail, int tail) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 bv = b[i];
        const float4 cv = c[i];
        float4 r;
        r.x = fmaf(s, cv.x, bv.x);
        r.y = fmaf(s, cv.y, bv.y);
        r.z = fmaf(s, cv.z, bv.z);
        r.w = fmaf(s, cv.w, bv.w);
        a[i] = r;
    }
    // n % 4 trailing elements (0 when n is a multiple of 4)
    if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail) {
        a_tail[threadIdx.x] = fmaf(s, c_tail[threadIdx.x], b_tail[threadIdx.x]);
    }
}

// Scalar grid-stride fallback (pointers not 16-byte aligned).
__global__ void __launch_bounds__(kBlock)
triad_scalar_kernel(float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c, float s,
                    long long n) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        a[i] = fmaf(s, c[i], b[i]);
    }
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

bool use_vec4(const void* a, const void* b, const void* c) { return aligned16(a) && aligned16(b) && aligned16(c); }

// Enough resident blocks to fill every SM (occupancy x SMs), never more than the work needs.
cudaError_t grid_size(int device, const void* kernel, long long work_items, int* grid) {
    int sms = 0, per_sm = 0;
    cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlock, 0);
    if (err != cudaSuccess) return err;
    long long g = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
    const long long needed = (work_items + kBlock - 1) / kBlock;
    if (g > needed) g = needed;
    if (g < 1) g = 1;
    *grid = static_cast<int>(g);
    return cudaSuccess;
}

// The launch plan for these pointers: float4 path or scalar fallback, and the grid size.
struct Plan {
    bool vec4;
    int grid;
};

cudaError_t plan(int device, const float* a, const float* b, const float* c, long long n, Plan* p) {
    p->vec4 = use_vec4(a, b, c);
    if (p->vec4) {
        const long long n4 = n / 4;
        return grid_size(device, reinterpret_cast<const void*>(triad_vec4_kernel), n4 > 0 ? n4 : 1, &p->grid);
    }
    return grid_size(device, reinterpret_cast<const void*>(triad_scalar_kernel), n, &p->grid);
}

cudaError_t launch(const Plan& p, float* a, const float* b, const float* c, float s, long long n,
                   cudaStream_t stream) {
    if (p.vec4) {
        const long long n4 = n / 4;
        const int tail = static_cast<int>(n - n4 * 4);
        triad_vec4_kernel<<<p.grid, kBlock, 0, stream>>>(
            reinterpret_cast<float4*>(a), reinterpret_cast<const float4*>(b), reinterpret_cast<const float4*>(c),
            s, n4, a + n4 * 4, b + n4 * 4, c + n4 * 4, tail);
    } else {
        triad_scalar_kernel<<<p.grid, kBlock, 0, stream>>>(a, b, c, s, n);
    }
    return cudaGetLastError();  // launch-configuration errors; execution errors surface at the next sync
}

}  // namespace

extern "C" {

int triad_info(int device, int* runtime_version, int* driver_version, int* sm_count, int* grid_vec4,
               int* block) {
    cudaError_t err = cudaRuntimeGetVersion(runtime_version);
    if (err != cudaSuccess) return static_cast<int>(err);
    err = cudaDriverGetVersion(driver_version);
    if (err != cudaSuccess) return static_cast<int>(err);
    err = cudaSetDevice(device);
    if (err != cudaSuccess) return static_cast<int>(err);
    err = cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return static_cast<int>(err);
    *block = kBlock;
    // the resident-grid size (large n) of the float4 kernel
    return static_cast<int>(grid_size(device, reinterpret_cast<const void*>(triad_vec4_kernel), 1LL << 40,
                                      grid_vec4));
}

int triad_vectorized(const float* a, const float* b, const float* c, long long n) {
    return (n >= 4 && use_vec4(a, b, c)) ? 1 : 0;
}

const char* triad_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

int triad_launch(int device, float* a, const float* b, const float* c, float s, long long n, void* stream) {
    if (n <= 0 || a == nullptr || b == nullptr || c == nullptr) return static_cast<int>(cudaErrorInvalidValue);
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return static_cast<int>(err);
    Plan p;
    err = plan(device, a, b, c, n, &p);
    if (err != cudaSuccess) return static_cast<int>(err);
    return static_cast<int>(launch(p, a, b, c, s, n, static_cast<cudaStream_t>(stream)));
}

int triad_timed(int device, float* a, const float* b, const float* c, float s, long long n, int iters,
                void* stream, float* ms_out) {
    if (n <= 0 || a == nullptr || b == nullptr || c == nullptr || iters < 1 || ms_out == nullptr)
        return static_cast<int>(cudaErrorInvalidValue);
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return static_cast<int>(err);
    Plan p;
    err = plan(device, a, b, c, n, &p);  // host-side queries stay outside the timed region
    if (err != cudaSuccess) return static_cast<int>(err);
    cudaEvent_t start = nullptr, stop = nullptr;
    err = cudaEventCreate(&start);
    if (err == cudaSuccess) err = cudaEventCreate(&stop);
    if (err == cudaSuccess) err = cudaEventRecord(start, st);
    for (int i = 0; err == cudaSuccess && i < iters; ++i) err = launch(p, a, b, c, s, n, st);
    if (err == cudaSuccess) err = cudaEventRecord(stop, st);
    if (err == cudaSuccess) err = cudaEventSynchronize(stop);  // also reports kernel execution errors
    if (err == cudaSuccess) err = cudaEventElapsedTime(ms_out, start, stop);
    // destroy the events in any case; keep the first error
    if (start != nullptr) {
        cudaError_t e = cudaEventDestroy(start);
        if (err == cudaSuccess) err = e;
    }
    if (stop != nullptr) {
        cudaError_t e = cudaEventDestroy(stop);
        if (err == cudaSuccess) err = e;
    }
    return static_cast<int>(err);
}

}  // extern "C"
