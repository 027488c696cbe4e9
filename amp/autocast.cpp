// amp/autocast.cpp — AutocastGuard, the per-thread nesting count that bounds the weight-cast
// cache's lifetime, and the queries.
#include "amp/autocast.h"

#include "amp/weight_cast_cache.h"
#include "core/dispatcher.h"
#include "core/error.h"

namespace mixtape::amp {

namespace {
thread_local int tls_nesting = 0;
thread_local int64_t tls_cast_count = 0;
}  // namespace

namespace detail {
void count_autocast_cast() { ++tls_cast_count; }
}  // namespace detail

AutocastGuard::AutocastGuard(DeviceType device_type, std::optional<DType> dtype, bool enabled,
                             std::optional<bool> cache_enabled)
    : prev_(autocast_state()) {
  install_autocast_layer();
  AutocastState next = prev_;
  AutocastDeviceState& d = next[device_type];
  if (dtype) {
    MT_CHECK(*dtype == DType::Float16 || *dtype == DType::BFloat16, "AutocastGuard(", device_type_name(device_type),
             "): autocast runs ops in a 16-bit floating dtype, Float16 or BFloat16; got ", dtype_name(*dtype),
             " (for a Float32/Float64 region, simply leave autocast off)");
    d.dtype = *dtype;
  }
  d.enabled = enabled;
  if (cache_enabled) d.cache_enabled = *cache_enabled;
  set_autocast_state(next);
  ++tls_nesting;  // counted for enabled=false guards too, as torch.autocast.__enter__ does
}

AutocastGuard::~AutocastGuard() {
  if (--tls_nesting == 0) thread_weight_cast_cache().clear();  // end of the outermost region
  set_autocast_state(prev_);
}

bool is_autocast_enabled(DeviceType t) { return autocast_state()[t].enabled; }
DType get_autocast_dtype(DeviceType t) { return autocast_state()[t].dtype; }
bool is_autocast_cache_enabled(DeviceType t) { return autocast_state()[t].cache_enabled; }
int autocast_nesting() { return tls_nesting; }

size_t autocast_cache_size() { return thread_weight_cast_cache().size(); }
void clear_autocast_cache() { thread_weight_cast_cache().clear(); }
int64_t autocast_cast_count() { return tls_cast_count; }
void reset_autocast_cast_count() { tls_cast_count = 0; }

void check_autocast_ban(const OpSchema& op, DeviceType device_type) {
  if (device_type != DeviceType::CUDA || op.cuda_autocast_ban.empty()) return;
  MT_ERROR(op.name, " is unsafe to autocast on CUDA: ", op.cuda_autocast_ban);
}

}  // namespace mixtape::amp
