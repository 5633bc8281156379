#include "scheduler/scheduler.h"

namespace holdfast {

std::vector<std::string> Allocation::hosts() const {
  std::vector<std::string> out;
  out.reserve(nodes.size());
  for (const NodeInfo& n : nodes) out.push_back(n.host);
  return out;
}

}  // namespace holdfast
