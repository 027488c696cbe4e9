// tests/data/test_data.cpp — IDX reading (plain, gzip, corrupt), the real Fashion-MNIST files,
// datasets and the prefetching DataLoader, transforms, PNG ImageFolders (and their pixel limit),
// and --data's detection of the IDX vs ImageFolder layout (load_fashion_mnist).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <mixtape/mixtape.h>

#include "common/error_of.h"

#include "data/dataloader.h"
#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data/image_folder.h"

namespace fs = std::filesystem;

namespace mixtape::data {
namespace {

using mixtape::testing::error_of;

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("mixtape_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

Tensor u8_images(int64_t n, int64_t h, int64_t w) {
  Tensor t = Tensor::empty({n, h, w}, TensorOptions(DType::UInt8));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return t;
}

bool bit_equal_u8(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST(Idx, RoundTripPlainAndGzip) {
  fs::path dir = temp_dir("idx");
  Tensor t = u8_images(3, 4, 5);
  write_idx(t, (dir / "a.idx").string());
  Tensor r = read_idx((dir / "a.idx").string());
  EXPECT_EQ(r.sizes(), (IntList{3, 4, 5}));
  EXPECT_EQ(std::memcmp(r.data_ptr(), t.data_ptr(), t.nbytes()), 0);
  // The same bytes gzip-compressed (detected by magic, the name says nothing).
  std::ifstream in(dir / "a.idx", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), {});
  gzFile gz = gzopen((dir / "b.bin").string().c_str(), "wb");
  gzwrite(gz, raw.data(), static_cast<unsigned>(raw.size()));
  gzclose(gz);
  Tensor g = read_idx((dir / "b.bin").string());
  EXPECT_EQ(std::memcmp(g.data_ptr(), t.data_ptr(), t.nbytes()), 0);
  fs::remove_all(dir);
}

TEST(Idx, CorruptFilesGiveErrorsWithOffsets) {
  fs::path dir = temp_dir("idx_bad");
  write_idx(u8_images(2, 3, 3), (dir / "ok.idx").string());
  std::ifstream in(dir / "ok.idx", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), {});
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  };
  std::string p = write("trunc.idx", raw.substr(0, raw.size() - 1));
  EXPECT_NE(error_of([&] { read_idx(p); }).find("(18 data bytes from offset 16) but holds 17 data bytes"),
            std::string::npos);
  p = write("magic.idx", std::string("\x01\x00\x08\x03", 4) + raw.substr(4));
  EXPECT_NE(error_of([&] { read_idx(p); }).find("bad magic at offset 0"), std::string::npos);
  p = write("type.idx", std::string("\x00\x00\x09\x03", 4) + raw.substr(4));
  EXPECT_NE(error_of([&] { read_idx(p); }).find("unsupported element type 0x9 at offset 2"), std::string::npos);
  p = write("short.idx", raw.substr(0, 9));
  EXPECT_NE(error_of([&] { read_idx(p); }).find("inside the dimension sizes"), std::string::npos);
  p = write("gz.bin", std::string("\x1f\x8b\x08\x00garbage", 11));
  EXPECT_NE(error_of([&] { read_idx(p); }).find("gzip"), std::string::npos);
  EXPECT_NE(error_of([&] { read_idx((dir / "missing").string()); }).find("cannot open"), std::string::npos);
  fs::remove_all(dir);
}

// $MIXTAPE_FASHION_MNIST moves the default folder (a machine without the Debian package); unset or
// empty, it is the package's.
TEST(FashionMnist, DefaultDirFollowsTheEnvironment) {
  const char* saved = std::getenv("MIXTAPE_FASHION_MNIST");
  const std::string restore = saved ? saved : "";
  ::setenv("MIXTAPE_FASHION_MNIST", "/somewhere/else", 1);
  EXPECT_EQ(default_fashion_mnist_dir(), "/somewhere/else");
  ::setenv("MIXTAPE_FASHION_MNIST", "", 1);
  EXPECT_EQ(default_fashion_mnist_dir(), kFashionMnistDir);
  ::unsetenv("MIXTAPE_FASHION_MNIST");
  EXPECT_EQ(default_fashion_mnist_dir(), kFashionMnistDir);
  if (saved) ::setenv("MIXTAPE_FASHION_MNIST", restore.c_str(), 1);
}

TEST(FashionMnist, RealFilesLoad) {
  auto train = load_mnist_format(default_fashion_mnist_dir(), true);
  auto test = load_mnist_format(default_fashion_mnist_dir(), false);
  EXPECT_EQ(train->data().sizes(), (IntList{60000, 28, 28}));
  EXPECT_EQ(test->data().sizes(), (IntList{10000, 28, 28}));
  // Fashion-MNIST is balanced: 6000 / 1000 images per class.
  std::vector<int64_t> count(10, 0);
  for (int64_t y : test->targets().to_vector<int64_t>()) ++count.at(static_cast<size_t>(y));
  for (int64_t c : count) EXPECT_EQ(c, 1000);
  EXPECT_STREQ(fashion_mnist_class_name(9), "Ankle boot");
  EXPECT_NE(error_of([] { load_mnist_format("/nonexistent", true); }).find("apt-get install dataset-fashion-mnist"),
            std::string::npos);
}

std::shared_ptr<TensorDataset> numbered(int64_t n) {
  Tensor x = arange(0, n, 1, DType::Float32).reshape({n, 1});
  return std::make_shared<TensorDataset>(x, arange(0, n, 1, DType::Int64));
}

TEST(DataLoader, EveryEpochCoversEverySampleOnce) {
  DataLoader loader(numbered(103), {.batch_size = 10, .shuffle = true, .seed = 5});
  EXPECT_EQ(loader.num_batches(), 11);
  std::vector<int64_t> first_epoch;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    int64_t batches = 0;
    for (const Batch& b : loader) {
      ++batches;
      auto t = b.target.to_vector<int64_t>();
      auto d = b.data.to_vector<float>();
      for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(static_cast<float>(t[i]), d[i]);  // rows stay paired
      seen.insert(seen.end(), t.begin(), t.end());
    }
    EXPECT_EQ(batches, 11);
    std::set<int64_t> uniq(seen.begin(), seen.end());
    EXPECT_EQ(uniq.size(), 103u);
    if (epoch == 0) first_epoch = seen;
    else EXPECT_NE(seen, first_epoch);  // a new permutation each epoch
  }
}

