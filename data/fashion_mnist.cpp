// data/fashion_mnist.cpp — loading the IDX pair and checking they belong together.
#include "data/fashion_mnist.h"

#include <cstdlib>
#include <filesystem>

#include "data/idx.h"
#include "data/image_folder.h"
#include "ops/cast.h"

namespace mixtape::data {

namespace {
std::string find_file(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    std::string p = dir + "/" + stem + ext;
    if (std::filesystem::exists(p)) return p;
  }
  MT_ERROR("load_mnist_format: neither '", dir, "/", stem, ".gz' nor '", dir, "/", stem,
           "' exists (on Debian: apt-get install dataset-fashion-mnist)");
}
}  // namespace

std::string default_fashion_mnist_dir() {
  const char* env = std::getenv("MIXTAPE_FASHION_MNIST");
  return env && *env ? std::string(env) : std::string(kFashionMnistDir);
}

std::shared_ptr<TensorDataset> load_mnist_format(const std::string& dir, bool train) {
  std::string prefix = train ? "train" : "t10k";
  std::string ipath = find_file(dir, prefix + "-images-idx3-ubyte");
  std::string lpath = find_file(dir, prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(ipath), labels = read_idx(lpath);
  MT_CHECK(images.dtype() == DType::UInt8 && images.dim() == 3, "load_mnist_format: '", ipath,
           "' should hold u8 (N, H, W) images, got ", images.describe());
  MT_CHECK(labels.dtype() == DType::UInt8 && labels.dim() == 1, "load_mnist_format: '", lpath,
           "' should hold u8 (N) labels, got ", labels.describe());
  MT_CHECK(images.size(0) == labels.size(0), "load_mnist_format: ", images.size(0), " images in '", ipath, "' but ",
           labels.size(0), " labels in '", lpath, "'");
  return std::make_shared<TensorDataset>(images, to_dtype(labels, DType::Int64));
}

bool is_image_folder_split(const std::string& dir) {
  namespace fs = std::filesystem;
  return fs::is_directory(fs::path(dir) / "train") && fs::is_directory(fs::path(dir) / "test");
}

std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir, bool train, int64_t limit) {
  MT_CHECK(std::filesystem::is_directory(dir), "load_fashion_mnist: the dataset folder '", dir,
           "' does not exist (on Debian: apt-get install dataset-fashion-mnist)");
  if (!is_image_folder_split(dir)) {
    auto ds = load_mnist_format(dir, train);
    if (limit <= 0 || limit >= ds->size()) return ds;
    return std::make_shared<TensorDataset>(ds->data().narrow(0, 0, limit), ds->targets().narrow(0, 0, limit));
  }
  ImageFolder folder((std::filesystem::path(dir) / (train ? "train" : "test")).string(), 1);
  const int64_t n = folder.size();
  MT_CHECK(n > 0, "load_fashion_mnist: '", dir, "/", train ? "train" : "test", "' holds no images");
  const int64_t keep = (limit <= 0 || limit >= n) ? n : limit;
  std::vector<int64_t> indices(static_cast<size_t>(keep));
  for (int64_t i = 0; i < keep; ++i) indices[static_cast<size_t>(i)] = i * n / keep;
  Batch all = folder.get_batch(indices);  // decodes every kept image once
  return std::make_shared<TensorDataset>(all.data, all.target);
}

const char* fashion_mnist_class_name(int64_t label) {
  static const char* names[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  MT_CHECK(label >= 0 && label < 10, "fashion_mnist_class_name: label ", label, " not in [0, 10)");
  return names[label];
}

}  // namespace mixtape::data
