// examples/train_fashion_mnist.cpp — the main job: train a CNN on Fashion-MNIST from C++ and
// report test accuracy. Reads Debian's dataset-fashion-mnist IDX files; writes per-step
// metrics (CSV) and a summary (JSON) to --out.
//
//   train_fashion_mnist --model smallcnn --epochs 3 --batch-size 128 --lr 0.05 --momentum 0.9
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>

#include <mixtape/mixtape.h>

using namespace mixtape;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string model = "smallcnn";
  std::string optimizer = "sgd";
  std::string schedule = "none";
  int epochs = 3;
  int64_t batch_size = 128;
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  uint64_t seed = 0;
  int threads = 0;
  std::string data_dir = data::kFashionMnistDir;
  std::string metrics_file = "out/fashion_mnist/metrics.csv";
  std::string summary_file = "out/fashion_mnist/summary.json";
  int64_t limit_train = 0;  // 0 = all
  int64_t limit_test = 0;
  bool augment = false;
  int log_every = 50;
};

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "smallcnn") return std::make_shared<models::SmallCNN>(10, 1);
  if (name == "lenet5" || name == "lenet") return std::make_shared<models::LeNet5>(10, 1);
  if (name == "mlp") return std::make_shared<models::MLP>(784, std::vector<int64_t>{256, 128}, 10);
  if (name == "resnet8") return std::make_shared<models::ResNet>(8, 10, 1);
  if (name == "resnet20") return std::make_shared<models::ResNet>(20, 10, 1);
  MT_ERROR("train_fashion_mnist: unknown --model '", name, "' (smallcnn, lenet5, mlp, resnet8, resnet20)");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& c, const TensorList& params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = c.lr, .momentum = c.momentum,
                                                                  .weight_decay = c.weight_decay, .nesterov = c.nesterov});
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  MT_ERROR("train_fashion_mnist: unknown --optimizer '", c.optimizer, "' (sgd, adam, adamw)");
}

// A subset view of a dataset (the first n samples), for quick runs.
std::shared_ptr<data::TensorDataset> head(std::shared_ptr<data::TensorDataset> ds, int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  return std::make_shared<data::TensorDataset>(ds->data().narrow(0, 0, n), ds->targets().narrow(0, 0, n));
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

EvalResult evaluate(nn::Module& model, data::DataLoader& loader) {
  model.eval();
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  for (const data::Batch& b : loader) {
    Tensor logits = model(b.data);
    loss_sum += cross_entropy(logits, b.target, {}, -100, Reduction::Sum).item<double>();
    Tensor pred = argmax(logits, 1);
    auto p = pred.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
    for (size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i];
    seen += b.target.size(0);
  }
  model.train();
  return {loss_sum / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen)};
}

