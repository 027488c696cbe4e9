// distributed/single_backend.cpp — the world of one process: what a program run without mpirun
// gets, so the same training code runs with and without a launcher.
#include <cstring>
#include <cstdlib>

#include "distributed/backend.h"

namespace mixtape::distributed {
namespace {

class SingleBackend final : public Backend {
 public:
  const char* name() const override { return "single"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce(void*, int64_t, DType, ReduceOp) override {}
  void broadcast(void*, int64_t, int) override {}
  void all_gather(const void* in, void* out, int64_t bytes) override {
    if (bytes > 0) std::memcpy(out, in, static_cast<size_t>(bytes));
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

}  // namespace

std::unique_ptr<Backend> make_single_backend() { return std::make_unique<SingleBackend>(); }

}  // namespace mixtape::distributed
