// examples/export_images.cpp — writes an IDX image/label pair as an ImageFolder of PNGs
// (root/<class>/<index>.png), so the image-file path of the data layer runs on real data:
//   export_images /usr/share/datasets/fashion-mnist out/fashion-png [--train] [--limit N]
#include <filesystem>
#include <iostream>
#include <string>

#include "data/fashion_mnist.h"
#include "data/image_folder.h"

using namespace mixtape;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: export_images <idx dir> <out dir> [--train] [--limit N]\n";
    return 2;
  }
  std::string src = argv[1], dst = argv[2];
  bool train = false;
  int64_t limit = -1;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--train") train = true;
    else if (a == "--limit" && i + 1 < argc) limit = std::stoll(argv[++i]);
    else {
      std::cerr << "export_images: unknown argument '" << a << "'\n";
      return 2;
    }
  }
  try {
    auto ds = data::load_mnist_format(src, train);
    int64_t n = limit < 0 ? ds->size() : std::min(limit, ds->size());
    for (int64_t i = 0; i < n; ++i) {
      data::Example ex = ds->get(i);
      int64_t label = ex.target.item<int64_t>();
      auto dir = std::filesystem::path(dst) / (std::to_string(label) + "_" + data::fashion_mnist_class_name(label));
      std::string name = dir.string();
      for (auto& ch : name) if (ch == '/' && &ch > name.data() + dst.size()) ch = '-';  // "T-shirt/top"
      std::filesystem::create_directories(name);
      data::save_png(ex.data, name + "/" + std::to_string(i) + ".png");
    }
    std::cout << "wrote " << n << " PNGs under " << dst << "\n";
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
