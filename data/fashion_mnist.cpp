// data/fashion_mnist.cpp — loading the IDX pair and checking they belong together.
#include "data/fashion_mnist.h"

#include <filesystem>

#include "data/idx.h"
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

const char* fashion_mnist_class_name(int64_t label) {
  static const char* names[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  MT_CHECK(label >= 0 && label < 10, "fashion_mnist_class_name: label ", label, " not in [0, 10)");
  return names[label];
}

}  // namespace mixtape::data
