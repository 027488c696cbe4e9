// core/caching_allocator.cpp — the caching allocator's bookkeeping (rules in the header).
// Invariants: every Block is in in_use_ (allocated), in pending_frees_ (freed, waiting for the
// events of the streams recorded on it; still marked allocated, so no neighbour merges into it), or
// in exactly one free list; the
// blocks of a segment tile it without gaps, linked by prev/next, and two free neighbours never
// stay unmerged; all blocks of a segment share its stream and pool, and a free block of a private
// pool is found only by requests of that pool's capture; reserved_ is the sum of live segment sizes.
#include "core/caching_allocator.h"

#include <tuple>

#include "core/error.h"

namespace mixtape {

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(a->pool, a->stream, a->size, reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(b->pool, b->stream, b->size, reinterpret_cast<uintptr_t>(b->ptr));
}

CachingAllocator::CachingAllocator(RawBackend backend, std::string name)
    : backend_(std::move(backend)), name_(std::move(name)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_segments();
  // Blocks still in use belong to tensors that outlive the allocator (process exit): their
  // segments are left to the process teardown, their bookkeeping is dropped.
  for (auto& [ptr, block] : in_use_) delete block;
  for (PendingFree& p : pending_frees_) {
    for (void* e : p.events)
      if (e) backend_.destroy_event(e);
    delete p.block;
  }
  for (Block* b : small_free_) delete b;
  for (Block* b : large_free_) delete b;
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes < kRoundBytes) return kRoundBytes;
  return (nbytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

CachingAllocator::Block* CachingAllocator::find_free(size_t size, bool small, StreamId stream, PoolId pool_id) {
  FreeList& list = pool(small);
  Block key;
  key.pool = pool_id;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = list.lower_bound(&key);
  if (it == list.end() || (*it)->stream != stream || (*it)->pool != pool_id) return nullptr;
  Block* b = *it;
  list.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, bool small, StreamId stream, PoolId pool_id) {
  void* p = backend_.alloc(size);
  if (!p) return nullptr;
  ++backend_allocs_;
  ++segments_;
  reserved_ += static_cast<int64_t>(size);
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = size;
  b->stream = stream;
  b->pool = pool_id;
  b->small = small;
  return b;
}

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  const size_t segment = small ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;

  std::lock_guard<std::mutex> lock(mu_);
  // During a capture, event queries and frees are calls the capturing thread may not make.
  const bool capturing = capture_pool_ != 0;
  const PoolId pool_id = capturing && stream == capture_stream_ ? capture_pool_ : 0;
  if (!capturing) process_pending_frees();
  Block* b = find_free(size, small, stream, pool_id);
  if (!b) b = new_segment(segment, small, stream, pool_id);
  if (!b) {
    if (capturing) throw_oom(nbytes, size, segment);
    // Out of memory: wait for the blocks other streams still use (one may fit), then give the
    // cache back and try once more before failing.
    process_pending_frees(/*wait=*/true);
    b = find_free(size, small, stream, pool_id);
    if (!b) {
      release_free_segments();
      b = new_segment(segment, small, stream, pool_id);
      if (!b) throw_oom(nbytes, size, segment);
    }
  }

  // Split off the tail when it is worth keeping in this block's pool.
  size_t rest = b->size - size;
  if (small ? rest >= kRoundBytes : rest > kSmallSize) {
    Block* tail = new Block;
    tail->ptr = b->ptr + size;
    tail->size = rest;
    tail->stream = b->stream;
    tail->pool = b->pool;
    tail->small = b->small;
    tail->prev = b;
    tail->next = b->next;
    if (b->next) b->next->prev = tail;
    b->next = tail;
    b->size = size;
    pool(tail->small).insert(tail);
  }

  b->allocated = true;
  b->requested = nbytes;
  b->recorded.clear();
  in_use_.emplace(b->ptr, b);
  current_ += static_cast<int64_t>(nbytes);
  ++count_;
  if (current_ > peak_) peak_ = current_;
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(ptr);
  MT_CHECK(it != in_use_.end(), name_, " caching allocator: deallocate of a pointer it did not allocate (", ptr,
           ")");
  Block* b = it->second;
  in_use_.erase(it);
  current_ -= static_cast<int64_t>(b->requested);
  b->requested = 0;
  if (!b->recorded.empty() && backend_.record_event) {
    // Work queued on the recorded streams may still use it: reusable once their events complete.
    PendingFree p{b, {}};
    try {
      for (StreamId s : b->recorded) p.events.push_back(backend_.record_event(s));
    } catch (...) {
      // Called from a Storage's destructor: nothing may escape. An event that cannot be recorded
      // leaves the block's reuse unsafe forever: it stays pending (a null event never completes).
      p.events.push_back(nullptr);
    }
    pending_frees_.push_back(std::move(p));
    return;
  }
  free_block(b);
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(ptr);
  MT_CHECK(it != in_use_.end(), name_, " caching allocator: record_stream of a pointer it did not allocate (", ptr,
           ") or that was freed already");
  Block* b = it->second;
  if (stream == b->stream) return;
  for (StreamId s : b->recorded)
    if (s == stream) return;
  b->recorded.push_back(stream);
}

void CachingAllocator::process_pending_frees(bool wait) {
  for (size_t i = 0; i < pending_frees_.size();) {
    PendingFree& p = pending_frees_[i];
    bool done = true;
    for (void* e : p.events) {
      if (e && wait && backend_.wait_event) backend_.wait_event(e);
      done = done && e && backend_.event_done(e);
    }
    if (!done) {
      ++i;
      continue;
    }
    for (void* e : p.events) backend_.destroy_event(e);  // all non-null: all completed
    Block* b = p.block;
    pending_frees_.erase(pending_frees_.begin() + static_cast<std::ptrdiff_t>(i));
    free_block(b);
  }
}

int64_t CachingAllocator::pending_free_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(pending_frees_.size());
}

