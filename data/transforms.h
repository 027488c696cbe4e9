// data/transforms.h — batch transforms run by the DataLoader's worker thread. Each takes a
// batch and the generator of that batch (seeded from (seed, epoch, batch index), so the
// augmentation of a batch is the same whatever thread or prefetch depth produces it).
#pragma once
#include <functional>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"

namespace mixtape::data {

using Transform = std::function<Batch(Batch, Generator&)>;

// u8 images (B, H, W) or (B, C, H, W) -> f32 (B, C, H, W): x / 255, then (x - mean[c]) / std[c].
// One mean/std value applies to every channel.
Transform normalize(std::vector<float> mean, std::vector<float> std);
// Pads each image by `padding` zeros on every side and crops a random size x size window.
Transform random_crop(int64_t size, int64_t padding);
// Mirrors each image left-right with probability p.
Transform random_horizontal_flip(double p = 0.5);
// Applies transforms in order.
Transform compose(std::vector<Transform> transforms);

}  // namespace mixtape::data
