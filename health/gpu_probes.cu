// CUDA probes: device memory test (our kernels) and GEMM throughput (cuBLAS,
// the same library training uses, so the number is what a job will see).
// cudaError_t becomes a Status in common/cuda_status.h, cublasStatus_t in one function here.
#include "health/gpu_probes.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>
#include "common/cuda_status.h"

namespace holdfast::health {
namespace {


Status CublasError(const std::string& context, cublasStatus_t st) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return InternalError(context + ": cuBLAS error " + cublasGetStatusString(st));
}

#define HF_CUDA(call) HF_RETURN_IF_ERROR(CudaStatus(#call, (call)))

constexpr int kPatterns = 5;

__host__ __device__ uint64_t PatternValue(int pattern, uint64_t i) {
  switch (pattern) {
    case 0: return 0;
    case 1: return ~0ULL;
    case 2: return i;
    case 3: return ~i;
    default: return (i * 6364136223846793005ULL + 1442695040888963407ULL) ^ (i >> 7);
  }
}

__global__ void FillKernel(uint64_t* p, uint64_t n, int pattern) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    p[i] = PatternValue(pattern, i);
  }
}

__global__ void VerifyKernel(const uint64_t* p, uint64_t n, int pattern, unsigned long long* errors) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if (p[i] != PatternValue(pattern, i)) atomicAdd(errors, 1ULL);
  }
}

__global__ void FillBf16(__nv_bfloat16* p, uint64_t n) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16(static_cast<float>(i % 17) * 0.01f);
  }
}

// Frees what the probes allocate, whichever way they return.
struct DeviceBuffers {
  std::vector<void*> buffers;
  cublasHandle_t cublas = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ~DeviceBuffers() {
    for (void* b : buffers) cudaFree(b);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
  template <typename T>
  Status Alloc(T** p, uint64_t bytes) {
    void* raw = nullptr;
    HF_CUDA(cudaMalloc(&raw, bytes));
    buffers.push_back(raw);
    *p = static_cast<T*>(raw);
    return Status::Ok();
  }
};

// Mismatched words over all patterns, or an error.
Result<unsigned long long> Memtest(int device, uint64_t bytes) {
  HF_CUDA(cudaSetDevice(device));
  const uint64_t n = bytes / 8;
  DeviceBuffers mem;
  uint64_t* buf = nullptr;
  unsigned long long* errors = nullptr;
  HF_RETURN_IF_ERROR(mem.Alloc(&buf, n * 8));
  HF_RETURN_IF_ERROR(mem.Alloc(&errors, sizeof(*errors)));
  unsigned long long total = 0;
  for (int p = 0; p < kPatterns; ++p) {
    HF_CUDA(cudaMemset(errors, 0, sizeof(*errors)));
    FillKernel<<<1024, 256>>>(buf, n, p);
    VerifyKernel<<<1024, 256>>>(buf, n, p, errors);
    unsigned long long found = 0;
    HF_CUDA(cudaMemcpy(&found, errors, sizeof(found), cudaMemcpyDeviceToHost));
    total += found;
  }
  return total;
}

Result<double> GemmTflops(int device, int n) {
  HF_CUDA(cudaSetDevice(device));
  const uint64_t elems = static_cast<uint64_t>(n) * n;
  DeviceBuffers mem;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  HF_RETURN_IF_ERROR(mem.Alloc(&a, elems * 2));
  HF_RETURN_IF_ERROR(mem.Alloc(&b, elems * 2));
  HF_RETURN_IF_ERROR(mem.Alloc(&c, elems * 2));
  HF_RETURN_IF_ERROR(CublasError("cublasCreate", cublasCreate(&mem.cublas)));
  HF_CUDA(cudaEventCreate(&mem.start));
  HF_CUDA(cudaEventCreate(&mem.stop));
  const float alpha = 1.0f, beta = 0.0f;
  const int warmup = 3, iters = 20;
  FillBf16<<<1024, 256>>>(a, elems);
  FillBf16<<<1024, 256>>>(b, elems);
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup) HF_CUDA(cudaEventRecord(mem.start));
    HF_RETURN_IF_ERROR(CublasError("cublasGemmEx",
                                   cublasGemmEx(mem.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF,
                                                n, b, CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT)));
  }
  HF_CUDA(cudaEventRecord(mem.stop));
  HF_CUDA(cudaEventSynchronize(mem.stop));
  float ms = 0;
  HF_CUDA(cudaEventElapsedTime(&ms, mem.start, mem.stop));
  const double flops = 2.0 * n * static_cast<double>(n) * n * iters;
  return flops / (ms * 1e-3) / 1e12;
}

