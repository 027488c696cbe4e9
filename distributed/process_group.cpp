// distributed/process_group.cpp — tensors to buffers, the communication thread and its queue,
// timeouts, and the world group.
#include "distributed/process_group.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iostream>
#include <thread>

#include "autograd/grad_mode.h"
#if MIXTAPE_WITH_CUDA
#include "core/cuda/graph.h"  // cuda::check_not_capturing
#endif
#include "distributed/backend.h"
#include "distributed/device_collectives.h"
#include "ops/creation.h"

namespace mixtape::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

struct Work::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false, finished = false;
  std::exception_ptr error;
  std::function<void()> job, finish;
  std::string what;
  int rank = 0, world = 1;
  std::chrono::milliseconds timeout{0};
  double busy = 0;
  std::function<bool()> device_done;  // set for a collective queued on a device
  std::function<void()> on_timeout;   // marks the group unusable: the collective is still queued
  std::function<std::string()> explain;  // the backend's silence report, for the timeout's message
};

struct ProcessGroup::Queue {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Work::State>> jobs;
  int running = 0;
  bool stop = false, started = false, finished = false;  // finished: the worker has returned
  std::exception_ptr start_error;
  std::string failed;  // the first collective that failed: the group is unusable after it
  std::thread worker;
};

namespace {

std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds fallback) {
  const char* s = std::getenv("MIXTAPE_DIST_TIMEOUT");
  if (!s || !*s) return fallback;
  char* end = nullptr;
  double sec = std::strtod(s, &end);
  MT_CHECK(end && *end == '\0' && std::isfinite(sec) && sec > 0 && sec <= 1e7,
           "MIXTAPE_DIST_TIMEOUT: expected a number of seconds in (0, 1e7], got '", s, "'");
  return std::chrono::milliseconds(static_cast<int64_t>(sec * 1000));
}

bool debug_requested() {
  const char* s = std::getenv("MIXTAPE_DIST_DEBUG");
  return s && *s && std::string(s) != "0";
}

// In C (the dtype's compute type), rounded once to T.
template <typename T, typename C>
void divide(void* buf, int64_t n, int by) {
  T* p = static_cast<T*>(buf);
  for (int64_t i = 0; i < n; ++i) p[i] = T(static_cast<C>(p[i]) / static_cast<C>(by));
}

void divide_in_place(void* buf, int64_t n, DType dt, int by) {
  switch (dt) {
    case DType::Float32: return divide<float, float>(buf, n, by);
    case DType::Float64: return divide<double, double>(buf, n, by);
    case DType::Float16: return divide<Half, float>(buf, n, by);
    case DType::BFloat16: return divide<BFloat16, float>(buf, n, by);
    default: MT_ERROR("all_reduce: avg needs a floating dtype, got ", dtype_name(dt));
  }
}

// The tensor a collective works on: `t` itself when it is contiguous CPU memory, otherwise a
// contiguous host copy written back by finish().
struct Staged {
  Tensor host;
  bool copy_back;
};
Staged stage(const Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return {t, false};
  return {t.to(Device::CPU()).contiguous(), true};  // a copy: t is CUDA or strided
}

void write_back(const Tensor& t, const Staged& s) {
  autograd::NoGradGuard no_grad;  // a parameter's broadcast is not part of any graph
  if (s.copy_back)
    const_cast<Tensor&>(t).copy_(s.host);
  else
    t.bump_version();  // written in place behind the ops' back: masters and saved tensors must see it
}

std::string describe_collective(const char* op, const Tensor& t, const std::string& what) {
  return std::string(op) + (what.empty() ? "" : " (" + what + ")") + " of " + t.describe();  // "f32[4]@cuda:0"
}

// The dtypes and ops a reduction supports (all_reduce's set: reduce_scatter reduces through it).
void check_reducible(const char* name, DType dt, ReduceOp op) {
  MT_CHECK(dt == DType::Float32 || dt == DType::Float64 || dt == DType::Float16 || dt == DType::BFloat16 ||
               (dt == DType::Int64 && op != ReduceOp::Avg),
           name, ": ", reduce_op_name(op), " is supported for Float32, Float64, Float16, BFloat16",
           op == ReduceOp::Avg ? "" : " and Int64", ", got ", dtype_name(dt));
}

