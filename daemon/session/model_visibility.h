// Which models a peer may see (models are shared by content among the users
// allowed to see them: docs/store.md, "Registrants and visibility"), under the
// `model_access` policy:
//
//   "allowed-users" (the default): every peer the access policy admits may
//     open and list every model; that is the point of a node daemon.
//   "registrant-group": a model is visible to each uid that registered it
//     (daemon/store/registrants.h), to members of each registrant's group,
//     to root and to the daemon's own uid (they can read the masters
//     directory anyway). "Member" is what the kernel says of the peer at
//     connect(): its effective gid or one of its supplementary groups
//     (SO_PEERCRED, SO_PEERGROUPS) equals the gid the registrant connected
//     with. No user database is read, so a membership granted since the
//     peer logged in counts from its next login, as it does for files.
//
// Under either policy, the source paths of another uid's registrations are
// shown only to root and the daemon's uid: a path names a user's files.
//
// Under "registrant-group" a peer that is not privileged is Restricted: it
// is shown its own uid's sessions only (what another user runs, loads or
// copies is that user's business), a model's registrations only where they
// are what lets it see the model (its own uid's and its groups'), the model
// under the name such a registration gave it, and it may evict only its own
// registration (ModelStore::EvictRegistration).
//
// A model a peer may not see is answered exactly as an unknown id (NOT_FOUND,
// the same words): an id is the hash of the content, so telling "exists but
// not yours" would confirm to anyone holding a copy of some weights that
// another user on the node has them.
//
// Pure and thread-safe; enforced by SessionManager::OpenModel and the Admin
// service (Models, Residency, Trace, VerifyModel, EvictModel).
#ifndef BLOCKSWAP_DAEMON_SESSION_MODEL_VISIBILITY_H_
#define BLOCKSWAP_DAEMON_SESSION_MODEL_VISIBILITY_H_

#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/session/peer.h"
#include "daemon/store/registrants.h"

namespace blockswap::daemon {

enum class ModelAccess { kAllowedUsers, kRegistrantGroup };

// "allowed-users" or "registrant-group"; anything else is INVALID_ARGUMENT
// naming both.
absl::StatusOr<ModelAccess> ParseModelAccess(absl::string_view text);
const char* ModelAccessName(ModelAccess access);

class ModelVisibility {
 public:
  explicit ModelVisibility(ModelAccess access = ModelAccess::kAllowedUsers,
                           uid_t daemon_uid = ::geteuid())
      : access_(access), daemon_uid_(daemon_uid) {}

  ModelAccess access() const { return access_; }
  // Root and the daemon's uid: they see every model and every source.
  bool Privileged(const Peer& viewer) const;
  // Under "registrant-group", anyone but the privileged: see above.
  bool Restricted(const Peer& viewer) const;
  // Whether `viewer` may open, list, verify or evict a model registered by
  // `registrants`.
  bool MaySee(const Peer& viewer, const std::vector<Registrant>& registrants) const;
  // The registrations as `viewer` may read them, "; "-separated, each once: a
  // source in full when it is the viewer's own uid's, in full with "(uid N)"
  // for the privileged, else "upload" or "file (another user's)"; for a
  // Restricted viewer only those that let it see the model.
  std::string Sources(const Peer& viewer, const std::vector<Registrant>& registrants) const;
  // The model's name as `viewer` is shown it: `first` (the name it was first
  // registered under) unless `viewer` is Restricted; then the name of the
  // newest of its own uid's registrations, else of the newest of those that
  // let it see the model (empty where that registration recorded none).
  std::string Name(const Peer& viewer, const std::vector<Registrant>& registrants,
                   const std::string& first) const;

 private:
  // Whether `registrant`'s registration lets `viewer` see the model.
  static bool Grants(const Peer& viewer, const Registrant& registrant);

  const ModelAccess access_;
  const uid_t daemon_uid_;
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_MODEL_VISIBILITY_H_
