#include "client/core/connection.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/core/remove_ipc.h"
#include "client/core/say_once.h"
#include "shared/base/env_settings.h"
#include "shared/base/status.h"
#include "shared/build_info/build_info.h"
#include "shared/protocol/grpc_status.h"
#include "shared/protocol/load_protocol.h"

namespace blockswap::client {
namespace {

// daemon/validation/request_validation.h's kProtocolVersion, which a daemon
// requires exactly.
constexpr uint32_t kProtocolVersion = 1;
constexpr absl::Duration kSideChannelTimeout = absl::Seconds(10);
constexpr int kMaxMessageBytes = 64 << 20;

// Which daemon this process uses, said once (the first connection that
// resolved no configured socket) on stderr.
void AnnounceOnce(const std::string& message) {
  static std::atomic<bool> announced{false};
  SayOnce(announced, message);
}

// Who copies this process's blocks and why, said once per process on stderr.
void SayCopyPathOnce(CopyPath path, absl::string_view why) {
  static std::atomic<bool> said{false};
  SayOnce(said, absl::StrCat("blocks are copied into this process's rings by ",
                             path == CopyPath::kTrainer ? "this process's own copy stream"
                                                        : "blockswapd's copy stream",
                             " (", why, ")"));
}

std::string StartedAnnouncement(const PrivateDaemonOptions& options, pid_t pid) {
  std::string text = absl::StrCat(
      "started a private blockswapd (pid ", pid, ") for uid ", ::geteuid(), " at ",
      options.socket_path(), "; masters and log in ", options.directory, "; it exits ",
      options.idle_exit == absl::ZeroDuration()
          ? std::string("never on its own")
          : absl::StrCat(absl::ToDoubleSeconds(options.idle_exit), " s after its last session"),
      " (", EnvName(EnvSetting::kAutostart), "=0 turns this off)");
  if (std::string warning = RemoveIpcWarning(::geteuid()); !warning.empty()) {
    absl::StrAppend(&text, "\nblockswap: note: ", warning);
  }
  return text;
}

}  // namespace

absl::StatusOr<std::optional<CopyPath>> CopyPathFromEnvironment() {
  const std::optional<std::string> value = EnvValue(EnvSetting::kCopy);
  if (!value.has_value()) return std::nullopt;
  absl::StatusOr<CopyPath> path = ParseCopyPath(*value);
  if (!path.ok()) return Annotate(path.status(), EnvName(EnvSetting::kCopy));
  return *path;
}

std::unique_ptr<grpc::ClientContext> Connection::Context(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

absl::Status Connection::CallError(const grpc::Status& status, absl::string_view what) {
  absl::Status error = FromGrpcStatus(status);
  if (absl::IsCancelled(error)) {
    error = absl::UnavailableError(
        absl::StrCat("blockswapd ended the call (shutting down or restarting): ", error.message()));
  }
  return Annotate(error, what);
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Connect(absl::string_view socket_path,
                                                                absl::string_view client_name) {
  BLOCKSWAP_RETURN_IF_ERROR(SkipProtocolStepsFromEnvironment());
  std::unique_ptr<Connection> connection(new Connection());
  BLOCKSWAP_ASSIGN_OR_RETURN(connection->asked_copy_, CopyPathFromEnvironment());
  const ResolvedSocket resolved = ResolveSocket(socket_path);
  connection->client_name_ = std::string(client_name);
  v1::AttachReply reply;
  if (resolved.source == SocketSource::kSystemDefault && AutostartEnabled()) {
    BLOCKSWAP_ASSIGN_OR_RETURN(reply, connection->AttachWithoutConfiguredSocket());
  } else {
    connection->socket_path_ = resolved.path;
    absl::StatusOr<v1::AttachReply> attached = connection->Attach(kCallTimeout);
    if (!attached.ok() && resolved.source == SocketSource::kSystemDefault) {
      return Annotate(attached.status(), absl::StrCat(EnvName(EnvSetting::kAutostart),
                                                      "=0, so no private blockswapd is started"));
    }
    if (!attached.ok()) return attached.status();
    reply = *std::move(attached);
  }
  // The same kind of backend as the daemon's: no silent fallback.
  if (reply.backend() == v1::BACKEND_CUDA) {
    BLOCKSWAP_ASSIGN_OR_RETURN(connection->backend_, OpenBackend(BackendChoice::kCuda));
  } else {
    HostBackendOptions host = HostBackendOptions::FromEnvironment();
    host.device_count = reply.devices_size();
    connection->backend_ = OpenHostBackend(host);
  }
  BLOCKSWAP_RETURN_IF_ERROR(connection->OpenSideChannel());
  std::string why = connection->asked_copy_.has_value() ? EnvName(EnvSetting::kCopy)
                                                        : "blockswapd's copy setting";
  if (!connection->asked_copy_.has_value() && connection->copy_path_ == CopyPath::kTrainer) {
    absl::MutexLock lock(&connection->rings_mu_);
    if (!connection->rings_unavailable_.empty()) {
      const auto& [uuid, reason] = *connection->rings_unavailable_.begin();
      why = absl::StrCat("blockswapd cannot serve rings on ", uuid, ": ", reason);
    }
  }
  SayCopyPathOnce(connection->copy_path_, why);
  return connection;
}

absl::StatusOr<v1::AttachReply> Connection::Attach(absl::Duration timeout) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
  arguments.SetMaxSendMessageSize(kMaxMessageBytes);
  channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path_),
                                       grpc::InsecureChannelCredentials(), arguments);
  stub_ = v1::BlockSwap::NewStub(channel_);

