#include "trainer/train_state.h"

namespace holdfast {

const StateBuffer* TrainState::Find(const std::string& name) const {
  for (const StateBuffer& b : buffers) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

uint64_t TrainState::TotalBytes() const {
  uint64_t total = 0;
  for (const StateBuffer& b : buffers) total += b.bytes.size();
  return total;
}

std::vector<StateView> TrainState::Views() const {
  std::vector<StateView> views;
  for (const StateBuffer& b : buffers) views.push_back({b.name, b.bytes.data(), b.bytes.size()});
  return views;
}

const StateView* FindView(const std::vector<StateView>& views, const std::string& name) {
  for (const StateView& v : views) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

}  // namespace holdfast
