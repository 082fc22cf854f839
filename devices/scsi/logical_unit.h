#ifndef DEVICES_SCSI_LOGICAL_UNIT_H_
#define DEVICES_SCSI_LOGICAL_UNIT_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "block/backend.h"
#include "block/drive.h"
#include "block/media.h"
#include "devices/scsi/constants.h"
#include "devices/scsi/iovec_util.h"
#include "devices/scsi/sense.h"
#include "devices/scsi/task.h"

// A transport-neutral SCSI logical unit (SAM-5): the device server of one LUN, built on a
// block::Drive. virtio-scsi, IDE ATAPI and a vhost-user backend all drive it through the same
// LuQueue (one per transport thread) or, with several LUNs, through a Target's TargetQueue.
//
// Threading. A LogicalUnit is shared by all the queues of all threads. A command's hot path (READ,
// WRITE, and every command while nothing unusual is pending) reads the unit's shared state with
// one relaxed atomic load and takes no lock; unit attentions, deferred sense and MODE SELECT are
// handled under a mutex on a slow path. A LuQueue belongs to one thread.

namespace devices::scsi {

class CommandContext;
class LuQueue;

// How a CD/DVD unit tells a guest that its medium changed (both are what QEMU 7.2 does, see
// docs/linux-commands.md 2.6 and 3.6):
enum class MediaChangeReport {
  // SCSI (QEMU scsi-cd): UNIT ATTENTION 06/3A/00 MEDIUM NOT PRESENT, then, if a medium is in the
  // drive when that one was reported, UNIT ATTENTION 06/28/00 NOT READY TO READY CHANGE.
  kUnitAttentions,
  // ATAPI (QEMU ide-cd): once a new medium is ready, the first command not exempt from unit
  // attention gets NOT READY 02/3A/00, the next UNIT ATTENTION 06/28/00. For guests that do not poll
  // GET EVENT STATUS NOTIFICATION this shows the tray having been open.
  kNotReadyThenUnitAttention,
};

struct LogicalUnitOptions {
  // Standard INQUIRY data (SPC-4), space-padded: T10 VENDOR IDENTIFICATION (8 bytes),
  // PRODUCT IDENTIFICATION (16), PRODUCT REVISION LEVEL (4). Empty product: "VIRTUAL DISK" or
  // "VIRTUAL DVD-ROM".
  std::string vendor = "MICROVM";
  std::string product;
  std::string revision = "1.0";
  // VPD page 0x80 and the identifiers of VPD page 0x83. Empty: the drive's name, or "0".
  std::string serial;
  // Largest transfer of one READ/WRITE (SBC-3 MAXIMUM TRANSFER LENGTH, rounded down to whole
  // blocks); longer transfers fail with INVALID FIELD IN CDB.
  uint32_t max_transfer_bytes = 8 << 20;
  // Disk: READ CAPACITY(16) LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT, so the guest aligns its I/O
  // to the host's pages. Rounded to a power of two >= the logical block size.
  uint32_t physical_block_size = 4096;
  // Queue UNIT ATTENTION 06/29/00 POWER ON, RESET, OR BUS DEVICE RESET OCCURRED at creation and at
  // Reset() (SAM-5; QEMU's SCSI devices do; its ATAPI model does not).
  bool power_on_unit_attention = true;
  // CD/DVD only.
  MediaChangeReport media_change_report = MediaChangeReport::kUnitAttentions;
  // CD/DVD GET CONFIGURATION Core feature PHYSICAL INTERFACE STANDARD (MMC-6): 1 = SCSI
  // family, 2 = ATAPI.
  uint32_t physical_interface = 1;
};

// Flags of a command table entry.
enum CommandFlags : uint32_t {
  // Runs while a unit attention condition is pending, without reporting or clearing it: INQUIRY,
  // REPORT LUNS, REQUEST SENSE (SAM-5; REQUEST SENSE reports the attention as its data), and on
  // a CD/DVD unit GET CONFIGURATION and GET EVENT STATUS NOTIFICATION (MMC-5 4.1.6.1, kept in
  // MMC-6, and QEMU: a polling guest must not consume the attention the next open expects).
  // Every other command reports a pending attention first, and consumes it, even one that would
  // fail anyway (an unsupported opcode, a short CDB), as QEMU's bus layer does.
  kAllowedWithUnitAttention = 1u << 0,
  // Fails with NOT READY, MEDIUM NOT PRESENT (02/3A/01 tray closed, 02/3A/02 tray open) unless a
  // medium is reachable (MMC-5 4.1.8). Checked after unit attentions (SAM-5: UA first).
  kNeedsMedium = 1u << 1,
  // Offered only when the drive can discard (UNMAP): otherwise INVALID COMMAND OPERATION CODE and
  // absent from REPORT SUPPORTED OPERATION CODES.
  kNeedsDiscard = 1u << 2,
};

using CommandHandler = Execution (*)(CommandContext&);

inline constexpr int16_t kNoServiceAction = -1;

// One row of a unit's single dispatch table. REPORT SUPPORTED OPERATION CODES is generated from it.
struct CommandInfo {
  uint8_t opcode;
  int16_t service_action;  // kNoServiceAction, or the value of CDB byte 1 bits 4-0
  const char* name;
  uint32_t flags;
  // SPC-4 CDB USAGE DATA: usage[0] is the opcode, then for each CDB byte the bits the device
  // server looks at; cdb_length() bytes are meaningful. Informational: reserved bits are not
  // checked (Linux and SeaBIOS put vendor bits in some control bytes, e.g. READ TOC's 0x40).
  std::array<uint8_t, 16> usage;
  CommandHandler handler;

