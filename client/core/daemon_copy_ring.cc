#include "client/core/daemon_copy_ring.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "shared/base/env_settings.h"
#include "shared/base/status.h"
#include "shared/protocol/grpc_status.h"
#include "shared/protocol/request_queue.h"
#include "shared/protocol/ring_wire.h"

namespace blockswap::client {
namespace {

constexpr absl::Duration kDestroyDrainTimeout = absl::Seconds(5);

}  // namespace

absl::StatusOr<LoadTransport> LoadTransportFromEnvironment() {
  const std::optional<std::string> value = EnvValue(EnvSetting::kLoadTransport);
  if (!value.has_value() || *value == "shm") return LoadTransport::kShm;
  if (*value == "grpc") return LoadTransport::kGrpc;
  return absl::InvalidArgumentError(
      absl::StrCat(EnvName(EnvSetting::kLoadTransport), "=", *value, " (must be grpc or shm)"));
}

absl::StatusOr<std::unique_ptr<RingImport>> DaemonCopyRing::Import(Connection& connection,
                                                                    Device& device,
                                                                    uint32_t slot_count,
                                                                    uint64_t slot_bytes,
                                                                    LoadTransport transport) {
  v1::CreateRingRequest request;
  request.set_session_token(connection.token());
  request.set_device_uuid(device.info().uuid);
  request.set_slot_count(slot_count);
  request.set_slot_bytes(slot_bytes);
  request.set_request_ring(transport == LoadTransport::kShm);
  v1::RingDescriptor descriptor;
  auto context = Connection::Context();
  grpc::Status created = connection.stub().CreateRing(context.get(), request, &descriptor);
  if (!created.ok()) return Connection::CallError(created, "creating a ring");
  absl::StatusOr<std::unique_ptr<RingImport>> ring =
      ImportCreated(connection, device, descriptor, transport);
  if (!ring.ok()) {
    // What this process did not take, the daemon frees now rather than at
    // the session's end (the caller may go on with copies of its own).
    (void)DestroyOnDaemon(connection, request.session_token(), descriptor.ring_id(),
                          kCallTimeout);
  }
  return ring;
}

absl::StatusOr<std::unique_ptr<RingImport>> DaemonCopyRing::ImportCreated(
    Connection& connection, Device& device, const v1::RingDescriptor& descriptor,
    LoadTransport transport) {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::vector<UniqueFd> fds,
                             connection.ReceiveFds(descriptor.daemon_control().batch()));
  BLOCKSWAP_ASSIGN_OR_RETURN(
      RingExport exported,
      RingFromWire(descriptor, std::move(fds), descriptor.daemon_control().batch()));
  if (exported.boot_id != connection.boot_id()) {
    return absl::UnavailableError("the ring comes from a different daemon than the session's");
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<RingImport> ring,
                             RingImport::Import(device, std::move(exported)));
  if (transport == LoadTransport::kShm) {
    if (!ring->has_request_ring()) {
      return absl::FailedPreconditionError(
          absl::StrCat("blockswapd gave ring ", ring->ring_id(),
                       " no request ring, which BLOCKSWAP_LOAD_TRANSPORT=shm (the default) needs; "
                       "BLOCKSWAP_LOAD_TRANSPORT=grpc sends loads on the gRPC Load stream"));
    }
    // Loads will not open the Load stream: open it now, so that the daemon's
    // loss still ends waits at once (Connection::Liveness).
    BLOCKSWAP_RETURN_IF_ERROR(connection.OpenLoadStreamIfClosed());
  }
  return ring;
}

absl::Status DaemonCopyRing::DestroyOnDaemon(Connection& connection,
                                             const std::string& session_token, uint64_t ring_id,
                                             absl::Duration timeout) {
  v1::DestroyRingRequest request;
  request.set_session_token(session_token);
  request.set_ring_id(ring_id);
  v1::DestroyRingReply reply;
  auto context = Connection::Context(timeout);
  grpc::Status destroyed = connection.stub().DestroyRing(context.get(), request, &reply);
  return destroyed.ok() ? absl::OkStatus() : Connection::CallError(destroyed, "destroying a ring");
}

