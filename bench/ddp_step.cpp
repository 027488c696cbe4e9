// bench/ddp_step.cpp — one data-parallel training step, measured from the inside: time per step,
// bytes all-reduced per step, the all-reduce time and the share of it hidden behind backward.
// Run alone (a world of one: the plain model, no communication) or under mpirun; the global
// batch is split over the ranks. bench/ddp_compare.sh runs 2 ranks x 1 thread against 1 rank x
// 2 threads, interleaved, and reports the ratios.
//
//   [mpirun -np N] build-bench/bench/ddp_step [--model smallcnn|resnet8|resnet20] [--batch 128]
//       [--steps 20] [--warmup 3] [--threads T] [--amp off|fp16|bf16] [--bucket-cap-kb K] [--json]
//       [--grad-view-ab ROUNDS] [--collectives ROUNDS]
//
// --collectives R: the process group's collectives alone, f32, R rounds (needs 2+ ranks): per
// round every size once, in an order that alternates between rounds (ascending, descending),
// each timed over `--steps` back-to-back calls after a barrier; the medians over the rounds of
// rank 0's time per call, for all_reduce at 4 B (the per-step loss), 16 KiB, 256 KiB and SmallCNN's
// 1,686,568 B, and reduce_scatter / all_gather_into at that size (ZeRO-1's two).
//
// --grad-view-ab R: DistributedDataParallel without and with gradient_as_bucket_view (two
// replicas of the same model, each with its SGD), R rounds of --steps steps each, the two
// alternating within every round (ABBA order over the rounds); per round the ratio of the
// medians (view / default), and the bytes the .grads hold besides the buckets between steps
// (the allocator's bytes freed by zero_grad(set_to_none)), and the bytes all-reduced.
//
// Synthetic seeded batches (the cost of a step does not depend on the numbers); SGD lr 0.05
// momentum 0.9. Per step: wall time (median over the timed steps, rank 0's clock, a barrier
// before each step so the ranks start together), and from DistributedDataParallel's statistics
// the bytes, the communication thread's time inside the all-reduces and the time the end of
// backward waited for them (exposed); hidden = 1 - exposed / communication.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"

using namespace mixtape;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct ViewRound {
  double default_ms = 0, view_ms = 0;
};

// --collectives: rank 0's median microseconds per call of each collective (see the header).
int collectives(distributed::ProcessGroup& pg, int calls, int rounds) {
  MT_CHECK(pg.world_size() > 1, "ddp_step: --collectives needs mpirun with 2 or more ranks");
  const int w = pg.world_size();
  const int64_t cnn = 1686568 / 4;  // SmallCNN's FP32 gradient, in floats
  const int64_t chunk = (cnn + w - 1) / w;
  struct Case {
    std::string name;
    int64_t bytes;
    std::function<void()> run;
    std::vector<double> us;
  };
  Tensor loss = zeros({1}), small = zeros({4096}), mid = zeros({65536}), big = zeros({cnn});
  Tensor flat = zeros({chunk * w}), shard = zeros({chunk});
  std::vector<Case> cases;
  cases.push_back({"all_reduce", 4, [&] { pg.all_reduce(loss); }, {}});
  cases.push_back({"all_reduce", 16384, [&] { pg.all_reduce(small); }, {}});
  cases.push_back({"all_reduce", 262144, [&] { pg.all_reduce(mid); }, {}});
  cases.push_back({"all_reduce", cnn * 4, [&] { pg.all_reduce(big); }, {}});
  cases.push_back({"reduce_scatter", chunk * w * 4, [&] { pg.reduce_scatter(shard, flat); }, {}});
  cases.push_back({"all_gather_into", chunk * w * 4, [&] { pg.all_gather_into(flat, shard); }, {}});
  for (Case& c : cases) c.run();  // warm-up: buffers, MPI's connections
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < cases.size(); ++k) {
      Case& c = cases[r % 2 ? cases.size() - 1 - k : k];
      pg.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) c.run();
      c.us.push_back(1e6 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
  }
  if (pg.rank() == 0) {
    std::printf("| collective | bytes | median us per call | min | max |\n|---|---:|---:|---:|---:|\n");
    for (const Case& c : cases)
      std::printf("| %s | %lld | %.1f | %.1f | %.1f |\n", c.name.c_str(), static_cast<long long>(c.bytes), median(c.us),
                  *std::min_element(c.us.begin(), c.us.end()), *std::max_element(c.us.begin(), c.us.end()));
  }
  return 0;
}

