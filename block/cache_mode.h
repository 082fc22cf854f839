#ifndef BLOCK_CACHE_MODE_H_
#define BLOCK_CACHE_MODE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace block {

// The host cache modes QEMU users know (qemu-doc "-drive cache="), and what each means here:
//
//   mode          host page cache   guest sees write cache   guest flush / FUA
//   none          bypassed (O_DIRECT)  enabled (WCE=1)       honoured
//   writeback     used                 enabled (WCE=1)       honoured
//   writethrough  used                 disabled (WCE=0)      every write is durable (as FUA)
//   directsync    bypassed (O_DIRECT)  disabled (WCE=0)      every write is durable (as FUA)
//   unsafe        used                 enabled (WCE=1)       ignored: completes at once
enum class CacheMode { kNone, kWriteback, kWritethrough, kDirectsync, kUnsafe };

absl::StatusOr<CacheMode> ParseCacheMode(absl::string_view text);
std::string CacheModeName(CacheMode mode);

// Open the backing file with O_DIRECT.
inline bool UsesDirectIo(CacheMode mode) {
  return mode == CacheMode::kNone || mode == CacheMode::kDirectsync;
}
// What the device reports as its volatile write cache (SCSI caching page WCE, ATA IDENTIFY word 85).
inline bool WriteCacheEnabled(CacheMode mode) {
  return mode != CacheMode::kWritethrough && mode != CacheMode::kDirectsync;
}
// Every write must be durable before it completes.
inline bool EveryWriteDurable(CacheMode mode) { return !WriteCacheEnabled(mode); }
// Flushes (and FUA) are acknowledged without touching the host.
inline bool IgnoresFlushes(CacheMode mode) { return mode == CacheMode::kUnsafe; }

// How a write with FUA reaches the host: natively as one RWF_DSYNC write, or emulated as write then
// a flush that the writes done meanwhile share (docs/block.md). `kAuto`: natively when no other
// durable write of the queue is in flight, shared flushes when several overlap (where the host's
// storage has no FUA, each RWF_DSYNC write is a write and a cache flush of its own in the kernel,
// and at depth 16 one flush for a batch of writes is 1.7 times faster here). `kNative` and `kAuto`
// fall back to emulation on a backend that cannot write natively.
enum class FuaMode { kNative, kEmulate, kAuto };

absl::StatusOr<FuaMode> ParseFuaMode(absl::string_view text);
std::string FuaModeName(FuaMode mode);

}  // namespace block

#endif  // BLOCK_CACHE_MODE_H_
