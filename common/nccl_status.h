// The one place an ncclResult_t becomes a Status, as cuda_status.h is for
// cudaError_t: every NCCL call (the trainer's NCCL communicator, the health
// probe) is converted here, with one mapping of NCCL's results to our codes.
// Header-only so that common/ itself links no NCCL library; include it only
// where <nccl.h> is available (compiled with HOLDFAST_HAVE_NCCL).
#pragma once

#include <nccl.h>

#include <string>

#include "common/status.h"

namespace holdfast {

// "context: NCCL error: text (NCCL's last error text)"; a peer or the network
// gone -> Unavailable (the run, restarted, may get past it), a misuse ->
// InvalidArgument, anything else -> Internal. `comm` may be null (NCCL then
// gives the last error of the process).
inline Status NcclStatus(const std::string& context, ncclResult_t res, ncclComm_t comm = nullptr) {
  if (res == ncclSuccess) return Status::Ok();
  std::string msg = context + ": NCCL error: " + ncclGetErrorString(res);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') msg += std::string(" (") + last + ")";
  switch (res) {
    case ncclRemoteError:
      return UnavailableError(msg + "; a peer rank failed or went away");
    case ncclSystemError:
      return UnavailableError(msg + "; a network or system call failed");
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgumentError(msg);
    case ncclUnhandledCudaError:
    case ncclInternalError:
    default:
      return InternalError(msg);
  }
}

}  // namespace holdfast
