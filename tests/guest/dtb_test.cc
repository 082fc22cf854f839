// Host-side unit test of the guest's read-only DTB parser (dtb.c), against blobs written with
// libfdt's sequential-write API. Node offsets follow the same convention in both (offset of the
// FDT_BEGIN_NODE token in the structure block), so libfdt's answers double as expected values.
#include "tests/guest/dtb.h"

#include <libfdt.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

void Check(int err) { ASSERT_EQ(err, 0) << fdt_strerror(err); }

void PropCells(void *fdt, const char *name, std::vector<uint32_t> cells) {
  for (auto &c : cells) c = cpu_to_fdt32(c);
  Check(fdt_property(fdt, name, cells.data(), static_cast<int>(cells.size() * 4)));
}

// The machine of docs/machine.md, plus a node with a two-string compatible list.
std::vector<char> MachineBlob() {
  std::vector<char> buf(8192);
  void *fdt = buf.data();
  Check(fdt_create(fdt, static_cast<int>(buf.size())));
  Check(fdt_finish_reservemap(fdt));
  Check(fdt_begin_node(fdt, ""));
  Check(fdt_property_string(fdt, "compatible", "microvm,x86-64"));
  Check(fdt_property_u32(fdt, "#address-cells", 2));
  Check(fdt_property_u32(fdt, "#size-cells", 2));
  Check(fdt_begin_node(fdt, "chosen"));
  Check(fdt_property_string(fdt, "bootargs", "test=fdt"));
  Check(fdt_property_string(fdt, "stdout-path", "/isa/serial@3f8"));
  Check(fdt_end_node(fdt));
  Check(fdt_begin_node(fdt, "memory@0"));
  Check(fdt_property_string(fdt, "device_type", "memory"));
  PropCells(fdt, "reg", {0, 0, 0, 0x8000000, 1, 0, 0, 0x40000000});
  Check(fdt_end_node(fdt));
  Check(fdt_begin_node(fdt, "cpus"));
  Check(fdt_property_u32(fdt, "#address-cells", 1));
  Check(fdt_property_u32(fdt, "#size-cells", 0));
  for (uint32_t id = 0; id < 3; id++) {
    Check(fdt_begin_node(fdt, ("cpu@" + std::to_string(id)).c_str()));
    Check(fdt_property_string(fdt, "device_type", "cpu"));
    Check(fdt_property_u32(fdt, "reg", id));
    Check(fdt_end_node(fdt));
  }
  Check(fdt_end_node(fdt));
  Check(fdt_begin_node(fdt, "interrupt-controller@fec00000"));
  Check(fdt_property_string(fdt, "compatible", "intel,ce4100-ioapic"));
  PropCells(fdt, "reg", {0, 0xfec00000, 0, 0x1000});
  Check(fdt_end_node(fdt));
  Check(fdt_begin_node(fdt, "interrupt-controller@fee00000"));
  Check(fdt_property_string(fdt, "compatible", "intel,ce4100-lapic"));
  PropCells(fdt, "reg", {0, 0xfee00000, 0, 0x1000});
  Check(fdt_end_node(fdt));
  Check(fdt_begin_node(fdt, "isa"));
  Check(fdt_property_string(fdt, "compatible", "isa"));
  Check(fdt_property_u32(fdt, "#address-cells", 2));
  Check(fdt_property_u32(fdt, "#size-cells", 1));
  Check(fdt_begin_node(fdt, "serial@3f8"));
  Check(fdt_property_string(fdt, "compatible", "ns16550a"));
  PropCells(fdt, "reg", {1, 0x3f8, 8});
  PropCells(fdt, "interrupts", {4});
  Check(fdt_property_u32(fdt, "clock-frequency", 1843200));
  Check(fdt_end_node(fdt));
  Check(fdt_begin_node(fdt, "keyboard-controller@60"));
  Check(fdt_property_string(fdt, "compatible", "intel,8042"));
  PropCells(fdt, "reg", {1, 0x60, 1, 1, 0x64, 1});
  Check(fdt_end_node(fdt));
  Check(fdt_begin_node(fdt, "debug-exit@f4"));
  Check(fdt_property_string(fdt, "compatible", "microvm,debug-exit"));
  PropCells(fdt, "reg", {1, 0xf4, 1});
  Check(fdt_end_node(fdt));
  Check(fdt_end_node(fdt));  // isa
  Check(fdt_begin_node(fdt, "widget@1000"));
  static const char kTwoStrings[] = "vendor,widget-v2\0vendor,widget";
  Check(fdt_property(fdt, "compatible", kTwoStrings, sizeof(kTwoStrings)));
  PropCells(fdt, "reg", {0, 0x1000, 0, 0x100});
  Check(fdt_end_node(fdt));
  Check(fdt_end_node(fdt));  // root
  Check(fdt_finish(fdt));
  buf.resize(fdt_totalsize(fdt));
  return buf;
}

class DtbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    blob_ = MachineBlob();
    ASSERT_TRUE(dtb_open(&dtb_, blob_.data()));
  }
  std::vector<char> blob_;
  struct dtb dtb_;
};

TEST_F(DtbTest, RejectsBadHeaders) {
  struct dtb dtb;
  std::vector<char> bad = blob_;
  bad[0] = 0;
  EXPECT_FALSE(dtb_open(&dtb, bad.data()));
  bad = blob_;
  fdt_set_off_dt_struct(bad.data(), fdt_totalsize(bad.data()) + 16);
  EXPECT_FALSE(dtb_open(&dtb, bad.data()));
  EXPECT_FALSE(dtb_open(&dtb, nullptr));
}

TEST_F(DtbTest, PathsMatchLibfdt) {
  for (const char *path : {"/", "/chosen", "/memory@0", "/cpus/cpu@2", "/isa/serial@3f8",
                           "/isa/debug-exit@f4", "/widget@1000"}) {
    EXPECT_EQ(dtb_path_offset(&dtb_, path), fdt_path_offset(blob_.data(), path)) << path;
  }
  EXPECT_EQ(dtb_path_offset(&dtb_, "/isa/serial"),
            fdt_path_offset(blob_.data(), "/isa/serial@3f8"));
  EXPECT_EQ(dtb_path_offset(&dtb_, "/memory"), fdt_path_offset(blob_.data(), "/memory@0"));
  EXPECT_EQ(dtb_path_offset(&dtb_, "/isa//serial@3f8/"), dtb_path_offset(&dtb_, "/isa/serial@3f8"));
  EXPECT_EQ(dtb_path_offset(&dtb_, "/isa/serial@2f8"), -1);
  EXPECT_EQ(dtb_path_offset(&dtb_, "/nothing"), -1);
  EXPECT_EQ(dtb_path_offset(&dtb_, "isa"), -1);
  EXPECT_EQ(dtb_path_offset(&dtb_, "/is"), -1);
}

TEST_F(DtbTest, WalksEveryNodeLikeLibfdt) {
  std::vector<int> ours, theirs;
  for (int n = dtb_root(&dtb_); n >= 0; n = dtb_next_node(&dtb_, n, nullptr)) ours.push_back(n);
  for (int n = 0; n >= 0; n = fdt_next_node(blob_.data(), n, nullptr)) theirs.push_back(n);
  EXPECT_EQ(ours, theirs);
  for (int n : ours) {
    EXPECT_EQ(dtb_parent(&dtb_, n), n == 0 ? -1 : fdt_parent_offset(blob_.data(), n));
    EXPECT_STREQ(dtb_node_name(&dtb_, n), fdt_get_name(blob_.data(), n, nullptr));
    char ours_path[256], theirs_path[256];
    ASSERT_EQ(fdt_get_path(blob_.data(), n, theirs_path, sizeof(theirs_path)), 0);
    EXPECT_STREQ(dtb_node_path(&dtb_, n, ours_path, sizeof(ours_path)), theirs_path);
  }
}

