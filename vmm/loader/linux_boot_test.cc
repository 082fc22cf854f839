#include "vmm/loader/linux_boot.h"

#include <glob.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/loader/initrd.h"
#include "vmm/loader/kernel_loader.h"
#include "vmm/loader/test_images.h"
#include "vmm/machine/layout.h"

namespace vmm::loader {
namespace {

using test_images::BuildBzImage;
using test_images::BzImageSpec;
using test_images::MakeMemory;
using test_images::Pattern;
using test_images::ReadGuest;
using test_images::WriteTempFile;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kZp = kZeroPageAddress;

LoadedKernel LoadBzImage(const GuestMemory& memory, const BzImageSpec& spec,
                         const std::string& name) {
  absl::StatusOr<LoadedKernel> kernel = LoadKernel(memory, WriteTempFile(name, BuildBzImage(spec)));
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  return *kernel;
}

LoadedKernel ElfKernel() {
  LoadedKernel kernel;
  kernel.kind = LoadedKernel::EntryKind::kElf64;
  kernel.entry = GuestAddress(0x1000000);
  kernel.image_start = GuestAddress(0x1000000);
  kernel.image_end = GuestAddress(0x1400000);
  kernel.reserved_end = kernel.image_end;
  return kernel;
}

std::string GuestString(const GuestMemory& memory, uint64_t address, size_t size) {
  std::vector<uint8_t> bytes(size);
  EXPECT_TRUE(memory.Read(GuestAddress(address), bytes).ok());
  return std::string(bytes.begin(), bytes.end());
}

void DirtyZeroPage(const GuestMemory& memory) {
  ASSERT_TRUE(memory.Write(GuestAddress(kZp), std::vector<uint8_t>(4096, 0xee)).ok());
}

// The e820 table for RAM below 3 GiB: low RAM, the EBDA/ROM hole, RAM from 1 MiB.
void ExpectE820(const GuestMemory& memory, uint64_t ram) {
  ASSERT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x1e8), 3);  // e820_entries
  const uint64_t table = kZp + 0x2d0;                     // e820_table, 20-byte entries
  EXPECT_EQ(ReadGuest<uint64_t>(memory, table + 0), 0u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, table + 8), 0x9fc00u);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, table + 16), 1u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, table + 20), 0x9fc00u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, table + 28), 0x100000u - 0x9fc00u);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, table + 36), 2u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, table + 40), 0x100000u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, table + 48), ram - 0x100000u);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, table + 56), 1u);
  EXPECT_EQ(ReadGuest<uint8_t>(memory, table + 60), 0);  // Nothing after the third entry.
}

TEST(LinuxBootTest, BzImageZeroPage) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  const LoadedKernel kernel = LoadBzImage(memory, spec, "lb_bzimage");
  DirtyZeroPage(memory);
  const std::string cmdline = "console=ttyS0 reboot=k panic=1";
  const InitrdPlacement initrd{GuestAddress(0x3000000), 0x12345};
  ASSERT_TRUE(WriteLinuxBootParams(memory, {.kernel = &kernel,
                                            .cmdline = cmdline,
                                            .initrd = initrd,
                                            .acpi_rsdp_address = kAcpiTablesAddress})
                  .ok());

  // The kernel's own header, copied (boot.rst offsets).
  EXPECT_EQ(ReadGuest<uint16_t>(memory, kZp + 0x1fe), 0xaa55);  // boot_flag
  EXPECT_EQ(GuestString(memory, kZp + 0x202, 4), "HdrS");       // header
  EXPECT_EQ(ReadGuest<uint16_t>(memory, kZp + 0x206), 0x020f);  // version
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x1f1), 4);        // setup_sects
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x230), spec.kernel_alignment);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x238), spec.cmdline_size);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x258), spec.pref_address);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x260), spec.init_size);
  // What the loader fills in.
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x210), 0xff);              // type_of_loader
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x211), 0x81);              // loadflags
  EXPECT_EQ(ReadGuest<uint16_t>(memory, kZp + 0x224), 0xde00);           // heap_end_ptr
  EXPECT_EQ(ReadGuest<uint16_t>(memory, kZp + 0x1fa), 0xffff);           // vid_mode
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x228), kCmdlineAddress);  // cmd_line_ptr
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x0c8), 0u);               // ext_cmd_line_ptr
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x218), 0x3000000u);       // ramdisk_image
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x21c), 0x12345u);         // ramdisk_size
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x0c0), 0u);               // ext_ramdisk_image
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x0c4), 0u);               // ext_ramdisk_size
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x250), 0u);               // setup_data
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x070), 0xe0000u);         // acpi_rsdp_addr
  ExpectE820(memory, 64 * kMiB);
  // Everything else zeroed, including the sentinel the bzImage has as 0xff.
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x1ef), 0);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x000), 0u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x26c), 0u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0xff8), 0u);
  EXPECT_EQ(GuestString(memory, kCmdlineAddress, cmdline.size() + 1), cmdline + '\0');
}

