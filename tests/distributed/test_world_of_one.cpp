// tests/distributed/test_world_of_one.cpp — the process group and DistributedDataParallel in a
// program started without mpirun (a world of one): collectives leave values as they are, DDP's
// gradients are bit-identical to the plain model's, buckets follow the capacities in reverse
// registration order, no_sync communicates nothing, checkpointed segments work.
// The two-process behaviour: tests/distributed_mpi.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "dist_test_util.h"

namespace mixtape {
namespace {

using distributed::DistributedDataParallel;
using distributed::ReduceOp;
using testing::error_of;

distributed::ProcessGroup& group() { return distributed::init_process_group(); }

TEST(ProcessGroupOfOne, IsRankZeroOfOneAndCollectivesKeepTheValues) {
  auto& pg = group();
  EXPECT_EQ(pg.rank(), 0);
  EXPECT_EQ(pg.world_size(), 1);
  EXPECT_STREQ(pg.backend_name(), "single");
  EXPECT_EQ(distributed::world(), &pg);
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor t = tensor({1.5, -2.0, 3.25}, {3}, TensorOptions(dt));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
      pg.all_reduce(t, op);
      EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1.5, -2.0, 3.25})) << dtype_name(dt);
    }
  }
  Tensor b = tensor({4.0, 5.0}, {2});
  pg.broadcast(b, 0);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{4.0, 5.0}));
  auto parts = pg.all_gather(b);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].to_vector<double>(), (std::vector<double>{4.0, 5.0}));
  EXPECT_EQ(pg.all_gather_string("hello"), (std::vector<std::string>{"hello"}));
  pg.barrier();
}

TEST(ProcessGroupOfOne, BadArgumentsNameTheCollective) {
  auto& pg = group();
  Tensor i32 = tensor({1.0}, {1}, TensorOptions(DType::Int32));
  EXPECT_NE(error_of([&] { pg.all_reduce(i32); }).find("all_reduce: sum is supported for Float32"), std::string::npos);
  Tensor i64 = tensor({1.0}, {1}, TensorOptions(DType::Int64));
  EXPECT_NE(error_of([&] { pg.all_reduce(i64, ReduceOp::Avg); }).find("got Int64"), std::string::npos);
  EXPECT_NE(error_of([&] { pg.broadcast(i64, 1); }).find("broadcast: root 1 is not a rank"), std::string::npos);
}

TEST(ProcessGroupOfOne, CollectivesTouchNothing) {
  auto& pg = group();
  Tensor m = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2});
  const uint32_t v0 = m.version();
  const int64_t c0 = pg.collectives();
  auto w = pg.all_reduce_async(m.select(1, 0), ReduceOp::Avg, "strided");
  EXPECT_TRUE(w.is_completed());
  w.wait();
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{1.0, 2.0, 3.0, 4.0}));
  EXPECT_EQ(m.version(), v0);  // not even a copy: a world of one has nothing to add
  EXPECT_EQ(pg.collectives(), c0);
  EXPECT_STREQ(pg.cuda_backend_name(), "host");
}

// reduce_scatter and all_gather_into in a world of one: the input's elements, copied (output's shape is free).
TEST(ProcessGroupOfOne, FlatCollectivesCopyTheInput) {
  auto& pg = group();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor in = tensor({1.5, -2.0, 3.25, 4.0}, {4}, TensorOptions(dt));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
      Tensor out = zeros({2, 2}, TensorOptions(dt));
      auto w = pg.reduce_scatter_async(out, in, op);
      EXPECT_TRUE(w.is_completed());
      w.wait();
      EXPECT_EQ(out.to_vector<double>(), in.to_vector<double>()) << dtype_name(dt) << " " << reduce_op_name(op);
    }
    Tensor gathered = zeros({4}, TensorOptions(dt));
    pg.all_gather_into(gathered, in.view({2, 2}));
    EXPECT_EQ(gathered.to_vector<double>(), in.to_vector<double>()) << dtype_name(dt);
  }
  Tensor strided = zeros({4, 2}).select(1, 1);
  pg.reduce_scatter(strided, tensor({1.0, 2.0, 3.0, 4.0}, {4}));
  EXPECT_EQ(strided.to_vector<double>(), (std::vector<double>{1.0, 2.0, 3.0, 4.0}));
}

