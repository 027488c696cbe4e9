// tests/cuda_emulator/nccl.cpp — the NCCL functions mixtape calls, for the emulator: the ranks
// (processes on this machine, started by mpirun) meet in a POSIX shared-memory segment named by
// the unique id, and each collective copies through it between process-shared barriers.
//
// Semantics kept from NCCL's documentation: a communicator of nranks ranks made by
// ncclCommInitRank with the id rank 0 got from ncclGetUniqueId; collectives run in the order
// they are issued and in stream order; in-place operation (sendbuff == recvbuff) is allowed;
// operands must be device memory of the communicator's device (else fault()). A collective runs
// as soon as the work already queued on its stream has run (the emulator's streams are
// deferred: waiting for a later synchronisation could deadlock two ranks that synchronise on
// different things, which a GPU never would). Sums are taken in rank order, in float for 16-bit
// types with one rounding per addition, so every rank gets the same bits. Not kept: speed, and
// a dead peer is not detected (the barrier waits; ctest's timeout ends such a test).
//
// Captured collectives: a collective issued on a capturing stream becomes a node of the capture
// (enqueue_collective) and exchanges nothing then; each cudaGraphLaunch of its graph runs the
// launch stream through the launch at once, so the replayed collective meets the peer's replayed
// (or eager) one in issue order, as the eager ones meet. The stuck-collective knob below counts
// eager collectives only.
//
// A collective that never completes, for tests of mixtape's NCCL watchdog (the knob is read at
// ncclCommInitRank): MIXTAPE_CUDA_EMULATOR_NCCL_STUCK=<n> makes this process's communicator's
// n-th collective (ncclAllReduce, ncclBroadcast and ncclAllGather count, from 1) behave as if a
// peer never arrived: it exchanges nothing, and it and every collective issued after it become
// items on their streams that complete only after ncclCommAbort (then they return at once, the
// data untouched, as an aborted NCCL kernel does). With MIXTAPE_CUDA_EMULATOR_NCCL_ASYNC_ERROR=1
// ncclCommGetAsyncError also reports ncclRemoteError from that collective on (a peer's connection
// lost). Set it on every rank alike: the ranks then never meet in that collective. Not modelled:
// a host that synchronises with such a collective before the abort blocks on a GPU until the
// watchdog aborts; here the waiting thread would run the item while holding the emulator's lock,
// which the watchdog's cudaEventQuery needs, so the item faults instead of deadlocking (and under
// MIXTAPE_CUDA_EMULATOR_STREAMS=immediate the item runs, and faults, at once).
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "core/bfloat16.h"
#include "core/half.h"
#include "tests/cuda_emulator/emulator.h"

using namespace mixtape::cuda_emulator;

struct ncclComm {
  int nranks = 0, rank = 0, device = 0;
  size_t slot = 0;       // bytes per rank per round
  char* base = nullptr;  // the mapped segment: Header, then nranks slots
  size_t size = 0;
  std::string last_error;
  // The stuck-collective knob (see the file's header): which collective sticks (0: none), how
  // many were issued, whether one stuck already, and what ncclCommGetAsyncError reports.
  uint64_t stuck_at = 0, issued = 0;
  bool remote_error_when_stuck = false, wedged = false;
  std::atomic<int> async_error{ncclSuccess};
  // Set by ncclCommAbort; shared with the stuck items, which may run after the comm is freed.
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
};

namespace {

constexpr size_t kSlotBytes = size_t(4) << 20;

struct Header {
  std::atomic<int> ready;  // rank 0 sets it once the barrier is initialised
  pthread_barrier_t barrier;
};

Header* header(ncclComm_t c) { return reinterpret_cast<Header*>(c->base); }
char* slot(ncclComm_t c, int r) { return c->base + sizeof(Header) + static_cast<size_t>(r) * c->slot; }
void barrier(ncclComm_t c) { pthread_barrier_wait(&header(c)->barrier); }

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

template <typename T, typename Acc>
void reduce_typed(ncclComm_t c, size_t offset_bytes, size_t n, ncclRedOp_t op, void* out) {
  T* dst = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) {
    Acc acc = static_cast<Acc>(reinterpret_cast<const T*>(slot(c, 0) + offset_bytes)[i]);
    for (int r = 1; r < c->nranks; ++r) {
      Acc v = static_cast<Acc>(reinterpret_cast<const T*>(slot(c, r) + offset_bytes)[i]);
      if (op == ncclMax) acc = std::isnan(static_cast<double>(v)) || v > acc ? v : acc;
      else if (op == ncclMin) acc = v < acc ? v : acc;
      else if (op == ncclProd) acc = static_cast<Acc>(T(acc * v));
      else acc = static_cast<Acc>(T(acc + v));  // ncclSum, ncclAvg: round after every addition
    }
    if (op == ncclAvg) acc = acc / static_cast<Acc>(c->nranks);
    dst[i] = T(acc);
  }
}

