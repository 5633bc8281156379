// NCCL all-reduce bus bandwidth across the node's GPUs, one process, one
// communicator per GPU (ncclCommInitAll). busbw follows nccl-tests
// (doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw * 2(n-1)/n.
// ncclResult_t becomes a Status in one function, NcclStatus (common/nccl_status.h; cudaError_t:
// common/cuda_status.h).
#include "health/gpu_probes.h"

#if HOLDFAST_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>
#include "common/cuda_status.h"
#include "common/nccl_status.h"

namespace holdfast::health {
namespace {

struct Measurement {
  double busbw_gbps = 0;
  double algbw_gbps = 0;
  bool correct = false;
};

Result<Measurement> Measure(int ndev, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  std::vector<ncclComm_t> comms(ndev, nullptr);
  std::vector<float*> send(ndev, nullptr), recv(ndev, nullptr);
  std::vector<cudaStream_t> streams(ndev, nullptr);
  Status st = NcclStatus("ncclCommInitAll", ncclCommInitAll(comms.data(), ndev, nullptr));
  // A known value in the first elements lets us check the sum, not just time it.
  const size_t checked = std::min<size_t>(count, 1 << 16);
  std::vector<float> ones(checked, 1.0f), got(checked, 0.0f);
  for (int d = 0; d < ndev && st.ok(); ++d) {
    st = CudaStatus("cudaSetDevice", cudaSetDevice(d));
    if (st.ok()) st = CudaStatus("cudaMalloc", cudaMalloc(&send[d], count * sizeof(float)));
    if (st.ok()) st = CudaStatus("cudaMalloc", cudaMalloc(&recv[d], count * sizeof(float)));
    if (st.ok()) st = CudaStatus("cudaMemset", cudaMemset(send[d], 0, count * sizeof(float)));
    if (st.ok()) st = CudaStatus("cudaMemcpy", cudaMemcpy(send[d], ones.data(), checked * sizeof(float),
                                                        cudaMemcpyHostToDevice));
    if (st.ok()) st = CudaStatus("cudaStreamCreate", cudaStreamCreate(&streams[d]));
  }
  auto run = [&](int iters) -> Status {
    for (int i = 0; i < iters; ++i) {
      HF_RETURN_IF_ERROR(NcclStatus("ncclGroupStart", ncclGroupStart()));
      for (int d = 0; d < ndev; ++d) {
        HF_RETURN_IF_ERROR(NcclStatus("ncclAllReduce", ncclAllReduce(send[d], recv[d], count, ncclFloat, ncclSum,
                                                                    comms[d], streams[d])));
      }
      HF_RETURN_IF_ERROR(NcclStatus("ncclGroupEnd", ncclGroupEnd()));
    }
    for (int d = 0; d < ndev; ++d) {
      HF_RETURN_IF_ERROR(CudaStatus("cudaSetDevice", cudaSetDevice(d)));
      HF_RETURN_IF_ERROR(CudaStatus("all-reduce", cudaStreamSynchronize(streams[d])));
    }
    return Status::Ok();
  };
  Measurement m;
  const int iters = 20;
  if (st.ok()) st = run(5);
  const auto t0 = std::chrono::steady_clock::now();
  if (st.ok()) st = run(iters);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  if (st.ok()) {
    st = CudaStatus("cudaMemcpy", cudaMemcpy(got.data(), recv[0], checked * sizeof(float), cudaMemcpyDeviceToHost));
    m.correct = true;
    for (float v : got) m.correct = m.correct && v == static_cast<float>(ndev);
  }
  for (int d = 0; d < ndev; ++d) {
    cudaSetDevice(d);
    if (streams[d] != nullptr) cudaStreamDestroy(streams[d]);
    cudaFree(send[d]);
    cudaFree(recv[d]);
    if (comms[d] != nullptr) ncclCommDestroy(comms[d]);
  }
  if (!st.ok()) return st;
  m.algbw_gbps = static_cast<double>(count * sizeof(float)) / seconds / 1e9;
  m.busbw_gbps = m.algbw_gbps * 2.0 * (ndev - 1) / ndev;
  return m;
}

}  // namespace

bool NcclProbeCompiled() { return true; }

std::vector<CheckResult> RunNcclAllreduce(const HealthConfig& config) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) {
    return {Skipped("nccl.allreduce_busbw", "", "no usable CUDA device")};
  }
  if (ndev < 2) {
    return {Skipped("nccl.allreduce_busbw", "", "needs 2 or more GPUs on the node, found " + std::to_string(ndev))};
  }
  const std::string source = "ncclAllReduce float sum, " + FormatNumber(config.nccl_bytes / 1048576.0) + " MB, " +
                             std::to_string(ndev) + " GPUs, busbw = algbw*2(n-1)/n";
  const std::string threshold = config.nccl_busbw_gbps_min > 0
                                    ? ">= " + FormatNumber(config.nccl_busbw_gbps_min) + " GB/s"
                                    : "none (set health.nccl_busbw_gbps_min)";
  auto m = Measure(ndev, static_cast<size_t>(config.nccl_bytes));
  if (!m.ok()) {
    return {Fail("nccl.allreduce_busbw", "", "all-reduce across local GPUs failed: " + m.status().message(),
                 {"error", threshold, source}, Action::kExcludeNode)};
  }
  Evidence ev{FormatNumber(m->busbw_gbps) + " GB/s busbw (algbw " + FormatNumber(m->algbw_gbps) + ")", threshold,
              source};
  if (!m->correct) {
    return {Fail("nccl.allreduce_busbw", "", "all-reduce returned a wrong sum: NVLink/PCIe data corruption", ev,
                 Action::kDrainNode)};
  }
  if (config.nccl_busbw_gbps_min > 0 && m->busbw_gbps < config.nccl_busbw_gbps_min) {
    return {Fail("nccl.allreduce_busbw", "",
                 "all-reduce bus bandwidth " + FormatNumber(m->busbw_gbps) +
                     " GB/s: degraded NVLink/NVSwitch or PCIe path between GPUs",
                 ev, Action::kExcludeNode)};
  }
  return {Pass("nccl.allreduce_busbw", "", FormatNumber(m->busbw_gbps) + " GB/s busbw", ev)};
}

}  // namespace holdfast::health

#else  // !HOLDFAST_HAVE_NCCL

namespace holdfast::health {
bool NcclProbeCompiled() { return false; }
std::vector<CheckResult> RunNcclAllreduce(const HealthConfig&) {
  return {Skipped("nccl.allreduce_busbw", "", "holdfast-health was built without NCCL (HOLDFAST_HAVE_NCCL=OFF)")};
}
}  // namespace holdfast::health

#endif
