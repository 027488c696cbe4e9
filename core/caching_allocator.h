// core/caching_allocator.h — a caching allocator over any raw backend (a pair of functions that
// get and return memory "segments"). The CUDA allocator is this over cudaMalloc/cudaFree
// (core/cuda/caching_allocator_cuda.cpp); the tests drive it with a fake backend on the CPU.
//
// Rules (docs/CUDA.md explains why):
//   - Sizes are rounded up to kRoundBytes (512). Requests up to kSmallSize (1 MiB) come from the
//     small pool, carved out of kSmallSegment (2 MiB) segments; larger ones from the large pool,
//     whose segments are the request rounded up to kLargeRound (2 MiB).
//   - A request takes the best fit: the smallest free block of its pool and stream that is large
//     enough (free lists ordered by stream, size, address). A block larger than needed is split
//     when the rest is worth keeping (>= 512 B in the small pool, > 1 MiB in the large one); a
//     freed block merges with free neighbours of its segment.
//   - Streams: every segment belongs to the stream it was first allocated for, and its blocks are
//     reused only by requests on that stream. A freed block is reusable at once, because later
//     work on the same stream runs after the work that used it. A block also used on other
//     streams is declared with record_stream(ptr, stream) (PyTorch's Tensor.record_stream): when
//     it is freed, an event is recorded on each of those streams, and the block is reused only
//     once every event has completed (checked at each allocate and empty_cache; out of memory,
//     the allocator waits for them before giving the cache back).
//   - Private pools (CUDA graphs, PyTorch's graph pool): between begin_capture(pool, stream) and
//     end_capture(), requests on `stream` are served only from segments of `pool` (its own free
//     lists; new segments join it), and no other request ever gets a block of it, so the
//     addresses a captured graph uses stay its own across replays. Blocks freed during the
//     capture are reused by later requests of the same capture (the graph replays in capture
//     order). While a capture is under way the allocator makes no call that a capturing thread
//     may not (no event query, no freeing of the cache); out of memory is reported at once.
//     release_pool(pool) (the graph is gone, its work finished) returns the pool's free segments
//     to the backend; its blocks still in use join the ordinary pool and are cached when freed.
//   - empty_cache() returns every segment with no block in use to the backend.
//   - Out of memory (the backend returns nullptr): free the cache and retry once; then throw
//     mixtape::Error with the requested size and the statistics.
//   - Statistics have the CPU allocator's shape: current/peak count requested bytes (so CPU and
//     CUDA figures of one program agree), reserved counts bytes held from the backend.
//   - Thread-safe: one mutex guards everything.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace mixtape {

struct RawBackend {
  std::function<void*(size_t)> alloc;  // nullptr when out of memory; may throw on other errors
  std::function<void(void*)> free;
  // Events for record_stream (optional: without them a recorded block waits for nothing):
  // record one on a stream, ask whether it has completed, wait until it has, destroy it.
  std::function<void*(uintptr_t stream)> record_event;
  std::function<bool(void* event)> event_done;
  std::function<void(void* event)> wait_event;
  std::function<void(void* event)> destroy_event;
};

class CachingAllocator {
 public:
  using StreamId = uintptr_t;  // a cudaStream_t's bits on CUDA; any tag in tests
  using PoolId = uint64_t;     // 0: the ordinary pool; a graph's private pool otherwise
  static constexpr size_t kRoundBytes = 512;
  static constexpr size_t kSmallSize = size_t(1) << 20;
  static constexpr size_t kSmallSegment = size_t(2) << 20;
  static constexpr size_t kLargeRound = size_t(2) << 20;

  // `name` is used in errors ("cuda:0").
  CachingAllocator(RawBackend backend, std::string name);
  ~CachingAllocator();  // returns every segment to the backend (blocks in use are leaked, not freed)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // 0 bytes gives nullptr.
  void* allocate(size_t nbytes, StreamId stream = 0);
  // ptr must come from allocate() (nullptr is ignored); throws on a pointer it never gave out.
  void deallocate(void* ptr);
  bool owns(void* ptr) const;
  // The block at ptr (from allocate(), in use) is also used by work on `stream`: when it is freed,
  // it is not reused before that work is done. A no-op for the block's own stream.
  void record_stream(void* ptr, StreamId stream);
  void empty_cache();
  int64_t pending_free_count() const;  // freed blocks still waiting for their recorded streams

  // Requests on `stream` come from private pool `pool` (!= 0) until end_capture(). One capture at
  // a time per allocator; throws when one is under way or the pool was released.
  void begin_capture(PoolId pool, StreamId stream);
  void end_capture();
  bool capturing() const;
  // The pool's graph is gone and its work has finished (see the rules above).
  void release_pool(PoolId pool);
  int64_t pool_reserved_bytes(PoolId pool) const;  // bytes of the pool's segments

  AllocatorStats stats() const;
  void reset_peak();
  int64_t cached_bytes() const;      // reserved but not handed out
  int64_t segment_count() const;     // segments held from the backend
  int64_t backend_alloc_count() const;

  static size_t round_size(size_t nbytes);

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;        // bytes this block covers
    size_t requested = 0;   // bytes asked for while allocated
    StreamId stream = 0;
    PoolId pool = 0;
    bool small = false;
    bool allocated = false;
    Block* prev = nullptr;  // neighbours within the same segment
    Block* next = nullptr;
    std::vector<StreamId> recorded;  // other streams that use it (record_stream)
  };
  struct PendingFree {
    Block* block;
    std::vector<void*> events;  // one per recorded stream
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeList = std::set<Block*, BlockLess>;

  FreeList& pool(bool small) { return small ? small_free_ : large_free_; }
  Block* find_free(size_t size, bool small, StreamId stream, PoolId pool);
  Block* new_segment(size_t size, bool small, StreamId stream, PoolId pool);  // nullptr when the backend is out
  void release_free_segments();                                   // the cache, lock held
  void free_block(Block* b);                                      // into its free list, merged; lock held
  void process_pending_frees(bool wait = false);                  // frees those whose events completed (or, with
                                                                  // wait, waits for them first); lock held
  [[noreturn]] void throw_oom(size_t nbytes, size_t rounded, size_t segment) const;
  std::vector<Block*> blocks_of_pool(PoolId pool) const;  // every block, free or not; lock held

  RawBackend backend_;
  std::string name_;
  mutable std::mutex mu_;
  FreeList small_free_, large_free_;
  std::unordered_map<void*, Block*> in_use_;
  std::vector<PendingFree> pending_frees_;
  PoolId capture_pool_ = 0;  // the capture under way (0: none) and its stream
  StreamId capture_stream_ = 0;
  std::set<PoolId> released_pools_;
  int64_t current_ = 0, peak_ = 0, count_ = 0, reserved_ = 0, segments_ = 0, backend_allocs_ = 0;
};

}  // namespace mixtape