// The types ncclAllReduce accepts (checked there).
void reduce(ncclComm_t c, size_t n, ncclDataType_t t, ncclRedOp_t op, void* out) {
  switch (t) {
    case ncclFloat32: return reduce_typed<float, float>(c, 0, n, op, out);
    case ncclFloat64: return reduce_typed<double, double>(c, 0, n, op, out);
    case ncclFloat16: return reduce_typed<mixtape::Half, float>(c, 0, n, op, out);
    case ncclBfloat16: return reduce_typed<mixtape::BFloat16, float>(c, 0, n, op, out);
    default: return reduce_typed<int64_t, int64_t>(c, 0, n, op, out);
  }
}

uint64_t env_count(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != '\0' || v[0] == '-') fault("%s=%s: expected a non-negative integer", name, v);
  return n;
}

// The stuck-collective knob: true when this call is the stuck collective or one issued after it;
// its work then went onto `stream` as an item that completes only once the comm is aborted.
bool wedged(ncclComm_t c, cudaStream_t stream, const char* call) {
  ++c->issued;
  if (!c->wedged && c->issued != c->stuck_at) return false;
  if (!c->wedged) {
    c->wedged = true;
    if (c->remote_error_when_stuck) {
      c->last_error = "emulated: a peer's connection was lost (MIXTAPE_CUDA_EMULATOR_NCCL_ASYNC_ERROR)";
      c->async_error.store(ncclRemoteError);
    }
  }
  enqueue(stream, [aborted = c->aborted, call, n = c->issued] {
    if (!aborted->load())
      fault("%s (collective #%llu, MIXTAPE_CUDA_EMULATOR_NCCL_STUCK) never completes, and the host waited for it "
            "before ncclCommAbort: a GPU would block here until the watchdog aborts the communicator, which the "
            "emulator cannot model",
            call, static_cast<unsigned long long>(n));
  });
  return true;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

// Runs `exchange` as the collective `call` on `stream`: captured (a node of the graph, run at each
// launch) or now, after the work the stream queued before it.
template <typename Fn>
ncclResult_t run_collective(ncclComm_t comm, cudaStream_t stream, const char* call, Fn exchange) {
  if (capturing(stream)) {
    enqueue_collective(stream, [exchange] {
      DeviceAccess access;
      exchange();
    }, call);
    return ncclSuccess;
  }
  if (wedged(comm, stream, call)) return ncclSuccess;
  cudaStreamSynchronize(stream);  // run what the stream queued before the collective
  DeviceAccess access;
  exchange();
  return ncclSuccess;
}

ncclResult_t check_comm(ncclComm_t c, const char* call) {
  if (!c || !c->base) return ncclInvalidArgument;
  if (current_device() != c->device)
    fault("%s: the current device is %d, but the communicator belongs to device %d", call, current_device(), c->device);
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  static std::atomic<int> counter{0};
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "/mixtape-nccl-%d-%d-%lld", static_cast<int>(getpid()),
                counter++, static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto* c = new ncclComm;
  c->nranks = nranks, c->rank = rank, c->device = current_device(), c->slot = kSlotBytes;
  c->stuck_at = env_count("MIXTAPE_CUDA_EMULATOR_NCCL_STUCK");
  c->remote_error_when_stuck = env_count("MIXTAPE_CUDA_EMULATOR_NCCL_ASYNC_ERROR") != 0;
  c->size = sizeof(Header) + static_cast<size_t>(nranks) * c->slot;
  const std::string name(id.internal, strnlen(id.internal, sizeof(id.internal)));
  int fd = -1;
  if (rank == 0) {
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(c->size)) != 0) {
      delete c;
      return ncclSystemError;
    }
  } else {
    // Wait (up to a minute) for rank 0 to create and size the segment.
    for (int tries = 0; tries < 60000; ++tries) {
      fd = shm_open(name.c_str(), O_RDWR, 0600);
      struct stat st {};
      if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == c->size) break;
      if (fd >= 0) close(fd), fd = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (fd < 0) {
      delete c;
      return ncclSystemError;
    }
  }
  void* p = mmap(nullptr, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    delete c;
    return ncclSystemError;
  }
  c->base = static_cast<char*>(p);
  Header* h = header(c);
  if (rank == 0) {
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&h->barrier, &attr, static_cast<unsigned>(nranks));
    pthread_barrierattr_destroy(&attr);
    h->ready.store(1, std::memory_order_release);
  } else {
    while (h->ready.load(std::memory_order_acquire) != 1) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  barrier(c);                                // every rank has mapped it:
  if (rank == 0) shm_unlink(name.c_str());  // the name can go (nothing is left behind in /dev/shm)
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  if (comm->base) munmap(comm->base, comm->size);
  delete comm;
  return ncclSuccess;
}