// The flat-buffer collectives' arguments: `flat` holds world chunks of `chunk`'s numel.
void check_flat_pair(const char* name, const Tensor& flat, const char* flat_role, const Tensor& chunk,
                     const char* chunk_role, int rank, int world) {
  MT_CHECK(flat.defined() && chunk.defined(), name, " on rank ", rank, ": the ", flat.defined() ? chunk_role : flat_role,
           " is undefined");
  MT_CHECK(flat.device() == chunk.device(), name, " on rank ", rank, ": the ", flat_role, " and the ", chunk_role,
           " must be on the same device, got ", flat.describe(), " and ", chunk.describe());
  MT_CHECK(flat.dtype() == chunk.dtype(), name, " on rank ", rank, ": the ", flat_role, " and the ", chunk_role,
           " must have the same dtype, got ", dtype_name(flat.dtype()), " and ", dtype_name(chunk.dtype()));
  MT_CHECK(flat.numel() == static_cast<int64_t>(world) * chunk.numel(), name, " on rank ", rank, ": the ", flat_role,
           " must hold world_size (", world, ") x the ", chunk_role, "'s ", chunk.numel(), " = ",
           static_cast<int64_t>(world) * chunk.numel(), " elements, got ", flat.numel(), " (", flat.describe(), ")");
}

// A world of one: `to` gets `from`'s elements (same numel), as a completed Work.
Work copy_as_completed(const Tensor& to, const Tensor& from, std::string desc) {
  autograd::NoGradGuard no_grad;
  const_cast<Tensor&>(to).copy_(from.reshape(to.sizes()));
  return Work::on_device(std::move(desc), nullptr, [] { return true; });
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

Work Work::on_device(std::string what, std::function<void()> on_wait, std::function<bool()> done) {
  Work w;
  w.state_ = std::make_shared<State>();
  w.state_->what = std::move(what);
  w.state_->done = true;  // as far as the host is concerned: the device orders the rest
  w.state_->finish = std::move(on_wait);
  w.state_->device_done = std::move(done);
  return w;
}

void Work::wait() {
  MT_CHECK(state_, "Work::wait: this Work was not returned by a collective");
  State& s = *state_;
  std::unique_lock lk(s.m);
  if (!s.cv.wait_for(lk, s.timeout, [&] { return s.done; })) {
    lk.unlock();
    if (s.on_timeout) s.on_timeout();
    const std::string report = s.explain ? s.explain() : "";
    MT_ERROR(s.what, " timed out after ", s.timeout.count() / 1000.0, " s on rank ", s.rank, " of ", s.world, ": ",
             report.empty() ? "another rank failed, exited or issued a different collective" : report,
             " (MIXTAPE_DIST_TIMEOUT sets the limit)");
  }
  if (s.error) std::rethrow_exception(s.error);
  if (!s.finished) {
    s.finished = true;
    lk.unlock();
    if (!s.finish) return;
    try {
      s.finish();
    } catch (...) {  // e.g. the NCCL watchdog's abort: every later wait() throws it too
      std::lock_guard g(s.m);
      s.error = std::current_exception();
      throw;
    }
  }
}

bool Work::is_completed() const {
  if (!state_) return false;
  if (state_->device_done) return state_->device_done();
  std::lock_guard lk(state_->m);
  return state_->done;
}

double Work::busy_seconds() const {
  if (!state_) return 0;
  std::lock_guard lk(state_->m);
  return state_->busy;
}

ProcessGroup::ProcessGroup(std::unique_ptr<Backend> backend, ProcessGroupOptions options)
    : backend_(std::move(backend)), options_(options), queue_(std::make_unique<Queue>()) {
  options_.timeout = timeout_from_env(options_.timeout);
  Queue& q = *queue_;
  q.worker = std::thread([this] { worker_loop(); });
  std::unique_lock lk(q.m);
  // MPI_Init waits for every rank: one that never started or is frozen holds it forever. Start-up
  // (process launch, MPI's wire-up) takes seconds on a loaded machine, so a timeout of a few
  // seconds meant for collectives gets a floor here.
  const auto start_limit = std::max<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(60));
  if (!q.cv.wait_for(lk, start_limit, [&] { return q.started; })) {
    std::cerr << "mixtape: starting the process group (" << backend_->name() << ") did not complete within "
              << start_limit.count() / 1000.0 << " s: a rank did not start, or is frozen (MIXTAPE_DIST_TIMEOUT "
              << "sets the limit, at least 60 s at start-up); ending this process\n" << std::flush;
    std::_Exit(1);
  }
  if (q.start_error) {
    q.stop = true;
    lk.unlock();
    q.cv.notify_all();
    q.worker.join();
    std::rethrow_exception(q.start_error);
  }
  lk.unlock();  // submit() below takes the queue's lock
  rank_ = backend_->rank();
  world_size_ = backend_->world_size();
  // MIXTAPE_DIST_DEBUG adds collectives: on for all ranks if any rank asked (agreed once, here).
  debug_ = debug_requested();
  if (world_size_ > 1) {
    auto flag = std::make_shared<int64_t>(debug_ ? 1 : 0);  // owned by the job (see all_gather_string)
    Backend* b = backend_.get();
    submit("all_reduce (MIXTAPE_DIST_DEBUG)", [b, flag] { b->all_reduce(flag.get(), 1, DType::Int64, ReduceOp::Max); },
           nullptr)
        .wait();
    debug_ = *flag != 0;
  }
}

