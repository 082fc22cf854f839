#include "vmm/loader/image_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/unprivileged.h"
#include "vmm/loader/test_images.h"

namespace vmm::loader {
namespace {

using test_images::MakeMemory;
using test_images::Pattern;
using test_images::TempPath;
using test_images::WriteTempFile;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ImageFileTest, ReadsAndBoundsChecks) {
  const std::vector<uint8_t> bytes = Pattern(100, 1);
  const std::string path = WriteTempFile("image_file_read", bytes);
  absl::StatusOr<ImageFile> file = ImageFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 100u);
  std::array<uint8_t, 10> out;
  ASSERT_TRUE(file->ReadAt(90, out).ok());
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end()),
            std::vector<uint8_t>(bytes.begin() + 90, bytes.end()));
  absl::Status past_end = file->ReadAt(91, out);
  EXPECT_EQ(past_end.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(past_end.message()), HasSubstr("truncated"));
  EXPECT_THAT(std::string(past_end.message()), HasSubstr(path));
  EXPECT_FALSE(file->ReadAt(UINT64_MAX, out).ok());
}

TEST(ImageFileTest, ReadIntoGuestChecksGuestRange) {
  const std::vector<uint8_t> bytes = Pattern(0x2000, 3);
  absl::StatusOr<ImageFile> file = ImageFile::Open(WriteTempFile("image_file_guest", bytes));
  ASSERT_TRUE(file.ok());
  GuestMemory memory = MakeMemory(16 << 20);
  ASSERT_TRUE(file->ReadIntoGuest(memory, 0x1000, 0x1000, GuestAddress(0x200000)).ok());
  std::vector<uint8_t> back(0x1000);
  ASSERT_TRUE(memory.Read(GuestAddress(0x200000), back).ok());
  EXPECT_EQ(back, std::vector<uint8_t>(bytes.begin() + 0x1000, bytes.end()));
  EXPECT_EQ(file->ReadIntoGuest(memory, 0, 0x2000, GuestAddress((16 << 20) - 0x1000)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(file->ReadIntoGuest(memory, 0x1000, 0x1001, GuestAddress(0x200000)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ImageFileTest, OpenErrors) {
  absl::StatusOr<ImageFile> missing = ImageFile::Open(TempPath("does_not_exist"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("does_not_exist"));
  EXPECT_EQ(ImageFile::Open(TempPath("does_not_exist/x")).status().code(),
            absl::StatusCode::kNotFound);
  const std::string dir = TempPath("");
  EXPECT_EQ(ImageFile::Open(dir).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ImageFileTest, UnreadableIsPermissionDenied) {
  const std::string path = WriteTempFile("image_file_unreadable", Pattern(10, 1));
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  // Root would read it anyway (CAP_DAC_OVERRIDE): an ordinary caller opens it.
  absl::StatusOr<std::string> seen = tests::RunUnprivileged([&] {
    absl::StatusOr<ImageFile> file = ImageFile::Open(path);
    return absl::StrCat(absl::StatusCodeToString(file.status().code()), ": ",
                        file.status().message());
  });
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_THAT(*seen, StartsWith("PERMISSION_DENIED: "));
  EXPECT_THAT(*seen, HasSubstr(path));
}

}  // namespace
}  // namespace vmm::loader