TEST(ProcessGroupOfOne, FlatCollectivesCheckTheirArguments) {
  auto& pg = group();
  EXPECT_EQ(error_of([&] { pg.reduce_scatter(zeros({3}), zeros({4})); }),
            "reduce_scatter on rank 0: the input must hold world_size (1) x the output's 3 = 3 elements, got 4 (f32[4])");
  EXPECT_EQ(error_of([&] { pg.all_gather_into(zeros({4}), zeros({2})); }),
            "all_gather_into on rank 0: the output must hold world_size (1) x the input's 2 = 2 elements, got 4 (f32[4])");
  EXPECT_EQ(error_of([&] { pg.reduce_scatter(zeros({2}), zeros({2}, TensorOptions(DType::Float64))); }),
            "reduce_scatter on rank 0: the input and the output must have the same dtype, got Float64 and Float32");
  EXPECT_EQ(error_of([&] { pg.all_gather_into(Tensor(), zeros({2})); }),
            "all_gather_into on rank 0: the output is undefined");
  Tensor i32 = zeros({2}, TensorOptions(DType::Int32));
  EXPECT_NE(error_of([&] { pg.reduce_scatter(i32, i32); }).find("reduce_scatter: sum is supported for Float32"),
            std::string::npos);
  Tensor i64 = zeros({2}, TensorOptions(DType::Int64));
  EXPECT_NE(error_of([&] { pg.reduce_scatter(i64, i64, ReduceOp::Avg); }).find("got Int64"), std::string::npos);
  pg.all_gather_into(i32, i32);  // gathering moves bytes: any dtype
}

TEST(DataParallelOfOne, GradientsAreThePlainModelsBitForBit) {
  auto plain = dist_test::make_mlp(3), inner = dist_test::make_mlp(3);
  DistributedDataParallel ddp(inner, group());
  auto batch = dist_test::global_batch(16, 0);
  cross_entropy((*plain)(batch.x), batch.y).backward();
  cross_entropy(ddp(batch.x), batch.y).backward();
  auto a = plain->named_parameters(), b = inner->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].second.grad().defined()) << b[i].first;
    EXPECT_EQ(a[i].second.grad().to_vector<double>(), b[i].second.grad().to_vector<double>()) << a[i].first;
  }
  const auto& st = ddp.last_stats();
  EXPECT_EQ(st.buckets, 1);  // 20*32 + 32 + 32*10 + 10 = 1002 floats: one first bucket
  EXPECT_EQ(st.bytes, (1002 + 4) * 4);  // the gradients and a used count per parameter
}

TEST(DataParallelOfOne, BucketsFillInReverseRegistrationOrderUpToTheirCapacity) {
  auto m = dist_test::make_mlp(0);
  // Caps in bytes: first bucket 400 (100 floats), then 1400 (350 floats).
  DistributedDataParallel ddp(m, group(), {.bucket_cap_bytes = 1400, .first_bucket_cap_bytes = 400});
  auto layout = ddp.bucket_layout();
  // 3.bias (10 floats) opens bucket 0; + 3.weight (320) > 100 -> bucket 1; + 1.bias (32) would
  // make 352 floats = 1408 bytes > 1400 -> bucket 2; + 1.weight (640) > 350 -> bucket 3.
  std::vector<std::vector<std::string>> want = {{"3.bias"}, {"3.weight"}, {"1.bias"}, {"1.weight"}};
  EXPECT_EQ(layout, want);
  // A 16-bit model: FP32 buckets by default (4 bytes a gradient), its own dtype on request (2).
  DistributedDataParallel fp32(dist_test::make_mlp(0, DType::Float16), group(), {.first_bucket_cap_bytes = 2004});
  EXPECT_EQ(fp32.bucket_layout().size(), 2u);
  DistributedDataParallel own(dist_test::make_mlp(0, DType::Float16), group(),
                              {.first_bucket_cap_bytes = 2004, .reduce_16bit_in_fp32 = false});
  EXPECT_EQ(own.bucket_layout().size(), 1u);
  EXPECT_NE(error_of([&] { DistributedDataParallel(m, group(), {.bucket_cap_bytes = 0}); }).find("must be positive"),
            std::string::npos);
}

