#include "trainer/progress_sink.h"

#include <cstdlib>

#include "common/launch_contract.h"

namespace holdfast {

ProgressSink& NoProgress() {
  static NoProgressSink none;
  return none;
}

Result<std::unique_ptr<ProgressSink>> OpenProgressSink(const std::string& path, int rank) {
  if (path.empty()) return std::unique_ptr<ProgressSink>(std::make_unique<NoProgressSink>());
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ProgressWriter> writer, ProgressWriter::Open(path, rank));
  return std::unique_ptr<ProgressSink>(std::make_unique<ProgressRecordSink>(std::move(writer)));
}

Result<std::unique_ptr<ProgressSink>> OpenProgressSinkFromEnv(int rank) {
  const char* path = std::getenv(kEnvProgressPath);
  return OpenProgressSink(path == nullptr ? "" : path, rank);
}

}  // namespace holdfast
