// Writes the seed corpus of request_validation_fuzzer and
// session_sequence_fuzzer (request_stream.h) into the directory given as the
// only argument: the request sequences of a real client (upload, commit,
// ring, loads, destroy, detach), and one sequence per kind of bad request the
// daemon refuses (bogus sizes, devices, slots, generations, blocks, ids,
// tokens; another session's ring; calls after Detach).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "blockswap/v1/blockswap.pb.h"
#include "daemon/validation/request_validation.h"
#include "shared/protocol/model_layout.h"
#include "tests/fuzz/request_stream.h"

namespace blockswap::fuzz {
namespace {

class Seed {
 public:
  template <typename Message>
  Seed& Add(RequestOp op, const Message& message, int session = 0) {
    AppendRecord(&bytes_, op, message.SerializeAsString(), session);
    return *this;
  }
  Seed& Raw(RequestOp op, const std::string& payload, int session = 0) {
    AppendRecord(&bytes_, op, payload, session);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

v1::AttachRequest Attach(const std::string& name = "seed",
                         uint32_t version = daemon::kProtocolVersion) {
  v1::AttachRequest request;
  request.set_client_name(name);
  request.set_protocol_version(version);
  return request;
}

// Blocks of `tensors` U8 tensors of `bytes` bytes each.
v1::BeginUploadRequest Upload(int blocks, int tensors, uint64_t bytes) {
  ModelLayout layout;
  for (int b = 0; b < blocks; ++b) {
    std::vector<TensorSpec> specs;
    for (int t = 0; t < tensors; ++t) {
      specs.push_back(TensorSpec{absl::StrCat("t", t), "U8", {bytes}});
    }
    layout.blocks.push_back(PackBlock(std::move(specs)).value());
  }
  v1::BeginUploadRequest request;
  request.set_name("seed-model");
  *request.mutable_layout() = LayoutToProto(layout);
  return request;
}

v1::CommitUploadRequest Commit(uint64_t upload_id) {
  v1::CommitUploadRequest request;
  request.set_upload_id(upload_id);
  return request;
}

v1::CreateRingRequest Ring(const std::string& device, uint32_t slots, uint64_t slot_bytes) {
  v1::CreateRingRequest request;
  request.set_device_uuid(device);
  request.set_slot_count(slots);
  request.set_slot_bytes(slot_bytes);
  return request;
}

v1::DestroyRingRequest Destroy(uint64_t ring_id) {
  v1::DestroyRingRequest request;
  request.set_ring_id(ring_id);
  return request;
}

// `model` "0".."7" and ring ids 1..8 are resolved by the session fuzzer.
v1::LoadRequest Load(uint64_t ring, uint32_t slot, const std::string& model, uint32_t block,
                     uint32_t generation) {
  v1::LoadRequest request;
  request.set_ring_id(ring);
  request.set_slot(slot);
  request.set_model_id(model);
  request.set_block(block);
  request.set_generation(generation);
  return request;
}

v1::OpenModelRequest Open(const std::string& model) {
  v1::OpenModelRequest request;
  request.set_model_id(model);
  return request;
}

std::string Write(uint64_t offset, const std::string& bytes) { return U64Bytes(offset) + bytes; }

}  // namespace
}  // namespace blockswap::fuzz

int main(int argc, char** argv) {
  using namespace blockswap::fuzz;  // NOLINT: a test program
  using blockswap::v1::PassStats;
  using blockswap::v1::RegisterFileRequest;
  using blockswap::v1::ReportStatsRequest;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  int written = 0;
  bool failed = false;
  auto put = [&](const std::string& name, const Seed& seed) {
    std::ofstream out(absl::StrCat(dir, "/", name), std::ios::binary | std::ios::trunc);
    out << seed.bytes();
    out.close();
    if (!out) {
      std::fprintf(stderr, "writing seed %s failed\n", name.c_str());
      failed = true;
    }
    ++written;
  };
  const std::string host = "HOST-0";

  // A client's life: upload two blocks, commit, ring, loads, destroy, detach.
  put("upload-ring-loads", Seed()
                               .Add(RequestOp::kAttach, Attach())
                               .Add(RequestOp::kBeginUpload, Upload(2, 2, 100))
                               .Raw(RequestOp::kWriteStaging, Write(0, std::string(100, 'a')))
                               .Add(RequestOp::kCommitUpload, Commit(1))
                               .Add(RequestOp::kCreateRing, Ring(host, 2, 1024))
                               .Add(RequestOp::kLoad, Load(1, 0, "1", 0, 1))
                               .Add(RequestOp::kLoad, Load(1, 1, "1", 1, 1))
                               .Add(RequestOp::kDestroyRing, Destroy(1))
                               .Raw(RequestOp::kDetach, ""));
  // The model registered before the input, by id alias.
  put("open-canary-load",
      Seed()
          .Add(RequestOp::kOpenModel, Open("0"))
          .Add(RequestOp::kCreateRing, Ring(host, 4, 512))
          .Add(RequestOp::kLoad, Load(1, 0, "0", 0, 1))
          .Add(RequestOp::kLoad, Load(1, 1, "0", 1, 1))
          .Add(RequestOp::kLoad, Load(1, 0, "0", 1, 2)));  // consumed_seq still 0
  // Bogus loads: slot, block, generation, model, ring.
  put("bad-loads", Seed()
                       .Add(RequestOp::kOpenModel, Open("0"))
                       .Add(RequestOp::kCreateRing, Ring(host, 2, 512))
                       .Add(RequestOp::kLoad, Load(1, 7, "0", 0, 1))
                       .Add(RequestOp::kLoad, Load(1, 0, "0", 99, 1))
                       .Add(RequestOp::kLoad, Load(1, 0, "0", 0, 0))
                       .Add(RequestOp::kLoad, Load(1, 0, std::string(64, 'f'), 0, 1))
                       .Add(RequestOp::kLoad, Load(12345, 0, "0", 0, 1))
                       .Add(RequestOp::kLoad, Load(1, 1, "0", 0, 1)));
  // The load fast path: loads with a session_token go through the ring's
  // request ring (the token's first byte is the model handle; "x!" moves the
  // tail by `block` instead), valid ones first, then garbage.
  auto fast = [](blockswap::v1::LoadRequest load, const std::string& token) {
    load.set_session_token(token);
    return load;
  };
  blockswap::v1::CreateRingRequest fast_ring = Ring(host, 2, 512);
  fast_ring.set_request_ring(true);
  put("request-ring-loads", Seed()
                                .Add(RequestOp::kOpenModel, Open("0"))
                                .Add(RequestOp::kCreateRing, fast_ring)
                                .Add(RequestOp::kLoad, fast(Load(1, 0, "0", 0, 1), "\x01"))
                                .Add(RequestOp::kLoad, fast(Load(1, 1, "0", 1, 1), "\x01"))
                                .Add(RequestOp::kCreateRing, fast_ring)
                                .Add(RequestOp::kLoad, fast(Load(2, 7, "0", 0, 1), "\x01"))
                                .Add(RequestOp::kLoad, fast(Load(2, 0, "0", 0, 1), "\x03"))
                                .Add(RequestOp::kCreateRing, fast_ring)
                                .Add(RequestOp::kLoad, fast(Load(3, 0, "0", 1000, 1), "x!")));
  put("small-slots", Seed()
                         .Add(RequestOp::kOpenModel, Open("0"))
                         .Add(RequestOp::kCreateRing, Ring(host, 1, 16))
                         .Add(RequestOp::kLoad, Load(1, 0, "0", 0, 1)));
  // Bogus rings: no device, unknown device, slot counts, slot sizes, quota.
  put("bad-rings", Seed()
                       .Add(RequestOp::kCreateRing, Ring("", 2, 64))
                       .Add(RequestOp::kCreateRing, Ring("GPU-nope", 2, 64))
                       .Add(RequestOp::kCreateRing, Ring(host, 0, 64))
                       .Add(RequestOp::kCreateRing, Ring(host, 65, 64))
                       .Add(RequestOp::kCreateRing, Ring(host, 2, 0))
                       .Add(RequestOp::kCreateRing, Ring(host, 64, uint64_t{1} << 40))
                       .Add(RequestOp::kCreateRing, Ring(host, 4, 1 << 20))
                       .Add(RequestOp::kCreateRing, Ring(host, 1, 64))
                       .Add(RequestOp::kCreateRing, Ring(host, 1, 64))
                       .Add(RequestOp::kCreateRing, Ring(host, 1, 64))
                       .Add(RequestOp::kCreateRing, Ring(host, 1, 64))
                       .Add(RequestOp::kDestroyRing, Destroy(2))
                       .Add(RequestOp::kDestroyRing, Destroy(2))
                       .Add(RequestOp::kDestroyRing, Destroy(999)));
  // Bogus uploads: sizes over the quota, empty and invalid layouts, unknown
  // and repeated commits, dirty padding.
  blockswap::v1::BeginUploadRequest invalid = Upload(1, 1, 8);
  invalid.mutable_layout()->mutable_blocks(0)->mutable_tensors(0)->set_offset(3);
  put("bad-uploads", Seed()
                         .Add(RequestOp::kBeginUpload, Upload(4, 1, 1 << 20))
                         .Add(RequestOp::kBeginUpload, blockswap::v1::BeginUploadRequest())
                         .Add(RequestOp::kBeginUpload, invalid)
                         .Add(RequestOp::kCommitUpload, Commit(77))
                         .Add(RequestOp::kBeginUpload, Upload(1, 1, 8))
                         .Raw(RequestOp::kWriteStaging, Write(200, "dirty padding"))
                         .Add(RequestOp::kCommitUpload, Commit(1))
                         .Add(RequestOp::kCommitUpload, Commit(1))
                         .Add(RequestOp::kBeginUpload, Upload(1, 1, 8))
                         .Raw(RequestOp::kDetach, "")
                         .Add(RequestOp::kCommitUpload, Commit(2)));
  // Two sessions: one loads into, and destroys, the other's ring.
  put("other-session", Seed()
                           .Add(RequestOp::kCreateRing, Ring(host, 2, 512), 1)
                           .Add(RequestOp::kOpenModel, Open("0"))
                           .Add(RequestOp::kLoad, Load(1, 0, "0", 0, 1))
                           .Add(RequestOp::kDestroyRing, Destroy(1))
                           .Add(RequestOp::kOpenModel, Open("0"), 1)
                           .Add(RequestOp::kLoad, Load(1, 0, "0", 0, 1), 1)
                           .Raw(RequestOp::kAuthenticate, "", 1));
  // Everything after Detach; a second Attach; tokens.
  put("after-detach", Seed()
                          .Add(RequestOp::kOpenModel, Open("0"))
                          .Add(RequestOp::kCreateRing, Ring(host, 2, 512))
                          .Raw(RequestOp::kDetach, "")
                          .Add(RequestOp::kLoad, Load(1, 0, "0", 0, 1))
                          .Add(RequestOp::kCreateRing, Ring(host, 2, 512))
                          .Add(RequestOp::kBeginUpload, Upload(1, 1, 8))
                          .Add(RequestOp::kOpenModel, Open("0"))
                          .Raw(RequestOp::kAuthenticate, "")
                          .Raw(RequestOp::kDetach, "")
                          .Add(RequestOp::kAttach, Attach("again"))
                          .Add(RequestOp::kAttach, Attach("old", 0))
                          .Add(RequestOp::kAttach, Attach(std::string(300, 'n'))));
  put("tokens", Seed()
                    .Raw(RequestOp::kAuthenticate, std::string(32, 'a'))
                    .Raw(RequestOp::kAuthenticate, std::string(32, 'A'))
                    .Raw(RequestOp::kAuthenticate, "short")
                    .Raw(RequestOp::kAuthenticate, "")
                    .Add(RequestOp::kOpenModel, Open(std::string(64, 'g')))
                    .Add(RequestOp::kOpenModel, Open(std::string(64, '0'))));
  // Stats a client may report, hostile numbers included; file registrations
  // without offers.
  ReportStatsRequest stats;
  PassStats* pass = stats.add_passes();
  pass->set_direction("forward");
  pass->set_stall_seconds(0.5);
  pass->set_copy_seconds(-1);
  stats.add_passes()->set_stall_seconds(std::numeric_limits<double>::quiet_NaN());
  RegisterFileRequest file;
  file.add_file_offers(1);
  file.set_block_pattern(R"(blocks\.(\d+)\.)");
  RegisterFileRequest file_twice = file;
  file_twice.add_file_offers(1);
  RegisterFileRequest file_rank = file;
  file_rank.set_select_rank(65);
  put("stats-files", Seed()
                         .Add(RequestOp::kReportStats, stats)
                         .Add(RequestOp::kRegisterFile, file)
                         .Add(RequestOp::kRegisterFile, file_twice)
                         .Add(RequestOp::kRegisterFile, file_rank)
                         .Add(RequestOp::kRegisterFile, RegisterFileRequest()));
  std::printf("wrote %d seeds into %s\n", written, dir.c_str());
  return failed ? 1 : 0;
}
