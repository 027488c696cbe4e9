// data/fashion_mnist.h — MNIST-format datasets (Fashion-MNIST, MNIST) from IDX files, or from
// the ImageFolder of PNGs that examples/export_images makes of them.
#pragma once
#include <memory>
#include <string>

#include "data/dataset.h"

namespace mixtape::data {

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The default data folder of the programs and tests: $MIXTAPE_FASHION_MNIST when set and not
// empty (a machine without the package: scripts/gpu-check.sh points it at its bundle), else
// kFashionMnistDir.
std::string default_fashion_mnist_dir();

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`: images (N, 28, 28)
// UInt8, labels (N) Int64. Errors name the missing file and how to install the package.
std::shared_ptr<TensorDataset> load_mnist_format(const std::string& dir, bool train);

// Fashion-MNIST (or MNIST) from `dir` in either on-disk form, detected from what is there:
//   IDX:          dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]  -> load_mnist_format
//   ImageFolder:  dir/train/<class>/*.png and dir/test/<class>/*.png     (export_images writes
//                 each split: `export_images <idx dir> dir/train --train`, `... dir/test`)
// `limit` > 0 keeps `limit` samples: from IDX the first ones (the file order mixes the classes);
// from an ImageFolder, whose order is sorted by class, every (size/limit)-th, so every class
// stays in. ImageFolder images are decoded once into memory as (N, 1, H, W) u8 grayscale.
// Errors name the folder, both layouts and the Debian package.
std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir, bool train, int64_t limit = 0);

// True when `dir` has the ImageFolder layout above (train/ and test/ sub-folders).
bool is_image_folder_split(const std::string& dir);

// The ten Fashion-MNIST class names, index = label.
const char* fashion_mnist_class_name(int64_t label);

}  // namespace mixtape::data