Result<int> DeviceCount() {
  int n = 0;
  HF_CUDA(cudaGetDeviceCount(&n));
  return n;
}

std::string Gpu(int i) { return "gpu " + std::to_string(i); }

}  // namespace

bool GpuProbesCompiled() { return true; }

std::vector<CheckResult> RunGpuMemtest(const HealthConfig& config) {
  if (config.memtest_mb <= 0) return {Skipped("gpu.memtest", "", "turned off (health.memtest_mb = 0)")};
  auto count = DeviceCount();
  if (!count.ok()) return {Skipped("gpu.memtest", "", "no usable CUDA device: " + count.status().message())};
  std::vector<CheckResult> out;
  const std::string source = std::to_string(config.memtest_mb) + " MB x " + std::to_string(kPatterns) + " patterns";
  for (int d = 0; d < *count; ++d) {
    auto errors = Memtest(d, static_cast<uint64_t>(config.memtest_mb) << 20);
    if (!errors.ok()) {
      const bool busy = errors.status().code() == StatusCode::kResourceExhausted;
      out.push_back(Fail("gpu.memtest", Gpu(d),
                         (busy ? "cannot allocate test memory: another process holds the GPU's memory: "
                               : "memory test could not run: ") + errors.status().message(),
                         {"error", "0 mismatches", source}, Action::kExcludeNode));
    } else if (*errors > 0) {
      out.push_back(Fail("gpu.memtest", Gpu(d), "device memory returned wrong data: the GPU is faulty",
                         {std::to_string(*errors) + " mismatched words", "0 mismatches", source}, Action::kDrainNode));
    } else {
      out.push_back(Pass("gpu.memtest", Gpu(d), "no mismatches", {"0 mismatches", "0 mismatches", source}));
    }
  }
  return out;
}

std::vector<CheckResult> RunGpuGemm(const HealthConfig& config) {
  auto count = DeviceCount();
  if (!count.ok()) return {Skipped("gpu.gemm", "", "no usable CUDA device: " + count.status().message())};
  std::vector<CheckResult> out;
  const std::string source = "cublasGemmEx BF16, FP32 accumulate, n=" + std::to_string(config.gemm_size);
  const std::string threshold = config.gemm_tflops_min > 0 ? ">= " + FormatNumber(config.gemm_tflops_min) + " TFLOPS"
                                                           : "none (set health.gemm_tflops_min)";
  for (int d = 0; d < *count; ++d) {
    auto tflops = GemmTflops(d, static_cast<int>(config.gemm_size));
    if (!tflops.ok()) {
      out.push_back(Fail("gpu.gemm", Gpu(d), "GEMM could not run: " + tflops.status().message(),
                         {"error", threshold, source}, Action::kExcludeNode));
      continue;
    }
    Evidence ev{FormatNumber(*tflops) + " TFLOPS", threshold, source};
    if (config.gemm_tflops_min > 0 && *tflops < config.gemm_tflops_min) {
      out.push_back(Fail("gpu.gemm", Gpu(d),
                         "GEMM at " + FormatNumber(*tflops) + " TFLOPS: throttled or degraded GPU (clocks, power, " +
                             "temperature); it would slow every rank",
                         ev, Action::kExcludeNode));
    } else {
      out.push_back(Pass("gpu.gemm", Gpu(d), FormatNumber(*tflops) + " TFLOPS", ev));
    }
  }
  return out;
}

}  // namespace holdfast::health
