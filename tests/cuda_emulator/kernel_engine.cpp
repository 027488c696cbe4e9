// tests/cuda_emulator/kernel_engine.cpp — runs a kernel's grid on the host (the model is in
// tests/cuda_emulator/device.h): blocks in order, a block's threads as fibers that switch only at
// __syncthreads().
//
// Thread order between barriers is MIXTAPE_CUDA_EMULATOR_SCHEDULE: `forward` (0, 1, ...),
// `reverse`, or `shuffle` (the default: a fresh permutation per block, from a seed that advances
// with every launch, MIXTAPE_CUDA_EMULATOR_SEED picks the start). Because a fiber runs until it
// blocks, a missing __syncthreads makes one thread see another's shared-memory writes either all
// or not at all, which changes the result, and the varying order finds both directions.
//
// Fibers switch with a small x86-64 routine (callee-saved registers, the stack pointer, MXCSR and
// the x87 control word: what the SysV ABI says survives a call), not swapcontext: swapcontext
// makes a signal-mask system call per switch, and a test-sized launch runs ~10^5 threads.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda_emulator/device.h"
#include "tests/cuda_emulator/emulator.h"

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

namespace mixtape::cuda_emulator {

cudaError_t record_error(cudaError_t e);  // runtime.cpp
void submit_kernel(cudaStream_t s, const char* site, std::function<void()> work);  // runtime.cpp

ThreadCoords g_coords{};

}  // namespace mixtape::cuda_emulator

// void mt_emu_switch(void** save_sp, void* load_sp): saves this context on its stack, stores the
// stack pointer in *save_sp, and resumes the context whose stack pointer is load_sp.
asm(R"(
  .text
  .globl mt_emu_switch
  .type mt_emu_switch, @function
mt_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mt_emu_switch, .-mt_emu_switch
)");
extern "C" void mt_emu_switch(void** save_sp, void* load_sp);

namespace mixtape::cuda_emulator {
namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kStackBytes = size_t(128) << 10;  // per fiber; kernels here use a few KiB
constexpr size_t kMaxDynamicShared = size_t(48) << 10;

enum class FiberState { Ready, AtBarrier, Done };

struct Fiber {
  void* sp = nullptr;
  FiberState state = FiberState::Ready;
  uint3 idx{};
};

struct Engine {
  char* stacks = nullptr;  // kMaxThreadsPerBlock stacks, each above a PROT_NONE guard page
  size_t stride = 0;
  void* scheduler_sp = nullptr;
  std::vector<Fiber> fibers;
  int running = -1;
  const std::function<void()>* body = nullptr;
  const char* kernel = "";
  uint64_t launches = 0;
  bool in_kernel = false;

