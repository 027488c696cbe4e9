// distributed/cuda/nccl_collectives.cpp — DeviceCollectives on NCCL: one communicator for this
// process's device, its unique id made by rank 0 and sent to the others over MPI (as llm.c
// does), collectives on a stream of their own ordered after the caller's stream by events.
// Invariant: see distributed/device_collectives.h. Built only with NCCL (MIXTAPE_WITH_NCCL).
#include "distributed/device_collectives.h"

#if MIXTAPE_WITH_NCCL
#include <nccl.h>

#include <cstring>

#include "core/cuda/stream.h"
#include "ops/creation.h"

namespace mixtape::distributed {
namespace {

void check(ncclResult_t r, const char* call, ncclComm_t comm, int rank, int world) {
  if (r == ncclSuccess) return;
  const char* detail = comm ? ncclGetLastError(comm) : "";
  MT_ERROR(call, " failed on rank ", rank, " of ", world, ": ", ncclGetErrorString(r),
           detail && *detail ? std::string(" (") + detail + ")" : std::string());
}

ncclDataType_t nccl_type(DType dt, const char* op) {
  switch (dt) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int64: return ncclInt64;
    default: MT_ERROR(op, ": NCCL has no reduction for ", dtype_name(dt));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
  }
  return ncclSum;
}

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(ProcessGroup& host, int device) : device_(device), rank_(host.rank()), world_(host.world_size()) {
    cuda::DeviceGuard on(device_);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr, rank_, world_);
    Tensor bytes = empty({static_cast<int64_t>(sizeof(id))}, TensorOptions(DType::UInt8));
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
    host.broadcast(bytes, 0);  // over MPI
    std::memcpy(&id, bytes.data_ptr(), sizeof(id));
    check(ncclCommInitRank(&comm_, world_, id, rank_), "ncclCommInitRank", nullptr, rank_, world_);
    stream_ = cuda::create_stream();
  }
  ~NcclCollectives() override {
    // At exit the CUDA context may already be going away: errors are not reported here.
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "nccl"; }

  Work all_reduce(const Tensor& t, ReduceOp op, const std::string& what) override {
    check_device("all_reduce", t);
    cuda::DeviceGuard on(device_);
    after_caller();
    check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype(), "all_reduce"),
                        nccl_op(op), comm_, stream_),
          "ncclAllReduce", comm_, rank_, world_);
    return finished_work(t, what);
  }

  void broadcast(const Tensor& t, int root) override {
    check_device("broadcast", t);
    cuda::DeviceGuard on(device_);
    after_caller();
    check(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm_, stream_), "ncclBroadcast",
          comm_, rank_, world_);
    finished_work(t, "broadcast").wait();  // the caller's stream now waits for it
  }

  std::vector<Tensor> all_gather(const Tensor& t) override {
    check_device("all_gather", t);
    cuda::DeviceGuard on(device_);
    IntList sizes = t.sizes();
    sizes.insert(sizes.begin(), world_);
    Tensor out = empty(sizes, TensorOptions(t.dtype()).with_device(t.device()));
    after_caller();
    check(ncclAllGather(t.data_ptr(), out.data_ptr(), t.nbytes(), ncclUint8, comm_, stream_), "ncclAllGather", comm_,
          rank_, world_);
    cuda::record_stream(t, stream_);
    finished_work(out, "all_gather").wait();
    std::vector<Tensor> parts;
    for (int r = 0; r < world_; ++r) parts.push_back(out.select(0, r));
    return parts;
  }

 private:
  void check_device(const char* op, const Tensor& t) const {
    MT_CHECK(t.device().index() == device_, op, ": this process's NCCL communicator is on cuda:", device_,
             ", the tensor on ", t.device().str(), " (one device per rank)");
  }
  // The communication stream waits for what the caller's stream queued before the collective.
  void after_caller() {
    cuda::Event ready;
    ready.record(cuda::current_stream());
    ready.wait(stream_);
  }
  // `t` was written on the communication stream: keep its memory from reuse until that is done,
  // bump its version (an in-place write), and let wait() order the caller's stream after it.
  Work finished_work(const Tensor& t, const std::string& what) {
    cuda::record_stream(t, stream_);
    t.bump_version();
    auto done = std::make_shared<cuda::Event>();
    done->record(stream_);
    // wait() may run after the DeviceGuard is gone, on a thread whose current device is another:
    // the stream that must wait is this device's current one.
    return Work::on_device(
        what, [done, d = device_] { done->wait(cuda::current_stream(d)); }, [done] { return done->query(); });
  }

  int device_, rank_, world_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_collectives(ProcessGroup& host, int device) {
  return std::make_unique<NcclCollectives>(host, device);
}
bool built_with_nccl() { return true; }

}  // namespace mixtape::distributed
#endif