TEST(DataLoader, SeededShuffleAndPrefetchDepthDoNotChangeBatches) {
  auto ds = numbered(50);
  DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 1, .prefetch = 0});
  DataLoader b(ds, {.batch_size = 8, .shuffle = true, .seed = 1, .prefetch = 3});
  DataLoader c(ds, {.batch_size = 8, .shuffle = true, .seed = 2});
  std::vector<int64_t> va, vb, vc;
  for (const Batch& x : a) for (auto v : x.target.to_vector<int64_t>()) va.push_back(v);
  for (const Batch& x : b) for (auto v : x.target.to_vector<int64_t>()) vb.push_back(v);
  for (const Batch& x : c) for (auto v : x.target.to_vector<int64_t>()) vc.push_back(v);
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  DataLoader plain(ds, {.batch_size = 8});
  EXPECT_EQ((*plain.begin()).target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(DataLoader, DropLastAndEarlyExit) {
  DataLoader loader(numbered(25), {.batch_size = 10, .drop_last = true});
  int64_t n = 0;
  for (const Batch& b : loader) {
    EXPECT_EQ(b.target.size(0), 10);
    ++n;
  }
  EXPECT_EQ(n, 2);
  for (const Batch& b : loader) {  // leaving mid-epoch must not hang or leak the worker
    (void)b;
    break;
  }
  EXPECT_NE(error_of([] { DataLoader(numbered(3), {.batch_size = 0}); }).find("batch_size must be positive"),
            std::string::npos);
}

TEST(DataLoader, WorkerErrorsReachTheCaller) {
  DataLoaderOptions opt{.batch_size = 4, .prefetch = 2};
  opt.transform = [](Batch b, Generator&) -> Batch {
    if (b.target.to_vector<int64_t>()[0] >= 8) MT_ERROR("transform failed on purpose");
    return b;
  };
  DataLoader loader(numbered(16), opt);
  int64_t ok = 0;
  std::string err = error_of([&] {
    for (const Batch& b : loader) {
      (void)b;
      ++ok;
    }
  });
  EXPECT_EQ(ok, 2);
  EXPECT_NE(err.find("transform failed on purpose"), std::string::npos);
}

TEST(Transforms, NormalizeCropFlip) {
  Generator g(3);
  Tensor img = u8_images(2, 4, 4);
  Batch b{img, zeros({2}, DType::Int64)};
  Batch n = normalize({0.5f}, {0.25f})(b, g);
  EXPECT_EQ(n.data.sizes(), (IntList{2, 1, 4, 4}));
  EXPECT_FLOAT_EQ(get_element(n.data, 5), (get_element(img, 5) / 255.0f - 0.5f) / 0.25f);
  Batch same = random_crop(4, 0)(b, g);
  EXPECT_EQ(std::memcmp(same.data.data_ptr(), img.data_ptr(), img.nbytes()), 0);
  Batch cropped = random_crop(4, 2)(b, g);
  EXPECT_EQ(cropped.data.sizes(), (IntList{2, 4, 4}));
  Batch flipped = random_horizontal_flip(1.0)(b, g);
  EXPECT_EQ(get_element(flipped.data, 0), get_element(img, 3));
  Batch twice = random_horizontal_flip(1.0)(flipped, g);
  EXPECT_EQ(std::memcmp(twice.data.data_ptr(), img.data_ptr(), img.nbytes()), 0);
  Generator g1(9), g2(9);
  Batch c1 = random_crop(3, 1)(b, g1), c2 = random_crop(3, 1)(b, g2);
  EXPECT_EQ(std::memcmp(c1.data.data_ptr(), c2.data.data_ptr(), c1.data.nbytes()), 0);
}

TEST(ImageFolder, PngRoundTripAndSortedClasses) {
  fs::path dir = temp_dir("imgfolder");
  Tensor imgs = u8_images(3, 6, 5);
  fs::create_directories(dir / "b_class");
  fs::create_directories(dir / "a_class");
  save_png(imgs.select(0, 0), (dir / "b_class" / "x.png").string());
  save_png(imgs.select(0, 1), (dir / "a_class" / "2.png").string());
  save_png(imgs.select(0, 2), (dir / "a_class" / "1.png").string());
  std::ofstream(dir / "a_class" / "notes.txt") << "ignored";
  ImageFolder folder(dir.string(), 1);
  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"a_class", "b_class"}));
  ASSERT_EQ(folder.size(), 3);
  Example e0 = folder.get(0);  // a_class/1.png
  EXPECT_EQ(e0.data.sizes(), (IntList{1, 6, 5}));
  EXPECT_EQ(e0.target.item<int64_t>(), 0);
  EXPECT_EQ(std::memcmp(e0.data.data_ptr(), imgs.select(0, 2).contiguous().data_ptr(), 30), 0);  // PNG is lossless
  EXPECT_EQ(folder.get(2).target.item<int64_t>(), 1);
  Batch b = folder.get_batch({0, 1, 2});
  EXPECT_EQ(b.data.sizes(), (IntList{3, 1, 6, 5}));
  ImageFolder rgb(dir.string(), 3);
  EXPECT_EQ(rgb.get(0).data.sizes(), (IntList{3, 6, 5}));
  std::ofstream(dir / "b_class" / "broken.png") << "not a png";
  ImageFolder with_broken(dir.string(), 1);
  EXPECT_NE(error_of([&] { with_broken.get(2); }).find("cannot decode"), std::string::npos);
  EXPECT_NE(error_of([] { ImageFolder("/nonexistent/dir"); }).find("is not a directory"), std::string::npos);
  fs::remove_all(dir);
}

