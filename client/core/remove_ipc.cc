#include "client/core/remove_ipc.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace blockswap::client {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// logind's boolean spelling (systemd's parse_boolean).
bool ParseBoolean(absl::string_view value, bool fallback) {
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (v == "yes" || v == "y" || v == "true" || v == "t" || v == "on" || v == "1") return true;
  if (v == "no" || v == "n" || v == "false" || v == "f" || v == "off" || v == "0") return false;
  return fallback;
}

// The largest system uid (login.defs SYS_UID_MAX, default 999): logind
// never removes a system user's IPC objects.
uid_t SystemUidMax(const std::string& root) {
  uid_t max = 999;
  for (absl::string_view line : absl::StrSplit(ReadText(root + "/etc/login.defs"), '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "SYS_UID_MAX")) continue;
    uid_t value = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value)) max = value;
  }
  return max;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

bool RemoveIpcEnabled(const std::vector<std::string>& config_texts) {
  bool enabled = true;
  for (const std::string& text : config_texts) {
    bool in_login = false;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line[0] == '#' || line[0] == ';') continue;
      if (line[0] == '[') {
        in_login = line == "[Login]";
        continue;
      }
      if (!in_login || !absl::ConsumePrefix(&line, "RemoveIPC")) continue;
      line = absl::StripLeadingAsciiWhitespace(line);
      if (!absl::ConsumePrefix(&line, "=")) continue;
      enabled = ParseBoolean(line, enabled);
    }
  }
  return enabled;
}

std::string RemoveIpcWarning(uid_t uid, const std::string& root) {
  // logind runs where systemd is the init and logind's state directory exists.
  if (!Exists(root + "/run/systemd/seats") && !Exists(root + "/run/systemd/users")) return "";
  if (uid == 0 || uid <= SystemUidMax(root)) return "";
  std::vector<std::string> texts = {ReadText(root + "/etc/systemd/logind.conf")};
  // Drop-ins, each directory in name order; later directories win.
  for (const char* directory :
       {"/usr/lib/systemd/logind.conf.d", "/usr/local/lib/systemd/logind.conf.d",
        "/etc/systemd/logind.conf.d", "/run/systemd/logind.conf.d"}) {
    std::error_code error;
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(root + directory, error)) {
      if (entry.path().extension() == ".conf") names.push_back(entry.path().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) texts.push_back(ReadText(name));
  }
  if (!RemoveIpcEnabled(texts)) return "";
  return absl::StrCat(
      "systemd-logind removes the /dev/shm files of uid ", uid,
      " at its last logout (RemoveIPC=yes, the default): the private daemon's masters will not "
      "survive it and a later run uploads them again (set RemoveIPC=no in "
      "/etc/systemd/logind.conf, or run the system service)");
}

}  // namespace blockswap::client
