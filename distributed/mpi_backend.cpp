// distributed/mpi_backend.cpp — the Backend on MPI_COMM_WORLD (Open MPI; mpirun launches the ranks).
// Invariant: every MPI call but MPI_Abort is made on the process group's communication thread
// (which also initialises and finalises MPI), and every failing call throws with MPI's message.
// 16-bit floats travel as 16-bit words with mixtape's own reduction operators (MPI has no
// 16-bit float type); Max propagates NaN, as torch.maximum does. Where MPI gives
// MPI_THREAD_MULTIPLE, a heartbeat thread of its own sends every peer a byte every 250 ms on a
// duplicate of MPI_COMM_WORLD and notes when each peer's last arrived: a timeout then names the
// ranks that went silent (frozen, or their host gone) rather than merely "another rank".
#include "distributed/backend.h"

#if MIXTAPE_WITH_MPI
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <type_traits>
#include <vector>

namespace mixtape::distributed {
namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  MT_ERROR(call, " failed: ", std::string(msg, static_cast<size_t>(len)));
}

template <typename T>
float widen(T v) {
  return static_cast<float>(v);
}

// The 16-bit operators: widen, combine in float, round once (round to nearest even).
template <typename T, bool kMax>
void combine16(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = widen(a[i]), y = widen(b[i]);
    float r = kMax ? (std::isnan(x) || std::isnan(y) ? x + y : std::max(x, y)) : x + y;
    b[i] = T(r);
  }
}

template <typename T>
void max_with_nan(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = std::isnan(a[i]) || std::isnan(b[i]) ? a[i] + b[i] : std::max(a[i], b[i]);
}

