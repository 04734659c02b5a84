// `viewer`: what one allowed user can see and use of the models on the node
// (model_access, daemon/session/model_visibility.h). As --uid=N (default:
// unchanged), it optionally registers content first (--upload-seed=S: the
// test model of that seed, as the stream role uploads it; --file=PATH with
// --block-pattern: a safetensors file), then probes the model --probe=ID
// (OpenModel, Admin.VerifyModel, Admin.EvictModel, each beside the same call
// for an id nobody registered; --no-open=1: no OpenModel, so that its session
// holds nothing it did not register) and reports what Admin.Models,
// Admin.Clients, Admin.Stats, Admin.Residency, Admin.Trace and Admin.Status
// show it. It only observes: the test
// decides what should have been seen. Exit 0 once everything is reported.
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/core/connection.h"
#include "client/core/file_model.h"
#include "client/core/model.h"
#include "tests/integration/client_roles.h"
#include "tests/support/child_process.h"
#include "tests/support/key_value_args.h"
#include "tests/support/role_report.h"

namespace blockswap::testing {
namespace {

std::string CodeAndMessage(const grpc::Status& status) {
  return absl::StrCat(static_cast<int>(status.error_code()), " ", status.error_message());
}

std::string CodeAndMessage(const absl::Status& status) {
  return absl::StrCat(static_cast<int>(status.code()), " ", status.message());
}

// `<key> CODE MESSAGE` for the call on `id` and `unknown_<key> ...` for the
// same call on kUnregisteredModelId.
template <typename Call>
void ReportBoth(const RoleReport& report, const std::string& key, const std::string& id,
                Call call) {
  report.Add(key, CodeAndMessage(call(id)));
  report.Add("unknown_" + key, CodeAndMessage(call(kUnregisteredModelId)));
}

void ReportAdminViews(v1::Admin::Stub& admin, const RoleReport& report) {
  {
    v1::ModelsReply models;
    grpc::ClientContext context;
    if (grpc::Status s = admin.Models(&context, v1::ModelsRequest(), &models); !s.ok()) {
      report.Add("models_error", CodeAndMessage(s));
    }
    for (const v1::ModelInfo& model : models.models()) {
      report.Add("listed", model.model_id());
      report.Add("source_" + model.model_id(), model.source());
      report.Add("shared_" + model.model_id(), absl::StrCat(model.shared_bytes()));
      report.Add("name_" + model.model_id(), model.name());
    }
  }
  {
    v1::ClientsReply clients;
    grpc::ClientContext context;
    if (grpc::Status s = admin.Clients(&context, v1::ClientsRequest(), &clients); !s.ok()) {
      report.Add("clients_error", CodeAndMessage(s));
    }
    for (const v1::ClientInfo& client : clients.clients()) {
      report.Add("client", absl::StrCat(client.client_name(), " session=", client.session_id(),
                                        " pid=", client.pid(), " uid=", client.uid()));
      report.Add("client_uid", absl::StrCat(client.uid()));
    }
  }
  {
    v1::StatsReply stats;
    grpc::ClientContext context;
    if (grpc::Status s = admin.Stats(&context, v1::StatsRequest(), &stats); !s.ok()) {
      report.Add("stats_error", CodeAndMessage(s));
    }
    uint64_t device_loads = 0;
    for (const v1::DeviceStats& device : stats.devices()) device_loads += device.loads();
    report.Add("stats_device_loads", absl::StrCat(device_loads));
    for (const v1::ClientStats& client : stats.clients()) {
      report.Add("stats_client",
                 absl::StrCat(client.client_name(), " session=", client.session_id()));
    }
  }
  {
    // The node-wide counters this caller is given.
    v1::StatusReply status;
    grpc::ClientContext context;
    if (grpc::Status s = admin.Status(&context, v1::StatusRequest(), &status); !s.ok()) {
      report.Add("status_error", CodeAndMessage(s));
    }
    report.Add("counters", absl::StrCat("master_blocks=", status.master_blocks(),
                                        " pinned_bytes=", status.pinned_bytes(),
                                        " staged_bytes=", status.staged_bytes(),
                                        " evictions=", status.evictions(),
                                        " file_reads=", status.file_reads()));
    report.Add("counters_withheld", status.store_counters_withheld());
  }
  {
    v1::ResidencyReply residency;
    grpc::ClientContext context;
    if (grpc::Status s = admin.Residency(&context, v1::ResidencyRequest(), &residency); !s.ok()) {
      report.Add("residency_error", CodeAndMessage(s));
    }
    for (const v1::RingResidency& ring : residency.rings()) {
      report.Add("residency_ring", absl::StrCat(ring.ring_id()));
    }
  }
  v1::TraceReply trace;
  grpc::ClientContext context;
  if (grpc::Status s = admin.Trace(&context, v1::TraceRequest(), &trace); !s.ok()) {
    report.Add("trace_error", CodeAndMessage(s));
  }
  std::set<uint64_t> rings;
  for (const v1::TraceDevice& device : trace.devices()) {
    for (const v1::TraceEvent& event : device.events()) rings.insert(event.ring_id());
  }
  for (const v1::TraceClient& client : trace.clients()) {
    report.Add("trace_session", absl::StrCat(client.session_id()));
    rings.insert(client.ring_ids().begin(), client.ring_ids().end());
  }
  for (uint64_t ring : rings) report.Add("trace_ring", absl::StrCat(ring));
}

int RunViewer(const std::vector<std::string>& argv) {
  const KeyValueArgs args(argv);
  const RoleReport report(args.Str("report"));
  if (!BecomeUid(args)) return kClientSetupFailed;
  auto connection = client::Connection::Connect(args.Str("socket"), args.Str("name", "viewer"));
  if (!connection.ok()) {
    std::cerr << "viewer: " << connection.status() << "\n";
    return kClientFailed;
  }
  client::Connection& c = **connection;
  std::vector<std::unique_ptr<client::Model>> held;  // open until the role ends
  if (args.Has("upload-seed")) {
    const uint32_t blocks = static_cast<uint32_t>(args.Int("blocks", 6));
    auto data = ModelTensorData(args.Int("upload-seed", 1), blocks, args.Int("elements", 4096));
    auto model = client::Model::Register(c, args.Str("upload-name", "viewer upload"),
                                         ModelUploads(data, blocks));
    report.Add("uploaded", model.ok() ? (*model)->id() : CodeAndMessage(model.status()));
    if (model.ok()) held.push_back(*std::move(model));
  }
  if (args.Has("file")) {
    auto registered =
        client::RegisterFile(c, args.Str("file"), {.block_pattern = args.Str("block-pattern")});
    report.Add("registered",
               registered.ok() ? registered->model->id() : CodeAndMessage(registered.status()));
    if (registered.ok()) held.push_back(std::move(registered->model));
  }
  const std::string probe = args.Str("probe");
  if (!args.Has("no-open")) ReportBoth(report, "open", probe, [&](const std::string& id) {
    auto model = client::Model::Open(c, id);
    if (!model.ok()) return model.status();
    held.push_back(*std::move(model));
    return absl::OkStatus();
  });
  auto admin = v1::Admin::NewStub(
      grpc::CreateChannel("unix:" + args.Str("socket"), grpc::InsecureChannelCredentials()));
  ReportBoth(report, "verify", probe, [&](const std::string& id) {
    v1::VerifyModelRequest request;
    request.set_model_id(id);
    v1::VerifyModelReply reply;
    grpc::ClientContext context;
    return admin->VerifyModel(&context, request, &reply);
  });
  // The model is held (opened above unless --no-open=1, or by the test): a
  // visible one is refused as referenced, never evicted.
  ReportBoth(report, "evict", probe, [&](const std::string& id) {
    v1::EvictModelRequest request;
    request.set_model_id(id);
    v1::EvictModelReply reply;
    grpc::ClientContext context;
    return admin->EvictModel(&context, request, &reply);
  });
  ReportAdminViews(*admin, report);
  report.Add("done", "1");
  return kClientOk;
}
BLOCKSWAP_CHILD_ROLE("viewer", RunViewer);

}  // namespace
}  // namespace blockswap::testing
