// What the stand-in CUDA driver exports beyond the driver API, for tests
// only (find them with dlsym; a real libcuda has none of them, so their
// presence also tells a test that it runs over the stand-in).
#ifndef BLOCKSWAP_TESTS_STANDIN_DRIVER_STANDIN_HOOKS_H_
#define BLOCKSWAP_TESTS_STANDIN_DRIVER_STANDIN_HOOKS_H_

#include <cuda.h>
#include <dlfcn.h>

#include <cstddef>

extern "C" {
// What this library is, in words.
const char* blockswap_standin_driver();
// Breaches of CUDA's rules reported in this process so far, and the newest
// one's text (truncated to `size`).
int blockswap_standin_violation_count();
void blockswap_standin_last_violation(char* text, size_t size);
// A sticky error in device `ordinal`'s context, now: every later call in it
// returns `error` (what a kernel fault does to a real context).
void blockswap_standin_poison_device(int ordinal, CUresult error);
// Where the bytes of a stand-in device pointer are in this process (a
// test's host stand-in for a kernel reads and writes them there).
void* blockswap_standin_host_address(CUdeviceptr dptr);
}

using BlockswapStandinViolationCountFn = int (*)();
using BlockswapStandinLastViolationFn = void (*)(char*, size_t);
using BlockswapStandinPoisonDeviceFn = void (*)(int, CUresult);
using BlockswapStandinHostAddressFn = void* (*)(CUdeviceptr);

// blockswap_standin_host_address of the libcuda.so.1 this process has loaded;
// null when that is not the stand-in, or none is loaded yet.
inline BlockswapStandinHostAddressFn LoadedStandinHostAddress() {
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  auto fn = reinterpret_cast<BlockswapStandinHostAddressFn>(
      ::dlsym(library, "blockswap_standin_host_address"));
  ::dlclose(library);  // drops the reference RTLD_NOLOAD took; the library stays loaded
  return fn;
}

#endif  // BLOCKSWAP_TESTS_STANDIN_DRIVER_STANDIN_HOOKS_H_
