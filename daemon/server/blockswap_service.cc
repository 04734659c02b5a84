#include "daemon/server/blockswap_service.h"

#include <chrono>
#include <deque>

#include "absl/strings/str_cat.h"
#include "shared/base/status.h"
#include "shared/protocol/grpc_status.h"

namespace blockswap::daemon {
namespace {

// Finishes a unary call with `result`, copying its value into `reply`.
template <typename Reply>
grpc::ServerUnaryReactor* Respond(grpc::CallbackServerContext* context, Reply* reply,
                                  absl::StatusOr<Reply> result) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *reply = std::move(*result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

// Whether the call is still wanted: gRPC cancels it when its client
// cancels or leaves (the connection closes) and when its deadline passes.
Cancellation CallCancellation(grpc::CallbackServerContext* context) {
  return Cancellation([context]() -> absl::Status {
    if (context->IsCancelled()) {
      return absl::CancelledError("the call was cancelled: its client cancelled it or left");
    }
    if (std::chrono::system_clock::now() > context->deadline()) {
      return absl::DeadlineExceededError("the call's deadline passed");
    }
    return absl::OkStatus();
  });
}

// Finishes a unary call later, with the result of `work` run on `queue` in
// `session`'s uid's turn (slow work a reactor must not do itself). `work`
// takes the call's Cancellation; a call that nobody wants any more by the
// time its turn comes is answered without running it.
template <typename Reply, typename Work>
grpc::ServerUnaryReactor* RespondLater(WorkQueue& queue, const Session& session,
                                       grpc::CallbackServerContext* context, Reply* reply,
                                       Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  queue.Post(session.peer().uid, CallCancellation(context),
             [reactor, reply, work = std::move(work)](const Cancellation& cancellation) mutable {
               absl::Status wanted = cancellation.Check();
               absl::StatusOr<Reply> result =
                   wanted.ok() ? work(cancellation) : absl::StatusOr<Reply>(std::move(wanted));
               if (result.ok()) *reply = *std::move(result);
               reactor->Finish(ToGrpcStatus(result.status()));
             });
  return reactor;
}

grpc::ServerUnaryReactor* Fail(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// The Load stream of one client: reads requests and queues them on the
// rings' device workers; writes only error events. Writes are queued and
// issued one at a time, as gRPC requires.
class LoadReactor final : public grpc::ServerBidiReactor<v1::LoadRequest, v1::LoadEvent> {
 public:
  // Lets device workers send events without knowing whether the stream still
  // exists: after OnDone, Send drops them.
  class Sink final : public LoadEventSink {
   public:
    explicit Sink(LoadReactor* reactor) : reactor_(reactor) {}
    void Send(v1::LoadEvent event) override {
      absl::MutexLock lock(&mu_);
      if (reactor_ != nullptr) reactor_->Enqueue(std::move(event));
    }
    void Detach() {
      absl::MutexLock lock(&mu_);
      reactor_ = nullptr;
    }

   private:
    absl::Mutex mu_;
    LoadReactor* reactor_ ABSL_GUARDED_BY(mu_);
  };

  LoadReactor(grpc::CallbackServerContext* context, SessionManager& sessions,
              const PeerRegistry& peers)
      : sessions_(sessions), sink_(std::make_shared<Sink>(this)) {
    absl::StatusOr<Peer> caller = CallerOf(peers, *context);
    if (!caller.ok()) {
      Finish(ToGrpcStatus(caller.status()));
      return;
    }
    caller_ = *std::move(caller);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side
      EndReads(grpc::Status::OK);
      return;
    }
    if (session_ == nullptr) {
      absl::StatusOr<std::shared_ptr<Session>> session =
          sessions_.Authenticate(request_.session_token(), caller_);
      if (!session.ok()) {
        EndReads(ToGrpcStatus(session.status()));
        return;
      }
      session_ = *std::move(session);
    }
    absl::Status submitted = sessions_.SubmitLoad(*session_, request_, sink_);
    if (!submitted.ok()) {
      Enqueue(LoadErrorEvent(request_.ring_id(), request_.slot(), request_.generation(),
                             submitted));
    }
    StartRead(&request_);
  }

  // Reactions never run while mu_ is held: gRPC may call them from inside
  // StartWrite or Finish.
  void OnWriteDone(bool ok) override {
    const v1::LoadEvent* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      writes_.pop_front();
      writing_ = false;
      if (!ok) {
        writes_.clear();  // the stream is broken: nobody will read them
        reads_done_ = true;
      }
      if (!writes_.empty()) {
        writing_ = true;
        next = &writes_.front();
      }
    }
    if (next != nullptr) {
      StartWrite(next);
    } else {
      MaybeFinish();
    }
  }

  void OnDone() override {
    sink_->Detach();
    delete this;
  }

 private:
  void Enqueue(v1::LoadEvent event) {
    const v1::LoadEvent* first = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      writes_.push_back(std::move(event));  // deque: earlier elements stay put
      if (!writing_) {
        writing_ = true;
        first = &writes_.front();
      }
    }
    if (first != nullptr) StartWrite(first);
  }