ProcessGroup::~ProcessGroup() {
  device_.reset();  // NCCL's communicator before MPI is finalised below
  Queue& q = *queue_;
  {
    std::unique_lock lk(q.m);
    if (!q.jobs.empty() || q.running > 0) {
      // A collective is still in flight (an error unwound past its wait()): its peers may be
      // inside it, and MPI_Finalize would wait for them forever. End the job instead.
      lk.unlock();
      std::cerr << "mixtape: rank " << rank_ << " of " << world_size_
                << " is exiting with a collective unfinished; ending every rank\n";
      backend_->abort(1);
    }
    q.stop = true;
  }
  q.cv.notify_all();
  {
    // MPI_Finalize waits for every rank: a frozen one would hold this rank forever.
    // A rank that is alive but late (a long epilogue of its own: rank 0 writing a summary or a
    // checkpoint) keeps beating: wait for it as long as every rank's heartbeat is current.
    std::unique_lock lk(q.m);
    bool done = false;
    while (!(done = q.cv.wait_for(lk, options_.timeout, [&] { return q.finished; })) && backend_->every_rank_alive()) {
    }
    if (!done) {
      lk.unlock();
      const std::string report = backend_->silence_report();
      std::cerr << "mixtape: rank " << rank_ << " of " << world_size_ << " failed: ending the process group ("
                << backend_->name() << ") did not complete within " << options_.timeout.count() / 1000.0 << " s"
                << (report.empty() ? "" : ": " + report) << " (MIXTAPE_DIST_TIMEOUT sets the limit)\n" << std::flush;
      backend_->abort(1);
    }
  }
  if (q.worker.joinable()) q.worker.join();
}

const char* ProcessGroup::backend_name() const { return backend_->name(); }