TEST(DataParallelOfOne, NoSyncCommunicatesNothingAndTheNextBackwardAveragesTheSum) {
  auto plain = dist_test::make_mlp(5), inner = dist_test::make_mlp(5);
  DistributedDataParallel ddp(inner, group());
  auto b0 = dist_test::global_batch(8, 0), b1 = dist_test::global_batch(8, 1);
  {
    auto guard = ddp.no_sync();
    cross_entropy(ddp(b0.x), b0.y).backward();
  }
  EXPECT_EQ(ddp.last_stats().buckets, 0);  // no bucket was reduced under no_sync
  cross_entropy(ddp(b1.x), b1.y).backward();
  EXPECT_EQ(ddp.last_stats().buckets, 1);
  cross_entropy((*plain)(b0.x), b0.y).backward();
  cross_entropy((*plain)(b1.x), b1.y).backward();
  auto a = plain->parameters(), b = inner->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].grad().to_vector<double>(), b[i].grad().to_vector<double>());
}

TEST(DataParallelOfOne, CheckpointedSegmentsGetTheirGradientsReduced) {
  auto plain = dist_test::make_mlp(7), inner = dist_test::make_mlp(7);
  DistributedDataParallel ddp(inner, group());
  auto batch = dist_test::global_batch(8, 0);
  Tensor out = autograd::checkpoint([&](const Tensor& x) { return ddp(x); }, batch.x);
  cross_entropy(out, batch.y).backward();
  EXPECT_EQ(ddp.last_stats().buckets, 1);
  cross_entropy((*plain)(batch.x), batch.y).backward();
  auto a = plain->parameters(), b = inner->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].grad().to_vector<double>(), b[i].grad().to_vector<double>());
}

TEST(DataParallelOfOne, BucketsFollowTheGradDtypeAnOptimizerMadeLaterSets) {
  auto m = dist_test::make_mlp(0, DType::Float16);
  DistributedDataParallel ddp(m, group(), {.reduce_16bit_in_fp32 = false});  // FP16 gradients: FP16 buckets
  optim::SGD opt(m->parameters(), {.lr = 0.1});  // FP32 masters: the gradients become FP32
  auto batch = dist_test::global_batch(8, 0, DType::Float16);
  cross_entropy(ddp(batch.x), batch.y).backward();
  EXPECT_EQ(ddp.last_stats().bytes, (1002 + 4) * 4);  // reduced in FP32 (with the used counts), as they are
  EXPECT_EQ(m->parameters()[0].grad().dtype(), DType::Float32);
}

TEST(DataParallelOfOne, ABackwardInterruptedByAnErrorIsReportedAtTheNextForward) {
  auto inner = dist_test::make_mlp(9);
  DistributedDataParallel ddp(inner, group());
  // A hook registered after DDP's throws: DDP had already counted the gradient in.
  auto w = inner->named_parameters()[3].second;  // 3.bias: the first gradient backward produces
  int id = w.register_post_accumulate_grad_hook([](const Tensor&) { MT_ERROR("injected"); });
  auto batch = dist_test::global_batch(8, 0);
  EXPECT_NE(error_of([&] { cross_entropy(ddp(batch.x), batch.y).backward(); }).find("injected"), std::string::npos);
  w.remove_post_accumulate_grad_hook(id);
  EXPECT_NE(error_of([&] { ddp(batch.x); }).find("the previous backward was interrupted"), std::string::npos);
  inner->zero_grad();
  cross_entropy(ddp(batch.x), batch.y).backward();  // and then it works again
  EXPECT_EQ(ddp.last_stats().buckets, 1);
}

}  // namespace
}  // namespace mixtape
