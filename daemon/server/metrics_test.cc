#include "daemon/server/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/server/metrics_server.h"
#include "tests/support/http_get.h"

namespace blockswap::daemon {
namespace {

MetricsSnapshot TwoDevicesOneClient() {
  MetricsSnapshot s;
  s.version = "0.1.0";
  s.backend = "host";
  s.uptime_seconds = 12.5;
  s.pinned_bytes = 4096;
  s.max_pinned_bytes = 8192;
  s.staged_bytes = 2048;
  s.models = 1;
  s.staged_blocks = 1;
  s.evictions = {{"operator", 2}, {"max_memory_bytes", 1}};
  s.file_reads = 3;
  s.file_bytes_read = 300;
  s.refused_connections = 5;
  s.quota_refusals = 6;
  s.process = ProcessStats{.cpu_seconds = 1.25,
                           .resident_memory_bytes = 1 << 20,
                           .virtual_memory_bytes = 1 << 30,
                           .open_fds = 9,
                           .max_fds = 1024,
                           .start_time_seconds = 1.7e9,
                           .threads = 12};
  s.quotas.per_client = {.rings = 4, .device_bytes = 0, .staging_bytes = 1024};
  s.quotas.per_uid = {.sessions = 9};
  DeviceMetrics a{.uuid = "HOST-0", .name = "host device 0", .total_memory_bytes = 1 << 30};
  a.stats = {.loads = 7,
             .bytes = 7000,
             .copy_seconds = 0.25,
             .queue_depth = 2,
             .protocol_errors = 1,
             .rings = 1,
             .staged_loads = 3,
             .staged_bytes = 3000};
  DeviceMetrics b{.uuid = "GPU-1",
                  .name = "gpu 1",
                  .error = "sticky",
                  .compute_mode = "default",
                  .mig = "enabled"};
  for (double seconds : {40e-6, 0.8e-3, 0.9e-3, 2.0}) a.stats.load_latency.Observe(seconds);
  s.devices = {a, b};
  s.clients.push_back({.session_id = 3,
                       .client_name = "rank \"0\"",
                       .pid = 42,
                       .uid = 1000,
                       .rings = 1,
                       .ring_bytes = 8192,
                       .staging_bytes = 0,
                       .loads = 7,
                       .rejected_loads = 1,
                       .bytes = 7000,
                       .stall_seconds = 1.5,
                       .host_wait_seconds = 2.5,
                       .copy_seconds = 0.5});
  return s;
}

bool HasLine(const std::string& text, const std::string& line) {
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    if (l == line) return true;
  }
  return false;
}

TEST(Metrics, PerDeviceSamplesCarryTheDeviceLabel) {
  const std::string text = FormatMetrics(TwoDevicesOneClient());
  EXPECT_TRUE(HasLine(text, "blockswap_device_loads_total{device=\"HOST-0\"} 7")) << text;
  EXPECT_TRUE(HasLine(text, "blockswap_device_bytes_total{device=\"HOST-0\"} 7000")) << text;
  EXPECT_TRUE(HasLine(text, "blockswap_device_copy_seconds_total{device=\"HOST-0\"} 0.25"));
  EXPECT_TRUE(HasLine(text, "blockswap_device_queue_depth{device=\"HOST-0\"} 2"));
  EXPECT_TRUE(HasLine(text, "blockswap_device_protocol_errors_total{device=\"HOST-0\"} 1"));
  EXPECT_TRUE(HasLine(text, "blockswap_device_staged_loads_total{device=\"HOST-0\"} 3"));
  EXPECT_TRUE(HasLine(text, "blockswap_device_staged_bytes_total{device=\"HOST-0\"} 3000"));
  EXPECT_TRUE(HasLine(text, "blockswap_device_healthy{device=\"HOST-0\"} 1"));
  EXPECT_TRUE(HasLine(text, "blockswap_device_healthy{device=\"GPU-1\"} 0"));
  EXPECT_TRUE(HasLine(text, "blockswap_device_loads_total{device=\"GPU-1\"} 0"));
  EXPECT_TRUE(HasLine(text,
                      "blockswap_device_info{device=\"HOST-0\",name=\"host device 0\","
                      "compute_mode=\"n/a\",mig=\"n/a\"} 1"))
      << text;
  EXPECT_TRUE(HasLine(text,
                      "blockswap_device_info{device=\"GPU-1\",name=\"gpu 1\","
                      "compute_mode=\"default\",mig=\"enabled\"} 1"))
      << text;
}

TEST(Metrics, PerClientSamplesCarryEscapedLabels) {
  const std::string text = FormatMetrics(TwoDevicesOneClient());
  const std::string labels = "{session=\"3\",client=\"rank \\\"0\\\"\",pid=\"42\",uid=\"1000\"}";
  EXPECT_TRUE(HasLine(text, "blockswap_client_stall_seconds_total" + labels + " 1.5")) << text;
  EXPECT_TRUE(HasLine(text, "blockswap_client_host_wait_seconds_total" + labels + " 2.5")) << text;
  EXPECT_TRUE(HasLine(text, "blockswap_client_loads_total" + labels + " 7")) << text;
  EXPECT_TRUE(HasLine(text, "blockswap_client_protocol_errors_total" + labels + " 1"));
  EXPECT_TRUE(HasLine(text, "blockswap_client_ring_bytes" + labels + " 8192"));
  EXPECT_TRUE(HasLine(text, "blockswap_client_bytes_total" + labels + " 7000"));
}

TEST(Metrics, WithoutPerSessionSeriesNoSampleNamesASessionButTheyAreCounted) {
  MetricsSnapshot snapshot = TwoDevicesOneClient();
  snapshot.per_session_series = false;
  const std::string text = FormatMetrics(snapshot);
  EXPECT_FALSE(absl::StrContains(text, "blockswap_client_")) << text;
  EXPECT_FALSE(absl::StrContains(text, "uid=")) << text;
  EXPECT_TRUE(HasLine(text, "blockswap_sessions 1")) << text;
}

TEST(Metrics, NodeWideGauges) {
  const std::string text = FormatMetrics(TwoDevicesOneClient());
  EXPECT_TRUE(HasLine(text, "blockswap_pinned_bytes 4096"));
  EXPECT_TRUE(HasLine(text, "blockswap_sessions 1"));
  EXPECT_TRUE(HasLine(text, "blockswap_models 1"));
  EXPECT_TRUE(HasLine(text, "blockswap_staged_blocks 1"));
  EXPECT_TRUE(HasLine(text, "blockswap_staged_bytes 2048"));
  EXPECT_TRUE(HasLine(text, "blockswap_draining 0"));
  EXPECT_TRUE(HasLine(text, "blockswap_quota_count{quota=\"max_rings_per_client\"} 4"));
  EXPECT_TRUE(HasLine(text, "blockswap_quota_count{quota=\"max_sessions_per_uid\"} 9"));
  EXPECT_TRUE(
      HasLine(text, "blockswap_quota_bytes{quota=\"max_staging_bytes_per_client\"} 1024"));
  EXPECT_FALSE(absl::StrContains(text, "blockswap_quota_count{quota=\"max_staging_bytes"))
      << "a byte quota among the counts";
  EXPECT_TRUE(HasLine(text, "blockswap_max_pinned_bytes 8192"));
  EXPECT_TRUE(HasLine(text, "blockswap_evictions_total{reason=\"operator\"} 2"));
  EXPECT_TRUE(HasLine(text, "blockswap_evictions_total{reason=\"max_memory_bytes\"} 1"));
  EXPECT_TRUE(HasLine(text, "blockswap_file_reads_total 3"));
  EXPECT_TRUE(HasLine(text, "blockswap_file_read_bytes_total 300"));
  EXPECT_TRUE(HasLine(text, "blockswap_refused_connections_total 5"));
  EXPECT_TRUE(HasLine(text, "blockswap_quota_refusals_total 6"));
  EXPECT_TRUE(HasLine(text, "blockswap_info{version=\"0.1.0\",backend=\"host\"} 1"));
}

TEST(Metrics, LoadLatencyIsACumulativeHistogramPerDevice) {
  const std::string text = FormatMetrics(TwoDevicesOneClient());
  const std::string hist = "blockswap_device_load_latency_seconds";
  const std::string a = "device=\"HOST-0\"";
  EXPECT_TRUE(HasLine(text, "# TYPE " + hist + " histogram")) << text;
  EXPECT_TRUE(HasLine(text, hist + "_bucket{" + a + ",le=\"5e-05\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, hist + "_bucket{" + a + ",le=\"0.0005\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, hist + "_bucket{" + a + ",le=\"0.001\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, hist + "_bucket{" + a + ",le=\"1\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, hist + "_bucket{" + a + ",le=\"+Inf\"} 4")) << text;
  EXPECT_TRUE(HasLine(text, hist + "_count{" + a + "} 4")) << text;
  EXPECT_TRUE(HasLine(text, hist + "_bucket{device=\"GPU-1\",le=\"+Inf\"} 0")) << text;
  // The sum is the samples' sum.
  EXPECT_TRUE(absl::StrContains(text, hist + "_sum{" + a + "} 2.00174")) << text;
}

TEST(Metrics, ProcessFamiliesKeepTheirStandardNames) {
  MetricsSnapshot s = TwoDevicesOneClient();
  std::string text = FormatMetrics(s);
  EXPECT_TRUE(HasLine(text, "process_open_fds 9")) << text;
  EXPECT_TRUE(HasLine(text, "process_max_fds 1024")) << text;
  EXPECT_TRUE(HasLine(text, "process_resident_memory_bytes 1048576")) << text;
  EXPECT_TRUE(HasLine(text, "process_cpu_seconds_total 1.25")) << text;
  EXPECT_TRUE(HasLine(text, "process_threads 12")) << text;
  s.process.reset();  // /proc unreadable: the families are left out, not zero
  EXPECT_FALSE(absl::StrContains(FormatMetrics(s), "process_")) << FormatMetrics(s);
}

TEST(Metrics, EveryFamilyHasHelpAndTypeOnceAndEverySampleIsPrefixed) {
  const std::string text = FormatMetrics(TwoDevicesOneClient());
  std::set<std::string> typed, histograms;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      ASSERT_EQ(parts.size(), 4u) << line;
      EXPECT_TRUE(typed.insert(parts[2]).second) << "TYPE twice: " << line;
      EXPECT_TRUE(parts[3] == "gauge" || parts[3] == "counter" || parts[3] == "histogram") << line;
      if (parts[3] == "histogram") histograms.insert(parts[2]);
      // Counters end in _total (the exposition format's convention).
      if (parts[3] == "counter") {
        EXPECT_TRUE(absl::EndsWith(parts[2], "_total")) << line;
      }
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    // Ours are blockswap_*; the process collector's standard names stay.
    EXPECT_TRUE(absl::StartsWith(line, "blockswap_") || absl::StartsWith(line, "process_")) << line;
    std::string name(line.substr(0, line.find_first_of("{ ")));
    for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
      const std::string base = name.substr(0, name.size() - std::min(name.size(), suffix.size()));
      if (absl::EndsWith(name, suffix) && histograms.contains(base)) name = base;
    }
    EXPECT_TRUE(typed.contains(name)) << "sample before its TYPE: " << line;
  }
}

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

using testing::HttpGet;

TEST(MetricsServer, ServesTheRenderedTextAtSlashMetricsOnly) {
  std::atomic<int> renders{0};
  auto server = MetricsServer::Start("127.0.0.1:0", [&] {
    ++renders;
    return std::string("blockswap_up 1\n");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  std::string response = HttpGet((*server)->port(), "/metrics");
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.0 200")) << response;
  EXPECT_TRUE(absl::StrContains(response, "text/plain; version=0.0.4")) << response;
  EXPECT_TRUE(absl::EndsWith(response, "\r\n\r\nblockswap_up 1\n")) << response;
  EXPECT_EQ(renders.load(), 1);
  response = HttpGet((*server)->port(), "/other");
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.0 404")) << response;
  EXPECT_EQ(renders.load(), 1);
}

TEST(MetricsServer, AnAddressInUseIsAnErrorNamingIt) {
  auto first = MetricsServer::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = absl::StrCat("127.0.0.1:", (*first)->port());
  auto second = MetricsServer::Start(taken, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), taken)) << second.status();
}

}  // namespace
}  // namespace blockswap::daemon
