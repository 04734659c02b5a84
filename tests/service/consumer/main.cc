// Uses the installed C ABI and C++ wrapper: prints the ABI version, then
// connects to a socket where no daemon listens and prints the error.
#include <blockswap/blockswap.h>

#include <blockswap/blockswap.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  std::printf("abi %u\n", bs_abi_version());
  bs_client* client = nullptr;
  int code = bs_connect(argc > 1 ? argv[1] : "/nonexistent/blockswapd.sock", "consumer", &client);
  std::printf("connect code %d: %s\n", code, bs_last_error());
  return code == 0 ? 1 : 0;
}
