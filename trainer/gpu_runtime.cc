// The host side of the trainer's CUDA code: device queries, the AdamW launch
// and the checkpoint copy engine. cudaError_t becomes a Status in common/cuda_status.h.
#include "trainer/gpu.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include "common/cuda_status.h"

#include <cmath>

#include "trainer/gpu_kernels.h"

namespace holdfast::gpu {
namespace {


std::string Version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// One copy stream and two events on the rank's device (see CopyEngine).
class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(int ordinal) : ordinal_(ordinal) {}
  ~CudaCopyEngine() override {
    if (copies_done_ != nullptr) cudaEventDestroy(copies_done_);
    if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    HF_RETURN_IF_ERROR(CudaStatus("cudaSetDevice(" + std::to_string(ordinal_) + ")", cudaSetDevice(ordinal_)));
    HF_RETURN_IF_ERROR(CudaStatus("cudaStreamCreate (checkpoint copy stream)",
                            cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)));
    HF_RETURN_IF_ERROR(CudaStatus("cudaEventCreate", cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming)));
    return CudaStatus("cudaEventCreate", cudaEventCreateWithFlags(&copies_done_, cudaEventDisableTiming));
  }

  Status CopyToHostAsync(void* dst, const void* src, size_t bytes) override {
    if (!batch_open_) {
      // The copies read what the compute work queued so far wrote.
      HF_RETURN_IF_ERROR(CudaStatus("cudaEventRecord", cudaEventRecord(compute_done_, cudaStreamLegacy)));
      HF_RETURN_IF_ERROR(CudaStatus("cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, compute_done_, 0)));
      batch_open_ = true;
    }
    return CudaStatus("cudaMemcpyAsync (device to host, " + std::to_string(bytes) + " bytes)",
                cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  Status RecordCopiesDone() override {
    batch_open_ = false;
    return CudaStatus("cudaEventRecord", cudaEventRecord(copies_done_, stream_));
  }
  Status WaitCopiesDone() override { return CudaStatus("cudaEventSynchronize", cudaEventSynchronize(copies_done_)); }
  Status FenceCompute() override {
    return CudaStatus("cudaStreamWaitEvent", cudaStreamWaitEvent(cudaStreamLegacy, copies_done_, 0));
  }
  Result<void*> AllocHost(size_t bytes) override {
    void* p = nullptr;
    HF_RETURN_IF_ERROR(CudaStatus("cudaHostAlloc(" + std::to_string(bytes) + ")", cudaHostAlloc(&p, bytes, cudaHostAllocDefault)));
    return p;
  }
  void FreeHost(void* p) override { cudaFreeHost(p); }

 private:
  int ordinal_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
  cudaEvent_t copies_done_ = nullptr;
  bool batch_open_ = false;
};

}  // namespace

bool Built() { return true; }

Status SetDevice(int ordinal) { return CudaStatus("cudaSetDevice(" + std::to_string(ordinal) + ")", cudaSetDevice(ordinal)); }

std::string DeviceInfo::Describe() const {
  return name + " (sm_" + std::to_string(sm) + ", " + std::to_string(memory_bytes >> 30) + " GiB), driver " + driver +
         ", CUDA runtime " + runtime + ", cuBLAS " + cublas;
}

Result<DeviceInfo> QueryDevice(int ordinal) {
  cudaDeviceProp prop{};
  HF_RETURN_IF_ERROR(CudaStatus("cudaGetDeviceProperties(" + std::to_string(ordinal) + ")",
                          cudaGetDeviceProperties(&prop, ordinal)));
  DeviceInfo info;
  info.name = prop.name;
  info.sm = prop.major * 10 + prop.minor;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  int driver = 0, runtime = 0;
  HF_RETURN_IF_ERROR(CudaStatus("cudaDriverGetVersion", cudaDriverGetVersion(&driver)));
  HF_RETURN_IF_ERROR(CudaStatus("cudaRuntimeGetVersion", cudaRuntimeGetVersion(&runtime)));
  info.driver = Version(driver);
  info.runtime = Version(runtime);
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    info.cublas = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  } else {
    info.cublas = "unknown";
  }
  return info;
}

Status ApplyAdamWOnDevice(const AdamWStep& s, const std::vector<std::pair<int64_t, int64_t>>& decay_runs, int64_t n,
                          const float* grad, float* param, float* exp_avg, float* exp_avg_sq,
                          const double* d_norm, double max_norm) {
  // The same scalars as ApplyAdamW, computed the same way on the host.
  const double t = static_cast<double>(s.step);
  const float step_size = static_cast<float>(s.lr / (1 - std::pow(s.beta1, t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.beta2, t)));
  const float decay = static_cast<float>(1 - s.lr * s.weight_decay);
  const auto b1 = static_cast<float>(s.beta1), b2 = static_cast<float>(s.beta2), eps = static_cast<float>(s.eps);
  auto run = [&](int64_t from, int64_t to, float d) -> Status {
    if (to <= from) return Status::Ok();
    const int err = detail::LaunchAdamW(grad + from, param + from, exp_avg + from, exp_avg_sq + from, to - from, d, b1,
                                        b2, step_size, bc2_sqrt, eps, d_norm, max_norm);
    return CudaStatus("AdamW kernel launch", static_cast<cudaError_t>(err));
  };
  int64_t at = 0;
  for (const auto& [offset, count] : decay_runs) {
    HF_RETURN_IF_ERROR(run(at, offset, 1.0f));
    HF_RETURN_IF_ERROR(run(offset, offset + count, decay));
    at = offset + count;
  }
  return run(at, n, 1.0f);
}

Result<std::unique_ptr<CopyEngine>> MakeCopyEngine(int ordinal) {
  auto engine = std::make_unique<CudaCopyEngine>(ordinal);
  HF_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<CopyEngine>(std::move(engine));
}

}  // namespace holdfast::gpu