TEST_F(DtbTest, ChildrenAndSiblings) {
  int cpus = dtb_path_offset(&dtb_, "/cpus");
  std::vector<std::string> names;
  for (int n = dtb_first_child(&dtb_, cpus); n >= 0; n = dtb_next_sibling(&dtb_, n)) {
    names.push_back(dtb_node_name(&dtb_, n));
    uint32_t reg;
    EXPECT_TRUE(dtb_get_u32(&dtb_, n, "reg", &reg));
    EXPECT_STREQ(dtb_get_string(&dtb_, n, "device_type"), "cpu");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"cpu@0", "cpu@1", "cpu@2"}));
  EXPECT_EQ(dtb_first_child(&dtb_, dtb_path_offset(&dtb_, "/isa/serial@3f8")), -1);
  EXPECT_EQ(dtb_next_sibling(&dtb_, dtb_path_offset(&dtb_, "/widget@1000")), -1);
  EXPECT_EQ(dtb_next_sibling(&dtb_, dtb_path_offset(&dtb_, "/isa/debug-exit@f4")), -1);
  EXPECT_EQ(dtb_next_sibling(&dtb_, dtb_path_offset(&dtb_, "/isa")),
            dtb_path_offset(&dtb_, "/widget@1000"));
}

TEST_F(DtbTest, Properties) {
  int chosen = dtb_path_offset(&dtb_, "/chosen");
  EXPECT_STREQ(dtb_get_string(&dtb_, chosen, "stdout-path"), "/isa/serial@3f8");
  EXPECT_EQ(dtb_get_string(&dtb_, chosen, "missing"), nullptr);
  int serial = dtb_path_offset(&dtb_, "/isa/serial@3f8");
  uint32_t value = 0, len = 0;
  EXPECT_TRUE(dtb_get_u32(&dtb_, serial, "clock-frequency", &value));
  EXPECT_EQ(value, 1843200u);
  EXPECT_NE(dtb_get_prop(&dtb_, serial, "reg", &len), nullptr);
  EXPECT_EQ(len, 12u);
  EXPECT_TRUE(dtb_get_interrupt(&dtb_, serial, 0, &value));
  EXPECT_EQ(value, 4u);
  EXPECT_FALSE(dtb_get_interrupt(&dtb_, serial, 1, &value));
  EXPECT_EQ(dtb_address_cells(&dtb_, dtb_path_offset(&dtb_, "/isa")), 2u);
  EXPECT_EQ(dtb_size_cells(&dtb_, dtb_path_offset(&dtb_, "/isa")), 1u);
  EXPECT_EQ(dtb_size_cells(&dtb_, chosen), 1u);  // spec default

  // Every property, in order.
  std::vector<std::string> names;
  const char *name;
  const void *data;
  for (int p = dtb_next_prop(&dtb_, serial, -1, &name, &data, &len); p >= 0;
       p = dtb_next_prop(&dtb_, serial, p, &name, &data, &len)) {
    names.push_back(name);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"compatible", "reg", "interrupts", "clock-frequency"}));
}

TEST_F(DtbTest, Compatible) {
  int serial = dtb_find_compatible(&dtb_, -1, "ns16550a");
  EXPECT_EQ(serial, dtb_path_offset(&dtb_, "/isa/serial@3f8"));
  EXPECT_EQ(dtb_find_compatible(&dtb_, serial, "ns16550a"), -1);
  int widget = dtb_path_offset(&dtb_, "/widget@1000");
  EXPECT_TRUE(dtb_is_compatible(&dtb_, widget, "vendor,widget-v2"));
  EXPECT_TRUE(dtb_is_compatible(&dtb_, widget, "vendor,widget"));
  EXPECT_FALSE(dtb_is_compatible(&dtb_, widget, "vendor,widg"));
  EXPECT_EQ(dtb_find_compatible(&dtb_, -1, "vendor,widget"), widget);
  EXPECT_EQ(dtb_find_compatible(&dtb_, -1, "nothing"), -1);
}

