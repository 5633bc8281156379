#include "trainer/device_stager.h"

#include <utility>

namespace holdfast {
namespace {
constexpr size_t kAlign = 256;  // each piece starts on its own cache lines (and DMA-friendly)
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

DeviceStager::DeviceStager(std::unique_ptr<CopyEngine> engine) : engine_(std::move(engine)) {}

DeviceStager::~DeviceStager() {
  if (host_ != nullptr) {
    (void)engine_->WaitCopiesDone();  // never free memory a copy may still write
    engine_->FreeHost(host_);
  }
}

Result<std::vector<StateView>> DeviceStager::Stage(const std::vector<Piece>& pieces) {
  size_t need = 0;
  for (const Piece& p : pieces) need += AlignUp(p.bytes);
  if (need > capacity_) {
    if (host_ != nullptr) {
      HF_RETURN_IF_ERROR(engine_->WaitCopiesDone());
      engine_->FreeHost(host_);
      host_ = nullptr;
      capacity_ = 0;
    }
    Result<void*> mem = engine_->AllocHost(need);
    if (!mem.ok()) {
      return mem.status().WithContext("allocating " + std::to_string(need >> 20) +
                                      " MiB of pinned host memory to stage a checkpoint");
    }
    host_ = *mem;
    capacity_ = need;
    ++allocations_;
  }
  std::vector<StateView> views;
  views.reserve(pieces.size());
  size_t offset = 0;
  auto* base = static_cast<uint8_t*>(host_);
  CopyEngine* engine = engine_.get();
  fence_pending_ = true;  // from the first queued copy on, the update must wait
  for (const Piece& p : pieces) {
    if (p.bytes > 0) {
      Status queued = engine->CopyToHostAsync(base + offset, p.device, p.bytes);
      if (!queued.ok()) {
        (void)engine->RecordCopiesDone();  // so the fence covers what was queued
        return queued.WithContext("queueing the device→host copy of '" + p.name + "'");
      }
    }
    StateView v{p.name, base + offset, p.bytes};
    v.ready = [engine] { return engine->WaitCopiesDone(); };
    views.push_back(std::move(v));
    offset += AlignUp(p.bytes);
  }
  HF_RETURN_IF_ERROR(engine->RecordCopiesDone());
  ++stages_;
  return views;
}

Status DeviceStager::FenceBeforeUpdate() {
  if (!fence_pending_) return Status::Ok();
  fence_pending_ = false;
  return engine_->FenceCompute();
}

}  // namespace holdfast
