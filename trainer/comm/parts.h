// Internal to holdfast::comm: argument checks and layout shared by the
// communicators' reduce-scatter and allgather (communicator.h: `counts` splits
// a buffer into one contiguous part per rank, in rank order), and a Work that
// is complete from the start. Not included outside trainer/comm/.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "trainer/comm/communicator.h"

namespace holdfast {

// Where each rank's part lies in the buffer, in elements.
struct Parts {
  std::vector<size_t> offsets;  // offsets[r] = counts[0] + ... + counts[r-1]
  size_t total = 0;             // sum of counts
  size_t largest = 0;           // max of counts
};

// Checks `counts` against the world size (and `data` against a non-empty
// buffer) and lays the parts out. `what` names the call for the message
// ("gloo reduce-scatter (rank 1 of 4)").
inline Result<Parts> LayOutParts(const std::string& what, const void* data, const std::vector<size_t>& counts,
                                 int world_size) {
  if (counts.size() != static_cast<size_t>(world_size)) {
    return InvalidArgumentError(what + ": counts has " + std::to_string(counts.size()) +
                                " entries; it needs one per rank (world size " + std::to_string(world_size) + ")");
  }
  Parts parts;
  parts.offsets.reserve(counts.size());
  for (size_t c : counts) {
    parts.offsets.push_back(parts.total);
    // Callers turn counts into byte counts (of elements up to 8 bytes): keep those in range.
    if (c > std::numeric_limits<size_t>::max() / sizeof(double) - parts.total) {
      return InvalidArgumentError(what + ": counts sum past the addressable size");
    }
    parts.total += c;
    if (c > parts.largest) parts.largest = c;
  }
  if (data == nullptr && parts.total > 0) {
    return InvalidArgumentError(what + ": data is null but counts sum to " + std::to_string(parts.total));
  }
  return parts;
}

// SendRecvAsync's arguments (communicator.h), checked for rank `rank` of
// `world`: kInvalidArgument naming what is wrong.
inline Status CheckSendRecv(const std::string& what, int rank, int world, const void* send, size_t send_bytes,
                            int send_to, const void* recv, size_t recv_bytes, int recv_from) {
  auto peer = [&](int p, const char* role) -> Status {
    if (p == -1) return Status::Ok();
    if (p < 0 || p >= world || p == rank) {
      return InvalidArgumentError(what + ": " + role + " rank " + std::to_string(p) + " is not another rank of " +
                                  "world " + std::to_string(world) + " (this is rank " + std::to_string(rank) + ")");
    }
    return Status::Ok();
  };
  if (Status s = peer(send_to, "send-to"); !s.ok()) return s;
  if (Status s = peer(recv_from, "receive-from"); !s.ok()) return s;
  if ((send_to >= 0 && send == nullptr && send_bytes > 0) || (recv_from >= 0 && recv == nullptr && recv_bytes > 0)) {
    return InvalidArgumentError(what + ": a null buffer of nonzero size");
  }
  return Status::Ok();
}

// A Work that finished before it was returned: a collective that needed no
// communication, or one refused before it was queued.
class DoneWork final : public Work {
 public:
  explicit DoneWork(Status status = Status::Ok()) : status_(std::move(status)) {}
  Status Wait() override { return status_; }

 private:
  Status status_;
};

}  // namespace holdfast