absl::StatusOr<std::unique_ptr<DaemonCopyRing>> DaemonCopyRing::Create(Connection& connection,
                                                                       Device& device,
                                                                       uint32_t slot_count,
                                                                       uint64_t slot_bytes) {
  BLOCKSWAP_RETURN_IF_ERROR(connection.RingsAvailable(device.info().uuid));
  BLOCKSWAP_ASSIGN_OR_RETURN(LoadTransport transport, LoadTransportFromEnvironment());
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<RingImport> ring,
                             Import(connection, device, slot_count, slot_bytes, transport));
  BLOCKSWAP_ASSIGN_OR_RETURN(std::unique_ptr<Stream> notifier, device.CreateStream());
  return std::unique_ptr<DaemonCopyRing>(
      new DaemonCopyRing(connection, device, transport, std::move(ring), std::move(notifier)));
}

absl::Status DaemonCopyRing::Recreate() {
  {
    absl::MutexLock lock(&mu_);
    BLOCKSWAP_RETURN_IF_ERROR(CheckOpen());
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(
      std::unique_ptr<RingImport> ring,
      Import(connection_, device(), shape().slot_count, shape().slot_bytes, transport_));
  absl::MutexLock lock(&mu_);
  {
    // The old ring's healing copies read the masters recorded for it.
    absl::MutexLock heal(&heal_mu_);
    if (healer_ != nullptr) (void)healer_->Synchronize();
    healing_ = ring.get();
    requested_.assign(shape().slot_count, RequestedLoad());
  }
  WatchLoss(*ring);
  retired_copy_time_ += consumer_->CopyTimeSoFar();
  id_ = ring->ring_id();
  consumer_ = NewConsumer(*ring);
  first_traced_ticket_ = meter_.next_ticket();
  ring_session_ = connection_.token();
  retired_.push_back(std::exchange(ring_, std::move(ring)));
  return absl::OkStatus();
}

DaemonCopyRing::~DaemonCopyRing() {
  {
    absl::MutexLock lock(&mu_);
    if (ring_ == nullptr) return;
  }
  absl::StatusOr<std::unique_ptr<Stream>> stream =
      device().WrapStream(nullptr, kDestroyDrainTimeout);
  if (stream.ok()) {
    (void)Close(**stream, kDestroyDrainTimeout);
  } else {
    // No stream to order against: close what is imported all the same.
    absl::MutexLock lock(&mu_);
    consumer_.reset();
    notifier_.reset();
    loss_watches_.clear();
    SynchronizeHealer();
    retired_.clear();
    ring_.reset();
  }
}

absl::Status DaemonCopyRing::Close(Stream& stream, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (ring_ == nullptr) return absl::OkStatus();
  absl::Status first;
  const auto keep_first = [&first](const absl::Status& status) {
    if (first.ok() && !status.ok()) first = status;
  };
  // A daemon that is gone will neither copy again nor free anything: there
  // is nothing to release to it.
  const bool daemon_alive =
      connection_.Liveness().ok() &&
      ring_->control().status.boot_id.load(std::memory_order_relaxed) == ring_->boot_id();
  // 1. `free` after the last use of every slot ever loaded, once the loads
  //    still outstanding are filled (a slot's next free follows its fill).
  //    Loads that do not fill within `timeout` get no record: the stream's
  //    synchronisation below still orders every use before DestroyRing.
  absl::Status drained = daemon_alive ? consumer_->Drain(timeout) : absl::OkStatus();
  keep_first(drained);
  if (daemon_alive && drained.ok()) {
    for (uint32_t slot = 0; slot < shape().slot_count; ++slot) {
      if (consumer_->requested(slot) == 0) continue;
      keep_first(consumer_->Release(slot, stream));
    }
  }
  // 2. Synchronise: the stream's reads of the slots, and the notifier's
  //    writes into the control block, are done before anything is unmapped.
  //    A stream that waits on a ready word for a copy that will not come (a
  //    load that did not fill, a dead daemon) is let go first, or this would
  //    wait for ever: what it reads then is garbage, and the caller hears
  //    of it (an error above, or DATA_LOSS for a wait already committed).
  if (!daemon_alive || !drained.ok()) AbandonHealing(*ring_);
  keep_first(stream.Synchronize());
  keep_first(TakeUnfinishedWaitsLocked());
  keep_first(meter_.Collect(/*wait_for_all=*/true));
  consumer_.reset();
  if (notifier_ != nullptr) keep_first(notifier_->Synchronize());
  notifier_.reset();
  // 3. Close the imported memory and words, their watches first: the
  //    connection's reader thread runs a watch when it loses the daemon,
  //    and a watch destroyed waits for one running.
  loss_watches_.clear();
  SynchronizeHealer();
  retired_.clear();
  ring_.reset();
  // 4. Only now may the daemon free what they were imported from.
  if (daemon_alive) keep_first(DestroyOnDaemon(connection_, ring_session_, id_, timeout));
  return first.ok() ? first : Annotate(first, absl::StrCat("closing ring ", id_));
}

bool DaemonCopyRing::Heal(RingImport& ring, uint32_t slot, uint32_t generation, uint32_t value) {
  absl::MutexLock lock(&heal_mu_);
  if (&ring != healing_ || slot >= requested_.size()) return false;
  const RequestedLoad& load = requested_[slot];
  if (load.generation != generation || load.master == nullptr || ring.ready_words() == nullptr) {
    return false;
  }
  // Made at the first loss: a ring that never loses its daemon needs none.
  if (healer_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Stream>> stream = device().CreateStream();
    if (!stream.ok()) return false;
    healer_ = *std::move(stream);
  }
  if (!healer_->CopyHostToDevice(ring.slot(slot), load.master->data(), load.bytes).ok() ||
      !healer_->WriteWord(*ring.ready_words(), slot, value).ok()) {
    return false;
  }
  std::fprintf(stderr,
               "blockswap: blockswapd was lost before its copy into ring %llu slot %u generation "
               "%u was done; this process copied the block from the master itself\n",
               static_cast<unsigned long long>(ring.ring_id()), slot, generation);
  return true;
}

void DaemonCopyRing::SynchronizeHealer() {
  absl::MutexLock lock(&heal_mu_);
  if (healer_ != nullptr) (void)healer_->Synchronize();
  requested_.assign(requested_.size(), RequestedLoad());
}

absl::Status DaemonCopyRing::CheckOpen() const {
  if (ring_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("ring ", id_, " is closed"));
}

absl::Status DaemonCopyRing::Explain(const absl::Status& status) const {
  if (status.ok()) return status;
  absl::Status reported = connection_.RingError(id_);
  if (reported.ok()) return status;
  return absl::Status(reported.code(),
                      absl::StrCat("ring ", id_, " failed in blockswapd: ", reported.message()));
}

absl::Status DaemonCopyRing::Load(uint32_t slot, const Model& model, uint32_t block, Stream& stream) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpen());
  absl::StatusOr<uint32_t> generation = consumer_->BeginLoad(slot, stream);
  if (!generation.ok()) return Explain(generation.status());
  if (block < model.block_count()) {
    absl::MutexLock heal(&heal_mu_);
    requested_[slot] = {*generation, model.master_view(block), model.layout().blocks[block].bytes};
  }
  if (transport_ == LoadTransport::kShm) {
    // A request names the model by its handle in the ring's session: a
    // model opened in an earlier session (before a reconnection) by the
    // handle of its reopening.
    uint32_t handle = model.handle();
    if (model.session_token() != ring_session_) {
      absl::StatusOr<uint32_t> reopened = connection_.ModelHandle(ring_session_, model.id());
      if (!reopened.ok())
        return Annotate(reopened.status(), absl::StrCat("loading into ring ", id_));
      handle = *reopened;
    }
    BLOCKSWAP_RETURN_IF_ERROR(RequestQueueWriter(ring_->client_control(), ring_->control())
                                  .Push({slot, *generation, handle, block}));
    ring_->doorbell()->Ring();
    return absl::OkStatus();
  }
  v1::LoadRequest request;
  request.set_ring_id(ring_->ring_id());
  request.set_slot(slot);
  request.set_model_id(model.id());
  request.set_block(block);
  request.set_generation(*generation);
  return connection_.SendLoad(std::move(request));
}