  // SPC-4: fixed by the opcode's group for every command in the tables.
  constexpr uint8_t cdb_length() const { return CdbLengthForOpcode(opcode); }
};

// The medium a command runs against. For a disk: the drive's, fixed. For a CD/DVD: from the media
// snapshot the command started with (block::RemovableMedia::Current()).
struct MediumInfo {
  bool present = false;
  bool tray_open = false;
  bool ready = false;  // present and reachable (tray closed)
  uint64_t generation = 0;
  uint32_t block_size = 512;  // as the guest addresses it (2048 on a CD/DVD)
  uint64_t blocks = 0;        // whole blocks of block_size
  uint32_t backend_block_size = 512;
  bool read_only = false;
  bool locked = false;  // the guest prevents medium removal
};

// The LUNs REPORT LUNS lists (SPC-4). A Target provides its own; a unit used on its own (an
// ATAPI device) reports LUN 0 alone.
class LunInventory {
 public:
  virtual ~LunInventory() = default;
  // Ascending.
  virtual std::span<const uint16_t> luns() const = 0;
};

// SPC-4: mode page control (MODE SENSE PC field).
enum class PageControl : uint8_t { kCurrent = 0, kChangeable = 1, kDefault = 2, kSaved = 3 };

class LogicalUnit : public std::enable_shared_from_this<LogicalUnit> {
 public:
  virtual ~LogicalUnit();
  LogicalUnit(const LogicalUnit&) = delete;
  LogicalUnit& operator=(const LogicalUnit&) = delete;

  // A queue for the calling thread: it creates the drive's queue for that thread. `completion` is
  // called from that queue's ProcessCompletions() for every task its Execute() left in flight.
  absl::StatusOr<std::unique_ptr<LuQueue>> CreateQueue(TaskCompletion completion);

  // SPC-4 PERIPHERAL DEVICE TYPE.
  uint8_t peripheral_type() const { return type_; }
  bool removable() const { return media_ != nullptr; }
  const LogicalUnitOptions& options() const { return options_; }
  const block::Drive& drive() const { return *drive_; }
  const std::string& serial() const { return serial_; }
  // The entries this unit offers, in table order.
  std::span<const CommandInfo* const> commands() const { return enabled_; }
  // The entry for `opcode` (and `service_action`, if that opcode has service actions), or null.
  const CommandInfo* Find(uint8_t opcode, int service_action) const;
  // Whether `opcode` is dispatched by service action.
  bool HasServiceActions(uint8_t opcode) const;
  // Whether any entry has `opcode`.
  bool Offers(uint8_t opcode) const { return first_entry_[opcode] >= 0; }

  // A reset of the unit (SAM-5 LOGICAL UNIT RESET, I_T NEXUS RESET, a transport reset such as a
  // virtio device reset): queues the power-on/reset unit attention (if the options ask for it),
  // drops deferred sense, returns MODE SELECT changes to their defaults (SPC-4: no saved
  // values), and clears the guest's medium lock (SPC-4, PREVENT ALLOW MEDIUM REMOVAL).
  // Commands in flight are not affected: they complete normally (a transport aborting them drops
  // their responses). Thread-safe.
  virtual void Reset();

