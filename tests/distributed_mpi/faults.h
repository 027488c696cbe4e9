// tests/distributed_mpi/faults.h — the fault scenarios test_distributed_mpi runs instead of its
// tests when given --fault=<name> (ctest checks that each ends the whole job, the failing or
// silent rank named, and never hangs: tests/CMakeLists.txt).
#pragma once
#include <string>

#include "mixtape/mixtape.h"

namespace mixtape::dist_faults {

// Runs scenario `name` on this rank; returns the process's exit status, or -1 for an unknown name.
int run(const std::string& name, distributed::ProcessGroup& pg);

}  // namespace mixtape::dist_faults
