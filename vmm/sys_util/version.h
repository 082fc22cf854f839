#ifndef VMM_SYS_UTIL_VERSION_H_
#define VMM_SYS_UTIL_VERSION_H_

#include <string>
#include <string_view>

namespace sys_util {

// The project's version, which --version prints on every binary (microvm, vhost-user-scsi,
// vmmctl). Raised with each change of the launchers' flags, the API or the image formats.
inline constexpr char kVersion[] = "0.24";

// "microvm 0.24 (opt build)\n": the program, kVersion and how it was built (Bazel's compilation
// mode: opt, fastbuild or dbg; and ASan when it is in), for --version.
inline std::string VersionText(std::string_view program) {
#if defined(MICROVM_COMPILATION_MODE)
  std::string build = MICROVM_COMPILATION_MODE;
#else
  std::string build = "unknown";
#endif
#if defined(__SANITIZE_ADDRESS__)
  build += ", ASan";
#endif
  return std::string(program) + " " + kVersion + " (" + build + " build)\n";
}

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_VERSION_H_
