#include "vmm/loader/firmware.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vmm/loader/image_file.h"
#include "vmm/machine/guest_memory.h"

namespace vmm::loader {
namespace {

std::string WriteImage(const std::vector<uint8_t>& bytes) {
  std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                     "/firmware." + std::to_string(bytes.size());
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<uint8_t> Pattern(size_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  return bytes;
}

TEST(FirmwareTest, TheImageEndsAt4GiBAndItsTailSitsBelow1MiB) {
  const std::vector<uint8_t> image = Pattern(256 * 1024);
  auto file = ImageFile::Open(WriteImage(image));
  ASSERT_TRUE(file.ok()) << file.status();
  auto rom = LoadFirmwareRom(*file);
  ASSERT_TRUE(rom.ok()) << rom.status();
  EXPECT_EQ((*rom)->start().value(), 0xfffc0000u);
  EXPECT_EQ((*rom)->end().value(), uint64_t{1} << 32);
  // The reset vector's 16 bytes are the image's last.
  EXPECT_EQ(std::vector<uint8_t>((*rom)->host_address() + (*rom)->size() - 16,
                                 (*rom)->host_address() + (*rom)->size()),
            std::vector<uint8_t>(image.end() - 16, image.end()));

  const std::span<uint8_t> alias = LegacyBiosAlias(**rom);
  EXPECT_EQ(std::vector<uint8_t>(alias.begin(), alias.end()),
            std::vector<uint8_t>(image.end() - kLegacyBiosAliasSize, image.end()));
  // A 64 KiB image is all alias: the F segment only.
  auto small = ImageFile::Open(WriteImage(Pattern(64 * 1024)));
  ASSERT_TRUE(small.ok());
  auto small_rom = LoadFirmwareRom(*small);
  ASSERT_TRUE(small_rom.ok());
  const std::span<uint8_t> small_alias = LegacyBiosAlias(**small_rom);
  EXPECT_EQ(std::vector<uint8_t>(small_alias.begin(), small_alias.end()), Pattern(64 * 1024));
}

TEST(FirmwareTest, SizesThatAreNoFirmware) {
  for (size_t size : {size_t{0}, size_t{4096}, size_t{65536 + 512}, size_t{320} << 10}) {
    auto file = ImageFile::Open(WriteImage(std::vector<uint8_t>(size)));
    ASSERT_TRUE(file.ok());
    const auto rom = LoadFirmwareRom(*file);
    EXPECT_EQ(rom.status().code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_NE(rom.status().message().find("not a firmware image"), std::string::npos);
  }
}

}  // namespace
}  // namespace vmm::loader
