#include "vmm/media_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "vmm/cd_medium.h"

namespace vmm {
namespace {

class MediaDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::string(std::getenv("TEST_TMPDIR")) + "/media-test";
    mkdir(root_.c_str(), 0755);
    mkdir((root_ + "/media").c_str(), 0755);
    std::ofstream(root_ + "/media/disc.iso") << std::string(2048, 'd');
    std::ofstream(root_ + "/secret") << "not for the guest";
    unlink((root_ + "/media/link").c_str());
    symlink((root_ + "/secret").c_str(), (root_ + "/media/link").c_str());
  }
  std::string root_;
};

TEST_F(MediaDirectoryTest, OnlyFilesBeneathIt) {
  auto dir = MediaDirectory::Open(root_ + "/media/");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ((*dir)->path(), root_ + "/media");
  // Relative, and absolute under the directory.
  for (const std::string& path : {std::string("disc.iso"), root_ + "/media/disc.iso"}) {
    auto medium = (*dir)->OpenMedium(path, CdMediumFileOptions(1));
    ASSERT_TRUE(medium.ok()) << path << ": " << medium.status();
    EXPECT_EQ((*medium)->info().size_bytes, 2048u);
    EXPECT_TRUE((*medium)->info().read_only);
  }
  // Out of it, existing or not, by any route: the same answer.
  for (const std::string& path :
       {root_ + "/secret", std::string("../secret"), std::string("../missing"), std::string("link"),
        std::string("/etc/shadow"), root_ + "/media", root_ + "/mediax/disc.iso",
        std::string("/proc/self/root/etc/passwd")}) {
    auto medium = (*dir)->OpenMedium(path, CdMediumFileOptions(1));
    ASSERT_FALSE(medium.ok()) << path;
    EXPECT_EQ(medium.status().code(), absl::StatusCode::kPermissionDenied)
        << path << ": " << medium.status();
  }
  EXPECT_EQ((*dir)->OpenMedium("missing.iso", CdMediumFileOptions(1)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(MediaDirectoryTest, ReopensInPlaceAndKnowsItsResolvedPath) {
  const std::string alias = root_ + "/alias";
  unlink(alias.c_str());
  ASSERT_EQ(symlink((root_ + "/media").c_str(), alias.c_str()), 0);
  auto dir = MediaDirectory::Open(alias);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ((*dir)->path(), alias);  // API callers' absolute paths match what they gave
  char* real = realpath((root_ + "/media").c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  EXPECT_EQ((*dir)->resolved_path(), real);
  std::free(real);
  ASSERT_TRUE((*dir)->ReopenInTheJail().ok());
  EXPECT_TRUE((*dir)->OpenMedium(alias + "/disc.iso", CdMediumFileOptions(1)).ok());
}

TEST_F(MediaDirectoryTest, NothingIsReachableInTheJailWithoutOne) {
  auto none = MediaDirectory::NoneInTheJail();
  for (const std::string& path : {root_ + "/media/disc.iso", std::string("disc.iso")}) {
    auto medium = none->OpenMedium(path, CdMediumFileOptions(1));
    ASSERT_FALSE(medium.ok());
    EXPECT_EQ(medium.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(medium.status().message().find("--media-dir"), std::string::npos);
  }
  EXPECT_TRUE(none->ReopenInTheJail().ok());
}

TEST_F(MediaDirectoryTest, DirectoryMustExist) {
  auto dir = MediaDirectory::Open(root_ + "/no-such-dir");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("no-such-dir"), std::string::npos);
  EXPECT_FALSE(MediaDirectory::Open(root_ + "/secret").ok());  // a file, not a directory
}

}  // namespace
}  // namespace vmm
