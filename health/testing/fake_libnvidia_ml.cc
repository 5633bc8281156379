// A stand-in for libnvidia-ml.so.1, loaded by OpenNvml in tests through the
// same dlopen path as the real driver. Its GPUs are described by the
// environment variable HOLDFAST_FAKE_NVML, space-separated key=value pairs
// with an optional ".<gpu index>" suffix, e.g.
//   "gpus=2 ecc_unc.1=3 remap_pending.0=1 recovery.1=2"
// Keys: gpus, init_fails, ecc_unsupported, ecc_unc, ecc_unc_aggregate, ecc_corr,
// remap_unsupported, remap_corr, remap_unc, remap_pending, remap_failure,
// retired_sbe, retired_dbe, retired_pending, fields_unsupported, recovery.
// Signatures and constants follow the NVML API Reference (r580).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

unsigned long long Get(const char* key, int index, unsigned long long fallback) {
  const char* env = std::getenv("HOLDFAST_FAKE_NVML");
  if (env == nullptr) return fallback;
  const std::string text = std::string(" ") + env + " ";
  auto find = [&](const std::string& k, unsigned long long* out) {
    const size_t at = text.find(k);
    if (at == std::string::npos) return false;
    *out = std::strtoull(text.c_str() + at + k.size(), nullptr, 10);
    return true;
  };
  unsigned long long v = 0;
  if (index >= 0 && find(" " + std::string(key) + "." + std::to_string(index) + "=", &v)) return v;
  if (find(" " + std::string(key) + "=", &v)) return v;
  return fallback;
}

int Index(void* device) { return static_cast<int>(reinterpret_cast<uintptr_t>(device)) - 1; }

union Value {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  signed int siVal;
  unsigned short usVal;
};
struct FieldValue {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  int nvmlReturn;
  Value value;
};

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kInsufficientSize = 7;
constexpr int kDriverNotLoaded = 9;

}  // namespace

extern "C" {

int nvmlInit_v2() { return Get("init_fails", -1, 0) ? kDriverNotLoaded : kSuccess; }
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case kSuccess: return "Success";
    case kNotSupported: return "Not Supported";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = static_cast<unsigned>(Get("gpus", -1, 0));
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= Get("gpus", -1, 0)) return kInvalidArgument;
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(index + 1));
  return kSuccess;
}
int nvmlDeviceGetName(void*, char* name, unsigned len) {
  std::snprintf(name, len, "Fake GPU");
  return kSuccess;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned len) {
  std::snprintf(uuid, len, "GPU-fake-%d", Index(device));
  return kSuccess;
}
int nvmlDeviceGetTotalEccErrors(void* device, int error_type, int counter_type, unsigned long long* count) {
  const int i = Index(device);
  if (Get("ecc_unsupported", i, 0)) return kNotSupported;
  if (error_type == 1) *count = Get(counter_type == 0 ? "ecc_unc" : "ecc_unc_aggregate", i, 0);
  else *count = Get("ecc_corr", i, 0);
  return kSuccess;
}
int nvmlDeviceGetRemappedRows(void* device, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failure) {
  const int i = Index(device);
  if (Get("remap_unsupported", i, 0)) return kNotSupported;
  *corr = static_cast<unsigned>(Get("remap_corr", i, 0));
  *unc = static_cast<unsigned>(Get("remap_unc", i, 0));
  *pending = static_cast<unsigned>(Get("remap_pending", i, 0));
  *failure = static_cast<unsigned>(Get("remap_failure", i, 0));
  return kSuccess;
}
int nvmlDeviceGetRetiredPages(void* device, int cause, unsigned* count, unsigned long long* addresses) {
  const int i = Index(device);
  const unsigned n = static_cast<unsigned>(Get(cause == 1 ? "retired_dbe" : "retired_sbe", i, 0));
  const bool fits = *count >= n;
  for (unsigned k = 0; fits && addresses != nullptr && k < n; ++k) addresses[k] = 0x1000ULL * k;
  *count = n;
  return fits ? kSuccess : kInsufficientSize;
}
int nvmlDeviceGetRetiredPagesPendingStatus(void* device, int* pending) {
  *pending = static_cast<int>(Get("retired_pending", Index(device), 0));
  return kSuccess;
}
int nvmlDeviceGetFieldValues(void* device, int count, FieldValue* values) {
  const int i = Index(device);
  for (int k = 0; k < count; ++k) {
    if (values[k].fieldId != 230 || Get("fields_unsupported", i, 0)) {
      values[k].nvmlReturn = kNotSupported;
      continue;
    }
    values[k].nvmlReturn = kSuccess;
    values[k].valueType = 1;
    values[k].value.uiVal = static_cast<unsigned>(Get("recovery", i, 0));
  }
  return kSuccess;
}

}  // extern "C"
