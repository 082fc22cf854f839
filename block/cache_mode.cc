#include "block/cache_mode.h"

#include "absl/strings/str_cat.h"

namespace block {

absl::StatusOr<CacheMode> ParseCacheMode(absl::string_view text) {
  if (text == "none") return CacheMode::kNone;
  if (text == "writeback") return CacheMode::kWriteback;
  if (text == "writethrough") return CacheMode::kWritethrough;
  if (text == "directsync") return CacheMode::kDirectsync;
  if (text == "unsafe") return CacheMode::kUnsafe;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown cache mode \"", text, "\" (none, writeback, writethrough, directsync, unsafe)"));
}

std::string CacheModeName(CacheMode mode) {
  switch (mode) {
    case CacheMode::kNone:
      return "none";
    case CacheMode::kWriteback:
      return "writeback";
    case CacheMode::kWritethrough:
      return "writethrough";
    case CacheMode::kDirectsync:
      return "directsync";
    case CacheMode::kUnsafe:
      return "unsafe";
  }
  return "?";
}

absl::StatusOr<FuaMode> ParseFuaMode(absl::string_view text) {
  if (text == "native") return FuaMode::kNative;
  if (text == "emulate") return FuaMode::kEmulate;
  if (text == "auto") return FuaMode::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown FUA mode \"", text, "\" (native, emulate, auto)"));
}

std::string FuaModeName(FuaMode mode) {
  switch (mode) {
    case FuaMode::kNative:
      return "native";
    case FuaMode::kEmulate:
      return "emulate";
    case FuaMode::kAuto:
      return "auto";
  }
  return "?";
}

}  // namespace block
