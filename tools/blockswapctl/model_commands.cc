#include "tools/blockswapctl/model_commands.h"

#include <iostream>
#include <optional>
#include <string>

#include "client/core/connection.h"
#include "tools/blockswapctl/model_id_prefix.h"

namespace blockswap::ctl {
namespace {

// A whole id as given; a prefix expanded against the daemon's models. On
// failure the error has been printed, prefixed with the command.
std::optional<std::string> ResolveModelId(AdminCaller& caller, const Options& options,
                                          absl::string_view command,
                                          const std::string& id_or_prefix) {
  if (IsFullModelId(id_or_prefix)) return id_or_prefix;
  absl::StatusOr<v1::ModelsReply> models = caller.Call(&v1::Admin::Stub::Models);
  if (!models.ok()) {
    std::cerr << "blockswapctl: " << command << ": listing models to expand '" << id_or_prefix
              << "': " << DescribeCallFailure(options.socket_path, models.status()) << "\n";
    return std::nullopt;
  }
  absl::StatusOr<std::string> id = ExpandModelIdPrefix(id_or_prefix, *models);
  if (!id.ok()) {
    std::cerr << "blockswapctl: " << command << ": " << id.status().message() << "\n";
    return std::nullopt;
  }
  return *std::move(id);
}

}  // namespace

// `blockswapctl register`: this process opens the file and offers it to the
// daemon (which reads only what its client can), then detaches; the model
// stays registered, unreferenced, until its room is needed or it is evicted.
int Register(const Options& options, const std::string& file,
             const client::FileRegistrationOptions& registration) {
  auto fail = [&](const absl::Status& status) {
    std::cerr << "blockswapctl: register: " << DescribeCallFailure(options.socket_path, status)
              << "\n";
    return kExitFailure;
  };
  auto connection = client::Connection::Connect(options.socket_path, "blockswapctl register");
  if (!connection.ok()) return fail(connection.status());
  auto registered = client::RegisterFile(**connection, file, registration);
  if (!registered.ok()) return fail(registered.status());
  const client::Model& model = *registered->model;
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

int Verify(const Options& options, const std::string& id_or_prefix) {
  AdminCaller caller(options);
  std::optional<std::string> resolved = ResolveModelId(caller, options, "verify", id_or_prefix);
  if (!resolved) return kExitFailure;
  const std::string& model_id = *resolved;
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

int Evict(const Options& options, const std::string& id_or_prefix) {
  AdminCaller caller(options);
  std::optional<std::string> resolved = ResolveModelId(caller, options, "evict", id_or_prefix);
  if (!resolved) return kExitFailure;
  const std::string& model_id = *resolved;
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

}  // namespace blockswap::ctl
