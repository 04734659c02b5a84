// A plain HTTP/1.0 GET on the loopback, for the tests of the metrics
// endpoint (the unit test of the server and the integration tests that
// scrape a real blockswapd). Header-only.
#ifndef BLOCKSWAP_TESTS_SUPPORT_HTTP_GET_H_
#define BLOCKSWAP_TESTS_SUPPORT_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "shared/base/unique_fd.h"

namespace blockswap::testing {

// GET `path` from 127.0.0.1:`port`; the whole response ("connect failed"
// when nothing listens).
inline std::string HttpGet(int port, const std::string& path) {
  UniqueFd socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return "connect failed";
  }
  std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  (void)!::write(socket.get(), request.data(), request.size());
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(socket.get(), buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  return response;
}

}  // namespace blockswap::testing

#endif  // BLOCKSWAP_TESTS_SUPPORT_HTTP_GET_H_