// The pixel limit is the folder's to set (data::DecodeOptions) and reaches every get(): the 5x6
// image decodes under a limit of 30 pixels and is refused under 29, naming the file and both sizes.
TEST(ImageFolder, DecodeOptionsSetThePixelLimit) {
  fs::path dir = temp_dir("imglimit");
  fs::create_directories(dir / "c");
  save_png(u8_images(1, 6, 5).select(0, 0), (dir / "c" / "a.png").string());
  EXPECT_EQ(ImageFolder(dir.string(), 1, {.max_pixels = 30}).get(0).data.sizes(), (IntList{1, 6, 5}));
  std::string e = error_of([&] { ImageFolder(dir.string(), 3, {.max_pixels = 29}).get(0); });
  EXPECT_NE(e.find((dir / "c" / "a.png").string() + "' declares 5x6 = 30 pixels (header at byte 16), over the limit "
                                                    "of 29 pixels (DecodeOptions::max_pixels)"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of([&] { ImageFolder(dir.string(), 1, {.max_pixels = 0}); }).find("max_pixels must be at least 1"),
            std::string::npos);
  fs::remove_all(dir);
}

// --data's two layouts: an ImageFolder split (train/ and test/, as export_images writes them) is
// detected and decoded into memory; --limit picks every k-th image so every class stays in.
TEST(FashionMnist, ImageFolderSplitLoadsAndLimitKeepsEveryClass) {
  fs::path dir = temp_dir("imgsplit");
  Tensor imgs = u8_images(6, 28, 28);
  for (const char* split : {"train", "test"})
    for (int c = 0; c < 2; ++c) {
      fs::path cls = dir / split / (std::to_string(c) + "_class");
      fs::create_directories(cls);
      for (int i = 0; i < 3; ++i) save_png(imgs.select(0, 3 * c + i), (cls / (std::to_string(i) + ".png")).string());
    }
  EXPECT_TRUE(is_image_folder_split(dir.string()));
  EXPECT_FALSE(is_image_folder_split((dir / "train").string()));
  auto all = load_fashion_mnist(dir.string(), true);
  EXPECT_EQ(all->data().sizes(), (IntList{6, 1, 28, 28}));
  EXPECT_EQ(all->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(std::memcmp(all->data().select(0, 4).contiguous().data_ptr(), imgs.select(0, 4).contiguous().data_ptr(),
                        28 * 28),
            0);
  auto two = load_fashion_mnist(dir.string(), false, 2);
  EXPECT_EQ(two->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  // IDX files in the folder: the first N, as before.
  const std::string data_dir = default_fashion_mnist_dir();
  auto idx = load_fashion_mnist(data_dir, false, 5);
  EXPECT_TRUE(bit_equal_u8(idx->data(), load_mnist_format(data_dir, false)->data().narrow(0, 0, 5)));
  EXPECT_NE(error_of([] { load_fashion_mnist("/nonexistent", true); }).find("apt-get install dataset-fashion-mnist"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mixtape::data