TEST_F(DtbTest, Reg) {
  uint32_t space = 99;
  uint64_t address = 0, size = 0;
  int serial = dtb_path_offset(&dtb_, "/isa/serial@3f8");
  ASSERT_TRUE(dtb_get_reg(&dtb_, serial, 0, &space, &address, &size));
  EXPECT_EQ(space, 1u);
  EXPECT_EQ(address, 0x3f8u);
  EXPECT_EQ(size, 8u);
  EXPECT_FALSE(dtb_get_reg(&dtb_, serial, 1, &space, &address, &size));

  uint16_t port = 0;
  int keyboard = dtb_path_offset(&dtb_, "/isa/keyboard-controller@60");
  EXPECT_TRUE(dtb_get_io_port(&dtb_, keyboard, 0, &port));
  EXPECT_EQ(port, 0x60);
  EXPECT_TRUE(dtb_get_io_port(&dtb_, keyboard, 1, &port));
  EXPECT_EQ(port, 0x64);
  EXPECT_FALSE(dtb_get_io_port(&dtb_, keyboard, 2, &port));

  int memory = dtb_path_offset(&dtb_, "/memory");
  ASSERT_TRUE(dtb_get_reg(&dtb_, memory, 1, &space, &address, &size));
  EXPECT_EQ(space, 0u);
  EXPECT_EQ(address, 0x100000000u);
  EXPECT_EQ(size, 0x40000000u);

  int lapic = dtb_find_compatible(&dtb_, -1, "intel,ce4100-lapic");
  ASSERT_TRUE(dtb_get_reg(&dtb_, lapic, 0, nullptr, &address, nullptr));
  EXPECT_EQ(address, 0xfee00000u);
  EXPECT_FALSE(dtb_get_io_port(&dtb_, lapic, 0, &port));  // MMIO, not I/O space

  // cpu@N: #size-cells = 0 under /cpus.
  ASSERT_TRUE(
      dtb_get_reg(&dtb_, dtb_path_offset(&dtb_, "/cpus/cpu@2"), 0, &space, &address, &size));
  EXPECT_EQ(address, 2u);
  EXPECT_EQ(size, 0u);
}

TEST_F(DtbTest, SkipsNops) {
  // Turn the serial node's compatible into FDT_NOP tokens (as an in-place editor would).
  std::vector<char> blob = blob_;
  int serial = fdt_path_offset(blob.data(), "/isa/serial@3f8");
  Check(fdt_nop_property(blob.data(), serial, "compatible"));
  struct dtb dtb;
  ASSERT_TRUE(dtb_open(&dtb, blob.data()));
  EXPECT_EQ(dtb_get_prop(&dtb, serial, "compatible", nullptr), nullptr);
  EXPECT_NE(dtb_get_prop(&dtb, serial, "reg", nullptr), nullptr);
  EXPECT_EQ(dtb_find_compatible(&dtb, -1, "ns16550a"), -1);
  EXPECT_EQ(dtb_path_offset(&dtb, "/isa/debug-exit@f4"),
            fdt_path_offset(blob.data(), "/isa/debug-exit@f4"));
}

TEST_F(DtbTest, SurvivesCorruption) {
  // Flip bytes of the structure block one at a time; every query must stay inside the blob.
  uint32_t off = fdt_off_dt_struct(blob_.data());
  uint32_t size = fdt_size_dt_struct(blob_.data());
  for (uint32_t i = 0; i < size; i++) {
    std::vector<char> blob = blob_;
    blob[off + i] ^= 0x5a;
    struct dtb dtb;
    if (!dtb_open(&dtb, blob.data())) continue;
    for (int n = dtb_root(&dtb); n >= 0; n = dtb_next_node(&dtb, n, nullptr)) {
      char path[128];
      uint64_t address;
      dtb_node_path(&dtb, n, path, sizeof(path));
      dtb_get_reg(&dtb, n, 0, nullptr, &address, nullptr);
      dtb_is_compatible(&dtb, n, "ns16550a");
    }
    dtb_path_offset(&dtb, "/isa/serial@3f8");
  }
}

}  // namespace
