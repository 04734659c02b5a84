// What a child role observed, as "key value" lines appended to a file the
// test names (--report=FILE), read back by the test while the role runs or
// after it ended. Appending one line per Add keeps the file readable at any
// moment, including after the role was killed.
#ifndef BLOCKSWAP_TESTS_SUPPORT_ROLE_REPORT_H_
#define BLOCKSWAP_TESTS_SUPPORT_ROLE_REPORT_H_

#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"

namespace blockswap::testing {

// The role's side. A report with an empty path records nothing.
class RoleReport {
 public:
  explicit RoleReport(std::string path) : path_(std::move(path)) {}
  void Add(const std::string& key, const std::string& value) const {
    if (path_.empty()) return;
    std::ofstream out(path_, std::ios::app);
    out << key << " " << value << "\n";
  }

 private:
  std::string path_;
};

// The test's side: every value of each key, in the order written.
using ReportLines = std::map<std::string, std::vector<std::string>>;

inline ReportLines ReadRoleReport(const std::string& path) {
  ReportLines report;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t space = line.find(' ');
    report[line.substr(0, space)].push_back(space == std::string::npos ? ""
                                                                       : line.substr(space + 1));
  }
  return report;
}

// The first value of `key` ("" when absent).
inline std::string FirstValue(const ReportLines& report, const std::string& key) {
  auto it = report.find(key);
  return it == report.end() || it->second.empty() ? "" : it->second.front();
}

// The first value of `key` as a number; -1 when absent or not a number.
inline double NumberValue(const ReportLines& report, const std::string& key) {
  double value = -1;
  return absl::SimpleAtod(FirstValue(report, key), &value) ? value : -1;
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_ROLE_REPORT_H_
