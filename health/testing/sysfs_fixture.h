// SysfsFixture: a writable copy of a fixture sysfs tree from
// health/testdata/sysfs/<name> (the kernel's layout under
// class/infiniband/<hca>/ports/<n>/), in a fresh temporary directory, with
// helpers to change it the way hardware would: a port going down, a counter
// rising. Removed by the destructor. For tests (health's and the daemon's).
// Not thread-safe.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace holdfast::health::testing {

class SysfsFixture {
 public:
  // `testdata_dir` is health/testdata; `tree` is "healthy" or "port_down".
  SysfsFixture(const std::string& testdata_dir, const std::string& tree) {
    char tmpl[] = "/tmp/holdfast-sysfs-XXXXXX";
    root_ = mkdtemp(tmpl);
    std::filesystem::copy(testdata_dir + "/sysfs/" + tree, root_, std::filesystem::copy_options::recursive);
  }
  ~SysfsFixture() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  SysfsFixture(const SysfsFixture&) = delete;
  SysfsFixture& operator=(const SysfsFixture&) = delete;

  const std::string& root() const { return root_; }
  std::string PortDir(const std::string& hca, int port) const {
    return root_ + "/class/infiniband/" + hca + "/ports/" + std::to_string(port);
  }
  // state "1: DOWN", phys_state "3: Disabled" (or "2: Polling" while retraining).
  void SetPortState(const std::string& hca, int port, const std::string& state, const std::string& phys_state) {
    Write(PortDir(hca, port) + "/state", state);
    Write(PortDir(hca, port) + "/phys_state", phys_state);
  }
  void SetRate(const std::string& hca, int port, const std::string& rate) { Write(PortDir(hca, port) + "/rate", rate); }
  uint64_t Counter(const std::string& hca, int port, const std::string& name) const {
    std::ifstream in(PortDir(hca, port) + "/counters/" + name);
    uint64_t v = 0;
    in >> v;
    return v;
  }
  void AddToCounter(const std::string& hca, int port, const std::string& name, uint64_t n) {
    const uint64_t v = Counter(hca, port, name) + n;
    Write(PortDir(hca, port) + "/counters/" + name, std::to_string(v));
  }
  void RemoveHca(const std::string& hca) { std::filesystem::remove_all(root_ + "/class/infiniband/" + hca); }

 private:
  static void Write(const std::string& path, const std::string& value) {
    std::ofstream out(path, std::ios::trunc);
    out << value << "\n";
  }
  std::string root_;
};

}  // namespace holdfast::health::testing