absl::Status DaemonCopyRing::Wait(uint32_t slot, Stream& stream, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpen());
  return Explain(consumer_->AwaitLoaded(slot, stream, timeout));
}

absl::StatusOr<std::optional<uint64_t>> DaemonCopyRing::WaitTimed(uint32_t slot, Stream& stream,
                                                        absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpen());
  if (ring_->ready_words() == nullptr) {
    BLOCKSWAP_RETURN_IF_ERROR(Explain(consumer_->AwaitLoaded(slot, stream, timeout)));
    return std::nullopt;
  }
  BLOCKSWAP_ASSIGN_OR_RETURN(WaitTimer * timer, meter_.Acquire());
  if (absl::Status waited = consumer_->AwaitLoaded(slot, stream, timeout, timer); !waited.ok()) {
    meter_.Unused();
    return Explain(waited);
  }
  const uint64_t ticket = meter_.Issued(slot, consumer_->requested(slot));
  // Results of earlier waits, without blocking: the trace gets them soon.
  BLOCKSWAP_RETURN_IF_ERROR(meter_.Collect(/*wait_for_all=*/false));
  return ticket;
}

absl::StatusOr<std::vector<MeasuredStall>> DaemonCopyRing::TakeMeasuredStalls(bool wait_for_all) {
  absl::MutexLock lock(&mu_);
  if (ring_ == nullptr) return meter_.TakeCollected();  // Close collected the rest
  BLOCKSWAP_RETURN_IF_ERROR(meter_.Collect(wait_for_all));
  return meter_.TakeCollected();
}

