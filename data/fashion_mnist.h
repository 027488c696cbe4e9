// data/fashion_mnist.h — MNIST-format datasets (Fashion-MNIST, MNIST) from IDX files.
#pragma once
#include <memory>
#include <string>

#include "data/dataset.h"

namespace mixtape::data {

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`: images (N, 28, 28)
// UInt8, labels (N) Int64. Errors name the missing file and how to install the package.
std::shared_ptr<TensorDataset> load_mnist_format(const std::string& dir, bool train);

// The ten Fashion-MNIST class names, index = label.
const char* fashion_mnist_class_name(int64_t label);

}  // namespace mixtape::data
