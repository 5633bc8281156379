#include "health/nvml.h"

#include <dlfcn.h>

#include <cstring>

namespace holdfast::health {
namespace {

// Declared here from the NVML API Reference (r580); the toolkit ships no nvml.h.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;
constexpr int NVML_AGGREGATE_ECC = 1;
constexpr int NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0;
constexpr int NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1;
constexpr unsigned NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230;
constexpr unsigned kNameLen = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidLen = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

union nvmlValue_t {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  signed int siVal;
  unsigned short usVal;
};
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
constexpr int NVML_VALUE_TYPE_UNSIGNED_INT = 1;

struct Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*get_count)(unsigned*);
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_ecc)(nvmlDevice_t, int, int, unsigned long long*);
  nvmlReturn_t (*get_retired)(nvmlDevice_t, int, unsigned*, unsigned long long*);
  nvmlReturn_t (*get_retired_pending)(nvmlDevice_t, int*);
  nvmlReturn_t (*get_remapped)(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*);
  nvmlReturn_t (*get_fields)(nvmlDevice_t, int, nvmlFieldValue_t*);
};

class DlopenNvml : public Nvml {
 public:
  DlopenNvml(void* handle, Api api) : handle_(handle), api_(api) {}
  ~DlopenNvml() override {
    api_.shutdown();
    dlclose(handle_);
  }

  // The one place an nvmlReturn_t becomes a Status.
  Status NvmlError(const std::string& what, nvmlReturn_t rc) const {
    if (rc == NVML_SUCCESS) return Status::Ok();
    std::string msg = what + ": NVML error " + std::to_string(rc) + " (" + api_.error_string(rc) + ")";
    if (rc == NVML_ERROR_NOT_SUPPORTED) return FailedPreconditionError(msg + ": not supported on this GPU/driver");
    if (rc == NVML_ERROR_GPU_IS_LOST) return UnavailableError(msg + ": the GPU has fallen off the bus");
    return InternalError(msg);
  }

  Result<int> DeviceCount() override {
    unsigned n = 0;
    HF_RETURN_IF_ERROR(NvmlError("nvmlDeviceGetCount_v2", api_.get_count(&n)));
    return static_cast<int>(n);
  }

  Result<nvmlDevice_t> Handle(int index) {
    nvmlDevice_t dev = nullptr;
    HF_RETURN_IF_ERROR(NvmlError("nvmlDeviceGetHandleByIndex_v2(" + std::to_string(index) + ")",
                                 api_.get_handle(static_cast<unsigned>(index), &dev)));
    return dev;
  }

  Result<std::string> DeviceName(int index) override {
    HF_ASSIGN_OR_RETURN(nvmlDevice_t dev, Handle(index));
    char name[kNameLen] = {0};
    char uuid[kUuidLen] = {0};
    HF_RETURN_IF_ERROR(NvmlError("nvmlDeviceGetName", api_.get_name(dev, name, kNameLen)));
    if (api_.get_uuid(dev, uuid, kUuidLen) == NVML_SUCCESS) return std::string(name) + " (" + uuid + ")";
    return std::string(name);
  }

