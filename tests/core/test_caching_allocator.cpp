// tests/core/test_caching_allocator.cpp — the caching allocator's rules (core/caching_allocator.h)
// on the CPU, over a fake backend that hands out host memory, counts calls and can run out.
// The CUDA allocator is the same class over cudaMalloc/cudaFree; tests/cuda_runtime/ repeats
// the essentials on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"

namespace mixtape {
namespace {

constexpr size_t MiB = size_t(1) << 20;

// Host memory with a capacity: alloc returns nullptr past it, like cudaMalloc's out of memory.
struct FakeBackend {
  size_t capacity = size_t(1) << 40;
  size_t held = 0;
  int allocs = 0, frees = 0;
  std::map<void*, size_t> live;

  RawBackend backend() {
    return RawBackend{[this](size_t n) -> void* {
                        if (held + n > capacity) return nullptr;
                        void* p = std::malloc(n);
                        held += n;
                        ++allocs;
                        live[p] = n;
                        return p;
                      },
                      [this](void* p) {
                        auto it = live.find(p);
                        ASSERT_NE(it, live.end()) << "backend free of an unknown segment";
                        held -= it->second;
                        live.erase(it);
                        ++frees;
                        std::free(p);
                      }};
  }
};

char* as_bytes(void* p) { return static_cast<char*>(p); }

TEST(CachingAllocator, RoundsSizesTo512Bytes) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(3 * MiB + 1), 3 * MiB + 512);
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  EXPECT_EQ(a.allocate(0), nullptr);
  EXPECT_EQ(fb.allocs, 0);
}

TEST(CachingAllocator, FreedBlockIsReusedWithoutTheBackend) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  void* p = a.allocate(1000);
  a.deallocate(p);
  void* q = a.allocate(900);  // same rounded size class: the same block comes back
  EXPECT_EQ(p, q);
  EXPECT_EQ(fb.allocs, 1);
  a.deallocate(q);
}

TEST(CachingAllocator, SmallRequestsAreCarvedFromOneSegment) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(a.allocate(1000));
  EXPECT_EQ(fb.allocs, 1);
  EXPECT_EQ(a.segment_count(), 1);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(CachingAllocator::kSmallSegment));
  std::sort(ps.begin(), ps.end());
  for (size_t i = 1; i < ps.size(); ++i) EXPECT_GE(as_bytes(ps[i]) - as_bytes(ps[i - 1]), 1024);
  for (void* p : ps) a.deallocate(p);
}

TEST(CachingAllocator, BestFitPicksTheSmallestLargeEnoughBlock) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  void* big = a.allocate(9 * MiB);   // segment 10 MiB
  void* mid = a.allocate(3 * MiB);   // segment 4 MiB
  void* keep = a.allocate(5 * MiB);  // segment 6 MiB, stays in use
  a.deallocate(big);
  a.deallocate(mid);
  void* p = a.allocate(3 * MiB + MiB / 2);
  EXPECT_EQ(p, mid) << "the 4 MiB block fits better than the 10 MiB one";
  EXPECT_EQ(fb.allocs, 3);
  a.deallocate(p);
  a.deallocate(keep);
}

TEST(CachingAllocator, LargeBlocksSplitAndMergeBack) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  void* whole = a.allocate(10 * MiB);
  a.deallocate(whole);
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(4 * MiB);
  EXPECT_EQ(fb.allocs, 1) << "both fit in the cached 10 MiB segment";
  EXPECT_EQ(p, whole);
  EXPECT_EQ(as_bytes(q), as_bytes(p) + 3 * MiB);
  a.deallocate(p);
  a.deallocate(q);
  void* again = a.allocate(10 * MiB);  // merged back into one block
  EXPECT_EQ(again, whole);
  EXPECT_EQ(fb.allocs, 1);
  a.deallocate(again);
}

TEST(CachingAllocator, LargeBlockIsNotSplitForASmallRemainder) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  void* p = a.allocate(4 * MiB);
  a.deallocate(p);
  void* q = a.allocate(3 * MiB + MiB / 2);  // rest 0.5 MiB <= 1 MiB: handed out whole
  EXPECT_EQ(q, p);
  void* r = a.allocate(2 * MiB);
  EXPECT_NE(r, as_bytes(q) + 3 * MiB + MiB / 2);
  EXPECT_EQ(fb.allocs, 2);
  a.deallocate(q);
  a.deallocate(r);
}

TEST(CachingAllocator, BlocksAreReusedOnlyOnTheirStream) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  void* s1 = a.allocate(4 * MiB, /*stream=*/1);
  a.deallocate(s1);
  void* s2 = a.allocate(4 * MiB, /*stream=*/2);
  EXPECT_NE(s2, s1) << "a block freed on stream 1 must not serve stream 2";
  EXPECT_EQ(fb.allocs, 2);
  void* s1_again = a.allocate(4 * MiB, /*stream=*/1);
  EXPECT_EQ(s1_again, s1);
  EXPECT_EQ(fb.allocs, 2);
  a.deallocate(s2);
  a.deallocate(s1_again);
}

