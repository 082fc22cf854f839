#include "api/api_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"

namespace api {
namespace {

constexpr absl::string_view kFlag = "--api-token-file";

bool Mentions(const absl::Status& status, absl::string_view text) {
  return status.message().find(text) != absl::string_view::npos;
}

class ApiTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = std::string(std::getenv("TEST_TMPDIR")) + "/token.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  // A file holding `contents`, with `mode`.
  std::string Write(const std::string& name, const std::string& contents, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << contents;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  static absl::StatusOr<std::string> Read(const std::string& path,
                                          TokenFileCheck check = TokenFileCheck::kOwnerOnly) {
    return ReadApiTokenFile(path, kFlag, check);
  }

  std::string dir_;
};

TEST_F(ApiTokenTest, ReadsTheSecretWithoutTrailingWhitespace) {
  auto token = Read(Write("token", "s3cret-Token/+=\n\n \t"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret-Token/+=");
}

TEST_F(ApiTokenTest, RefusesAnEmptyFile) {
  for (const std::string& contents : {std::string(), std::string("\n"), std::string("  \n\t")}) {
    auto token = Read(Write("empty", contents));
    ASSERT_FALSE(token.ok());
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Mentions(token.status(), kFlag)) << token.status();
    EXPECT_TRUE(Mentions(token.status(), "empty")) << token.status();
  }
}

TEST_F(ApiTokenTest, RefusesAFileOthersCanRead) {
  for (const mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
    const std::string path = Write("open", "s3cret\n", mode);
    auto token = Read(path);
    ASSERT_FALSE(token.ok()) << std::oct << mode;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(Mentions(token.status(), kFlag)) << token.status();
    EXPECT_TRUE(Mentions(token.status(), "chmod 600")) << token.status();
    EXPECT_TRUE(Mentions(token.status(), path)) << token.status();
    // A client may share a token file with a group.
    EXPECT_TRUE(Read(path, TokenFileCheck::kReadable).ok());
  }
  EXPECT_TRUE(Read(Write("owner-only", "s3cret", 0400)).ok());
}

TEST_F(ApiTokenTest, RefusesAFileOwnedBySomeoneElse) {
  const std::string path = Write("theirs", "s3cret\n");
  // Giving a file away takes root (CI runs as root, outside Bazel's user namespace: the target is
  // tagged no-sandbox).
  if (geteuid() != 0) MICROVM_SKIP("giving a file to another uid (chown) needs root");
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0) << strerror(errno);
  auto token = Read(path);
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Mentions(token.status(), "uid 65534")) << token.status();
  EXPECT_TRUE(Mentions(token.status(), kFlag)) << token.status();
}

TEST_F(ApiTokenTest, RefusesWhatIsNoTokenFile) {
  auto missing = Read(dir_ + "/missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(missing.status(), kFlag)) << missing.status();
  EXPECT_FALSE(Read(dir_).ok());  // a directory
  // A FIFO is refused at once (a plain open would wait for a writer).
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = Read(fifo);
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_TRUE(Mentions(from_fifo.status(), "not a regular file")) << from_fifo.status();
  EXPECT_FALSE(Read(Write("spaces", "two words\n")).ok());
  EXPECT_FALSE(Read(Write("control", std::string("a\x01z"))).ok());
  EXPECT_FALSE(Read(Write("long", std::string(kMaxTokenBytes + 1, 'x'))).ok());
  EXPECT_TRUE(Read(Write("longest", std::string(kMaxTokenBytes, 'x'))).ok());
  EXPECT_FALSE(Read(Write("huge", std::string(1 << 20, 'x'))).ok());
  EXPECT_FALSE(Read("", TokenFileCheck::kReadable).ok());
}

TEST(CheckApiTokenTest, VisibleAsciiOnly) {
  EXPECT_TRUE(CheckApiToken("abc-DEF_123.~!", "t").ok());
  EXPECT_FALSE(CheckApiToken("", "t").ok());
  EXPECT_FALSE(CheckApiToken("a b", "t").ok());
  EXPECT_FALSE(CheckApiToken("a\tb", "t").ok());
  EXPECT_FALSE(CheckApiToken("caf\xc3\xa9", "t").ok());
  EXPECT_FALSE(CheckApiToken(std::string("a\0b", 3), "t").ok());
}

TEST(CheckAuthorizationTest, OneBearerTokenThatMatches) {
  const std::string token = "s3cret";
  auto check = [&](std::vector<absl::string_view> values) {
    return CheckAuthorization(values, token);
  };
  EXPECT_TRUE(check({"Bearer s3cret"}).ok());
  EXPECT_TRUE(check({"bearer s3cret"}).ok());  // the scheme is case-insensitive
  EXPECT_TRUE(check({BearerAuthorization(token)}).ok());

  const absl::Status missing = check({});
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Mentions(missing, "authorization: Bearer")) << missing;
  const absl::Status twice = check({"Bearer s3cret", "Bearer s3cret"});
  EXPECT_EQ(twice.code(), absl::StatusCode::kUnauthenticated);
  const absl::Status basic = check({"Basic czNjcmV0"});
  EXPECT_EQ(basic.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Mentions(basic, "not a bearer token")) << basic;
  for (absl::string_view wrong :
       {"Bearer s3cre", "Bearer s3cret ", "Bearer S3CRET", "Bearer ", "Bearer s3cretX", "Bearer"}) {
    const absl::Status status = check({wrong});
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << wrong;
    // What the caller sent is never echoed.
    EXPECT_FALSE(Mentions(status, "s3cre")) << status;
  }
}

TEST(ConstantTimeEqualsTest, Compares) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_FALSE(ConstantTimeEquals("a", ""));
  // A NUL byte is compared like any other (no C-string shortcut).
  EXPECT_FALSE(ConstantTimeEquals(absl::string_view("a\0b", 3), absl::string_view("a\0c", 3)));
}

}  // namespace
}  // namespace api