  v1::AttachRequest request;
  request.set_client_name(client_name_);
  request.set_protocol_version(kProtocolVersion);
  request.set_client_abi_version(ThisBuild().abi_version);
  if (asked_copy_.has_value()) request.set_copy(CopyPathToProto(*asked_copy_));
  request.set_replaces_session_token(replaces_token_);
  v1::AttachReply reply;
  auto context = Context(timeout);
  grpc::Status attached = stub_->Attach(context.get(), request, &reply);
  if (!attached.ok()) {
    // The daemon's refusals name its versions; this names the library's.
    return CallError(attached, absl::StrCat("attaching to blockswapd at ", socket_path_,
                                            " from client library version ", ThisBuild().version));
  }
  token_ = reply.session_token();
  replaces_token_.clear();
  boot_id_ = reply.daemon_boot_id();
  // A daemon from before trainer copies says nothing: it copies.
  absl::StatusOr<std::optional<CopyPath>> copy = CopyPathFromProto(reply.copy());
  if (!copy.ok()) return Annotate(copy.status(), "the daemon's AttachReply.copy");
  copy_path_ = copy->value_or(CopyPath::kDaemon);
  device_uuids_.clear();
  absl::MutexLock lock(&rings_mu_);
  rings_unavailable_.clear();
  for (const v1::Device& device : reply.devices()) {
    device_uuids_.push_back(device.uuid());
    if (!device.rings_unavailable().empty()) {
      rings_unavailable_[device.uuid()] = device.rings_unavailable();
    }
  }
  return reply;
}

