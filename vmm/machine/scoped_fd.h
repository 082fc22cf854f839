#ifndef VMM_MACHINE_SCOPED_FD_H_
#define VMM_MACHINE_SCOPED_FD_H_

#include "block/scoped_fd.h"

namespace vmm {

using ScopedFd = block::ScopedFd;

}  // namespace vmm

#endif  // VMM_MACHINE_SCOPED_FD_H_