// Also what lets a stuck collective's items complete (the file's header).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  comm->aborted->store(true);
  return ncclCommDestroy(comm);
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclSystemError: return "system error (emulated NCCL: shared memory)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated NCCL)";
    default: return "unhandled error (emulated NCCL)";
  }
}

const char* ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error.c_str() : ""; }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return ncclInvalidArgument;
  *async_error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclAllReduce"); r != ncclSuccess) return r;
  const size_t es = type_size(datatype);
  const bool supported = datatype == ncclFloat32 || datatype == ncclFloat64 || datatype == ncclFloat16 ||
                         datatype == ncclBfloat16 || (datatype == ncclInt64 && op != ncclAvg);
  if (!supported) return ncclInvalidArgument;  // (refused on every rank alike, before any barrier)
  require_device_range(sendbuff, count * es, "ncclAllReduce: sendbuff");
  require_device_range(recvbuff, count * es, "ncclAllReduce: recvbuff");
  return run_collective(comm, stream, "ncclAllReduce", [=] {
    const size_t per_round = comm->slot / es;
    for (size_t done = 0; done < count; done += per_round) {
      const size_t n = std::min(per_round, count - done);
      std::memcpy(slot(comm, comm->rank), static_cast<const char*>(sendbuff) + done * es, n * es);
      barrier(comm);
      reduce(comm, n, datatype, op, static_cast<char*>(recvbuff) + done * es);
      barrier(comm);  // nobody refills a slot before every rank has read it
    }
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclBroadcast"); r != ncclSuccess) return r;
  const size_t es = type_size(datatype);
  if (es == 0 || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  if (comm->rank == root) require_device_range(sendbuff, count * es, "ncclBroadcast: sendbuff");
  require_device_range(recvbuff, count * es, "ncclBroadcast: recvbuff");
  return run_collective(comm, stream, "ncclBroadcast", [=] {
    const size_t bytes = count * es;
    for (size_t done = 0; done < bytes; done += comm->slot) {
      const size_t n = std::min(comm->slot, bytes - done);
      if (comm->rank == root) std::memcpy(slot(comm, 0), static_cast<const char*>(sendbuff) + done, n);
      barrier(comm);
      std::memmove(static_cast<char*>(recvbuff) + done, slot(comm, 0), n);
      barrier(comm);
    }
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclAllGather"); r != ncclSuccess) return r;
  const size_t es = type_size(datatype);
  if (es == 0) return ncclInvalidArgument;
  require_device_range(sendbuff, sendcount * es, "ncclAllGather: sendbuff");
  require_device_range(recvbuff, sendcount * es * static_cast<size_t>(comm->nranks), "ncclAllGather: recvbuff");
  return run_collective(comm, stream, "ncclAllGather", [=] {
    const size_t bytes = sendcount * es;
    for (size_t done = 0; done < bytes; done += comm->slot) {
      const size_t n = std::min(comm->slot, bytes - done);
      std::memcpy(slot(comm, comm->rank), static_cast<const char*>(sendbuff) + done, n);
      barrier(comm);
      for (int r = 0; r < comm->nranks; ++r)
        std::memcpy(static_cast<char*>(recvbuff) + static_cast<size_t>(r) * bytes + done, slot(comm, r), n);
      barrier(comm);
    }
  });
}

}  // extern "C"