int run(const Config& c) {
  if (c.threads > 0) set_num_threads(c.threads);
  manual_seed(c.seed);
  for (const std::string& f : {c.metrics_file, c.summary_file}) {
    auto parent = std::filesystem::path(f).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
  }

  auto train_set = head(data::load_mnist_format(c.data_dir, true), c.limit_train);
  auto test_set = head(data::load_mnist_format(c.data_dir, false), c.limit_test);
  // Fashion-MNIST pixel statistics over the training set.
  data::Transform norm = data::normalize({0.2860f}, {0.3530f});
  data::Transform train_tf = c.augment ? data::compose({data::random_crop(28, 2), data::random_horizontal_flip(), norm}) : norm;
  data::DataLoader train_loader(train_set, {.batch_size = c.batch_size, .shuffle = true, .seed = c.seed,
                                            .drop_last = true, .prefetch = 2, .transform = train_tf});
  data::DataLoader test_loader(test_set, {.batch_size = 500, .prefetch = 2, .transform = norm});

  auto model = make_model(c.model);
  if (c.model == "mlp") {
    // The MLP takes flat vectors: flatten inside a wrapper so the loop below stays the same.
    auto seq = std::make_shared<nn::Sequential>();
    seq->push_back(std::make_shared<nn::Flatten>());
    seq->push_back(model);
    model = seq;
  }
  int64_t n_params = 0;
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  auto opt = make_optimizer(c, model->parameters());
  int64_t steps_per_epoch = train_loader.num_batches();
  int64_t total_steps = steps_per_epoch * c.epochs;
  std::unique_ptr<optim::LRScheduler> sched;
  if (c.schedule == "cosine")
    sched = std::make_unique<optim::WarmupCosine>(*opt, std::min<int64_t>(100, total_steps / 10), total_steps);
  else if (c.schedule != "none")
    MT_ERROR("train_fashion_mnist: unknown --schedule '", c.schedule, "' (cosine, none)");

  std::cout << "mixtape: training " << c.model << " (" << n_params << " parameters) on Fashion-MNIST: "
            << train_set->size() << " train / " << test_set->size() << " test images, batch " << c.batch_size << ", "
            << c.epochs << " epochs, " << c.optimizer << " lr " << c.lr << ", " << get_num_threads() << " threads\n";

  std::ofstream csv(c.metrics_file);
  MT_CHECK(csv.good(), "train_fashion_mnist: cannot write --metrics '", c.metrics_file, "'");
  csv << "step,epoch,loss,lr,images_per_s\n";
  reset_peak_memory();
  auto t_start = Clock::now();
  double train_seconds = 0;
  int64_t step = 0, images = 0;
  EvalResult last;
  nlohmann::json epochs = nlohmann::json::array();
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    model->train();
    auto t_epoch = Clock::now();
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    for (const data::Batch& b : train_loader) {
      auto t_step = Clock::now();
      Tensor logits = (*model)(b.data);
      Tensor loss = cross_entropy(logits, b.target);
      opt->zero_grad();
      loss.backward();
      opt->step();
      if (sched) sched->step();
      double dt = std::chrono::duration<double>(Clock::now() - t_step).count();
      ++step;
      images += b.target.size(0);
      double l = loss.item<double>();
      loss_sum += l * static_cast<double>(b.target.size(0));
      auto p = argmax(logits, 1).to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
      for (size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i];
      seen += b.target.size(0);
      double lr = opt->param_groups()[0].options.get("lr");
      csv << step << ',' << epoch << ',' << l << ',' << lr << ',' << static_cast<double>(b.target.size(0)) / dt << '\n';
      if (step % c.log_every == 0)
        std::cout << "  epoch " << epoch + 1 << " step " << step << "/" << total_steps << "  loss " << std::fixed
                  << std::setprecision(4) << l << "  lr " << std::setprecision(5) << lr << std::defaultfloat << "\n";
    }
    double epoch_s = std::chrono::duration<double>(Clock::now() - t_epoch).count();
    train_seconds += epoch_s;
    last = evaluate(*model, test_loader);
    double train_acc = static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(seen, 1));
    std::cout << "epoch " << epoch + 1 << ": train loss " << std::fixed << std::setprecision(4)
              << loss_sum / static_cast<double>(std::max<int64_t>(seen, 1)) << ", train acc " << std::setprecision(2)
              << 100 * train_acc << "%, test loss " << std::setprecision(4) << last.loss << ", test acc "
              << std::setprecision(2) << 100 * last.accuracy << "%, " << std::setprecision(1) << epoch_s << " s ("
              << std::setprecision(0) << static_cast<double>(seen) / epoch_s << " images/s)" << std::defaultfloat << "\n";
    epochs.push_back({{"epoch", epoch + 1},
                      {"train_loss", loss_sum / static_cast<double>(std::max<int64_t>(seen, 1))},
                      {"train_accuracy", train_acc},
                      {"test_loss", last.loss},
                      {"test_accuracy", last.accuracy},
                      {"seconds", epoch_s}});
  }
  double wall = std::chrono::duration<double>(Clock::now() - t_start).count();
  nlohmann::json summary = {{"model", c.model},
                            {"parameters", n_params},
                            {"optimizer", c.optimizer},
                            {"epochs", c.epochs},
                            {"batch_size", c.batch_size},
                            {"seed", c.seed},
                            {"threads", get_num_threads()},
                            {"train_images", train_set->size()},
                            {"test_accuracy", last.accuracy},
                            {"test_loss", last.loss},
                            {"train_images_per_s", static_cast<double>(images) / train_seconds},
                            {"wall_seconds", wall},
                            {"peak_bytes", memory_stats().peak_bytes},
                            {"per_epoch", epochs}};
  std::ofstream(c.summary_file) << summary.dump(2) << "\n";
  std::cout << "test accuracy " << std::fixed << std::setprecision(2) << 100 * last.accuracy << "% after " << c.epochs
            << " epochs (" << std::setprecision(1) << wall << " s); metrics in " << c.metrics_file << ", summary in " << c.summary_file << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Train a CNN on Fashion-MNIST with mixtape"};
  app.add_option("--model", c.model, "smallcnn | lenet5 | mlp | resnet8 | resnet20")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd | adam | adamw")->capture_default_str();
  app.add_option("--schedule", c.schedule, "cosine (linear warmup + cosine decay) | none")->capture_default_str();
  app.add_option("--epochs", c.epochs)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", c.batch_size)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr)->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", c.nesterov, "Nesterov momentum (SGD)");
  app.add_option("--weight-decay", c.weight_decay)->capture_default_str();
  app.add_option("--seed", c.seed)->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads (0 = all)")->capture_default_str();
  app.add_option("--data", c.data_dir, "folder with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--metrics", c.metrics_file, "per-step CSV: step, epoch, loss, lr, images/s")->capture_default_str();
  app.add_option("--summary-json", c.summary_file, "final summary (accuracy, loss, images/s, peak bytes)")
      ->capture_default_str();
  app.add_option("--limit,--limit-train", c.limit_train, "use only the first N training images (0 = all)");
  app.add_option("--limit-test", c.limit_test, "use only the first N test images (0 = all)");
  app.add_flag("--augment", c.augment, "random crop (pad 2) and horizontal flip");
  app.add_option("--log-every", c.log_every)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::cerr << "train_fashion_mnist: " << e.what() << "\n";
    return 1;
  }
}
