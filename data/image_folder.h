// data/image_folder.h — a dataset of image files laid out one folder per class:
//   root/<class name>/<any name>.{png,jpg,jpeg,bmp}
// Classes are the sub-folder names in sorted order (label = position); files are sorted too,
// so the sample order never depends on the file system. Images decode with decode_image
// (data/image_decode.h) when get() asks for them, under the DecodeOptions given here (the
// pixel limit: an image declaring more than 2^26 pixels is an error by default).
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_decode.h"

namespace mixtape::data {

class ImageFolder : public Dataset {
 public:
  // channels: 1 (grayscale) or 3 (RGB); images are converted on load.
  explicit ImageFolder(const std::string& root, int channels = 1, DecodeOptions decode = {});
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  // data: (channels, H, W) UInt8; target: 0-d Int64.
  Example get(int64_t index) const override;
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t index) const { return files_.at(static_cast<size_t>(index)); }

 private:
  int channels_;
  DecodeOptions decode_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
};

// Writes a (1|3, H, W) or (H, W) UInt8 tensor as PNG.
void save_png(const Tensor& image, const std::string& path);

}  // namespace mixtape::data
