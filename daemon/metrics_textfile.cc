// WriteMetricsTextfile: shared by the prometheus-cpp build and the stub.
#include "common/atomic_file.h"
#include "daemon/metrics.h"

namespace holdfast {

Status WriteMetricsTextfile(const std::string& path, const std::string& text) {
  // node_exporter reads only *.prom, so it never sees the temporary name.
  return WriteFileAtomically(path, text).WithContext("metrics textfile");
}

}  // namespace holdfast