  // The target's LUN inventory changed (a unit attached or detached): REPORTED LUNS DATA HAS
  // CHANGED (06/3F/0E, SPC-4 6.35 and 7.5.2) on the next command that reports unit attentions.
  // Thread-safe.
  void ReportLunsChanged();
  // The drive of a fixed unit (a disk) was resized (block::Drive::Resize): the unit reads its new
  // capacity, which READ CAPACITY reports and commands are checked against from now on, and
  // CAPACITY DATA HAS CHANGED (06/2A/09, SBC-3) goes to the next command that reports unit
  // attentions. Thread-safe.
  void CapacityChanged();

  // The caching mode page's WCE bit (SBC-3) as the guest sees it: the drive's
  // (block::WriteCacheEnabled of its cache mode) until a MODE SELECT changes it. When the guest
  // turned WCE off on a drive that has a write cache, every write is sent with FUA, so the guest's
  // "no volatile cache" view holds; the drive's cache mode still governs durability below that
  // (cache=unsafe still ignores FUA).
  bool write_cache_enabled() const { return wce_.load(std::memory_order_relaxed); }

  // ---- For the command handlers ----

  // Standard INQUIRY byte 1: RMB (SPC-4).
  bool removable_medium_bit() const { return removable(); }
  // VPD pages offered (ascending), and one page built into `out` (returns its length, 0 if the page
  // is not supported).
  virtual std::span<const uint8_t> VpdPages() const = 0;
  virtual size_t BuildVpdPage(uint8_t page, const MediumInfo& medium,
                              std::span<uint8_t> out) const = 0;
  // Mode pages offered (ascending, subpage 0), one page (returns its length, 0 if not supported),
  // the mode parameter header's DEVICE-SPECIFIC PARAMETER, and whether the unit has block
  // descriptors (SBC-3; MMC-6 units do not).
  virtual std::span<const uint8_t> ModePages() const = 0;
  virtual size_t BuildModePage(uint8_t page, PageControl control, const MediumInfo& medium,
                               std::span<uint8_t> out) const = 0;
  virtual uint8_t ModeDeviceSpecificParameter(const MediumInfo& medium) const = 0;
  virtual bool HasBlockDescriptors() const = 0;
  // MODE SELECT of one page (`page` holds the whole page, header included). Validates only when
  // `apply` is false; a page that would change anything not changeable gets INVALID FIELD IN
  // PARAMETER LIST. Returns NO SENSE when accepted.
  virtual Sense SelectModePage(std::span<const uint8_t> page, const MediumInfo& medium, bool apply);

  // REQUEST SENSE (SPC-4): the sense to report as data, consuming it: the deferred sense of
  // the last failed command, else the highest-priority unit attention, else the current condition
  // (NOT READY without a medium), else NO SENSE.
  Sense TakeRequestSense(const MediumInfo& medium);

 protected:
  LogicalUnit(uint8_t type, std::shared_ptr<block::Drive> drive, LogicalUnitOptions options,
              std::span<const CommandInfo> table, bool discard);

  // Whether the drive's cache mode has a volatile write cache (the WCE default).
  bool default_wce() const { return default_wce_; }
  void set_write_cache_enabled(bool wce) { wce_.store(wce, std::memory_order_relaxed); }

  // For a fixed drive: the medium, read once, but for its size in blocks, which a resize changes
  // (set both where fixed_medium_ is made).
  MediumInfo fixed_medium_;
  std::atomic<uint64_t> fixed_blocks_{0};

 private:
  friend class LuQueue;

  // Unit attention conditions, in reporting priority order.
  enum UnitAttention : uint32_t {
    kUaPowerOn = 1u << 0,           // 06/29/00
    kUaMediumNotPresent = 1u << 1,  // 06/3A/00 (MediaChangeReport::kUnitAttentions)
    kUaMediumChanged = 1u << 2,     // 06/28/00
    kUaCapacityChanged = 1u << 3,   // 06/2A/09
    kUaLunsChanged = 1u << 4,       // 06/3F/0E
  };

