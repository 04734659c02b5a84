// Header-only C++ wrapper over the C ABI (blockswap.h): RAII types that free
// their handle, and errors as blockswap::Error exceptions carrying the code
// and the daemon's message. Compiles against nothing but blockswap.h, so it
// is as stable as the C ABI.
#ifndef BLOCKSWAP_BLOCKSWAP_HPP_
#define BLOCKSWAP_BLOCKSWAP_HPP_

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "blockswap/blockswap.h"

namespace blockswap {

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }  // enum bs_code

 private:
  int code_;
};

namespace detail {
inline void Check(int code, const char* what) {
  if (code != BS_OK) throw Error(code, std::string(what) + ": " + bs_last_error());
}
template <typename T, void (*Free)(T*)>
struct Handle {
  T* ptr = nullptr;
  Handle() = default;
  explicit Handle(T* p) : ptr(p) {}
  Handle(Handle&& other) noexcept : ptr(std::exchange(other.ptr, nullptr)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      if (ptr != nullptr) Free(ptr);
      ptr = std::exchange(other.ptr, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (ptr != nullptr) Free(ptr);
  }
};
inline uint32_t Millis(std::chrono::milliseconds timeout) {
  return static_cast<uint32_t>(timeout.count());
}
}  // namespace detail

// One tensor of a block to register: its bytes stay the caller's.
struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  const void* data = nullptr;
};
using Block = std::vector<Tensor>;

class Client;

// A registered model, open in this client's session. Destroy it before its
// Client.
class Model {
 public:
  const char* id() const { return bs_model_id(handle_.ptr); }
  uint32_t block_count() const { return bs_model_block_count(handle_.ptr); }
  uint64_t block_bytes(uint32_t block) const { return bs_model_block_bytes(handle_.ptr, block); }
  uint32_t tensor_count(uint32_t block) const { return bs_model_tensor_count(handle_.ptr, block); }
  bs_tensor_info tensor(uint32_t block, uint32_t index) const {
    bs_tensor_info info{};
    detail::Check(bs_model_tensor(handle_.ptr, block, index, &info), "bs_model_tensor");
    return info;
  }
  // Read-only host view of the daemon's master copy of a block.
  const void* master(uint32_t block) const { return bs_model_master(handle_.ptr, block); }
  const bs_model* get() const { return handle_.ptr; }

 private:
  friend class Client;
  explicit Model(bs_model* model) : handle_(model) {}
  detail::Handle<bs_model, bs_model_close> handle_;
};

// A ring of device buffers. Destroy it before its Client. `stream` is a
// cudaStream_t on cuda and nullptr (the calling thread) on host.
class Ring {
 public:
  uint32_t slot_count() const { return bs_ring_slot_count(handle_.ptr); }
  uint64_t slot_bytes() const { return bs_ring_slot_bytes(handle_.ptr); }
  void* slot(uint32_t index) const { return bs_ring_slot(handle_.ptr, index); }

  void Load(uint32_t slot, const Model& model, uint32_t block, void* stream = nullptr) {
    detail::Check(bs_ring_load(handle_.ptr, slot, model.get(), block, stream), "bs_ring_load");
  }
  void Wait(uint32_t slot, void* stream = nullptr,
            std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    detail::Check(bs_ring_wait(handle_.ptr, slot, stream, detail::Millis(timeout)),
                  "bs_ring_wait");
  }
  void Release(uint32_t slot, void* stream = nullptr) {
    detail::Check(bs_ring_release(handle_.ptr, slot, stream), "bs_ring_release");
  }
  void Drain(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    detail::Check(bs_ring_drain(handle_.ptr, detail::Millis(timeout)), "bs_ring_drain");
  }
  // bs_ring_close: the ring's teardown ordered after `stream`, the stream
  // that used its slots last (the destructor closes on the default stream).
  void Close(void* stream = nullptr, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    detail::Check(bs_ring_close(handle_.ptr, stream, detail::Millis(timeout)), "bs_ring_close");
  }
  bs_ring* get() const { return handle_.ptr; }

 private:
  friend class Client;
  explicit Ring(bs_ring* ring) : handle_(ring) {}
  detail::Handle<bs_ring, bs_ring_destroy> handle_;
};

// An attached session with the node's blockswapd.
class Client {
 public:
  explicit Client(const std::string& socket_path = "", const std::string& name = "") {
    bs_client* client = nullptr;
    detail::Check(bs_connect(socket_path.empty() ? nullptr : socket_path.c_str(), name.c_str(),
                             &client),
                  "bs_connect");
    handle_ = detail::Handle<bs_client, bs_disconnect>(client);
  }

  int backend() const { return bs_client_backend(handle_.ptr); }  // enum bs_backend
  std::vector<std::string> devices() const {
    std::vector<std::string> uuids;
    for (uint32_t i = 0; i < bs_client_device_count(handle_.ptr); ++i) {
      uuids.emplace_back(bs_client_device_uuid(handle_.ptr, i));
    }
    return uuids;
  }

  Model Register(const std::string& name, const std::vector<Block>& blocks) {
    std::vector<std::vector<bs_tensor_desc>> tensors(blocks.size());
    std::vector<bs_block_desc> descs(blocks.size());
    for (size_t b = 0; b < blocks.size(); ++b) {
      for (const Tensor& t : blocks[b]) {
        tensors[b].push_back(bs_tensor_desc{t.name.c_str(), t.dtype.c_str(), t.shape.data(),
                                            static_cast<uint32_t>(t.shape.size()), t.data});
      }
      descs[b] = bs_block_desc{tensors[b].data(), static_cast<uint32_t>(tensors[b].size())};
    }
    bs_model* model = nullptr;
    detail::Check(bs_model_register(handle_.ptr, name.c_str(), descs.data(),
                                    static_cast<uint32_t>(descs.size()), &model),
                  "bs_model_register");
    return Model(model);
  }

  // A model read by the daemon from a safetensors file (bs_model_register_file);
  // `extras`, when given, receives the tensors not streamed (empty when none).
  Model RegisterFile(const std::string& path, const std::string& block_pattern,
                     const std::string& select = "", uint32_t select_rank = 0,
                     std::unique_ptr<Model>* extras = nullptr) {
    bs_file_options options{block_pattern.c_str(), select.c_str(), select_rank, nullptr};
    bs_model* model = nullptr;
    bs_model* extras_model = nullptr;
    detail::Check(bs_model_register_file(handle_.ptr, path.c_str(), &options, &model,
                                         extras == nullptr ? nullptr : &extras_model),
                  "bs_model_register_file");
    Model result(model);
    if (extras != nullptr) {
      extras->reset(extras_model == nullptr ? nullptr : new Model(extras_model));
    }
    return result;
  }

  Model Open(const std::string& model_id) {
    bs_model* model = nullptr;
    detail::Check(bs_model_open(handle_.ptr, model_id.c_str(), &model), "bs_model_open");
    return Model(model);
  }

  Ring CreateRing(const std::string& device_uuid, uint32_t slot_count, uint64_t slot_bytes) {
    bs_ring* ring = nullptr;
    detail::Check(bs_ring_create(handle_.ptr, device_uuid.c_str(), slot_count, slot_bytes, &ring),
                  "bs_ring_create");
    return Ring(ring);
  }

  bs_client* get() const { return handle_.ptr; }

 private:
  detail::Handle<bs_client, bs_disconnect> handle_;
};

}  // namespace blockswap

#endif  // BLOCKSWAP_BLOCKSWAP_HPP_
