// tests/distributed_mpi/faults.h — the fault scenarios test_distributed_mpi runs instead of its
// tests when given --fault=<name> (ctest checks that each ends the whole job, the failing or
// silent rank named, and never hangs: tests/CMakeLists.txt).
#pragma once
#include <functional>
#include <string>

#include "mixtape/mixtape.h"

namespace mixtape::dist_faults {

// Runs scenario `name` on this rank; returns the process's exit status, or -1 for an unknown name.
int run(const std::string& name, distributed::ProcessGroup& pg);
// The CUDA builds' scenarios (faults_nccl_cuda.cpp), tried by run() for a name it does not know.
int run_cuda(const std::string& name, distributed::ProcessGroup& pg);
// Runs `body`; an exception ends every rank (abort_if_distributed), as in the main job.
int guarded(const std::function<void()>& body);

}  // namespace mixtape::dist_faults
