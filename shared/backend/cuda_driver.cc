#include "shared/backend/cuda_driver.h"

#include <dlfcn.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shared/base/status.h"

namespace blockswap::cuda_internal {
namespace {

constexpr const char* kDriverLibrary = "libcuda.so.1";

// A library opened with dlopen, closed with dlclose. Move-only.
class DlHandle {
 public:
  static absl::StatusOr<DlHandle> Open(const char* library) {
    // RTLD_LOCAL: the driver's symbols must not satisfy another library's
    // undefined references behind our back; RTLD_NOW: a broken library fails
    // here, not at some later call.
    void* handle = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      return absl::FailedPreconditionError(absl::StrCat(
          "no CUDA driver: dlopen(\"", library, "\") failed: ", why != nullptr ? why : "?"));
    }
    return DlHandle(handle);
  }
  DlHandle(DlHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  DlHandle& operator=(DlHandle&&) = delete;
  DlHandle(const DlHandle&) = delete;
  DlHandle& operator=(const DlHandle&) = delete;
  ~DlHandle() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }

  void* Symbol(const char* name) const { return ::dlsym(handle_, name); }

 private:
  explicit DlHandle(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;
};

// The driver's lookup in whichever form it has.
class ProcAddress {
 public:
  static absl::StatusOr<ProcAddress> Find(const DlHandle& library) {
    ProcAddress found;
    found.v12_ =
        reinterpret_cast<PFN_cuGetProcAddress_v12000>(library.Symbol("cuGetProcAddress_v2"));
    if (found.v12_ == nullptr) {
      found.v11_ =
          reinterpret_cast<PFN_cuGetProcAddress_v11030>(library.Symbol("cuGetProcAddress"));
    }
    if (found.v12_ == nullptr && found.v11_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the CUDA driver ", kDriverLibrary,
          " has neither cuGetProcAddress_v2 nor cuGetProcAddress: blockswap needs a driver of "
          "CUDA ",
          CudaVersionString(kLowestCudaDriverVersion), " or later"));
    }
    return found;
  }

  // `symbol` as of `version`, or an error naming it and why it is missing.
  absl::Status Resolve(const char* symbol, int version, void** fn, int driver_version) const {
    *fn = nullptr;
    CUresult result = CUDA_SUCCESS;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (v12_ != nullptr) {
      result = v12_(symbol, fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
    } else {
      result = v11_(symbol, fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    if (result == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *fn != nullptr) {
      return absl::OkStatus();
    }
    *fn = nullptr;
    const char* why = status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                          ? "the driver has it only in a later version"
                          : "the driver does not have it";
    // driver_version is 0 while the version itself is being looked up.
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver",
        driver_version != 0 ? absl::StrCat(" (CUDA ", CudaVersionString(driver_version), ")") : "",
        " cannot provide ", symbol, " as of CUDA ", CudaVersionString(version), ": ", why,
        " (CUresult ", static_cast<int>(result), "); blockswap needs a driver of CUDA ",
        CudaVersionString(kLowestCudaDriverVersion), " or later"));
  }

 private:
  PFN_cuGetProcAddress_v12000 v12_ = nullptr;
  PFN_cuGetProcAddress_v11030 v11_ = nullptr;
};

struct LoadedDriver {
  DlHandle library;
  int version = 0;
  CudaDriverTable table;
};

absl::StatusOr<LoadedDriver> Load() {
  BLOCKSWAP_ASSIGN_OR_RETURN(DlHandle library, DlHandle::Open(kDriverLibrary));
  BLOCKSWAP_ASSIGN_OR_RETURN(const ProcAddress lookup, ProcAddress::Find(library));

  // The version first, so that an old driver is named as such rather than by
  // the first entry point it lacks.
  PFN_cuDriverGetVersion_v2020 get_version = nullptr;
  BLOCKSWAP_RETURN_IF_ERROR(
      lookup.Resolve("cuDriverGetVersion", 2020, reinterpret_cast<void**>(&get_version), 0));
  int version = 0;
  if (CUresult result = get_version(&version); result != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat("the CUDA driver ", kDriverLibrary,
                                                      " failed cuDriverGetVersion (CUresult ",
                                                      static_cast<int>(result), ")"));
  }
  if (version < kLowestCudaDriverVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver supports CUDA ", CudaVersionString(version),
        "; blockswap needs a driver of CUDA ", CudaVersionString(kLowestCudaDriverVersion),
        " or later (the highest version of the driver entry points it uses)"));
  }

  LoadedDriver loaded{std::move(library), version, {}};
#define BLOCKSWAP_CUDA_DRIVER_RESOLVE(name, entry_version, type) \
  BLOCKSWAP_RETURN_IF_ERROR(lookup.Resolve(                      \
      #name, entry_version, reinterpret_cast<void**>(&loaded.table.name), version));
  BLOCKSWAP_CUDA_DRIVER_ENTRY_POINTS(BLOCKSWAP_CUDA_DRIVER_RESOLVE)
#undef BLOCKSWAP_CUDA_DRIVER_RESOLVE
  return loaded;
}

// Never destroyed: see LoadCudaDriver.
const absl::StatusOr<LoadedDriver>& Loaded() {
  static const auto* loaded = new absl::StatusOr<LoadedDriver>(Load());
  return *loaded;
}

}  // namespace

std::string CudaVersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

std::string FormatGpuUuid(const CUuuid& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    auto byte = static_cast<unsigned char>(uuid.bytes[i]);
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xf]);
  }
  return out;
}

absl::StatusOr<const CudaDriverTable*> LoadCudaDriver() {
  const absl::StatusOr<LoadedDriver>& loaded = Loaded();
  if (!loaded.ok()) return loaded.status();
  return &loaded->table;
}

int LoadedCudaDriverVersion() {
  const absl::StatusOr<LoadedDriver>& loaded = Loaded();
  return loaded.ok() ? loaded->version : 0;
}

}  // namespace blockswap::cuda_internal
