// data/transforms.cpp — pixel loops over contiguous batches (images are small; clarity wins).
#include "data/transforms.h"

#include <cstring>

#include "ops/cast.h"

namespace mixtape::data {

namespace {
// Views a batch as (B, C, H, W), adding the channel dim for (B, H, W).
Tensor as_bchw(const Tensor& x, const char* op) {
  MT_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected images (B, H, W) or (B, C, H, W), got ", x.describe());
  Tensor c = contiguous(x);
  return x.dim() == 3 ? c.as_strided_alias({c.size(0), 1, c.size(1), c.size(2)},
                                           contiguous_strides({c.size(0), 1, c.size(1), c.size(2)}), c.storage_offset())
                      : c;
}
}  // namespace

Transform normalize(std::vector<float> mean, std::vector<float> stdv) {
  MT_CHECK(!mean.empty() && mean.size() == stdv.size(), "normalize: need as many means as stds (", mean.size(), " vs ",
           stdv.size(), ")");
  for (float s : stdv) MT_CHECK(s > 0, "normalize: std must be positive, got ", s);
  return [mean, stdv](Batch b, Generator&) {
    Tensor x = as_bchw(b.data, "normalize");
    int64_t B = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    MT_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == C, "normalize: ", mean.size(),
             " means for ", C, " channels");
    Tensor xf = x.dtype() == DType::UInt8 ? Tensor() : to_dtype(x, DType::Float32).contiguous();
    Tensor out = Tensor::empty(x.sizes(), TensorOptions(DType::Float32));
    float* o = out.data_ptr<float>();
    float scale = x.dtype() == DType::UInt8 ? 1.0f / 255.0f : 1.0f;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t c = 0; c < C; ++c) {
        float m = mean[mean.size() == 1 ? 0 : c], s = 1.0f / stdv[stdv.size() == 1 ? 0 : c];
        int64_t base = (i * C + c) * HW;
        if (x.dtype() == DType::UInt8) {
          const uint8_t* p = x.data_ptr<uint8_t>() + base;
          for (int64_t k = 0; k < HW; ++k) o[base + k] = (static_cast<float>(p[k]) * scale - m) * s;
        } else {
          const float* p = xf.data_ptr<float>() + base;
          for (int64_t k = 0; k < HW; ++k) o[base + k] = (p[k] - m) * s;
        }
      }
    b.data = out;
    return b;
  };
}

Transform random_crop(int64_t size, int64_t padding) {
  MT_CHECK(size > 0 && padding >= 0, "random_crop: need size > 0 and padding >= 0, got ", size, ", ", padding);
  return [size, padding](Batch b, Generator& gen) {
    Tensor x = as_bchw(b.data, "random_crop");
    int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    int64_t PH = H + 2 * padding, PW = W + 2 * padding;
    MT_CHECK(size <= PH && size <= PW, "random_crop: crop ", size, " larger than padded image ", PH, "x", PW);
    Tensor out = Tensor::empty({B, C, size, size}, TensorOptions(x.dtype()));
    size_t es = x.element_size();
    std::memset(out.data_ptr(), 0, out.nbytes());
    auto r = gen.reserve(static_cast<uint64_t>(2 * B));
    const char* src = static_cast<const char*>(x.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t i = 0; i < B; ++i) {
      int64_t top = philox_word(r.seed, r.offset, 2 * i) % (PH - size + 1);
      int64_t left = philox_word(r.seed, r.offset, 2 * i + 1) % (PW - size + 1);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < size; ++y) {
          int64_t sy = top + y - padding;
          if (sy < 0 || sy >= H) continue;
          for (int64_t xx = 0; xx < size; ++xx) {
            int64_t sx = left + xx - padding;
            if (sx < 0 || sx >= W) continue;
            std::memcpy(dst + (((i * C + c) * size + y) * size + xx) * es, src + (((i * C + c) * H + sy) * W + sx) * es, es);
          }
        }
    }
    b.data = b.data.dim() == 3 ? out.reshape({B, size, size}) : out;
    return b;
  };
}

Transform random_horizontal_flip(double p) {
  MT_CHECK(p >= 0 && p <= 1, "random_horizontal_flip: p must be in [0, 1], got ", p);
  return [p](Batch b, Generator& gen) {
    Tensor x = as_bchw(b.data, "random_horizontal_flip").clone();
    int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    size_t es = x.element_size();
    auto r = gen.reserve(static_cast<uint64_t>(B));
    char* d = static_cast<char*>(x.data_ptr());
    for (int64_t i = 0; i < B; ++i) {
      if (!(uniform_from_bits(philox_word(r.seed, r.offset, i)) < p)) continue;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y) {
          char* row = d + ((i * C + c) * H + y) * W * es;
          for (int64_t a = 0, z = W - 1; a < z; ++a, --z)
            for (size_t k = 0; k < es; ++k) std::swap(row[a * es + k], row[z * es + k]);
        }
    }
    b.data = b.data.dim() == 3 ? x.reshape(b.data.sizes()) : x;
    return b;
  };
}

Transform compose(std::vector<Transform> transforms) {
  return [transforms](Batch b, Generator& g) {
    for (const auto& t : transforms) b = t(std::move(b), g);
    return b;
  };
}

}  // namespace mixtape::data
