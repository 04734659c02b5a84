// A whole file as a string, for tests that check what a program wrote (its
// log, a manifest, a pid file). Empty when the file cannot be read.
// Header-only.
#ifndef BLOCKSWAP_TESTS_SUPPORT_READ_FILE_H_
#define BLOCKSWAP_TESTS_SUPPORT_READ_FILE_H_

#include <fstream>
#include <sstream>
#include <string>

namespace blockswap::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_READ_FILE_H_