void CachingAllocator::free_block(Block* b) {
  b->allocated = false;
  b->recorded.clear();
  FreeList& list = pool(b->small);
  // Merge with free neighbours (they are in the same pool and stream: a segment never mixes).
  if (b->prev && !b->prev->allocated) {
    Block* p = b->prev;
    list.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (b->next && !b->next->allocated) {
    Block* n = b->next;
    list.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  list.insert(b);
}

bool CachingAllocator::owns(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_.count(ptr) != 0;
}

void CachingAllocator::release_free_segments() {
  for (FreeList* list : {&small_free_, &large_free_}) {
    for (auto it = list->begin(); it != list->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment still (partly) in use
        ++it;
        continue;
      }
      it = list->erase(it);
      backend_.free(b->ptr);
      reserved_ -= static_cast<int64_t>(b->size);
      --segments_;
      delete b;
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (capture_pool_ != 0) return;  // nothing is freed during a capture (see the header)
  process_pending_frees();
  release_free_segments();
}

void CachingAllocator::begin_capture(PoolId pool_id, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  MT_CHECK(pool_id != 0, name_, " caching allocator: begin_capture needs a private pool id (not 0)");
  MT_CHECK(capture_pool_ == 0, name_, " caching allocator: begin_capture into pool ", pool_id,
           " while the capture into pool ", capture_pool_, " is under way (one capture per device at a time)");
  MT_CHECK(!released_pools_.count(pool_id), name_, " caching allocator: begin_capture into pool ", pool_id,
           ", which was released");
  capture_pool_ = pool_id;
  capture_stream_ = stream;
}

void CachingAllocator::end_capture() {
  std::lock_guard<std::mutex> lock(mu_);
  capture_pool_ = 0;
  capture_stream_ = 0;
}

bool CachingAllocator::capturing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capture_pool_ != 0;
}

std::vector<CachingAllocator::Block*> CachingAllocator::blocks_of_pool(PoolId pool_id) const {
  std::vector<Block*> out;
  for (const FreeList* list : {&small_free_, &large_free_})
    for (Block* b : *list)
      if (b->pool == pool_id) out.push_back(b);
  for (auto& [ptr, b] : in_use_)
    if (b->pool == pool_id) out.push_back(b);
  for (const PendingFree& p : pending_frees_)
    if (p.block->pool == pool_id) out.push_back(p.block);
  return out;
}

void CachingAllocator::release_pool(PoolId pool_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool_id == 0) return;
  MT_CHECK(capture_pool_ != pool_id, name_, " caching allocator: release_pool of pool ", pool_id,
           " during its capture");
  released_pools_.insert(pool_id);
  for (Block* b : blocks_of_pool(pool_id)) {
    if (!b->allocated && !b->prev && !b->next) {  // a whole free segment: back to the backend
      pool(b->small).erase(b);
      backend_.free(b->ptr);
      reserved_ -= static_cast<int64_t>(b->size);
      --segments_;
      delete b;
      continue;
    }
    // Part of a segment still in use: the ordinary pool's from now on (re-sorted in its list).
    const bool listed = !b->allocated;
    if (listed) pool(b->small).erase(b);
    b->pool = 0;
    if (listed) pool(b->small).insert(b);
  }
}

int64_t CachingAllocator::pool_reserved_bytes(PoolId pool_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t bytes = 0;
  for (Block* b : blocks_of_pool(pool_id)) bytes += static_cast<int64_t>(b->size);
  return bytes;
}

void CachingAllocator::throw_oom(size_t nbytes, size_t rounded, size_t segment) const {
  MT_ERROR(name_, ": out of memory allocating ", nbytes, " bytes (rounded to ", rounded, ", segment of ", segment,
           " bytes); allocator statistics: current ", current_, " bytes in ", in_use_.size(), " blocks, peak ",
           peak_, ", reserved ", reserved_, " in ", segments_, " segments, allocation count ", count_,
           capture_pool_ != 0 ? " (during a CUDA graph capture, whose private pool cannot take cached memory: the "
                                "cache is not freed then; empty_cache() before the capture gives it back)"
                              : " (the cache was freed and the allocation retried once)");
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  AllocatorStats s;
  s.current_bytes = current_;
  s.peak_bytes = peak_;
  s.allocation_count = count_;
  s.reserved_bytes = reserved_;
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
}

int64_t CachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t used = 0;
  for (auto& [ptr, b] : in_use_) used += static_cast<int64_t>(b->size);
  for (const PendingFree& p : pending_frees_) used += static_cast<int64_t>(p.block->size);  // not reusable yet
  return reserved_ - used;
}

int64_t CachingAllocator::segment_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return segments_;
}

int64_t CachingAllocator::backend_alloc_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backend_allocs_;
}

}  // namespace mixtape