TEST(CachingAllocator, EmptyCacheReturnsOnlyUnusedSegments) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  void* small_kept = a.allocate(1000);
  void* small_freed = a.allocate(2000);  // same 2 MiB segment as small_kept
  void* large_freed = a.allocate(8 * MiB);
  a.deallocate(small_freed);
  a.deallocate(large_freed);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(2 * MiB + 8 * MiB));
  a.empty_cache();
  EXPECT_EQ(fb.frees, 1) << "the small segment is still in use";
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(2 * MiB));
  a.deallocate(small_kept);
  a.empty_cache();
  EXPECT_EQ(fb.frees, 2);
  EXPECT_EQ(a.stats().reserved_bytes, 0);
  EXPECT_TRUE(fb.live.empty());
}

TEST(CachingAllocator, StatisticsHaveTheCpuAllocatorsShape) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  void* p = a.allocate(1000);
  void* q = a.allocate(3 * MiB);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.current_bytes, static_cast<int64_t>(1000 + 3 * MiB)) << "requested bytes, as on the CPU";
  EXPECT_EQ(s.peak_bytes, s.current_bytes);
  EXPECT_EQ(s.allocation_count, 2);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * MiB + 4 * MiB));
  a.deallocate(q);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 1000);
  EXPECT_EQ(s.peak_bytes, static_cast<int64_t>(1000 + 3 * MiB));
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(6 * MiB)) << "freed blocks stay cached";
  EXPECT_EQ(a.cached_bytes(), static_cast<int64_t>(6 * MiB - 1024));
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, 1000);
  a.deallocate(p);
}

TEST(CachingAllocator, OutOfMemoryFreesTheCacheAndRetriesOnce) {
  FakeBackend fb;
  fb.capacity = 8 * MiB;
  CachingAllocator a(fb.backend(), "fake");
  void* p = a.allocate(6 * MiB, /*stream=*/1);
  a.deallocate(p);  // cached, but only for stream 1
  void* q = a.allocate(4 * MiB, /*stream=*/2);  // 6 + 4 > 8: fails, cache freed, retried
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(fb.frees, 1);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(4 * MiB));
  a.deallocate(q);
}

TEST(CachingAllocator, OutOfMemoryNamesTheSizeAndTheStatistics) {
  FakeBackend fb;
  fb.capacity = 8 * MiB;
  CachingAllocator a(fb.backend(), "cuda:0");
  void* held = a.allocate(3 * MiB);
  try {
    a.allocate(size_t(100) * MiB);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:0: out of memory allocating 104857600 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("current 3145728 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved 4194304"), std::string::npos) << m;
    EXPECT_NE(m.find("retried once"), std::string::npos) << m;
  }
  EXPECT_EQ(a.stats().current_bytes, static_cast<int64_t>(3 * MiB)) << "a failed request changes nothing";
  a.deallocate(held);
}

TEST(CachingAllocator, NoLeakOver1000AllocFreeSteps) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  std::mt19937 rng(1234);
  std::uniform_int_distribution<size_t> size(1, 6 * MiB);
  std::vector<void*> live;
  int64_t max_reserved = 0;
  for (int step = 0; step < 1000; ++step) {
    if (live.size() < 8 && (live.empty() || rng() % 2)) {
      void* p = a.allocate(size(rng), /*stream=*/rng() % 2);
      std::memset(p, step & 0xff, 1);  // the block is real memory
      live.push_back(p);
    } else {
      size_t i = rng() % live.size();
      a.deallocate(live[i]);
      live.erase(live.begin() + static_cast<long>(i));
    }
    max_reserved = std::max(max_reserved, a.stats().reserved_bytes);
  }
  for (void* p : live) a.deallocate(p);
  EXPECT_EQ(a.stats().current_bytes, 0);
  EXPECT_LT(max_reserved, static_cast<int64_t>(200 * MiB)) << "the cache is reused, not grown without bound";
  EXPECT_LT(fb.allocs, 200);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0);
  EXPECT_TRUE(fb.live.empty()) << fb.live.size() << " segments never returned";
}

TEST(CachingAllocator, ThreadsShareItSafely) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 500; ++i) {
        size_t n = 1 + rng() % (3 * MiB);
        void* p = a.allocate(n, static_cast<CachingAllocator::StreamId>(t % 2));
        static_cast<char*>(p)[n - 1] = 1;
        a.deallocate(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.allocation_count, 2000);
  a.empty_cache();
  EXPECT_TRUE(fb.live.empty());
}