TEST(LinuxBootTest, ElfMinimalHeader) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const LoadedKernel kernel = ElfKernel();
  DirtyZeroPage(memory);
  ASSERT_TRUE(WriteLinuxBootParams(memory, {.kernel = &kernel, .cmdline = "console=ttyS0"}).ok());
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x070), 0u);  // acpi_rsdp_addr: no ACPI tables given
  EXPECT_EQ(ReadGuest<uint16_t>(memory, kZp + 0x1fe), 0xaa55);
  EXPECT_EQ(GuestString(memory, kZp + 0x202, 4), "HdrS");
  EXPECT_EQ(ReadGuest<uint16_t>(memory, kZp + 0x206), 0x020f);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x230), 0x1000000u);  // kernel_alignment
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x210), 0xff);
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x211), 0x81);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x228), kCmdlineAddress);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x238), 13u);  // cmdline_size
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x218), 0u);   // no ramdisk
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x21c), 0u);
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x1f1), 0);  // setup_sects: no setup code
  ExpectE820(memory, 64 * kMiB);
  EXPECT_EQ(GuestString(memory, kCmdlineAddress, 14), std::string("console=ttyS0\0", 14));
}

TEST(LinuxBootTest, FdtAsSetupData) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const LoadedKernel kernel = LoadBzImage(memory, BzImageSpec(), "lb_fdt");
  const std::vector<uint8_t> fdt = Pattern(300, 5);
  ASSERT_TRUE(WriteLinuxBootParams(memory, {.kernel = &kernel, .fdt = fdt}).ok());
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x250), kFdtAddress);  // setup_data
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kFdtAddress + 0), 0u);       // next
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kFdtAddress + 8), 2u);       // type SETUP_DTB
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kFdtAddress + 12), 300u);    // len
  std::vector<uint8_t> back(fdt.size());
  ASSERT_TRUE(memory.Read(GuestAddress(kFdtAddress + 16), back).ok());
  EXPECT_EQ(back, fdt);
  EXPECT_EQ(kLinuxFdtBlobAddress, kFdtAddress + 16);
  // Empty command line: still a NUL-terminated string.
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kCmdlineAddress), 0);

  // The largest FDT that fits, and one byte more.
  const std::vector<uint8_t> largest(kFdtMaxBytes - 16, 1);
  EXPECT_TRUE(WriteLinuxBootParams(memory, {.kernel = &kernel, .fdt = largest}).ok());
  const std::vector<uint8_t> too_big(kFdtMaxBytes - 15, 1);
  absl::Status status = WriteLinuxBootParams(memory, {.kernel = &kernel, .fdt = too_big});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("device tree"));
}

TEST(LinuxBootTest, ElfKernelFdtIsHonouredByVersion) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const LoadedKernel kernel = ElfKernel();
  const std::vector<uint8_t> fdt = Pattern(64, 5);
  ASSERT_TRUE(WriteLinuxBootParams(memory, {.kernel = &kernel, .fdt = fdt}).ok());
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x250), kFdtAddress);
  // Linux reads setup_data only from protocol 2.09 on.
  EXPECT_GE(ReadGuest<uint16_t>(memory, kZp + 0x206), 0x0209);
}

