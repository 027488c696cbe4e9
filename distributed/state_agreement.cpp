// distributed/state_agreement.cpp — tensor digests and the all-ranks comparison of
// state_agreement.h.
#include "distributed/state_agreement.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "ops/cast.h"

namespace mixtape::distributed {

std::string tensor_digest(const Tensor& t) {
  if (!t.defined()) return "undefined";
  const Tensor c = to_device(t, Device::CPU()).contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  const size_t n = c.nbytes();
  // FNV-1a's offset basis, then 8 bytes at a time: xor, multiply by FNV's prime, and fold the
  // high bits down so that every byte reaches every bit of the result.
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  h ^= h >> 32;
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return t.describe() + " #" + hex;
}

void check_same_on_all_ranks(ProcessGroup& pg, const AgreementItems& items, const std::string& what,
                             const std::string& advice) {
  if (pg.world_size() == 1) return;
  std::string mine;
  for (const auto& [label, value] : items) {
    MT_CHECK(label.find('\n') == std::string::npos && value.find('\n') == std::string::npos &&
                 label.find('\t') == std::string::npos,
             "check_same_on_all_ranks: item '", label, "' has a newline or tab in its label or value");
    mine += label + '\t' + value + '\n';
  }
  const std::vector<std::string> all = pg.all_gather_string(mine);
  auto split = [](const std::string& s) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t tab = s.find('\t', pos), end = s.find('\n', pos);
      out.emplace_back(s.substr(pos, tab - pos), s.substr(tab + 1, end - tab - 1));
      pos = end + 1;
    }
    return out;
  };
  const auto ref = split(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto other = split(all[r]);
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    const std::string rank = "rank " + std::to_string(r);
    std::string diff;
    if (i < ref.size() && i < other.size() && ref[i].first == other[i].first)
      diff = "at " + ref[i].first + ": " + rank + " has " + other[i].second + ", rank 0 has " + ref[i].second;
    else if (i < ref.size() && i < other.size())
      diff = "at item " + std::to_string(i + 1) + ": " + rank + " has " + other[i].first + ", rank 0 has " + ref[i].first;
    else if (i < ref.size())
      diff = "at " + ref[i].first + ": " + rank + " lacks it, rank 0 has " + ref[i].second;
    else
      diff = "at " + other[i].first + ": " + rank + " has " + other[i].second + ", rank 0 lacks it";
    MT_ERROR(rank, "'s ", what, " differs from rank 0's ", diff, advice.empty() ? "" : "; ", advice);
  }
}

}  // namespace mixtape::distributed
