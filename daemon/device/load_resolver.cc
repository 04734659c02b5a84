#include "daemon/device/load_resolver.h"

#include "absl/strings/str_cat.h"
#include "daemon/validation/request_validation.h"
#include "shared/base/status.h"

namespace blockswap::daemon {

uint32_t SessionModels::Open(std::shared_ptr<const Model> model) {
  absl::MutexLock lock(&mu_);
  auto [it, added] = by_id_.try_emplace(model->id(), 0);
  if (added) {
    by_handle_.push_back(std::move(model));
    it->second = static_cast<uint32_t>(by_handle_.size());
  }
  return it->second;
}

std::shared_ptr<const Model> SessionModels::FindById(absl::string_view model_id) const {
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(model_id);
  return it == by_id_.end() ? nullptr : by_handle_[it->second - 1];
}

absl::StatusOr<std::shared_ptr<const Model>> SessionModels::FindByHandle(uint32_t handle) const {
  absl::MutexLock lock(&mu_);
  if (handle == 0 || handle > by_handle_.size()) {
    return absl::NotFoundError(absl::StrCat("model handle ", handle, " is not open in session ",
                                            session_id_, " (it has handles 1..",
                                            by_handle_.size(), ")"));
  }
  return by_handle_[handle - 1];
}

std::vector<std::string> SessionModels::Ids() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, handle] : by_id_) ids.push_back(id);
  return ids;
}

void SessionModels::Clear() {
  absl::MutexLock lock(&mu_);
  by_id_.clear();
  by_handle_.clear();
}

absl::StatusOr<ResolvedLoad> ResolveLoad(const v1::LoadRequest& request,
                                         const std::shared_ptr<const Model>& model,
                                         const RingShape& shape) {
  const Model& m = *model;
  BLOCKSWAP_RETURN_IF_ERROR(ValidateLoad(
      request, LoadTarget{shape.slot_count, shape.slot_bytes,
                          static_cast<uint32_t>(m.block_count()),
                          [&m](uint32_t b) { return m.block_bytes(b); }}));
  return ResolvedLoad{m.block(request.block()), m.block_bytes(request.block()), model, m.id(),
                      m.block_master(request.block())->staged()};
}

absl::StatusOr<ResolvedLoad> LoadResolver::Resolve(uint64_t ring_id, const RingShape& shape,
                                                   const RequestValues& entry) const {
  absl::StatusOr<ResolvedLoad> resolved = Find(ring_id, shape, entry);
  (resolved.ok() ? counts_->loads : counts_->rejected).fetch_add(1, std::memory_order_relaxed);
  return resolved;
}

absl::StatusOr<ResolvedLoad> LoadResolver::Find(uint64_t ring_id, const RingShape& shape,
                                                const RequestValues& entry) const {
  BLOCKSWAP_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model,
                             models_->FindByHandle(entry.model_handle));
  v1::LoadRequest request;
  request.set_ring_id(ring_id);
  request.set_slot(entry.slot);
  request.set_block(entry.block);
  request.set_generation(entry.generation);
  return ResolveLoad(request, model, shape);
}

}  // namespace blockswap::daemon
