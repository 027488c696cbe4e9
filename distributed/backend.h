// distributed/backend.h — what a transport must provide to a ProcessGroup: collectives on
// contiguous host buffers, called on the group's communication thread only (start() first,
// stop() last), plus abort() from any thread.
// Invariant: a backend sees plain memory; tensors, devices, staging and Avg live in the group.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "distributed/process_group.h"

namespace mixtape::distributed {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // On the communication thread, before anything else; rank() and world_size() are valid after.
  virtual void start() {}
  virtual void stop() {}
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Sum or Max (Avg is the group's Sum followed by a division) of `count` elements of `dt`.
  virtual void all_reduce(void* buf, int64_t count, DType dt, ReduceOp op) = 0;
  virtual void broadcast(void* buf, int64_t bytes, int root) = 0;
  // `in` (bytes) from every rank into `out` (world_size * bytes), in rank order.
  virtual void all_gather(const void* in, void* out, int64_t bytes) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job; any thread, even while a collective is stuck.
  [[noreturn]] virtual void abort(int code) = 0;
  // Any thread, for a timeout's message: which ranks have gone silent (a frozen process, an
  // unreachable host), or that every rank is alive; empty when the backend cannot tell.
  virtual std::string silence_report() const { return ""; }
  // Any thread: true when the backend can tell that every other rank is alive (its heartbeat is
  // current); false when some rank went silent or the backend cannot tell.
  virtual bool every_rank_alive() const { return false; }
};

// A world of one: reductions and broadcasts leave the buffer as it is.
std::unique_ptr<Backend> make_single_backend();
// MPI_COMM_WORLD through Open MPI (distributed/mpi_backend.cpp); null in a build without MPI.
std::unique_ptr<Backend> make_mpi_backend();

}  // namespace mixtape::distributed