  Engine() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    stride = kStackBytes + page;
    void* p = mmap(nullptr, stride * kMaxThreadsPerBlock, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fault("cannot map %d fiber stacks", kMaxThreadsPerBlock);
    stacks = static_cast<char*>(p);
    for (int i = 0; i < kMaxThreadsPerBlock; ++i) mprotect(stacks + i * stride, page, PROT_NONE);
    fibers.resize(kMaxThreadsPerBlock);
  }
};
Engine& engine() {
  static Engine* e = new Engine;  // leaked: the stacks outlive any static destructor's launch
  return *e;
}

enum class Schedule { Forward, Reverse, Shuffle };
Schedule schedule() {
  static const Schedule s = [] {
    const char* v = std::getenv("MIXTAPE_CUDA_EMULATOR_SCHEDULE");
    std::string name = v && *v ? v : "shuffle";
    if (name == "forward") return Schedule::Forward;
    if (name == "reverse") return Schedule::Reverse;
    if (name == "shuffle") return Schedule::Shuffle;
    fault("MIXTAPE_CUDA_EMULATOR_SCHEDULE=%s: expected forward, reverse or shuffle", name.c_str());
  }();
  return s;
}
uint64_t seed() {
  static const uint64_t s = [] {
    const char* v = std::getenv("MIXTAPE_CUDA_EMULATOR_SEED");
    return v && *v ? std::strtoull(v, nullptr, 10) : 1ull;
  }();
  return s;
}

// Every fiber starts here (entered by mt_emu_switch's `ret`); it never returns.
[[noreturn]] void fiber_main() {
  Engine& e = engine();
  (*e.body)();
  Fiber& f = e.fibers[e.running];
  f.state = FiberState::Done;
  mt_emu_switch(&f.sp, e.scheduler_sp);
  fault("a finished fiber was resumed");
}

// Lays out fiber i's stack as mt_emu_switch leaves a suspended context: FPU control words, six
// callee-saved registers, then fiber_main as the return address, 16-byte aligned as at a call.
void prepare(Engine& e, int i) {
  char* top = e.stacks + (i + 1) * e.stride;
  // top is page-aligned. The return address sits at top - 16, so after `ret` the stack pointer is
  // 8 mod 16: what a function expects on entry, as if called.
  auto* sp = reinterpret_cast<uint64_t*>(top) - 1;
  *--sp = reinterpret_cast<uint64_t>(&fiber_main);
  for (int r = 0; r < 6; ++r) *--sp = 0;
  sp -= 2;
  uint32_t mxcsr;
  uint16_t fcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  std::memcpy(reinterpret_cast<char*>(sp) + 8, &mxcsr, sizeof mxcsr);
  std::memcpy(reinterpret_cast<char*>(sp), &fcw, sizeof fcw);
  e.fibers[i].sp = sp;
  e.fibers[i].state = FiberState::Ready;
}

void run_block(Engine& e, int nthreads, std::vector<int>& order, std::mt19937_64& rng) {
  for (int i = 0; i < nthreads; ++i) prepare(e, i);
  for (;;) {
    if (schedule() == Schedule::Shuffle) std::shuffle(order.begin(), order.end(), rng);
    for (int i : order) {
      Fiber& f = e.fibers[i];
      if (f.state == FiberState::Done) continue;
      f.state = FiberState::Ready;
      e.running = i;
      g_coords.thread_idx = f.idx;
      mt_emu_switch(&e.scheduler_sp, f.sp);
    }
    int done = 0;
    for (int i = 0; i < nthreads; ++i) done += e.fibers[i].state == FiberState::Done;
    if (done == nthreads) return;
    if (done != 0)
      fault("kernel %s, block (%u, %u, %u): %d of %d threads finished while the others wait at __syncthreads() "
            "(a divergent barrier: undefined behaviour on a GPU)",
            e.kernel, g_coords.block_idx.x, g_coords.block_idx.y, g_coords.block_idx.z, done, nthreads);
  }
}

}  // namespace

void syncthreads() {
  Engine& e = engine();
  if (!e.in_kernel) fault("__syncthreads() called outside a kernel");
  Fiber& f = e.fibers[e.running];
  f.state = FiberState::AtBarrier;
  mt_emu_switch(&f.sp, e.scheduler_sp);
}

namespace {

void execute_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body) {
  DeviceAccess access;  // also serialises grids: g_coords and the fibers are the engine's one set
  Engine& e = engine();
  if (e.in_kernel) fault("kernel %s started from inside kernel %s", kernel, e.kernel);
  e.in_kernel = true;
  e.body = &body;
  e.kernel = kernel;
  const uint64_t nthreads = uint64_t(block.x) * block.y * block.z;
  std::mt19937_64 rng(seed() * 0x9E3779B97F4A7C15ull + e.launches++);
  std::vector<int> order(nthreads);
  std::iota(order.begin(), order.end(), 0);
  if (schedule() == Schedule::Reverse) std::reverse(order.begin(), order.end());
  int t = 0;
  for (unsigned z = 0; z < block.z; ++z)
    for (unsigned y = 0; y < block.y; ++y)
      for (unsigned x = 0; x < block.x; ++x) e.fibers[t++].idx = uint3{x, y, z};
  g_coords.block_dim = block;
  g_coords.grid_dim = grid;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        g_coords.block_idx = uint3{bx, by, bz};
        run_block(e, static_cast<int>(nthreads), order, rng);
      }
  e.in_kernel = false;
  e.body = nullptr;
}

}  // namespace

cudaError_t run_grid(const char* kernel, dim3 grid, dim3 block, size_t dynamic_shared, cudaStream_t stream,
                     std::function<void()> body) {
  // The limits of every GPU mixtape targets (compute capability 8.0 and up).
  const uint64_t nthreads = uint64_t(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7FFFFFFFu || grid.y > 65535 || grid.z > 65535 ||
      nthreads == 0 || nthreads > kMaxThreadsPerBlock || block.z > 64 || dynamic_shared > kMaxDynamicShared)
    return record_error(cudaErrorInvalidConfiguration);
  if (stream_device(stream) != current_device()) return record_error(cudaErrorInvalidResourceHandle);
  // Counted under the kernel's site; dropped there in launch-only mode (emulator.h).
  submit_kernel(stream, kernel, [kernel, grid, block, body = std::move(body)] { execute_grid(kernel, grid, block, body); });
  return cudaSuccess;
}

}  // namespace mixtape::cuda_emulator