  // The slow path of Execute(), taken when attention_ is set or the media generation moved: notes
  // a media change, drops the deferred sense (unless this is REQUEST SENSE), and returns the sense
  // this command must fail with (a unit attention, or an ATAPI-style NOT READY step), if any.
  std::optional<Sense> CheckAttention(const CommandInfo* info, uint8_t opcode,
                                      const MediumInfo& medium);
  // Remembers the sense of a CHECK CONDITION for a following REQUEST SENSE (SAM-5: an autosense
  // transport such as virtio-scsi never asks; ATAPI does, after every error).
  void RecordSense(const Sense& sense);
  void NoteMediumChangeLocked(const MediumInfo& medium) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Sense TakeUnitAttentionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UpdateAttentionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const uint8_t type_;
  const std::shared_ptr<block::Drive> drive_;
  block::RemovableMedia* const media_;  // null for a fixed drive
  const LogicalUnitOptions options_;
  const std::string serial_;
  const bool default_wce_;

  // Dispatch: opcode -> first entry of that opcode in enabled_ (or -1).
  std::vector<const CommandInfo*> enabled_;
  std::array<int16_t, 256> first_entry_;
  std::array<bool, 256> has_service_actions_{};

  std::atomic<bool> wce_;
  // Set while anything below is pending: the one load of the hot path.
  std::atomic<bool> attention_{false};
  // The media generation accounted for (mirrors media_generation_ for a lock-free compare).
  std::atomic<uint64_t> seen_generation_{0};

  absl::Mutex mutex_;
  uint32_t pending_ua_ ABSL_GUARDED_BY(mutex_) = 0;
  // kUnitAttentions: report 06/28/00 after 06/3A/00 (a medium was in the drive at the change).
  bool changed_after_not_present_ ABSL_GUARDED_BY(mutex_) = false;
  // kNotReadyThenUnitAttention: 1 = NOT READY next, 2 = UNIT ATTENTION next.
  uint8_t not_ready_stage_ ABSL_GUARDED_BY(mutex_) = 0;
  std::optional<Sense> deferred_sense_ ABSL_GUARDED_BY(mutex_);
  uint64_t media_generation_ ABSL_GUARDED_BY(mutex_) = 0;
};

// The per-thread half of a LogicalUnit. Not thread-safe: every call comes from the thread that
// created it, so nothing here locks. The transport's loop:
//
//   for each new command: fill a Task, then Execute(task):
//       kCompleted -> respond now with task.status(), sense_data(), residuals;
//       kInFlight  -> it will come back through the completion handler.
//   Submit() once per batch (issues the block I/O those Execute() calls queued: one system call);
//   when completion_fd() is readable (epoll): ProcessCompletions(), which calls the handler for
//   each finished task (and submits any follow-up I/O itself).
//
// Emulated commands (INQUIRY, MODE SENSE, ...) complete synchronously, inside Execute(), with no
// I/O; so do commands rejected before any I/O. Only READ, WRITE, SYNCHRONIZE CACHE, WRITE SAME,
// UNMAP, START STOP UNIT (a flush) and READ CD go to the drive.
class LuQueue {
 private:
  struct Key {
    explicit Key() = default;
  };

 public:
  // Made by LogicalUnit::CreateQueue().
  LuQueue(Key, std::shared_ptr<LogicalUnit> lu, TaskCompletion completion);
  ~LuQueue();
  LuQueue(const LuQueue&) = delete;
  LuQueue& operator=(const LuQueue&) = delete;

  // Runs `task` (which must not be in flight). See Execution.
  Execution Execute(Task& task);
  void Submit();
  int completion_fd() const { return block_->completion_fd(); }
  void ProcessCompletions();
  // Tasks in flight (Execute() returned kInFlight and the handler has not run yet). Drain to zero
  // before destroying the queue: the drive drops the completions of a destroyed queue.
  size_t in_flight() const { return tasks_in_flight_; }

  LogicalUnit& lu() const { return *lu_; }
  // REPORT LUNS of this queue's unit lists `inventory`'s LUNs (a Target sets it); null: LUN 0.
  void set_inventory(const LunInventory* inventory) { inventory_ = inventory; }
  const LunInventory* inventory() const { return inventory_; }

 private:
  friend class LogicalUnit;
  friend class CommandContext;

  MediumInfo MediumFor(const block::MediaState& state);
  Execution Complete(Task& task, const Sense& sense);
  void Enqueue(Task& task, const block::Request& request);
  Execution Started(Task& task);
  void OnBlockCompletion(uint64_t cookie, block::Completion completion);
  void FinishIo(Task& task);

