#ifndef VMM_SCOPED_FD_H_
#define VMM_SCOPED_FD_H_

#include "block/scoped_fd.h"

namespace vmm {

using ScopedFd = block::ScopedFd;

}  // namespace vmm

#endif  // VMM_SCOPED_FD_H_
