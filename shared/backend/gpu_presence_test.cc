#include "shared/backend/gpu_presence.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blockswap {
namespace {

namespace fs = std::filesystem;

// A machine's kernel files under a temporary root.
class FakeMachine : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "gpu-presence-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  void PciFunction(const std::string& address, const std::string& vendor,
                   const std::string& pci_class) {
    Write("sys/bus/pci/devices/" + address + "/vendor", vendor + "\n");
    Write("sys/bus/pci/devices/" + address + "/class", pci_class + "\n");
  }
  std::optional<std::string> Find() const { return FindNvidiaGpu(root_.string()); }

  fs::path root_;
};

TEST_F(FakeMachine, NoGpuOnAMachineOfVirtioDevices) {
  PciFunction("0000:00:01.0", "0x1af4", "0x010000");
  PciFunction("0000:00:00.0", "0x8086", "0x060000");
  EXPECT_EQ(Find(), std::nullopt);
}

TEST_F(FakeMachine, EmptyRootHasNoGpu) { EXPECT_EQ(Find(), std::nullopt); }

TEST_F(FakeMachine, NvidiaThreeDControllerIsAGpuWithoutADriver) {
  PciFunction("0000:00:01.0", "0x1af4", "0x010000");
  PciFunction("0000:17:00.0", "0x10de", "0x030200");
  EXPECT_EQ(Find(), "PCI device 0000:17:00.0 (NVIDIA, class 0x030200)");
}

TEST_F(FakeMachine, NvidiaVgaControllerIsAGpu) {
  PciFunction("0000:01:00.0", "0x10de", "0x030000");
  EXPECT_THAT(Find(), ::testing::Optional(::testing::HasSubstr("0000:01:00.0")));
}

TEST_F(FakeMachine, NvidiaFunctionsThatAreNotGpusAreNot) {
  // The audio and USB functions of a consumer card, an NVIDIA bridge.
  PciFunction("0000:01:00.1", "0x10de", "0x040300");
  PciFunction("0000:01:00.2", "0x10de", "0x0c0330");
  PciFunction("0000:00:1e.0", "0x10de", "0x060400");
  EXPECT_EQ(Find(), std::nullopt);
}

TEST_F(FakeMachine, DriverEntriesCountWhenPciIsNotVisible) {
  // A container sees /proc and /dev, often not the host's PCI tree.
  Write("proc/driver/nvidia/gpus/0000:17:00.0/information", "Model: H200\n");
  EXPECT_EQ(Find(), "/proc/driver/nvidia/gpus/0000:17:00.0");
}

TEST_F(FakeMachine, DeviceNodeCountsButControlNodesDoNot) {
  Write("dev/nvidiactl", "");
  Write("dev/nvidia-uvm", "");
  EXPECT_EQ(Find(), std::nullopt);
  Write("dev/nvidia3", "");
  EXPECT_EQ(Find(), "/dev/nvidia3");
}

}  // namespace
}  // namespace blockswap