DeviceCollectives* ProcessGroup::device_collectives(const Tensor& t) {
  // By device only (never by layout): two ranks must never take different paths.
  if (!t.device().is_cuda() || world_size_ == 1) return nullptr;
#if MIXTAPE_WITH_CUDA
  // Under CUDA graph capture only NCCL's collectives are captured (docs/DISTRIBUTED.md, "DDP in a
  // CUDA graph"): setting the communicator up, or the host path's copies through MPI, cannot be.
  if (!device_tried_)
    cuda::check_not_capturing("ProcessGroup (the first collective of a CUDA tensor)",
                              "sets up the NCCL communicator (an MPI exchange, a stream, a thread; run the step "
                              "once eagerly first)");
  if (device_tried_ && !device_)
    cuda::check_not_capturing("ProcessGroup (a collective of a CUDA tensor)",
                              "reduces through host memory and MPI (the host path: no NCCL in this build, or "
                              "MIXTAPE_DIST_CUDA=host), which a graph cannot replay; only NCCL collectives");
#endif
  {
    std::lock_guard lk(queue_->m);  // a failed group issues nothing more, on the device either
    MT_CHECK(queue_->failed.empty(), "the process group is unusable after '", queue_->failed, "' failed on rank ", rank_);
  }
  MT_CHECK(device_error_.empty(), "the NCCL communicator could not be set up earlier: ", device_error_);
  if (!device_tried_) {
    device_tried_ = true;
    if (!built_with_nccl()) return nullptr;
    try {
      // Decided together (this is every rank's first CUDA collective): NCCL unless some rank was
      // told MIXTAPE_DIST_CUDA=host — ranks on different paths would never meet.
      const char* force = std::getenv("MIXTAPE_DIST_CUDA");
      Tensor host_only = tensor({force && std::string(force) == "host" ? 1.0 : 0.0}, {1}, TensorOptions(DType::Float64));
      all_reduce(host_only, ReduceOp::Max);
      if (host_only.to_vector<double>()[0] != 0) return nullptr;
      device_ = make_nccl_collectives(*this, t.device().index());
    } catch (const std::exception& e) {
      device_error_ = e.what();  // no silent fall-back to the host path: the other ranks use NCCL
      throw;
    }
  }
  return device_.get();
}

const char* ProcessGroup::cuda_backend_name() {
  if (world_size_ > 1 && !device_tried_) {  // before the first CUDA collective: what it will choose
    const char* force = std::getenv("MIXTAPE_DIST_CUDA");
    if (!(force && std::string(force) == "host") && built_with_nccl()) return "nccl";
  }
  return device_ ? device_->name() : "host";
}

void ProcessGroup::worker_loop() {
  Queue& q = *queue_;
  try {
    backend_->start();
  } catch (...) {
    std::lock_guard lk(q.m);
    q.start_error = std::current_exception();
  }
  {
    std::lock_guard lk(q.m);
    q.started = true;
    if (q.start_error) q.stop = true;
  }
  q.cv.notify_all();
  for (;;) {
    std::shared_ptr<Work::State> job;
    {
      std::unique_lock lk(q.m);
      q.cv.wait(lk, [&] { return q.stop || !q.jobs.empty(); });
      if (q.jobs.empty()) break;  // stop, and nothing left to run
      job = q.jobs.front();
      q.jobs.pop_front();
      q.running = 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr err;
    try {
      job->job();
    } catch (const std::exception& e) {
      err = std::make_exception_ptr(Error(job->what + " failed on rank " + std::to_string(job->rank) + " of " +
                                         std::to_string(job->world) + ": " + e.what()));
    }
    double busy = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      // Before the waiter wakes: a rank that returns from its last wait() and exits must find
      // the queue idle.
      std::lock_guard lk(q.m);
      q.running = 0;
      if (err && q.failed.empty()) q.failed = job->what;
    }
    {
      std::lock_guard lk(job->m);
      job->done = true;
      job->error = err;
      job->busy = busy;
      job->job = nullptr;
    }
    job->cv.notify_all();
  }
  if (!q.start_error) {
    try {
      backend_->stop();
    } catch (...) {
    }
  }
  {
    std::lock_guard lk(q.m);
    q.finished = true;
  }
  q.cv.notify_all();
}

Work ProcessGroup::submit(std::string what, std::function<void()> job, std::function<void()> finish) {
  auto st = std::make_shared<Work::State>();
  st->what = std::move(what);
  st->rank = rank_;
  st->world = world_size_;
  st->timeout = options_.timeout;
  st->explain = [b = backend_.get()] { return b->silence_report(); };
  st->job = std::move(job);
  st->finish = std::move(finish);
  // A timed-out collective stays queued (MPI cannot cancel it): nothing may be issued after it,
  // or the ranks' sequences of collectives would no longer pair up.
  Queue* q = queue_.get();
  st->on_timeout = [q, what = st->what] {
    std::lock_guard lk(q->m);
    if (q->failed.empty()) q->failed = what + " (timed out)";
  };
  ++collectives_;
  {
    std::lock_guard lk(queue_->m);
    MT_CHECK(queue_->failed.empty(), st->what, ": the process group is unusable after '", queue_->failed,
             "' failed on rank ", rank_);
    queue_->jobs.push_back(st);
  }
  queue_->cv.notify_all();
  Work w;
  w.state_ = std::move(st);
  return w;
}