absl::Status DaemonCopyRing::Release(uint32_t slot, Stream& stream) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpen());
  return Explain(consumer_->Release(slot, stream));
}

bool DaemonCopyRing::Filled(uint32_t slot) {
  if (slot >= shape().slot_count) return false;
  absl::MutexLock lock(&mu_);
  if (ring_ == nullptr) return false;
  const uint32_t requested = consumer_->requested(slot);
  return requested != 0 &&
         ring_->control().filled_seq[slot].load(std::memory_order_acquire) == requested;
}

std::optional<absl::Duration> DaemonCopyRing::CopyTime() {
  absl::MutexLock lock(&mu_);
  if (consumer_ == nullptr) return std::nullopt;  // closed
  return retired_copy_time_ + consumer_->CopyTimeSoFar();
}

absl::Status DaemonCopyRing::Health() {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpen());
  return Explain(consumer_->CheckHealth());
}

absl::Status DaemonCopyRing::TakeUnfinishedWaits() {
  absl::MutexLock lock(&mu_);
  return TakeUnfinishedWaitsLocked();
}

absl::Status DaemonCopyRing::TakeUnfinishedWaitsLocked() {
  std::vector<std::string> released;
  const auto take = [&released](const RingImport& ring) {
    for (const RingImport::UnfinishedWait& wait : ring.TakeUnfinishedWaits()) {
      released.push_back(absl::StrCat("ring ", ring.ring_id(), " slot ", wait.slot,
                                      " generation ", wait.generation));
    }
  };
  for (const std::unique_ptr<RingImport>& ring : retired_) take(*ring);
  if (ring_ != nullptr) take(*ring_);
  if (released.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "blockswapd was lost before its copy into ", absl::StrJoin(released, ", "),
      " was done, and the stream's wait for it had to be released (no one else could write "
      "it): the work queued behind that wait read a slot the copy may never have reached, so "
      "its results are not to be trusted"));
}

absl::Status DaemonCopyRing::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  BLOCKSWAP_RETURN_IF_ERROR(CheckOpen());
  return Explain(consumer_->Drain(timeout));
}

}  // namespace blockswap::client
