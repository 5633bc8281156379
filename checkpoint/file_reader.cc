#include "checkpoint/file_reader.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace holdfast {
namespace {

// The state the reader threads and the consumer share.
class Pipeline {
 public:
  Pipeline(uint64_t chunks, uint64_t lead) : chunks_(chunks), lead_(lead), done_(chunks, false) {}

  // A reader's next chunk, once it is within `lead` of the consumer; false
  // when none is left or the pipeline stopped.
  bool Claim(uint64_t* chunk) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return stopped_ || next_ >= chunks_ || next_ < consumed_ + lead_; });
    if (stopped_ || next_ >= chunks_) return false;
    *chunk = next_++;
    return true;
  }
  void Finish(uint64_t chunk, const Status& s) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (s.ok()) {
        done_[chunk] = true;
      } else {
        // The error of the first failing chunk is the one reported, whichever
        // reader finishes first.
        if (error_.ok() || chunk < error_chunk_) {
          error_ = s;
          error_chunk_ = chunk;
        }
        stopped_ = true;
      }
    }
    cv_.notify_all();
  }
  // Waits until `chunk` is read; false (and the error in *error) when it or
  // an earlier chunk failed. (Chunks are claimed in order, so every chunk
  // before a failed one was claimed and finishes.)
  bool Await(uint64_t chunk, Status* error) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_[chunk] || (!error_.ok() && error_chunk_ <= chunk); });
    if (!done_[chunk]) {
      *error = error_;
      return false;
    }
    return true;
  }
  void Consumed(uint64_t chunk) {
    {
      std::lock_guard<std::mutex> l(mu_);
      consumed_ = chunk + 1;
    }
    cv_.notify_all();
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

 private:
  const uint64_t chunks_;
  const uint64_t lead_;
  std::mutex mu_;
  std::condition_variable cv_;  // any change below
  uint64_t next_ = 0;           // next chunk to claim; guarded by mu_
  uint64_t consumed_ = 0;       // chunks handed to consume; guarded by mu_
  std::vector<bool> done_;      // guarded by mu_
  Status error_;                // the first failing chunk's error; guarded by mu_
  uint64_t error_chunk_ = 0;    // that chunk; guarded by mu_
  bool stopped_ = false;        // guarded by mu_
};

}  // namespace

Status ReadOverlapped(Storage* storage, const std::string& path, uint64_t offset, uint64_t n, uint8_t* dst,
                      const OverlappedReadOptions& options,
                      const std::function<void(const uint8_t*, size_t)>& consume) {
  const uint64_t chunk = std::max<uint64_t>(options.chunk_bytes, 1);
  const uint64_t chunks = (n + chunk - 1) / chunk;
  auto length = [&](uint64_t i) { return static_cast<size_t>(std::min(chunk, n - i * chunk)); };
  if (options.threads <= 0 || chunks <= 1) {
    HF_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, storage->OpenReadable(path));
    std::unique_ptr<uint8_t[]> scratch;
    if (dst == nullptr && n > 0) scratch.reset(new uint8_t[std::min(chunk, n)]);
    for (uint64_t i = 0; i < chunks; ++i) {
      uint8_t* p = dst != nullptr ? dst + i * chunk : scratch.get();
      HF_RETURN_IF_ERROR(file->ReadAt(offset + i * chunk, length(i), p));
      if (consume) consume(p, length(i));
    }
    return Status::Ok();
  }

  const int threads = static_cast<int>(std::min<uint64_t>(options.threads, chunks));
  const uint64_t lead = std::max<uint64_t>(std::max(options.lead, threads + 1), 2);
  // Without dst the chunks pass through a ring of `lead` buffers: a reader
  // claims chunk i only once chunk i - lead has been consumed, so it never
  // overwrites a slot the consumer still reads.
  std::unique_ptr<uint8_t[]> ring;
  if (dst == nullptr) ring.reset(new uint8_t[std::min(lead, chunks) * chunk]);
  auto place = [&](uint64_t i) { return dst != nullptr ? dst + i * chunk : ring.get() + (i % lead) * chunk; };

  Pipeline pipeline(chunks, lead);
  std::vector<std::thread> readers;
  readers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    readers.emplace_back([&] {
      Result<std::unique_ptr<ReadableFile>> file = storage->OpenReadable(path);
      uint64_t i = 0;
      while (pipeline.Claim(&i)) {
        pipeline.Finish(i, file.ok() ? (*file)->ReadAt(offset + i * chunk, length(i), place(i)) : file.status());
      }
    });
  }
  Status s;
  for (uint64_t i = 0; i < chunks; ++i) {
    if (!pipeline.Await(i, &s)) break;
    if (consume) consume(place(i), length(i));
    pipeline.Consumed(i);
  }
  pipeline.Stop();
  for (std::thread& t : readers) t.join();
  return s;
}

}  // namespace holdfast