void ProcessGroup::check_same_everywhere(const char* op, const Tensor& t) {
  std::string mine = layout_of(t);
  auto all = gather_strings(mine);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == mine) continue;
    std::string list;
    for (size_t i = 0; i < all.size(); ++i) list += (i ? ", " : "") + std::string("rank ") + std::to_string(i) + ": " + all[i];
    MT_ERROR(op, ": every rank must pass the same shape and dtype, got ", list);
  }
}

void ProcessGroup::mark_failed(const std::string& why) {
  std::lock_guard lk(queue_->m);
  if (queue_->failed.empty()) queue_->failed = why;
}

int ProcessGroup::add_collective_observer(std::function<void(const std::string&)> fn) {
  observers_.emplace_back(next_observer_, std::move(fn));
  return next_observer_++;
}

void ProcessGroup::remove_collective_observer(int id) {
  std::erase_if(observers_, [id](const auto& o) { return o.first == id; });
}

void ProcessGroup::begin_collective(const std::string& descriptor) {
  if (world_size_ == 1) return;
  if (!observing_ && !observers_.empty()) {
    observing_ = true;
    try {
      for (auto& [id, fn] : std::vector(observers_)) fn(descriptor);
    } catch (...) {
      observing_ = false;
      throw;
    }
    observing_ = false;
  }
  const int64_t seq = ++issued_;
  if (!debug_) return;
  // A fixed-size record, so that even ranks inside different collectives exchange it safely:
  // the k-th descriptor exchange of every rank pairs with the k-th of the others.
  constexpr size_t kText = 120;
  struct Record {
    int64_t seq;
    char text[kText];
  };
  static_assert(sizeof(Record) == 128);
  auto buf = std::make_shared<std::vector<Record>>(static_cast<size_t>(world_size_) + 1);  // owned by the job
  Record& mine = buf->back();
  mine.seq = seq;
  std::memset(mine.text, 0, kText);
  std::memcpy(mine.text, descriptor.data(), std::min(descriptor.size(), kText - 1));
  Backend* b = backend_.get();
  submit("all_gather (MIXTAPE_DIST_DEBUG descriptor of " + descriptor + ")",
         [b, buf] { b->all_gather(&buf->back(), buf->data(), sizeof(Record)); }, nullptr)
      .wait();
  bool same = true;
  for (int r = 0; r < world_size_; ++r) {
    const Record& o = (*buf)[static_cast<size_t>(r)];
    same = same && o.seq == mine.seq && std::strncmp(o.text, mine.text, kText) == 0;
  }
  if (same) return;
  std::string list;
  for (int r = 0; r < world_size_; ++r) {
    const Record& o = (*buf)[static_cast<size_t>(r)];
    list += (r ? "; " : "") + std::string("rank ") + std::to_string(r) + ": #" + std::to_string(o.seq) + " " +
            std::string(o.text, strnlen(o.text, kText));
  }
  MT_ERROR("MIXTAPE_DIST_DEBUG: the ranks issued different collectives (every rank must issue the same collectives, "
           "with the same shapes, in the same order): ", list, ". Nothing was exchanged but the descriptors.");
}

