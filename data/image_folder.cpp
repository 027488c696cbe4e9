// data/image_folder.cpp — directory scan (decoding is data/image_decode.cpp) and PNG writing
// with stb_image_write (Debian's libstb-dev).
#include "data/image_folder.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace fs = std::filesystem;

namespace mixtape::data {

namespace {
bool is_image(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".png" || e == ".jpg" || e == ".jpeg" || e == ".bmp";
}
}  // namespace

ImageFolder::ImageFolder(const std::string& root, int channels, DecodeOptions decode)
    : channels_(channels), decode_(decode) {
  MT_CHECK(channels == 1 || channels == 3, "ImageFolder: channels must be 1 or 3, got ", channels);
  MT_CHECK(decode.max_pixels >= 1, "ImageFolder: DecodeOptions::max_pixels must be at least 1, got ",
           decode.max_pixels);
  MT_CHECK(fs::is_directory(root), "ImageFolder: '", root, "' is not a directory");
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  MT_CHECK(!classes_.empty(), "ImageFolder: '", root, "' has no class sub-folders");
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / classes_[c]))
      if (entry.is_regular_file() && is_image(entry.path())) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      files_.push_back(std::move(f));
      labels_.push_back(static_cast<int64_t>(c));
    }
  }
  MT_CHECK(!files_.empty(), "ImageFolder: no .png/.jpg/.jpeg/.bmp files under '", root, "'");
}

Example ImageFolder::get(int64_t index) const {
  MT_CHECK(index >= 0 && index < size(), "ImageFolder: index ", index, " out of range for ", size(), " images");
  Tensor label = Tensor::empty({}, TensorOptions(DType::Int64));
  *label.data_ptr<int64_t>() = labels_[static_cast<size_t>(index)];
  return {load_image(files_[static_cast<size_t>(index)], channels_, decode_), label};
}

void save_png(const Tensor& image, const std::string& path) {
  MT_CHECK(image.dtype() == DType::UInt8, "save_png: expected UInt8 pixels, got ", image.describe());
  MT_CHECK(image.dim() == 2 || (image.dim() == 3 && (image.size(0) == 1 || image.size(0) == 3)),
           "save_png: expected (H, W) or (1|3, H, W), got ", image.describe());
  Tensor img = image.dim() == 2 ? image.unsqueeze(0) : image;
  int c = static_cast<int>(img.size(0)), h = static_cast<int>(img.size(1)), w = static_cast<int>(img.size(2));
  Tensor hwc = img.permute({1, 2, 0}).contiguous();
  MT_CHECK(stbi_write_png(path.c_str(), w, h, c, hwc.data_ptr(), w * c) != 0, "save_png: cannot write '", path, "'");
}

}  // namespace mixtape::data
