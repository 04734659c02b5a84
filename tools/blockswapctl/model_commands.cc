#include "tools/blockswapctl/model_commands.h"

#include <iostream>
#include <string>

#include "client/core/connection.h"

namespace blockswap::client {

// `blockswapctl register`: this process opens the file and offers it to the
// daemon (which reads only what its client can), then detaches; the model
// stays registered, unreferenced, until its room is needed or it is evicted.
int Register(const Options& options, const std::string& file,
             const FileRegistrationOptions& registration) {
  auto fail = [&](const absl::Status& status) {
    std::cerr << "blockswapctl: register: " << DescribeCallFailure(options.socket_path, status)
              << "\n";
    return kExitFailure;
  };
  auto connection = Connection::Connect(options.socket_path, "blockswapctl register");
  if (!connection.ok()) return fail(connection.status());
  auto registered = RegisterFile(**connection, file, registration);
  if (!registered.ok()) return fail(registered.status());
  const Model& model = *registered->model;
  uint64_t bytes = 0;
  for (const BlockSpec& block : model.layout().blocks) bytes += block.bytes;
  if (options.json) {
    PrintJson({{"model_id", model.id()},
               {"extras_model_id",
                registered->extras ? nlohmann::json(registered->extras->id()) : nlohmann::json()},
               {"block_count", model.block_count()},
               {"bytes", bytes},
               {"read_file", registered->read_file}});
  } else {
    std::cout << model.id() << "\n";
    std::cerr << "blockswapctl: " << model.block_count() << " blocks, " << bytes << " bytes"
              << (registered->read_file ? ", read from the file" : ", known already");
    if (registered->extras) std::cerr << "; extras model " << registered->extras->id();
    std::cerr << "\n";
  }
  return 0;
}

int Verify(const Options& options, const std::string& model_id) {
  AdminCaller caller(options);
  v1::VerifyModelRequest request;
  request.set_model_id(model_id);
  auto reply = caller.Call(&v1::Admin::Stub::VerifyModel, request);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: verify: "
              << DescribeCallFailure(options.socket_path, reply.status()) << "\n";
    return kExitFailure;
  }
  if (options.json) {
    PrintJson({{"model_id", model_id}, {"blocks", reply->blocks()}, {"bytes", reply->bytes()}});
  } else {
    std::cout << "ok: " << reply->blocks() << " blocks (" << reply->bytes()
              << " bytes) match their hashes\n";
  }
  return 0;
}

int Evict(const Options& options, const std::string& model_id) {
  AdminCaller caller(options);
  v1::EvictModelRequest request;
  request.set_model_id(model_id);
  auto reply = caller.Call(&v1::Admin::Stub::EvictModel, request);
  if (!reply.ok()) {
    std::cerr << "blockswapctl: evict: " << DescribeCallFailure(options.socket_path, reply.status())
              << "\n";
    return kExitFailure;
  }
  if (!options.json) std::cout << "evicted " << model_id << "\n";
  if (options.json) PrintJson({{"model_id", model_id}, {"evicted", true}});
  return 0;
}

}  // namespace blockswap::client
