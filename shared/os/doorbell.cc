#include "shared/os/doorbell.h"

#include "absl/strings/str_cat.h"
#include "shared/os/futex.h"
#include "shared/base/status.h"

namespace blockswap {
namespace {

constexpr size_t kWordObjectBytes = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<Doorbell>> Doorbell::Create(absl::string_view name) {
  std::unique_ptr<Doorbell> doorbell(new Doorbell());
  BLOCKSWAP_ASSIGN_OR_RETURN(doorbell->bell_memory_,
                             SharedMemory::Create(absl::StrCat(name, "-bell"), kWordObjectBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(
      doorbell->sleeping_memory_,
      SharedMemory::Create(absl::StrCat(name, "-sleeping"), kWordObjectBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(doorbell->bell_map_, doorbell->bell_memory_.Map(Access::kReadWrite));
  BLOCKSWAP_ASSIGN_OR_RETURN(doorbell->sleeping_map_,
                             doorbell->sleeping_memory_.Map(Access::kReadWrite));
  // Only the mapping above may ever write `sleeping`.
  BLOCKSWAP_RETURN_IF_ERROR(doorbell->sleeping_memory_.SealAgainstNewWriters());
  return doorbell;
}

absl::StatusOr<std::unique_ptr<Doorbell>> Doorbell::Import(DoorbellExport exported) {
  if (!exported.bell.valid() || !exported.sleeping.valid()) {
    return absl::InvalidArgumentError("a doorbell arrived without its two descriptors");
  }
  std::unique_ptr<Doorbell> doorbell(new Doorbell());
  BLOCKSWAP_ASSIGN_OR_RETURN(doorbell->bell_memory_,
                             SharedMemory::Adopt(std::move(exported.bell), kWordObjectBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(
      doorbell->sleeping_memory_,
      SharedMemory::Adopt(std::move(exported.sleeping), kWordObjectBytes));
  BLOCKSWAP_ASSIGN_OR_RETURN(doorbell->bell_map_, doorbell->bell_memory_.Map(Access::kReadWrite));
  BLOCKSWAP_ASSIGN_OR_RETURN(doorbell->sleeping_map_,
                             doorbell->sleeping_memory_.Map(Access::kReadOnly));
  return doorbell;
}

absl::StatusOr<DoorbellExport> Doorbell::Export() const {
  DoorbellExport out;
  BLOCKSWAP_ASSIGN_OR_RETURN(out.bell, bell_memory_.fd().Duplicate());
  // A read-only open file description: the client cannot map it writable.
  BLOCKSWAP_ASSIGN_OR_RETURN(out.sleeping, sleeping_memory_.fd().ReopenReadOnly());
  return out;
}

std::atomic<uint32_t>& Doorbell::bell() const {
  return *static_cast<std::atomic<uint32_t>*>(bell_map_.data());
}

std::atomic<uint32_t>& Doorbell::sleeping() const {
  return *static_cast<std::atomic<uint32_t>*>(sleeping_map_.data());
}

void Doorbell::Ring() {
  bell().fetch_add(1, std::memory_order_seq_cst);
  if (sleeping().load(std::memory_order_seq_cst) != 0) FutexWakeAll(&bell());
}

uint32_t Doorbell::PrepareToSleep() {
  sleeping().store(1, std::memory_order_seq_cst);
  return bell().load(std::memory_order_seq_cst);
}

void Doorbell::Sleep(uint32_t seen, absl::Duration timeout) {
  if (timeout > absl::ZeroDuration()) FutexWait(&bell(), seen, timeout);
  Awake();
}

void Doorbell::Awake() { sleeping().store(0, std::memory_order_relaxed); }

}  // namespace blockswap