  const std::shared_ptr<LogicalUnit> lu_;
  std::unique_ptr<block::BlockQueue> block_;
  TaskCompletion completion_;
  const LunInventory* inventory_ = nullptr;
  size_t tasks_in_flight_ = 0;
  bool need_submit_ = false;
  // A CD/DVD: the medium's geometry, per media generation (the backend is asked once per medium).
  bool cached_valid_ = false;
  uint64_t cached_generation_ = 0;
  MediumInfo cached_medium_;
};

// What a command handler sees: the parsed-command structs' Emulate() methods take one. Every
// handler ends with one of the completions below and returns what it returns.
class CommandContext {
 public:
  CommandContext(LuQueue& queue, Task& task, const CommandInfo& info, const MediumInfo& medium)
      : queue_(queue), task_(task), info_(info), medium_(medium) {}

  // The CDB: info().cdb_length() bytes at least (the task's copy, zero-padded to kMaxCdbSize).
  const uint8_t* cdb() const { return task_.cdb_.data(); }
  const CommandInfo& info() const { return info_; }
  Task& task() { return task_; }
  LogicalUnit& lu() const { return queue_.lu(); }
  LuQueue& queue() const { return queue_; }
  const MediumInfo& medium() const { return medium_; }

  // ---- Synchronous completions ----
  Execution Good();
  Execution Fail(const Sense& sense);
  // GOOD with `data` truncated to the allocation length and the data-in buffers (SPC-4).
  Execution DataIn(std::span<const uint8_t> data, uint64_t allocation_length);
  // GOOD after streaming through a DataInWriter made by Writer().
  DataInWriter Writer(uint64_t allocation_length) const {
    return DataInWriter(task_.data_in, allocation_length);
  }
  Execution Finish(const DataInWriter& writer);
  // A command needing `length` bytes of data-out (parameter data) gets them here; fails (and
  // returns false) with the overrun flag when the buffers hold fewer. Marks them transferred.
  bool ReadDataOut(std::span<uint8_t> out);
  // The overrun failure (see Task::overrun()).
  Execution Overrun();
  // Records that the command consumed `bytes` of data-out (for the residual).
  void MarkDataOut(uint64_t bytes) { task_.out_transferred_ = bytes; }

  // ---- Block I/O (complete asynchronously) ----
  // Reads `length` bytes (> 0) at byte `offset` into the data-in buffers (which must hold them:
  // callers check with DataInCovers()); with `flush_first`, after a flush (a READ with FUA: SBC-3,
  // the data must come from the medium, so anything cached is written first).
  Execution StartRead(uint64_t offset, uint64_t length, bool flush_first);
  // Writes `length` bytes (> 0) from the data-out buffers.
  Execution StartWrite(uint64_t offset, uint64_t length, bool fua);
  Execution StartFlush();
  // Writes `count` blocks of `block_size` at `offset`, each a copy of the first block of data-out
  // (which must hold it), or zeros when `zeros` (the caller found that block zero, or the command
  // has no data-out): WRITE SAME without UNMAP. `used_data_out`: the block came from data-out.
  Execution StartWriteSame(uint64_t offset, uint64_t count, uint32_t block_size, bool zeros,
                           bool used_data_out);
  // Discards byte ranges (UNMAP, WRITE SAME with UNMAP), all at once.
  struct Range {
    uint64_t offset;
    uint64_t length;
  };
  Execution StartDiscards(std::span<const Range> ranges);

  bool DataInCovers(uint64_t length) const { return TotalLength(task_.data_in) >= length; }
  bool DataOutCovers(uint64_t length) const { return TotalLength(task_.data_out) >= length; }

 private:
  LuQueue& queue_;
  Task& task_;
  const CommandInfo& info_;
  const MediumInfo medium_;
};

// Runs a parsed command: `Command::Parse(cdb)` returns std::optional<Command> (nullopt: INVALID
// FIELD IN CDB) and `Command::Emulate(CommandContext&)` does the rest. Table entries point here.
template <typename Command>
Execution Run(CommandContext& ctx) {
  std::optional<Command> command = Command::Parse(ctx.cdb());
  if (!command) return ctx.Fail(sense::kInvalidFieldInCdb);
  return command->Emulate(ctx);
}

// The sense for a block-layer errno (block/request.h), by the request that failed.
Sense SenseForBlockError(int error, block::RequestType type);

// NOT READY for a unit without a reachable medium: 02/3A/02 with the tray open, else 02/3A/01.
Sense NotReadySense(const MediumInfo& medium);

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_LOGICAL_UNIT_H_