// record_stream: a block also used on another stream is reused only after an event recorded on
// that stream at free time has completed. Fake events: a flag per event the test sets.
struct FakeEvents {
  std::map<void*, std::pair<uintptr_t, bool>> events;  // event -> (stream, done)
  int recorded = 0, destroyed = 0, waited = 0;
  void attach(RawBackend& b) {
    b.record_event = [this](uintptr_t stream) -> void* {
      void* e = new char;
      events[e] = {stream, false};
      ++recorded;
      return e;
    };
    b.event_done = [this](void* e) { return events.at(e).second; };
    b.wait_event = [this](void* e) {
      events.at(e).second = true;  // "the stream ran up to it"
      ++waited;
    };
    b.destroy_event = [this](void* e) {
      events.erase(e);
      ++destroyed;
      delete static_cast<char*>(e);
    };
  }
  void complete_all() {
    for (auto& [e, v] : events) v.second = true;
  }
  // An allocator over fb's memory and these events.
  CachingAllocator allocator(FakeBackend& fb) {
    RawBackend rb = fb.backend();
    attach(rb);
    return CachingAllocator(rb, "fake");
  }
};

TEST(CachingAllocator, RecordedStreamDelaysReuseUntilItsEventCompletes) {
  FakeBackend fb;
  FakeEvents ev;
  CachingAllocator a = ev.allocator(fb);
  const CachingAllocator::StreamId s1 = 1, s2 = 2;
  void* p = a.allocate(4096, s1);
  a.record_stream(p, s2);
  a.record_stream(p, s2);  // once per stream
  a.record_stream(p, s1);  // its own stream: nothing to wait for
  a.deallocate(p);
  EXPECT_EQ(ev.recorded, 1);
  ASSERT_EQ(ev.events.size(), 1u);
  EXPECT_EQ(ev.events.begin()->second.first, s2) << "the event goes on the stream that used the block";
  EXPECT_EQ(a.pending_free_count(), 1);
  EXPECT_EQ(a.stats().current_bytes, 0) << "freed: no longer counted as requested";
  void* q = a.allocate(4096, s1);
  EXPECT_NE(q, p) << "reused while stream 2 may still use it";
  a.empty_cache();
  EXPECT_EQ(a.pending_free_count(), 1) << "empty_cache does not free a block still in use on stream 2";
  ev.complete_all();
  void* r = a.allocate(4096, s1);
  EXPECT_EQ(r, p) << "reusable once the event completed";
  EXPECT_EQ(a.pending_free_count(), 0);
  EXPECT_EQ(ev.destroyed, 1);
  a.deallocate(q);
  a.deallocate(r);  // no record_stream this time: free at once, no event
  EXPECT_EQ(ev.recorded, 1);
  EXPECT_EQ(a.pending_free_count(), 0);
}

TEST(CachingAllocator, OutOfMemoryWaitsForBlocksOtherStreamsStillUse) {
  FakeBackend fb;
  fb.capacity = 4 * MiB;
  FakeEvents ev;
  CachingAllocator a = ev.allocator(fb);
  void* p = a.allocate(4 * MiB, 1);  // the whole capacity, in one large segment
  a.record_stream(p, 2);
  a.deallocate(p);
  EXPECT_EQ(a.pending_free_count(), 1);
  // Stream 2 may still use the segment; nothing else fits. The allocator waits for stream 2's
  // event instead of reporting out of memory, then reuses the segment.
  void* q = a.allocate(4 * MiB, 1);
  EXPECT_EQ(q, p);
  EXPECT_EQ(fb.allocs, 1) << "the waited-for segment was reused, not returned and allocated again";
  EXPECT_EQ(ev.waited, 1);
  EXPECT_EQ(a.pending_free_count(), 0);
  a.deallocate(q);
}

TEST(CachingAllocator, WithoutRecordStreamAFreedBlockIsReusedAtOnce) {
  // The other half of the contract: same-stream reuse needs no event.
  FakeBackend fb;
  FakeEvents ev;
  CachingAllocator a = ev.allocator(fb);
  void* p = a.allocate(4096, 1);
  a.deallocate(p);
  void* q = a.allocate(4096, 1);
  EXPECT_EQ(q, p);
  EXPECT_EQ(ev.recorded, 0);
  a.deallocate(q);  // the allocator leaves blocks still in use to the process (ASan would say so)
}

TEST(CachingAllocator, RecordStreamOfAForeignPointerIsAnError) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  int x = 0;
  try {
    a.record_stream(&x, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fake caching allocator: record_stream of a pointer it did not allocate"),
              std::string::npos)
        << e.what();
  }
}

TEST(CachingAllocator, FreeingAForeignPointerIsAnError) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  int x = 0;
  EXPECT_THROW(a.deallocate(&x), Error);
  a.deallocate(nullptr);  // ignored, like free(nullptr)
}