absl::StatusOr<v1::AttachReply> Connection::AttachWithoutConfiguredSocket() {
  BLOCKSWAP_ASSIGN_OR_RETURN(bool system_answers, SocketAnswers(kDefaultSocketPath));
  if (system_answers) {
    socket_path_ = kDefaultSocketPath;
    BLOCKSWAP_ASSIGN_OR_RETURN(v1::AttachReply reply, Attach(kCallTimeout));
    AnnounceOnce(absl::StrCat("using the system blockswapd at ", kDefaultSocketPath));
    return reply;
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(private_daemon_, PrivateDaemonOptionsFromEnvironment());
  return AttachPrivate(kCallTimeout);
}

absl::StatusOr<v1::AttachReply> Connection::AttachPrivate(absl::Duration timeout) {
  absl::StatusOr<v1::AttachReply> reply;
  absl::StatusOr<PrivateDaemonUse> use =
      AttachToPrivateDaemon(*private_daemon_, [&](const std::string& socket) {
        socket_path_ = socket;
        reply = Attach(timeout);
        return reply.status();
      });
  if (!use.ok()) {
    return Annotate(use.status(), absl::StrCat("no socket configured and no system blockswapd at ",
                                               kDefaultSocketPath, ", so the private one in ",
                                               private_daemon_->directory));
  }
  AnnounceOnce(use->started ? StartedAnnouncement(*private_daemon_, use->pid)
                            : absl::StrCat("using the private blockswapd at ", socket_path_,
                                           " (already running)"));
  return reply;
}

absl::Status Connection::OpenSideChannel() {
  BLOCKSWAP_ASSIGN_OR_RETURN(SideChannelClient side_channel,
                             SideChannelClient::Connect(socket_path_, token_));
  BLOCKSWAP_RETURN_IF_ERROR(Annotate(side_channel.AwaitAccepted(kSideChannelTimeout),
                                     "opening the descriptor side channel"));
  side_channel_ = std::make_unique<SideChannelClient>(std::move(side_channel));
  return absl::OkStatus();
}

void Connection::RecordModelHandle(absl::string_view session_token, absl::string_view model_id,
                                   uint32_t handle) {
  absl::MutexLock lock(&handles_mu_);
  if (handles_session_ != session_token) {
    handles_session_ = std::string(session_token);
    model_handles_.clear();
  }
  model_handles_[std::string(model_id)] = handle;
}

absl::StatusOr<uint32_t> Connection::ModelHandle(absl::string_view session_token,
                                                 absl::string_view model_id) const {
  absl::MutexLock lock(&handles_mu_);
  auto it = model_handles_.find(model_id);
  if (handles_session_ != session_token || it == model_handles_.end()) {
    return absl::NotFoundError(absl::StrCat("model ", model_id.substr(0, 80),
                                            " is not open in the session (open it again after a "
                                            "reconnection)"));
  }
  return it->second;
}

absl::Status Connection::Reconnect(absl::Duration timeout) {
  CloseLoadStream();
  side_channel_.reset();
  // A daemon that is still there (it paused past the heartbeat limit) must
  // not keep the old session while this process lives: the new Attach names
  // it, to be replaced. Not a Detach, which says the session's rings are
  // closed: this process may still map them (retired, not closed, until its
  // rings close), and a Detach sent to a stopped daemon may arrive after the
  // Attach.
  if (!token_.empty()) replaces_token_ = std::exchange(token_, std::string());
  const BackendKind kind = backend_->kind();
  const std::vector<std::string> devices = device_uuids_;
  // Until the new session is attached, Liveness() keeps reporting the loss.
  // A private daemon that is gone is started anew.
  absl::StatusOr<v1::AttachReply> reply =
      private_daemon_.has_value() ? AttachPrivate(timeout) : Attach(timeout);
  if (!reply.ok()) {
    device_uuids_ = devices;
    return reply.status();
  }
  const bool cuda = reply->backend() == v1::BACKEND_CUDA;
  if (cuda != (kind == BackendKind::kCuda) || device_uuids_ != devices) {
    absl::Status mismatch = absl::FailedPreconditionError(
        absl::StrCat("blockswapd at ", socket_path_, " came back with other devices (",
                     absl::StrJoin(device_uuids_, ", "), "; the session had ",
                     absl::StrJoin(devices, ", "), ")"));
    device_uuids_ = devices;
    return mismatch;
  }
  {
    absl::MutexLock lock(&load_mu_);
    load_stream_error_ = absl::OkStatus();
  }
  {
    absl::MutexLock lock(&errors_mu_);
    ring_errors_.clear();
    ended_error_ = absl::OkStatus();
  }
  load_stream_ended_.store(false, std::memory_order_release);
  return OpenSideChannel();
}

void Connection::CloseLoadStream() {
  {
    absl::MutexLock lock(&load_mu_);
    if (load_stream_ != nullptr) {
      load_stream_->WritesDone();
      load_context_->TryCancel();
    }
  }
  if (load_reader_.joinable()) load_reader_.join();
  // Once only: a second WritesDone on a stream is a gRPC API misuse (abort).
  absl::MutexLock lock(&load_mu_);
  load_stream_.reset();
  load_context_.reset();
}

Connection::~Connection() {
  CloseLoadStream();
  if (!token_.empty()) DetachSession(absl::Seconds(5));
}

void Connection::DetachSession(absl::Duration timeout) {
  v1::DetachRequest request;
  request.set_session_token(token_);
  v1::DetachReply reply;
  auto context = Context(timeout);
  (void)stub_->Detach(context.get(), request, &reply);
}

absl::Status Connection::ReportStats(const std::vector<v1::PassStats>& passes) {
  if (passes.empty()) return absl::OkStatus();
  v1::ReportStatsRequest request;
  request.set_session_token(token_);
  for (const v1::PassStats& pass : passes) *request.add_passes() = pass;
  v1::ReportStatsReply reply;
  auto context = Context(kStatsReportTimeout);
  grpc::Status sent = stub_->ReportStats(context.get(), request, &reply);
  if (!sent.ok()) return CallError(sent, "reporting pass statistics");
  return absl::OkStatus();
}

absl::StatusOr<std::string> Connection::LocalDeviceUuid(int ordinal) const {
  const auto& devices = backend_->devices();
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= devices.size()) {
    return absl::OutOfRangeError(absl::StrCat(
        "device ", ordinal, " out of range (this process sees ", devices.size(), " devices)"));
  }
  return devices[static_cast<size_t>(ordinal)]->info().uuid;
}

absl::StatusOr<Device*> Connection::LocalDevice(absl::string_view uuid) const {
  absl::StatusOr<Device*> device = backend_->FindDevice(uuid);
  if (!device.ok()) {
    return Annotate(device.status(), "the daemon's device is not visible in this process");
  }
  return device;
}

absl::Status Connection::RingsAvailable(absl::string_view uuid) const {
  absl::MutexLock lock(&rings_mu_);
  if (auto it = rings_unavailable_.find(uuid); it != rings_unavailable_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("blockswapd cannot serve rings on ", uuid, ": ", it->second));
  }
  if (auto it = rings_unusable_here_.find(uuid); it != rings_unusable_here_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this process cannot use blockswapd's rings on ", uuid, ": ", it->second));
  }
  return absl::OkStatus();
}

