// Memfds holding a short text, for tests that pass descriptors around and
// check that the one that arrives is the one that was sent. Header-only so
// that any test binary linking blockswap_shared can use it.
#ifndef BLOCKSWAP_TESTS_SUPPORT_MEMFD_TEXT_H_
#define BLOCKSWAP_TESTS_SUPPORT_MEMFD_TEXT_H_

#include <cstring>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "shared/os/shared_memory.h"
#include "shared/base/unique_fd.h"

namespace blockswap::testing {

// A memfd (one page) holding `text` and its terminating NUL.
inline SharedMemory MemfdWith(const std::string& text) {
  auto memory = SharedMemory::Create("test-memfd", 4096);
  EXPECT_TRUE(memory.ok()) << memory.status();
  auto mapping = memory->Map(Access::kReadWrite);
  EXPECT_TRUE(mapping.ok()) << mapping.status();
  std::memcpy(mapping->data(), text.c_str(), text.size() + 1);
  return *std::move(memory);
}

// The text in a memfd made by MemfdWith (or the error, as text).
inline std::string ContentOf(UniqueFd fd) {
  auto memory = SharedMemory::Adopt(std::move(fd), 4096);
  if (!memory.ok()) return memory.status().ToString();
  auto mapping = memory->Map(Access::kReadOnly);
  if (!mapping.ok()) return mapping.status().ToString();
  return std::string(static_cast<const char*>(mapping->data()));
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_MEMFD_TEXT_H_
