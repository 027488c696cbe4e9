// core/allocator.cpp — the CPU allocator (malloc for tiny blocks, 64-byte aligned above; large blocks cached)
// and the registry.
#include "core/allocator.h"

#include <cstdlib>
#include <new>
#include <string>

#include "core/caching_allocator.h"

#include "core/cuda_api.h"
#include "core/error.h"

namespace mixtape {

void AllocationCounter::on_alloc(size_t n) {
  int64_t cur = current_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  count_.fetch_add(1);
  int64_t peak = peak_.load();
  while (cur > peak && !peak_.compare_exchange_weak(peak, cur)) {
  }
}
void AllocationCounter::on_free(size_t n) { current_.fetch_sub(static_cast<int64_t>(n)); }
AllocatorStats AllocationCounter::stats() const {
  AllocatorStats s;
  s.current_bytes = current_.load();
  s.peak_bytes = peak_.load();
  s.allocation_count = count_.load();
  s.reserved_bytes = s.current_bytes;
  return s;
}
void AllocationCounter::reset_peak() { peak_.store(current_.load()); }

namespace {
// The CPU allocator. Tiny requests (< 1 KiB: scalars, biases, a loss) go to plain malloc, whose
// per-thread cache serves them in a few dozen instructions (aligned_alloc takes glibc's slow
// memalign path: ~500 instructions with the free, a third of a 1-element op's cost); they are
// 16-byte aligned, which no kernel relies on beyond. Medium ones are 64-byte aligned for SIMD
// loads. Large ones (activations, gradients, im2col buffers) come from a CachingAllocator: a
// training step frees and re-requests the same sizes every step, and fresh pages from the OS
// cost a page fault each on first touch (measured: ~12% of a SmallCNN step). Statistics count
// requested bytes either way, so AMP's memory figures do not depend on the cache.
// MIXTAPE_CPU_CACHE=0 turns the cache off; sanitizer builds default to off, so ASan still sees
// every use after free.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kTinyBelow = 1024;               // bytes; below this, plain malloc
  static constexpr size_t kCachedFrom = size_t(64) << 10;  // bytes; from this, the cache

  CpuAllocator()
      : cache_enabled_(cache_default()),
        cache_({[](size_t n) { return std::aligned_alloc(64, (n + 63) / 64 * 64); }, [](void* p) { std::free(p); }},
               "cpu") {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    void* p;
    if (nbytes < kTinyBelow) {
      p = std::malloc(nbytes);
      MT_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    } else if (cache_enabled_ && nbytes >= kCachedFrom) {
      p = cache_.allocate(nbytes);
    } else {
      p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
      MT_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    }
    counter_.on_alloc(nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    if (cache_enabled_ && nbytes >= kCachedFrom)
      cache_.deallocate(ptr);
    else
      std::free(ptr);
    counter_.on_free(nbytes);
  }
  AllocatorStats stats() const override {
    AllocatorStats s = counter_.stats();
    s.reserved_bytes += cache_.cached_bytes();  // held by the cache, not handed out
    return s;
  }
  void reset_peak() override { counter_.reset_peak(); }
  Device device() const override { return Device::CPU(); }
  void empty_cache() { cache_.empty_cache(); }

 private:
  static bool cache_default() {
    if (const char* env = std::getenv("MIXTAPE_CPU_CACHE")) return std::string(env) != "0";
#if defined(__SANITIZE_ADDRESS__)
    return false;
#else
    return true;
#endif
  }

  const bool cache_enabled_;  // fixed at start: a block must go back where it came from
  AllocationCounter counter_;
  CachingAllocator cache_;
};

// Never destroyed: tensors held by other static objects may be freed after main returns.
CpuAllocator& cpu_allocator() {
  static CpuAllocator* cpu = new CpuAllocator;
  return *cpu;
}

Allocator*& slot(DeviceType t) {
  static Allocator* slots[kNumDeviceTypes] = {&cpu_allocator(), nullptr};
  return slots[static_cast<int>(t)];
}
}  // namespace

Allocator* get_allocator(Device device) {
  Allocator* a = slot(device.type());
  MT_CHECK(a != nullptr, "allocator: no allocator for device ", device,
           device.is_cuda() ? " (" + cuda::unavailable_reason() + ")" : std::string());
  return a;
}
void set_allocator(DeviceType type, Allocator* allocator) { slot(type) = allocator; }
AllocatorStats memory_stats(Device device) { return get_allocator(device)->stats(); }
void reset_peak_memory(Device device) { get_allocator(device)->reset_peak(); }
void empty_cpu_cache() { cpu_allocator().empty_cache(); }

}  // namespace mixtape
