// core/allocator.cpp — the CPU allocator (64-byte aligned for SIMD loads) and the registry.
#include "core/allocator.h"

#include <cstdlib>
#include <new>

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
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    MT_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    counter_.on_alloc(nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    std::free(ptr);
    counter_.on_free(nbytes);
  }
  AllocatorStats stats() const override { return counter_.stats(); }
  void reset_peak() override { counter_.reset_peak(); }
  Device device() const override { return Device::CPU(); }

 private:
  AllocationCounter counter_;
};

Allocator*& slot(DeviceType t) {
  static CpuAllocator cpu;
  static Allocator* slots[kNumDeviceTypes] = {&cpu, nullptr};
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

}  // namespace mixtape
