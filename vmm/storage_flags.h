#ifndef VMM_STORAGE_FLAGS_H_
#define VMM_STORAGE_FLAGS_H_

#include <vector>

#include "absl/status/status.h"
#include "vmm/command_line.h"
#include "vmm/storage.h"

namespace vmm {

// The storage flags both launchers share, defined once (microvm, vhost-user-scsi):
//   --disk, --cdrom   documented here; they repeat, so ExtractDriveFlags takes them out of argv
//   --iothreads, --poll-max-ns
// --scsi-queues stays with each binary: its range and default differ (a PCI device may offer up
// to 1024 queues; vhost-user indexes rings with 8 bits and lets the front end choose).

// Reads --iothreads and --poll-max-ns into `config`, range-checked whether or not a drive uses
// them (a value out of range is a mistake either way); errors name the flag and the value.
absl::Status IoThreadFlagsInto(StorageConfig& config);

// The shared flags' --help entries, in the order above.
std::vector<HelpFlag> SharedStorageHelp();

}  // namespace vmm

#endif  // VMM_STORAGE_FLAGS_H_
