// The one place a cudaError_t becomes a Status, for every translation unit
// that calls the CUDA runtime (trainer GPU code, NCCL communicator, health
// probes). Header-only so that common/ itself links no CUDA library; include it
// only where <cuda_runtime_api.h> is available.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace holdfast {

// "context: CUDA error cudaErrorX: text"; no device / driver / invalid device
// -> FailedPrecondition (the node, not the run, is wrong), out of memory ->
// ResourceExhausted, anything else -> Internal.
inline Status CudaStatus(const std::string& context, cudaError_t err) {
  if (err == cudaSuccess) return Status::Ok();
  const std::string msg = context + ": CUDA error " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return FailedPreconditionError(msg);
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(msg);
    default:
      return InternalError(msg);
  }
}

}  // namespace holdfast