// One replica's step as the main loop runs it (zero_grad, forward, backward, step), timed.
struct Replica {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<optim::SGD> opt;
  int64_t grad_bytes = 0;  // freed by the last zero_grad: what the .grads held besides the buckets
  double step(distributed::ProcessGroup& pg, const Tensor& x, const Tensor& y) {
    pg.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t before = memory_stats().current_bytes;
    opt->zero_grad();
    grad_bytes = before - memory_stats().current_bytes;
    cross_entropy((*ddp)(x), y).backward();
    opt->step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

int grad_view_ab(distributed::ProcessGroup& pg, const std::string& model_name, int64_t local, int steps, int warmup,
                 int rounds, const distributed::DataParallelOptions& base) {
  Replica rep[2];
  for (int v = 0; v < 2; ++v) {
    manual_seed(0);
    if (model_name == "smallcnn") rep[v].model = std::make_shared<models::SmallCNN>(10, 1);
    else rep[v].model = std::make_shared<models::ResNet>(8, 10, 1);
    distributed::DataParallelOptions o = base;
    o.gradient_as_bucket_view = v == 1;
    rep[v].ddp = std::make_shared<distributed::DistributedDataParallel>(rep[v].model, pg, o);
    rep[v].opt = std::make_unique<optim::SGD>(rep[v].model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  }
  Generator g(7 + static_cast<uint64_t>(pg.rank()));
  Tensor x = randn({local, 1, 28, 28}, {}, &g);
  Tensor y = (rand({local}, {}, &g) * 10.0).to(DType::Int64);
  for (int s = 0; s < warmup; ++s)
    for (Replica& r : rep) r.step(pg, x, y);
  std::vector<double> ratios;
  if (pg.rank() == 0)
    std::printf("| round | default ms | view ms | view / default |\n|---:|---:|---:|---:|\n");
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> t[2];
    const int first = (round % 4 == 0 || round % 4 == 3) ? 0 : 1;  // ABBA
    for (int k = 0; k < 2; ++k) {
      const int v = k == 0 ? first : 1 - first;
      for (int s = 0; s < steps; ++s) t[v].push_back(rep[v].step(pg, x, y));
    }
    const double a = median(t[0]), b = median(t[1]);
    ratios.push_back(b / a);
    if (pg.rank() == 0) std::printf("| %d | %.2f | %.2f | %.3f |\n", round + 1, 1e3 * a, 1e3 * b, b / a);
  }
  if (pg.rank() == 0) {
    std::printf("median ratio %.3f over %d rounds of %d steps; ", median(ratios), rounds, steps);
    std::printf(".grad bytes besides the buckets: default %lld, view %lld; all-reduced per step: default %lld, view %lld\n",
                static_cast<long long>(rep[0].grad_bytes), static_cast<long long>(rep[1].grad_bytes),
                static_cast<long long>(rep[0].ddp->last_stats().bytes),
                static_cast<long long>(rep[1].ddp->last_stats().bytes));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "smallcnn", amp = "off";
  int64_t batch = 128, bucket_kb = 0;
  int steps = 20, warmup = 3, threads = 0, view_rounds = 0, collective_rounds = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddp_step: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--model")) model_name = next("--model");
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(next("--batch"));
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(next("--steps"));
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(next("--warmup"));
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(next("--threads"));
    else if (!std::strcmp(argv[i], "--amp")) amp = next("--amp");
    else if (!std::strcmp(argv[i], "--bucket-cap-kb")) bucket_kb = std::atoll(next("--bucket-cap-kb"));
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--grad-view-ab")) view_rounds = std::atoi(next("--grad-view-ab"));
    else if (!std::strcmp(argv[i], "--collectives")) collective_rounds = std::atoi(next("--collectives"));
    else {
      std::fprintf(stderr, "ddp_step: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  try {
    auto& pg = distributed::init_process_group();
    const int world = pg.world_size(), rank = pg.rank();
    if (threads > 0) set_num_threads(threads);
    if (collective_rounds > 0) {
      const int rc = collectives(pg, steps, collective_rounds);
      distributed::destroy_process_group();
      return rc;
    }
    MT_CHECK(batch % world == 0, "ddp_step: --batch ", batch, " does not divide over ", world, " ranks");
    const int64_t local = batch / world;
    manual_seed(0);
    std::shared_ptr<nn::Module> model;
    if (model_name == "smallcnn") model = std::make_shared<models::SmallCNN>(10, 1);
    else if (model_name == "resnet8") model = std::make_shared<models::ResNet>(8, 10, 1);
    else if (model_name == "resnet20") model = std::make_shared<models::ResNet>(20, 10, 1);
    else MT_ERROR("ddp_step: unknown --model '", model_name, "'");
    std::shared_ptr<distributed::DistributedDataParallel> ddp;
    distributed::DataParallelOptions opts;
    if (bucket_kb > 0) opts.bucket_cap_bytes = opts.first_bucket_cap_bytes = bucket_kb << 10;
    if (view_rounds > 0) {
      MT_CHECK(amp == "off" && (model_name == "smallcnn" || model_name == "resnet8"),
               "ddp_step: --grad-view-ab runs FP32 smallcnn or resnet8");
      const int rc = grad_view_ab(pg, model_name, local, steps, warmup, view_rounds, opts);
      distributed::destroy_process_group();
      return rc;
    }
    if (world > 1) ddp = std::make_shared<distributed::DistributedDataParallel>(model, pg, opts);
    nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    std::optional<DType> ac;
    if (amp == "fp16") ac = DType::Float16;
    else if (amp == "bf16") ac = DType::BFloat16;
    else MT_CHECK(amp == "off", "ddp_step: --amp off|fp16|bf16, got ", amp);
    amp::GradScaler scaler({.enabled = amp == "fp16"});
    Generator g(7 + static_cast<uint64_t>(rank));
    Tensor x = randn({local, 1, 28, 28}, {}, &g);
    Tensor y = (rand({local}, {}, &g) * 10.0).to(DType::Int64);

    std::vector<double> step_s, comm_s, exposed_s, hidden;
    int64_t bytes = 0;
    int buckets = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      pg.barrier();
      auto t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      Tensor loss;
      {
        std::optional<amp::AutocastGuard> guard;
        if (ac) guard.emplace(DeviceType::CPU, *ac);
        loss = cross_entropy(net(x), y);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s < warmup) continue;
      step_s.push_back(dt);
      if (ddp) {
        const auto& st = ddp->last_stats();
        comm_s.push_back(st.comm_seconds);
        exposed_s.push_back(st.exposed_seconds);
        hidden.push_back(st.hidden_fraction());
        bytes = st.bytes;
        buckets = st.buckets;
      }
    }
    if (rank == 0) {
      const double t = median(step_s);
      if (json) {
        std::printf("{\"model\": \"%s\", \"amp\": \"%s\", \"world\": %d, \"threads\": %d, \"batch\": %lld, "
                    "\"step_ms\": %.3f, \"images_per_s\": %.1f, \"buckets\": %d, \"bytes_per_step\": %lld, "
                    "\"allreduce_ms\": %.3f, \"exposed_ms\": %.3f, \"hidden\": %.3f}\n",
                    model_name.c_str(), amp.c_str(), world, get_num_threads(), static_cast<long long>(batch), 1e3 * t,
                    static_cast<double>(batch) / t, buckets, static_cast<long long>(bytes), 1e3 * median(comm_s),
                    1e3 * median(exposed_s), median(hidden));
      } else {
        std::printf("%s amp %s: %d rank(s) x %d thread(s), global batch %lld: %.2f ms/step (%.0f images/s)", model_name.c_str(),
                    amp.c_str(), world, get_num_threads(), static_cast<long long>(batch), 1e3 * t,
                    static_cast<double>(batch) / t);
        if (world > 1)
          std::printf("; %d bucket(s), %lld bytes all-reduced per step, all-reduce %.2f ms, exposed %.2f ms, hidden %.0f%%",
                      buckets, static_cast<long long>(bytes), 1e3 * median(comm_s), 1e3 * median(exposed_s),
                      100 * median(hidden));
        std::printf("\n");
      }
    }
    ddp.reset();
    distributed::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    distributed::abort_if_distributed(e.what());
    std::fprintf(stderr, "ddp_step: %s\n", e.what());
    return 1;
  }
}