TEST(LinuxBootTest, CommandLineLimits) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const LoadedKernel bzimage = LoadBzImage(memory, BzImageSpec(), "lb_cmdline");
  // cmdline_size 0x7ff excludes the NUL.
  EXPECT_TRUE(
      WriteLinuxBootParams(memory, {.kernel = &bzimage, .cmdline = std::string(0x7ff, 'a')}).ok());
  DirtyZeroPage(memory);
  absl::Status status =
      WriteLinuxBootParams(memory, {.kernel = &bzimage, .cmdline = std::string(0x800, 'a')});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cmdline_size"));
  // Nothing written on error.
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x210), 0xee);

  const LoadedKernel elf = ElfKernel();
  EXPECT_TRUE(WriteLinuxBootParams(
                  memory, {.kernel = &elf, .cmdline = std::string(kCmdlineMaxBytes - 1, 'b')})
                  .ok());
  status =
      WriteLinuxBootParams(memory, {.kernel = &elf, .cmdline = std::string(kCmdlineMaxBytes, 'b')});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  status = WriteLinuxBootParams(memory, {.kernel = &elf, .cmdline = std::string("a\0b", 3)});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("NUL"));
}

TEST(LinuxBootTest, WrongKernels) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  EXPECT_EQ(WriteLinuxBootParams(memory, {}).code(), absl::StatusCode::kInvalidArgument);
  LoadedKernel pvh = ElfKernel();
  pvh.kind = LoadedKernel::EntryKind::kPvh;
  EXPECT_EQ(WriteLinuxBootParams(memory, {.kernel = &pvh}).code(),
            absl::StatusCode::kInvalidArgument);
  LoadedKernel headerless = ElfKernel();
  headerless.kind = LoadedKernel::EntryKind::kLinux64;
  EXPECT_EQ(WriteLinuxBootParams(memory, {.kernel = &headerless}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LinuxBootTest, InitrdOutsideRam) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const LoadedKernel kernel = ElfKernel();
  const InitrdPlacement initrd{GuestAddress(63 * kMiB), 2 * kMiB};
  EXPECT_EQ(WriteLinuxBootParams(memory, {.kernel = &kernel, .initrd = initrd}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LinuxBootTest, RamAboveFourGiBInE820) {
  GuestMemory memory = MakeMemory(3072 * kMiB + 64 * kMiB);
  const LoadedKernel kernel = ElfKernel();
  ASSERT_TRUE(WriteLinuxBootParams(memory, {.kernel = &kernel}).ok());
  ASSERT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x1e8), 4);
  const uint64_t entry3 = kZp + 0x2d0 + 3 * 20;
  EXPECT_EQ(ReadGuest<uint64_t>(memory, entry3), kHighRamStart);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, entry3 + 8), 64 * kMiB);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, entry3 + 16), 1u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kZp + 0x2d0 + 2 * 20 + 8),
            kMmioHoleStart - kHighMemoryStart);
}

std::string FirstMatch(const char* pattern) {
  glob_t found;
  std::string path;
  if (glob(pattern, 0, nullptr, &found) == 0 && found.gl_pathc > 0) path = found.gl_pathv[0];
  globfree(&found);
  return path;
}

// The installed Debian kernel and its initramfs, when present: load both and write boot_params.
TEST(LinuxBootTest, RealDebianKernelAndInitrd) {
  const std::string kernel_path = FirstMatch("/boot/vmlinuz-*");
  const std::string initrd_path = FirstMatch("/boot/initrd.img-*");
  if (kernel_path.empty() || initrd_path.empty()) {
    MICROVM_SKIP("no /boot/vmlinuz-* and /boot/initrd.img-* installed (tools/setup)");
  }
  GuestMemory memory = MakeMemory(512 * kMiB);
  absl::StatusOr<LoadedKernel> kernel = LoadKernel(memory, kernel_path);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  absl::StatusOr<InitrdPlacement> initrd = LoadInitrd(memory, initrd_path, *kernel);
  ASSERT_TRUE(initrd.ok()) << initrd.status();
  EXPECT_GE(initrd->address, kernel->reserved_end);
  EXPECT_LE(initrd->address.value() + initrd->size - 1, kernel->initrd_addr_max);
  ASSERT_TRUE(
      WriteLinuxBootParams(
          memory, {.kernel = &*kernel, .cmdline = "console=ttyS0 panic=-1", .initrd = *initrd})
          .ok());
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x218), initrd->address.value());
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x21c), initrd->size);
  EXPECT_EQ(GuestString(memory, kZp + 0x202, 4), "HdrS");
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x1ef), 0);  // sentinel
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kZp + 0x210), 0xff);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kZp + 0x228), kCmdlineAddress);
}

}  // namespace
}  // namespace vmm::loader
