// `--key=value` arguments of the test programs and child roles. Header-only
// and free of abseil, so that the C ABI client program can use it too.
#ifndef BLOCKSWAP_TESTS_SUPPORT_KEY_VALUE_ARGS_H_
#define BLOCKSWAP_TESTS_SUPPORT_KEY_VALUE_ARGS_H_

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace blockswap::testing {

// Every `--key=value` of `argv`; other arguments are ignored.
class KeyValueArgs {
 public:
  explicit KeyValueArgs(const std::vector<std::string>& argv) {
    for (const std::string& arg : argv) {
      size_t eq = arg.find('=');
      if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        values_[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
      }
    }
  }

  bool Has(const std::string& key) const { return values_.count(key) > 0; }

  std::string Str(const std::string& key, const std::string& fallback = "") const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }

  // `fallback` when the key is absent or its value is not a whole number.
  int64_t Int(const std::string& key, int64_t fallback) const {
    auto it = values_.find(key);
    if (it == values_.end() || it->second.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    long long value = std::strtoll(it->second.c_str(), &end, 10);
    return (errno != 0 || *end != '\0') ? fallback : static_cast<int64_t>(value);
  }

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_KEY_VALUE_ARGS_H_