void Connection::MarkRingsUnavailable(absl::string_view uuid, absl::string_view reason) {
  absl::MutexLock lock(&rings_mu_);
  rings_unusable_here_.emplace(std::string(uuid), std::string(reason));
}

absl::StatusOr<std::vector<UniqueFd>> Connection::ReceiveFds(uint64_t batch) {
  if (side_channel_ == nullptr) {
    return absl::UnavailableError("no descriptor side channel: the session is being re-attached");
  }
  return side_channel_->Receive(batch, kSideChannelTimeout);
}

absl::StatusOr<uint64_t> Connection::OfferFile(const UniqueFd& file) {
  uint64_t offer = next_offer_.fetch_add(1);
  BLOCKSWAP_RETURN_IF_ERROR(side_channel_->SendFileOffer(offer, file));
  return offer;
}

absl::Status Connection::OpenLoadStream() {
  load_context_ = std::make_unique<grpc::ClientContext>();
  load_stream_ = stub_->Load(load_context_.get());
  if (load_stream_ == nullptr) return absl::UnavailableError("could not open the Load stream");
  load_reader_ = std::thread([this] { ReadLoadEvents(); });
  return absl::OkStatus();
}

absl::Status Connection::ReadyLoadStream() {
  BLOCKSWAP_RETURN_IF_ERROR(load_stream_error_);
  BLOCKSWAP_RETURN_IF_ERROR(EndedError());
  if (load_stream_ == nullptr) BLOCKSWAP_RETURN_IF_ERROR(OpenLoadStream());
  return absl::OkStatus();
}

absl::Status Connection::OpenLoadStreamIfClosed() {
  absl::MutexLock lock(&load_mu_);
  return ReadyLoadStream();
}

absl::Status Connection::SendLoad(v1::LoadRequest request) {
  request.set_session_token(token_);
  absl::MutexLock lock(&load_mu_);
  BLOCKSWAP_RETURN_IF_ERROR(ReadyLoadStream());
  if (!load_stream_->Write(request)) {
    load_stream_error_ = absl::UnavailableError("the Load stream to blockswapd broke");
    return load_stream_error_;
  }
  return absl::OkStatus();
}

void Connection::ReadLoadEvents() {
  grpc::ClientReaderWriter<v1::LoadRequest, v1::LoadEvent>* stream;
  {
    absl::MutexLock lock(&load_mu_);
    stream = load_stream_.get();
  }
  v1::LoadEvent event;
  while (stream->Read(&event)) {
    absl::Status error(static_cast<absl::StatusCode>(event.error_code()), event.error_message());
    absl::MutexLock lock(&errors_mu_);
    ring_errors_.emplace(event.ring_id(), error);  // the first error explains the rest
  }
  grpc::Status finished = stream->Finish();
  absl::Status error = finished.ok() ? absl::UnavailableError("blockswapd closed the Load stream")
                                     : CallError(finished, "the Load stream ended");
  {
    absl::MutexLock lock(&errors_mu_);
    ended_error_ = error;
  }
  load_stream_ended_.store(true, std::memory_order_release);
  RunLossWatches();
}

void Connection::RunLossWatches() {
  absl::MutexLock lock(&watch_mu_);
  for (auto& [id, on_loss] : loss_watches_) on_loss();
}

std::unique_ptr<Connection::LossWatch> Connection::WatchLoss(std::function<void()> on_loss) {
  absl::MutexLock lock(&watch_mu_);
  const uint64_t id = next_watch_++;
  // Ended before the watch: the reader has run the watches already.
  if (load_stream_ended_.load(std::memory_order_acquire)) on_loss();
  loss_watches_.emplace(id, std::move(on_loss));
  return std::make_unique<LossWatch>(*this, id);
}

Connection::LossWatch::~LossWatch() {
  absl::MutexLock lock(&connection_.watch_mu_);
  connection_.loss_watches_.erase(id_);
}

absl::Status Connection::EndedError() const {
  if (!load_stream_ended_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&errors_mu_);
  return ended_error_;
}

absl::Status Connection::Liveness() const {
  absl::Status ended = EndedError();
  if (ended.ok()) return ended;
  return absl::UnavailableError(absl::StrCat("lost blockswapd: ", ended.message()));
}

absl::Status Connection::RingError(uint64_t ring_id) const {
  absl::MutexLock lock(&errors_mu_);
  auto it = ring_errors_.find(ring_id);
  return it == ring_errors_.end() ? absl::OkStatus() : it->second;
}

}  // namespace blockswap::client
