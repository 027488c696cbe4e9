// core/allocator.h — where tensor bytes come from, and how many there are.
// Every device has one Allocator; each keeps statistics (current, peak, count) so memory
// savings of mixed precision can be measured, not guessed (bench/, amp::GradStats).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace mixtape {

struct AllocatorStats {
  int64_t current_bytes = 0;     // bytes handed out and not yet returned
  int64_t peak_bytes = 0;        // high-water mark of current_bytes since the last reset
  int64_t allocation_count = 0;  // number of allocate() calls since start
  int64_t reserved_bytes = 0;    // bytes held from the system (>= current for caching allocators)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  // Storage calls this: an allocator serving several devices of its type (CUDA) picks the
  // device's memory; one-device allocators need not override it.
  virtual void* allocate_on(Device device, size_t nbytes) { return allocate(nbytes); }
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual Device device() const = 0;
};

// Returns the allocator for a device; CUDA's is installed by the CUDA backend when present.
Allocator* get_allocator(Device device);
void set_allocator(DeviceType type, Allocator* allocator);

// Convenience for tests and benchmarks.
AllocatorStats memory_stats(Device device = Device::CPU());
void reset_peak_memory(Device device = Device::CPU());
// Returns the CPU allocator's cached free blocks to the system (cuda::empty_cache() for CUDA).
void empty_cpu_cache();

// Counts bytes for an allocator implementation; thread-safe.
class AllocationCounter {
 public:
  void on_alloc(size_t n);
  void on_free(size_t n);
  AllocatorStats stats() const;
  void reset_peak();

 private:
  std::atomic<int64_t> current_{0}, peak_{0}, count_{0};
};

}  // namespace mixtape