  void EndReads(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      finish_status_ = std::move(status);
    }
    MaybeFinish();
  }

  // Finishes once the client stopped sending and every queued event is out.
  void MaybeFinish() {
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (!reads_done_ || writing_ || finished_) return;
      finished_ = true;
      status = finish_status_;
    }
    Finish(status);
  }

  SessionManager& sessions_;
  std::shared_ptr<Sink> sink_;
  Peer caller_;
  std::shared_ptr<Session> session_;  // set by the first request
  v1::LoadRequest request_;           // reads are sequential: one buffer

  absl::Mutex mu_;
  std::deque<v1::LoadEvent> writes_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<Session>> BlockSwapService::SessionOf(
    grpc::CallbackServerContext* context, const std::string& token) const {
  BLOCKSWAP_ASSIGN_OR_RETURN(Peer caller, CallerOf(peers_, *context));
  return sessions_.Authenticate(token, caller);
}

grpc::ServerUnaryReactor* BlockSwapService::Attach(grpc::CallbackServerContext* context,
                                                   const v1::AttachRequest* request,
                                                   v1::AttachReply* reply) {
  absl::StatusOr<Peer> caller = CallerOf(peers_, *context);
  if (!caller.ok()) return Fail(context, caller.status());
  return Respond(context, reply, sessions_.Attach(*caller, *request));
}

grpc::ServerUnaryReactor* BlockSwapService::Detach(grpc::CallbackServerContext* context,
                                                   const v1::DetachRequest* request,
                                                   v1::DetachReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  sessions_.Detach(**session);
  return Fail(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* BlockSwapService::BeginUpload(grpc::CallbackServerContext* context,
                                                        const v1::BeginUploadRequest* request,
                                                        v1::BeginUploadReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  // Reserving the staging area (fallocate of the whole model) takes time.
  return RespondLater(work_, **session, context, reply,
                      [this, request, session = *session](const Cancellation&) {
                        return sessions_.BeginUpload(*session, *request);
                      });
}

grpc::ServerUnaryReactor* BlockSwapService::CommitUpload(grpc::CallbackServerContext* context,
                                                         const v1::CommitUploadRequest* request,
                                                         v1::ModelReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  return RespondLater(work_, **session, context, reply,
                      [this, request, session = *session](const Cancellation& cancellation) {
                        return sessions_.CommitUpload(*session, *request, cancellation);
                      });
}

grpc::ServerUnaryReactor* BlockSwapService::OpenModel(grpc::CallbackServerContext* context,
                                                      const v1::OpenModelRequest* request,
                                                      v1::ModelReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  return Respond(context, reply, sessions_.OpenModel(**session, *request));
}

grpc::ServerUnaryReactor* BlockSwapService::HeldBlocks(grpc::CallbackServerContext* context,
                                                       const v1::HeldBlocksRequest* request,
                                                       v1::HeldBlocksReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  return Respond(context, reply, sessions_.HeldBlocks(**session, *request));
}

grpc::ServerUnaryReactor* BlockSwapService::CreateRing(grpc::CallbackServerContext* context,
                                                       const v1::CreateRingRequest* request,
                                                       v1::RingDescriptor* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  return RespondLater(work_, **session, context, reply,
                      [this, request, session = *session](const Cancellation&) {
                        return sessions_.CreateRing(*session, *request);
                      });
}

grpc::ServerUnaryReactor* BlockSwapService::DestroyRing(grpc::CallbackServerContext* context,
                                                        const v1::DestroyRingRequest* request,
                                                        v1::DestroyRingReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  return Fail(context, sessions_.DestroyRing(**session, *request));
}

grpc::ServerUnaryReactor* BlockSwapService::ReportStats(grpc::CallbackServerContext* context,
                                                        const v1::ReportStatsRequest* request,
                                                        v1::ReportStatsReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  return Fail(context, sessions_.ReportStats(**session, *request));
}

grpc::ServerUnaryReactor* BlockSwapService::RegisterFile(grpc::CallbackServerContext* context,
                                                         const v1::RegisterFileRequest* request,
                                                         v1::RegisterFileReply* reply) {
  auto session = SessionOf(context, request->session_token());
  if (!session.ok()) return Fail(context, session.status());
  // Reads and hashes the whole file (or waits for a concurrent read of it).
  return RespondLater(work_, **session, context, reply,
                      [this, request, session = *session](const Cancellation& cancellation) {
                        return sessions_.RegisterFile(*session, *request, cancellation);
                      });
}

grpc::ServerBidiReactor<v1::LoadRequest, v1::LoadEvent>* BlockSwapService::Load(
    grpc::CallbackServerContext* context) {
  return new LoadReactor(context, sessions_, peers_);
}

}  // namespace blockswap::daemon