Work ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op, std::string what) {
  MT_CHECK(t.defined(), "all_reduce: the tensor is undefined");
  check_reducible("all_reduce", t.dtype(), op);
  std::string desc = describe_collective("all_reduce", t, what);
  if (world_size_ == 1) return Work::on_device(std::move(desc), nullptr, [] { return true; });  // nothing to do
  begin_collective(desc + " " + reduce_op_name(op));
  bytes_reduced_ += static_cast<int64_t>(t.nbytes());
  if (DeviceCollectives* dev = device_collectives(t)) {
    ++collectives_;  // (submit() counts the host ones)
    if (t.is_contiguous()) return dev->all_reduce(t, op, desc);
    // A strided CUDA tensor: through a contiguous copy on the device, written back now.
    Tensor tmp = t.contiguous();
    dev->all_reduce(tmp, op, desc).wait();
    autograd::NoGradGuard no_grad;
    const_cast<Tensor&>(t).copy_(tmp);
    return Work::on_device(std::move(desc), nullptr, [] { return true; });
  }
  Staged s = stage(t);
  const int world = world_size_;
  Backend* b = backend_.get();
  Tensor host = s.host;
  auto job = [b, host, op, world] {
    void* p = host.data_ptr();
    const ReduceOp base = op == ReduceOp::Avg ? ReduceOp::Sum : op;
    if (world > 1) b->all_reduce(p, host.numel(), host.dtype(), base);
    if (op == ReduceOp::Avg && world > 1) divide_in_place(p, host.numel(), host.dtype(), world);
  };
  return submit(std::move(desc), std::move(job), [t, s] { write_back(t, s); });
}

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }

Work ProcessGroup::reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op, std::string what) {
  check_flat_pair("reduce_scatter", input, "input", output, "output", rank_, world_size_);
  check_reducible("reduce_scatter", input.dtype(), op);
  std::string desc = describe_collective("reduce_scatter", input, what) + " into " + layout_of(output);
  if (world_size_ == 1) return copy_as_completed(output, input, std::move(desc));
  begin_collective(desc + " " + reduce_op_name(op));
  bytes_reduced_ += static_cast<int64_t>(input.nbytes());
  if (DeviceCollectives* dev = device_collectives(input)) {
    ++collectives_;
    if (output.numel() == 0) return Work::on_device(std::move(desc), nullptr, [] { return true; });
    Tensor in = input.contiguous();  // (NCCL keeps a temporary copy's memory until it has read it)
    if (output.is_contiguous()) return dev->reduce_scatter(output, in, op, desc);
    Tensor tmp = output.contiguous();  // a strided output: through a contiguous copy, written back now
    dev->reduce_scatter(tmp, in, op, desc).wait();
    autograd::NoGradGuard no_grad;
    const_cast<Tensor&>(output).copy_(tmp);
    return Work::on_device(std::move(desc), nullptr, [] { return true; });
  }
  Staged s = stage(output);
  // Read by the job: the caller leaves input alone until wait() (a CUDA input: a host copy).
  Tensor in = input.to(Device::CPU()).contiguous();
  Tensor whole = Tensor::empty({input.numel()}, TensorOptions(input.dtype()));
  Backend* b = backend_.get();
  const int world = world_size_, rank = rank_;
  Tensor host = s.host;
  // The whole input through all_reduce's own backend call (the same count, so the same MPI
  // algorithm and order of additions), then chunk `rank`: bit for bit all_reduce's chunk.
  auto job = [b, in, whole, host, op, world, rank] {
    if (whole.numel() == 0) return;
    std::memcpy(whole.data_ptr(), in.data_ptr(), whole.nbytes());
    b->all_reduce(whole.data_ptr(), whole.numel(), whole.dtype(), op == ReduceOp::Avg ? ReduceOp::Sum : op);
    char* chunk = static_cast<char*>(whole.data_ptr()) + static_cast<size_t>(rank) * host.nbytes();
    if (op == ReduceOp::Avg) divide_in_place(chunk, host.numel(), host.dtype(), world);
    std::memcpy(host.data_ptr(), chunk, host.nbytes());
  };
  return submit(std::move(desc), std::move(job), [output, s] { write_back(output, s); });
}

void ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  reduce_scatter_async(output, input, op).wait();
}