  Result<GpuMemoryErrors> MemoryErrors(int index) override {
    HF_ASSIGN_OR_RETURN(nvmlDevice_t dev, Handle(index));
    GpuMemoryErrors e;
    unsigned long long v = 0;
    nvmlReturn_t rc = api_.get_ecc(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &v);
    if (rc == NVML_SUCCESS) {
      e.ecc_supported = true;
      e.volatile_uncorrected = v;
      HF_RETURN_IF_ERROR(NvmlError("nvmlDeviceGetTotalEccErrors",
                                   api_.get_ecc(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &v)));
      e.aggregate_uncorrected = v;
      HF_RETURN_IF_ERROR(NvmlError("nvmlDeviceGetTotalEccErrors",
                                   api_.get_ecc(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &v)));
      e.volatile_corrected = v;
    } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
      return NvmlError("nvmlDeviceGetTotalEccErrors", rc);
    }
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    rc = api_.get_remapped(dev, &corr, &unc, &pending, &failure);
    if (rc == NVML_SUCCESS) {
      e.remap_supported = true;
      e.remapped_correctable = corr;
      e.remapped_uncorrectable = unc;
      e.remap_pending = pending != 0;
      e.remap_failure = failure != 0;
    } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
      return NvmlError("nvmlDeviceGetRemappedRows", rc);
    }
    if (!e.remap_supported) {  // page retirement is the pre-Ampere mechanism
      for (int cause : {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR}) {
        unsigned count = 0;  // count only: a zero-sized buffer
        rc = api_.get_retired(dev, cause, &count, nullptr);
        if (rc == NVML_ERROR_NOT_SUPPORTED) break;
        if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) return NvmlError("nvmlDeviceGetRetiredPages", rc);
        e.retired_supported = true;
        (cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? e.retired_dbe : e.retired_sbe) = count;
      }
      if (e.retired_supported) {
        int is_pending = 0;
        rc = api_.get_retired_pending(dev, &is_pending);
        if (rc == NVML_SUCCESS) e.retired_pending = is_pending != 0;
      }
    }
    return e;
  }

  Result<int> RecoveryAction(int index) override {
    if (api_.get_fields == nullptr) {
      return FailedPreconditionError("nvmlDeviceGetFieldValues missing from this libnvidia-ml");
    }
    HF_ASSIGN_OR_RETURN(nvmlDevice_t dev, Handle(index));
    nvmlFieldValue_t f;
    std::memset(&f, 0, sizeof(f));
    f.fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
    HF_RETURN_IF_ERROR(NvmlError("nvmlDeviceGetFieldValues", api_.get_fields(dev, 1, &f)));
    HF_RETURN_IF_ERROR(NvmlError("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", f.nvmlReturn));
    if (f.valueType == NVML_VALUE_TYPE_UNSIGNED_INT) return static_cast<int>(f.value.uiVal);
    return static_cast<int>(f.value.ullVal);
  }

 private:
  void* handle_;  // owned: dlclose'd in the destructor
  Api api_;
};

template <typename F>
bool Resolve(void* handle, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  return *fn != nullptr;
}

}  // namespace

const char* GpuRecoveryActionName(int action) {
  switch (action) {
    case 0: return "NONE";
    case 1: return "GPU_RESET";
    case 2: return "NODE_REBOOT";
    case 3: return "DRAIN_P2P";
    case 4: return "DRAIN_AND_RESET";
  }
  return "UNKNOWN";
}

Result<std::unique_ptr<Nvml>> OpenNvml(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return UnavailableError(library + " not found: no NVIDIA driver on this node" +
                            (err != nullptr ? std::string(" (") + err + ")" : std::string()));
  }
  Api api{};
  const char* missing = nullptr;
  if (!Resolve(handle, "nvmlInit_v2", &api.init)) missing = "nvmlInit_v2";
  if (!Resolve(handle, "nvmlShutdown", &api.shutdown)) missing = "nvmlShutdown";
  if (!Resolve(handle, "nvmlErrorString", &api.error_string)) missing = "nvmlErrorString";
  if (!Resolve(handle, "nvmlDeviceGetCount_v2", &api.get_count)) missing = "nvmlDeviceGetCount_v2";
  if (!Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", &api.get_handle)) missing = "nvmlDeviceGetHandleByIndex_v2";
  if (!Resolve(handle, "nvmlDeviceGetName", &api.get_name)) missing = "nvmlDeviceGetName";
  if (!Resolve(handle, "nvmlDeviceGetUUID", &api.get_uuid)) missing = "nvmlDeviceGetUUID";
  if (!Resolve(handle, "nvmlDeviceGetTotalEccErrors", &api.get_ecc)) missing = "nvmlDeviceGetTotalEccErrors";
  if (!Resolve(handle, "nvmlDeviceGetRetiredPages", &api.get_retired)) missing = "nvmlDeviceGetRetiredPages";
  if (!Resolve(handle, "nvmlDeviceGetRetiredPagesPendingStatus", &api.get_retired_pending)) {
    missing = "nvmlDeviceGetRetiredPagesPendingStatus";
  }
  if (!Resolve(handle, "nvmlDeviceGetRemappedRows", &api.get_remapped)) missing = "nvmlDeviceGetRemappedRows";
  Resolve(handle, "nvmlDeviceGetFieldValues", &api.get_fields);  // optional: RecoveryAction says so
  if (missing != nullptr) {
    dlclose(handle);
    return UnavailableError(library + " lacks " + missing + ": driver too old (R470 or later needed)");
  }
  const nvmlReturn_t rc = api.init();
  if (rc != NVML_SUCCESS) {
    std::string msg = std::string("nvmlInit_v2 failed: ") + api.error_string(rc);
    if (rc == NVML_ERROR_DRIVER_NOT_LOADED) msg += ": the NVIDIA kernel driver is not loaded";
    dlclose(handle);
    return UnavailableError(msg);
  }
  return std::unique_ptr<Nvml>(new DlopenNvml(handle, api));
}

}  // namespace holdfast::health