class MpiBackend final : public Backend {
 public:
  ~MpiBackend() override {
    stop_beat_.store(true);  // (stop() joined it already, unless the job is being torn down)
    if (heartbeat_.joinable()) heartbeat_.join();
  }
  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  void start() override {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    MT_CHECK(!finalized, "init_process_group: MPI was already finalised in this process (a group cannot be made "
             "again after destroy_process_group)");
    if (!inited) {
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided_), "MPI_Init_thread");
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided_);
    }
    // Only this thread calls MPI, except MPI_Abort, which abort() calls from whichever thread
    // failed: that needs MULTIPLE, else abort() exits the process instead. When this thread made
    // MPI, FUNNELED suffices; when the program did, this is not MPI's main thread: SERIALIZED.
    const int need = owns_mpi_ ? MPI_THREAD_FUNNELED : MPI_THREAD_SERIALIZED;
    MT_CHECK(provided_ >= need, "MPI provides thread level ", provided_, ", below ",
             owns_mpi_ ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SERIALIZED (the program initialised MPI itself)",
             ": mixtape's communication thread cannot use it");
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    check(MPI_Op_create(&combine16<Half, false>, 1, &half_sum_), "MPI_Op_create");
    check(MPI_Op_create(&combine16<Half, true>, 1, &half_max_), "MPI_Op_create");
    check(MPI_Op_create(&combine16<BFloat16, false>, 1, &bf16_sum_), "MPI_Op_create");
    check(MPI_Op_create(&combine16<BFloat16, true>, 1, &bf16_max_), "MPI_Op_create");
    check(MPI_Op_create(&max_with_nan<float>, 1, &f32_max_), "MPI_Op_create");
    check(MPI_Op_create(&max_with_nan<double>, 1, &f64_max_), "MPI_Op_create");
    if (provided_ == MPI_THREAD_MULTIPLE && size_ > 1) start_heartbeat();
  }

  void stop() override {
    stop_heartbeat();
    for (MPI_Op* op : {&half_sum_, &half_max_, &bf16_sum_, &bf16_max_, &f32_max_, &f64_max_})
      if (*op != MPI_OP_NULL) MPI_Op_free(op);
    if (owns_mpi_) MPI_Finalize();
  }

  void all_reduce(void* buf, int64_t count, DType dt, ReduceOp op) override {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op mop = MPI_OP_NULL;
    const bool sum = op == ReduceOp::Sum;
    switch (dt) {
      case DType::Float32: type = MPI_FLOAT; mop = sum ? MPI_SUM : f32_max_; break;
      case DType::Float64: type = MPI_DOUBLE; mop = sum ? MPI_SUM : f64_max_; break;
      case DType::Float16: type = MPI_UINT16_T; mop = sum ? half_sum_ : half_max_; break;
      case DType::BFloat16: type = MPI_UINT16_T; mop = sum ? bf16_sum_ : bf16_max_; break;
      case DType::Int64: type = MPI_INT64_T; mop = sum ? MPI_SUM : MPI_MAX; break;
      default: MT_ERROR("all_reduce: no MPI reduction for ", dtype_name(dt));
    }
    // MPI counts are ints: reduce in chunks of at most INT_MAX elements.
    auto* p = static_cast<char*>(buf);
    const int64_t esize = static_cast<int64_t>(element_size(dt));
    for (int64_t done = 0; done < count;) {
      const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
      check(MPI_Allreduce(MPI_IN_PLACE, p + done * esize, n, type, mop, MPI_COMM_WORLD), "MPI_Allreduce");
      done += n;
    }
  }

  void broadcast(void* buf, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(buf);
    for (int64_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min<int64_t>(bytes - done, INT_MAX));
      check(MPI_Bcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
      done += n;
    }
  }

  void all_gather(const void* in, void* out, int64_t bytes) override {
    MT_CHECK(bytes <= INT_MAX, "all_gather: ", bytes, " bytes per rank is over MPI's int count");
    check(MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Allgather");
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  bool every_rank_alive() const override {
    if (!beating_.load() || stop_beat_.load()) return false;
    const int64_t now = now_ms();
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && now - last_heard_[static_cast<size_t>(r)].load() > kSilentMs) return false;
    return true;
  }

  std::string silence_report() const override {
    if (!beating_.load() || stop_beat_.load()) return "";
    const int64_t now = now_ms();
    std::string silent;
    int64_t worst = 0;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const int64_t age = now - last_heard_[static_cast<size_t>(r)].load();
      worst = std::max(worst, age);
      if (age > kSilentMs)
        silent += (silent.empty() ? "" : ", ") + std::to_string(r) + " (none for " + std::to_string(age / 1000.0).substr(0, 4) + " s)";
    }
    if (!silent.empty()) return "no heartbeat from rank " + silent + ": frozen (stopped, swapping) or its host unreachable";
    return "every rank's heartbeat is current (the oldest " + std::to_string(worst) + " ms): the missing rank is alive "
           "but elsewhere (another collective, or none)";
  }

  [[noreturn]] void abort(int code) override {
    if (provided_ == MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // mpirun ends the job when a rank exits without MPI_Finalize
  }

 private:
  static constexpr int64_t kBeatMs = 250, kSilentMs = 2000;
  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void start_heartbeat() {
    check(MPI_Comm_dup(MPI_COMM_WORLD, &beat_comm_), "MPI_Comm_dup");
    last_heard_ = std::vector<std::atomic<int64_t>>(static_cast<size_t>(size_));
    for (auto& t : last_heard_) t.store(now_ms());
    beating_.store(true);
    heartbeat_ = std::thread([this] {
      static const char kBeat = 1;  // Isend's buffer: must outlive the freed requests
      while (!stop_beat_.load()) {
        for (int r = 0; r < size_; ++r) {
          if (r == rank_) continue;
          MPI_Request req;
          if (MPI_Isend(&kBeat, 1, MPI_CHAR, r, 0, beat_comm_, &req) == MPI_SUCCESS) MPI_Request_free(&req);
        }
        drain_beats();
        std::this_thread::sleep_for(std::chrono::milliseconds(kBeatMs));
      }
    });
  }
  void drain_beats() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, 0, beat_comm_, &flag, &st) != MPI_SUCCESS || !flag) return;
      char c;
      MPI_Recv(&c, 1, MPI_CHAR, st.MPI_SOURCE, 0, beat_comm_, MPI_STATUS_IGNORE);
      last_heard_[static_cast<size_t>(st.MPI_SOURCE)].store(now_ms());
    }
  }
  void stop_heartbeat() {
    if (!heartbeat_.joinable()) return;
    // Wait for every rank to get here while still beating (a frozen rank is then named by a
    // timeout of the group's end); then stop, and once the second barrier shows every rank has
    // stopped sending, receive what is left: no message stays unmatched at MPI_Finalize.
    MPI_Request all_here;
    if (MPI_Ibarrier(beat_comm_, &all_here) == MPI_SUCCESS) {
      for (int done = 0; !done;) {
        if (MPI_Test(&all_here, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    stop_beat_.store(true);
    beating_.store(false);
    heartbeat_.join();
    MPI_Barrier(beat_comm_);
    drain_beats();
    MPI_Comm_free(&beat_comm_);
  }

  int rank_ = 0, size_ = 1;
  std::thread heartbeat_;
  std::atomic<bool> stop_beat_{false};
  // Whether the heartbeat thread runs: read by other threads (timeouts' reports), where
  // heartbeat_.joinable() would race with the join in stop_heartbeat.
  std::atomic<bool> beating_{false};
  std::vector<std::atomic<int64_t>> last_heard_;
  MPI_Comm beat_comm_ = MPI_COMM_NULL;
  int provided_ = MPI_THREAD_SINGLE;
  bool owns_mpi_ = false;
  MPI_Op half_sum_ = MPI_OP_NULL, half_max_ = MPI_OP_NULL, bf16_sum_ = MPI_OP_NULL, bf16_max_ = MPI_OP_NULL,
         f32_max_ = MPI_OP_NULL, f64_max_ = MPI_OP_NULL;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend() { return std::make_unique<MpiBackend>(); }
bool built_with_mpi() { return true; }

}  // namespace mixtape::distributed

#else  // a build without MPI

namespace mixtape::distributed {
std::unique_ptr<Backend> make_mpi_backend() { return nullptr; }
bool built_with_mpi() { return false; }
}  // namespace mixtape::distributed

#endif