Work ProcessGroup::all_gather_into_async(const Tensor& output, const Tensor& input, std::string what) {
  check_flat_pair("all_gather_into", output, "output", input, "input", rank_, world_size_);
  std::string desc = describe_collective("all_gather_into", input, what) + " into " + layout_of(output);
  if (world_size_ == 1) return copy_as_completed(output, input, std::move(desc));
  begin_collective(desc);
  bytes_reduced_ += static_cast<int64_t>(input.nbytes());
  if (DeviceCollectives* dev = device_collectives(input)) {
    ++collectives_;
    if (input.numel() == 0) return Work::on_device(std::move(desc), nullptr, [] { return true; });
    Tensor in = input.contiguous();
    if (output.is_contiguous()) {
      // NCCL's in-place form is input at output's chunk `rank` exactly; any other overlap
      // would be read while written, so such an input goes through a copy.
      const bool in_place =
          in.data_ptr() == static_cast<const char*>(output.data_ptr()) + static_cast<size_t>(rank_) * in.nbytes();
      if (!in_place && overlaps(in, output)) in = in.clone();
      return dev->all_gather_into(output, in, desc);
    }
    Tensor tmp = output.contiguous();  // a strided output: through a contiguous copy, written back now
    dev->all_gather_into(tmp, in, desc).wait();
    autograd::NoGradGuard no_grad;
    const_cast<Tensor&>(output).copy_(tmp);
    return Work::on_device(std::move(desc), nullptr, [] { return true; });
  }
  Staged s = stage(output);
  Tensor in = input.to(Device::CPU()).contiguous();
  // MPI forbids a send buffer inside the receive buffer (input as a view of output's chunk r).
  if (overlaps(in, s.host)) in = in.clone();
  Backend* b = backend_.get();
  Tensor host = s.host;
  auto job = [b, in, host] {
    if (in.numel() > 0) b->all_gather(in.data_ptr(), host.data_ptr(), static_cast<int64_t>(in.nbytes()));
  };
  return submit(std::move(desc), std::move(job), [output, s] { write_back(output, s); });
}

void ProcessGroup::all_gather_into(const Tensor& output, const Tensor& input) {
  all_gather_into_async(output, input).wait();
}

void ProcessGroup::broadcast(const Tensor& t, int root, bool check_layout) {
  MT_CHECK(t.defined(), "broadcast: the tensor is undefined");
  MT_CHECK(root >= 0 && root < world_size_, "broadcast: root ", root, " is not a rank of this group of ", world_size_);
  if (world_size_ == 1) return;
  begin_collective(describe_collective("broadcast", t, "") + " from rank " + std::to_string(root));
  if (check_layout && !debug_) check_same_everywhere("broadcast", t);  // (the descriptor holds the layout)
  if (DeviceCollectives* dev = device_collectives(t)) {
    ++collectives_;
    if (t.is_contiguous()) return dev->broadcast(t, root);
    Tensor tmp = t.contiguous();
    dev->broadcast(tmp, root);
    autograd::NoGradGuard no_grad;
    const_cast<Tensor&>(t).copy_(tmp);
    return;
  }
  Staged s = stage(t);
  Backend* b = backend_.get();
  Tensor host = s.host;
  auto job = [b, host, root] { b->broadcast(host.data_ptr(), static_cast<int64_t>(host.nbytes()), root); };
  submit(describe_collective("broadcast", t, ""), std::move(job), [t, s] { write_back(t, s); }).wait();
}

std::vector<Tensor> ProcessGroup::all_gather(const Tensor& t) {
  MT_CHECK(t.defined(), "all_gather: the tensor is undefined");
  if (world_size_ > 1) {
    begin_collective(describe_collective("all_gather", t, ""));
    if (!debug_) check_same_everywhere("all_gather", t);
  }
  if (DeviceCollectives* dev = device_collectives(t)) {
    ++collectives_;
    return dev->all_gather(t.contiguous());
  }
  Tensor in = t.to(Device::CPU()).contiguous();
  IntList out_sizes = t.sizes();
  out_sizes.insert(out_sizes.begin(), world_size_);
  Tensor out = Tensor::empty(out_sizes, TensorOptions(t.dtype()));
  Backend* b = backend_.get();
  auto job = [b, in, out] { b->all_gather(in.data_ptr(), out.data_ptr(), static_cast<int64_t>(in.nbytes())); };
  submit(describe_collective("all_gather", t, ""), std::move(job), nullptr).wait();
  std::vector<Tensor> parts;
  for (int r = 0; r < world_size_; ++r) parts.push_back(out.select(0, r).to(t.device()).contiguous());
  return parts;
}

std::vector<std::string> ProcessGroup::all_gather_string(const std::string& s) {
  begin_collective("all_gather_string");
  return gather_strings(s);
}

