#include "daemon/session/file_offers.h"

#include <poll.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "shared/os/fd_passing.h"
#include "shared/protocol/side_channel_wire.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

absl::Status DrainFileOffers(const UniqueFd& side_channel,
                             const std::function<absl::StatusOr<Reservation>()>& charge,
                             std::map<uint64_t, ParkedFileOffer>* offers) {
  while (true) {
    pollfd pfd{side_channel.get(), POLLIN, 0};
    int ready = ::poll(&pfd, 1, 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return ErrnoStatus(errno, "polling the side channel");
    if (ready == 0 || (pfd.revents & POLLIN) == 0) {
      if (pfd.revents & (POLLHUP | POLLERR)) {
        return absl::UnavailableError("the client closed its side channel");
      }
      return absl::OkStatus();
    }
    // Each offer is one sendmsg of 16 bytes, so it is all there once any of
    // it is (a client that splits one is refused below).
    BLOCKSWAP_ASSIGN_OR_RETURN(ReceivedMessage message,
                               ReceiveExactWithFds(side_channel, sizeof(FileOfferHeader)));
    FileOfferHeader header;
    std::memcpy(&header, message.payload.data(), sizeof(header));
    if (std::memcmp(header.magic, kFileOfferMagic, sizeof(header.magic)) != 0 ||
        header.fd_count != 1 || message.fds.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed file offer on the side channel (", message.fds.size(),
                       " descriptors; an offer is a \"BSFO\" header with exactly one)"));
    }
    if (offers->size() >= kMaxPendingFileOffers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "more than ", kMaxPendingFileOffers, " file offers not yet named by RegisterFile"));
    }
    if (offers->contains(header.offer)) {
      return absl::InvalidArgumentError(
          absl::StrCat("file offer ", header.offer, " was sent twice"));
    }
    BLOCKSWAP_ASSIGN_OR_RETURN(Reservation charged, charge());
    offers->emplace(header.offer, ParkedFileOffer{std::move(message.fds[0]), std::move(charged)});
  }
}

}  // namespace blockswap::daemon
