// Who registered a model, and from what (models are shared by content among the
// users allowed to see them: docs/store.md, "Registrants and visibility").
// Every registration that names content already present is recorded too: a
// second user who uploads or registers a file of the same content gets access
// to it without a copy.
//
// The record is what the visibility rule (daemon/session/model_visibility.h)
// reads; it is persisted in the model's manifest ("registrants"), so that a
// restarted daemon that adopts the master keeps it.
#ifndef BLOCKSWAP_DAEMON_STORE_REGISTRANTS_H_
#define BLOCKSWAP_DAEMON_STORE_REGISTRANTS_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace blockswap::daemon {

// One registration: the registering process's uid and effective gid as
// SO_PEERCRED reported them, its source: "upload", or "file <path>[,
// <path>...]" (the daemon's view of the descriptors the client sent), and
// the name it gave the model (empty: not recorded; a manifest written before
// names were kept per registration has the first registration's only). A
// name is kept per registration because, under registrant-group, a
// registrant is shown the model under its own name, never another user's.
// The default is root's upload (tests and tools that register on their own).
struct Registrant {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string source = "upload";
  std::string name = {};

  bool operator==(const Registrant&) const = default;
};

// At most this many sources are kept per (uid, gid): a further registration
// of the same content by the same user from yet another path adds no access,
// and a user must not grow a model's manifest without bound.
inline constexpr size_t kMaxSourcesPerRegistrant = 4;

// The registrations of one model, oldest first. Thread-safe; Add is meant to
// be called by the store only, which persists the list before it publishes it.
class Registrants {
 public:
  explicit Registrants(std::vector<Registrant> list = {}) : list_(std::move(list)) {}
  Registrants(const Registrants&) = delete;
  Registrants& operator=(const Registrants&) = delete;

  std::vector<Registrant> List() const;
  // The list with `registrant` added, or empty when it would add nothing
  // (recorded already, or its uid and gid have kMaxSourcesPerRegistrant
  // sources already).
  std::vector<Registrant> With(const Registrant& registrant) const;
  // The list without `uid`'s registrations.
  std::vector<Registrant> Without(uid_t uid) const;
  void Replace(std::vector<Registrant> list);

 private:
  mutable absl::Mutex mu_;
  std::vector<Registrant> list_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_STORE_REGISTRANTS_H_