std::vector<std::string> ProcessGroup::gather_strings(const std::string& s) {
  const int world = world_size_;
  Backend* b = backend_.get();
  // The jobs own their buffers: after a timeout this frame is gone while the job may still run.
  struct Buffers {
    int64_t mine = 0;
    std::vector<int64_t> lengths;
    std::string padded, all;
  };
  auto buf = std::make_shared<Buffers>();
  buf->mine = static_cast<int64_t>(s.size());
  buf->lengths.resize(static_cast<size_t>(world));
  submit("all_gather (string lengths)", [b, buf] { b->all_gather(&buf->mine, buf->lengths.data(), sizeof(int64_t)); },
         nullptr)
      .wait();
  int64_t longest = 0;
  for (int64_t l : buf->lengths) longest = std::max(longest, l);
  buf->padded = s;
  buf->padded.resize(static_cast<size_t>(longest));
  buf->all.assign(static_cast<size_t>(longest * world), '\0');
  if (longest > 0)
    submit("all_gather (strings)", [b, buf, longest] { b->all_gather(buf->padded.data(), buf->all.data(), longest); },
           nullptr)
        .wait();
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r)
    out.push_back(buf->all.substr(static_cast<size_t>(r * longest), static_cast<size_t>(buf->lengths[static_cast<size_t>(r)])));
  return out;
}

void ProcessGroup::barrier() {
  begin_collective("barrier");
  Backend* b = backend_.get();
  submit("barrier", [b] { b->barrier(); }, nullptr).wait();
}

void ProcessGroup::abort(const std::string& why, int code) {
  std::cerr << "mixtape: rank " << rank_ << " of " << world_size_ << " failed: " << why << "\n" << std::flush;
  backend_->abort(code);
  std::_Exit(code);  // not reached: Backend::abort does not return
}

std::string layout_of(const Tensor& t) {
  return std::string(dtype_short(t.dtype())) + shape_str(t.sizes()) + (t.device().is_cuda() ? " on cuda" : "");
}

int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}) {
    const char* s = std::getenv(var);
    if (s && *s) return std::max(1, std::atoi(s));
  }
  return 1;
}

namespace {
std::mutex world_mu;
std::unique_ptr<ProcessGroup>& world_ptr() {
  static auto* p = new std::unique_ptr<ProcessGroup>();  // never destroyed here: see release below
  return *p;
}
// Finalises MPI at exit (after main returns), unless a collective is in flight.
struct WorldRelease {
  ~WorldRelease() { world_ptr().reset(); }
} world_release;
}  // namespace

ProcessGroup& init_process_group(ProcessGroupOptions options) {
  std::lock_guard lk(world_mu);
  auto& w = world_ptr();
  if (w) return *w;
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  std::unique_ptr<Backend> backend;
  if (launched) {
    backend = make_mpi_backend();
    MT_CHECK(backend || launcher_world_size() == 1, "init_process_group: this program was started by mpirun with ",
             launcher_world_size(), " ranks, but mixtape was built without MPI (install libopenmpi-dev and "
             "reconfigure: CMake reports 'MPI: found')");
  }
  if (!backend) backend = make_single_backend();
  w = std::make_unique<ProcessGroup>(std::move(backend), options);
  const int announced = launcher_world_size();
  MT_CHECK(!launched || announced == w->world_size(), "init_process_group: the launcher announced ", announced,
           " ranks but MPI_COMM_WORLD has ", w->world_size(),
           " (was the program started by another MPI's mpirun, or with a different -np?)");
  return *w;
}

ProcessGroup* world() {
  std::lock_guard lk(world_mu);
  return world_ptr().get();
}

void destroy_process_group() {
  std::unique_ptr<ProcessGroup> w;
  {
    std::lock_guard lk(world_mu);
    w = std::move(world_ptr());
  }
  w.reset();  // outside the lock: the destructor may abort the job, which never returns
}

void abort_if_distributed(const std::string& why, int code) {
  ProcessGroup* w = world();
  if (w && w->world_size() > 1) w->abort(why, code);
}

}  // namespace mixtape::distributed
