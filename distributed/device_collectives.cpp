// distributed/device_collectives.cpp — a build without NCCL: no device collectives (CUDA tensors
// are reduced through host memory). With NCCL, distributed/cuda/nccl_collectives.cpp defines these.
#include "distributed/device_collectives.h"

#if !MIXTAPE_WITH_NCCL
namespace mixtape::distributed {
std::unique_ptr<DeviceCollectives> make_nccl_collectives(ProcessGroup&, int) { return nullptr; }
bool built_with_nccl() { return false; }
}  // namespace mixtape::distributed
#endif