// Private pools (CUDA graphs): during a capture, requests on the capture's stream get blocks that
// no other request ever gets, freed ones are reused within the capture, and release_pool returns
// the pool's free segments.
TEST(CachingAllocatorPool, ACaptureIsServedOnlyFromItsPrivatePool) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  const CachingAllocator::StreamId capture = 2, other = 3;
  const CachingAllocator::PoolId pool = 7;
  a.deallocate(a.allocate(1000, capture));  // an ordinary cached block on the capture's stream
  ASSERT_EQ(fb.allocs, 1);
  a.begin_capture(pool, capture);
  EXPECT_TRUE(a.capturing());
  void* q = a.allocate(1000, capture);
  EXPECT_EQ(fb.allocs, 2) << "the ordinary cache must not serve a capture";
  a.deallocate(q);
  void* r = a.allocate(1000, capture);
  EXPECT_EQ(r, q) << "a block freed during the capture is reused by the same capture";
  void* o = a.allocate(1000, other);  // another stream: the ordinary pool
  EXPECT_EQ(fb.allocs, 3);
  a.end_capture();
  EXPECT_FALSE(a.capturing());
  EXPECT_EQ(a.pool_reserved_bytes(pool), static_cast<int64_t>(CachingAllocator::kSmallSegment));
  a.deallocate(r);  // the graph's block, free now: still the pool's only
  void* after = a.allocate(1000, capture);
  EXPECT_NE(after, r) << "a pool block left the pool";
  EXPECT_EQ(fb.allocs, 3) << "the ordinary cached block serves the request";
  EXPECT_EQ(a.pool_reserved_bytes(pool), static_cast<int64_t>(CachingAllocator::kSmallSegment));
  a.release_pool(pool);
  EXPECT_EQ(a.pool_reserved_bytes(pool), 0);
  EXPECT_EQ(fb.frees, 1) << "the pool's free segment goes back to the backend";
  a.deallocate(after);
  a.deallocate(o);
  a.empty_cache();
  EXPECT_TRUE(fb.live.empty());
}

TEST(CachingAllocatorPool, BlocksStillInUseWhenThePoolIsReleasedJoinTheOrdinaryPool) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  a.begin_capture(1, 5);
  void* kept = a.allocate(3 * MiB, 5);  // a graph output the program keeps
  a.end_capture();
  a.release_pool(1);
  EXPECT_EQ(fb.frees, 0) << "a segment in use is not returned";
  EXPECT_EQ(a.pool_reserved_bytes(0), a.stats().reserved_bytes);
  a.deallocate(kept);
  EXPECT_EQ(a.allocate(3 * MiB, 5), kept) << "freed, it is an ordinary cached block";
  a.deallocate(kept);
  a.empty_cache();
  EXPECT_TRUE(fb.live.empty());
}

TEST(CachingAllocatorPool, ACaptureQueriesNoEventAndFreesNoCache) {
  FakeBackend fb;
  fb.capacity = 6 * MiB;  // two ordinary segments and the pool's first
  FakeEvents ev;
  CachingAllocator a = ev.allocator(fb);
  void* p = a.allocate(1000, 1);
  a.record_stream(p, 2);
  a.deallocate(p);  // pending: its event is asked about at the next allocation, but not in a capture
  a.deallocate(a.allocate(MiB + 1, 1));  // 2 MiB cached in the ordinary pool
  a.begin_capture(9, 4);
  void* q = a.allocate(1000, 4);
  EXPECT_EQ(a.pending_free_count(), 1) << "a pending free was processed (an event query) during the capture";
  const int frees = fb.frees;
  const std::string msg = [&] {
    try {
      a.allocate(3 * MiB, 4);  // needs the cached 2 MiB back, which a capture may not free
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(msg.find("out of memory allocating 3145728 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("during a CUDA graph capture"), std::string::npos) << msg;
  EXPECT_EQ(fb.frees, frees);
  EXPECT_EQ(ev.waited, 0);
  a.empty_cache();  // no-op during a capture
  EXPECT_EQ(fb.frees, frees);
  a.deallocate(q);
  a.end_capture();
  a.release_pool(9);
  ev.complete_all();
  a.empty_cache();
  EXPECT_TRUE(fb.live.empty());
}

TEST(CachingAllocatorPool, CapturesAreCheckedOnePerAllocator) {
  FakeBackend fb;
  CachingAllocator a(fb.backend(), "fake");
  EXPECT_THROW(a.begin_capture(0, 1), Error);
  a.begin_capture(1, 1);
  try {
    a.begin_capture(2, 1);
    ADD_FAILURE() << "a second capture was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("while the capture into pool 1 is under way"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.release_pool(1), Error);  // during its own capture
  a.end_capture();
  a.release_pool(1);
  EXPECT_THROW(a.begin_capture(1, 1), Error);  // released pools are not reopened
}

}  // namespace
}  // namespace mixtape
