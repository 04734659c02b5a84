// SessionManager: the daemon's domain logic behind the BlockSwap service —
// sessions, uploads, models opened per session, rings and loads. It knows
// nothing of gRPC beyond the request and reply messages, so it is tested
// without a server.
//
// Session lifecycle: Attach creates a session bound to the calling process
// (its pidfd); the client then connects the descriptor side channel with the
// session token. The session ends on Detach or when the process dies (the
// ProcessWatcher watches every session's pidfd); everything it owned is
// released then: uploads at once, rings once nothing on a device can still
// touch them (DeviceWorker::RetireRing).
#ifndef BLOCKSWAP_DAEMON_SESSION_SESSION_MANAGER_H_
#define BLOCKSWAP_DAEMON_SESSION_SESSION_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/device/device_worker.h"
#include "daemon/session/client_accounts.h"
#include "daemon/session/model_visibility.h"
#include "daemon/session/process_watcher.h"
#include "daemon/session/quota.h"
#include "daemon/session/quota_gate.h"
#include "daemon/session/session.h"
#include "daemon/session/session_table.h"
#include "daemon/session/side_channel.h"
#include "daemon/store/file_ingest.h"
#include "daemon/store/model_store.h"
#include "daemon/validation/request_validation.h"
#include "shared/backend/backend.h"
#include "shared/base/cancellation.h"

namespace blockswap::daemon {

class SessionManager final : public SideChannelAcceptor {
 public:
  // `workers` maps each device UUID the daemon drives to its worker; all
  // arguments must outlive the manager. `visibility` decides which models
  // each session may open (model_visibility.h).
  SessionManager(const Backend& backend, ModelStore& store,
                 std::map<std::string, DeviceWorker*> workers, uint64_t boot_id,
                 RequestLimits limits = {}, ModelVisibility visibility = ModelVisibility());
  // Ends every session and stops watching their processes.
  ~SessionManager() override;

  absl::StatusOr<v1::AttachReply> Attach(const Peer& peer, const v1::AttachRequest& request);
  // The copy path of a session whose client asks for none (the daemon's
  // `copy`); kDaemon until set.
  void set_default_copy(CopyPath copy) { default_copy_.store(copy, std::memory_order_relaxed); }
  // The session of `token`, if it belongs to the process behind `caller`.
  absl::StatusOr<std::shared_ptr<Session>> Authenticate(absl::string_view token,
                                                        const Peer& caller) const;
  void Detach(Session& session);

  absl::StatusOr<v1::BeginUploadReply> BeginUpload(Session& session,
                                                   const v1::BeginUploadRequest& request);
  // Slow (hashes and copies the upload): never call it on a reactor thread.
  // Stops with `cancellation`'s error while it hashes (ModelStore::Register);
  // the upload is gone either way.
  absl::StatusOr<v1::ModelReply> CommitUpload(Session& session,
                                              const v1::CommitUploadRequest& request,
                                              const Cancellation& cancellation = {});
  // NOT_FOUND, worded as for an unknown id, for a model the session's peer
  // may not see.
  absl::StatusOr<v1::ModelReply> OpenModel(Session& session, const v1::OpenModelRequest& request);
  // Which of the requested block ids are held in a model the caller may see
  // (under model_access registrant-group, a block only in models it may not
  // see answers false: nobody gets content without sending its bytes).
  absl::StatusOr<v1::HeldBlocksReply> HeldBlocks(Session& session,
                                                 const v1::HeldBlocksRequest& request);
  // Allocates device memory: never call it on a reactor thread.
  absl::StatusOr<v1::RingDescriptor> CreateRing(Session& session,
                                                const v1::CreateRingRequest& request);
  absl::Status DestroyRing(Session& session, const v1::DestroyRingRequest& request);
  // Queues a load on the ring's device. Errors found later (protocol
  // violations) go to `sink`; an error returned here means nothing was queued.
  absl::Status SubmitLoad(Session& session, const v1::LoadRequest& request,
                          std::shared_ptr<LoadEventSink> sink);
  // Keeps the session's newest passes for Admin.Stats; a report that fails
  // ValidateReportStats changes nothing.
  absl::Status ReportStats(Session& session, const v1::ReportStatsRequest& request);
  // Registers a model from files the client offered on its side channel
  // (daemon/store/file_ingest.h) and opens it (and its extras) in the session.
  // Slow (reads and hashes the file): never call it on a reactor thread.
  // Stops with `cancellation`'s error when it has one (FileIngest::Register).
  absl::StatusOr<v1::RegisterFileReply> RegisterFile(Session& session,
                                                     const v1::RegisterFileRequest& request,
                                                     const Cancellation& cancellation = {});
  const FileIngest& file_ingest() const { return file_ingest_; }
  const ModelVisibility& visibility() const { return visibility_; }

  absl::Status AcceptSideChannel(absl::string_view token, const Peer& peer,
                                 UniqueFd socket) override;

  std::vector<std::shared_ptr<Session>> Sessions() const;
  size_t session_count() const;
  // Refuses new sessions from now on (shutdown).
  void StopAttaching();
  bool draining() const;  // StopAttaching was called
  // Requests refused because a per-process or per-uid quota was full.
  uint64_t quota_refusals() const { return quota_gate_.refusals(); }
  // Ends every session (shutdown).
  void EndAll();
  // The per-client and per-uid quotas; Set may be called at any time (SIGHUP).
  QuotaPolicy& quotas() { return quota_gate_.quotas(); }
  const QuotaPolicy& quotas() const { return quota_gate_.quotas(); }
  // What each process and uid holds.
  const ClientAccounts& accounts() const { return quota_gate_.accounts(); }

 private:
  // The held blocks a BeginUpload names, each checked to be visible to the
  // caller: FAILED_PRECONDITION naming one that is not.
  absl::StatusOr<KnownBlocks> FindHeldBlocks(Session& session,
                                             const v1::BeginUploadRequest& request,
                                             const ModelLayout& layout);
  void EndSession(uint64_t session_id, SessionEnd how) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the session under `token` if it is `peer`'s own process's
  // (AttachRequest.replaces_session_token); nothing otherwise.
  void EndReplacedSession(const Peer& peer, absl::string_view token) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::ModelReply> ModelReply(Session& session,
                                            const std::shared_ptr<const Model>& model,
                                            bool already_present);
  std::atomic<CopyPath> default_copy_{CopyPath::kDaemon};

  const Backend& backend_;
  ModelStore& store_;
  const std::map<std::string, DeviceWorker*> workers_;
  const uint64_t boot_id_;
  const RequestLimits limits_;
  const ModelVisibility visibility_;
  QuotaGate quota_gate_;
  FileIngest file_ingest_{store_};

  mutable absl::Mutex mu_;
  SessionTable table_ ABSL_GUARDED_BY(mu_);
  // Ends the session of a process that exits. Last: it stops (in its
  // destructor) before anything its reports use goes.
  ProcessWatcher watcher_{
      [this](uint64_t session_id) { EndSession(session_id, SessionEnd::kProcessExited); }};
};

}  // namespace blockswap::daemon

#endif  // BLOCKSWAP_DAEMON_SESSION_SESSION_MANAGER_H_
