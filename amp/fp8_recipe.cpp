// amp/fp8_recipe.cpp — see amp/fp8_recipe.h.
#include "amp/fp8_recipe.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace mixtape::amp {

const char* fp8_role_name(Fp8Role r) {
  switch (r) {
    case Fp8Role::Input: return "input";
    case Fp8Role::Weight: return "weight";
    case Fp8Role::GradOutput: return "grad_output";
  }
  return "?";
}

void check_recipe(const Fp8Recipe& recipe, const char* who) {
  if (const auto* d = std::get_if<DelayedScaling>(&recipe)) {
    MT_CHECK(d->amax_history_len >= 1, who, ": DelayedScaling.amax_history_len must be >= 1, got ",
             d->amax_history_len);
    MT_CHECK(std::isfinite(d->margin), who, ": DelayedScaling.margin must be finite, got ", d->margin);
  } else if (const auto* m = std::get_if<MXFP8BlockScaling>(&recipe)) {
    MT_CHECK(m->block_size >= 1, who, ": MXFP8BlockScaling.block_size must be >= 1, got ", m->block_size);
  }
}

namespace {
const char* format_name(Fp8Format f) { return f == Fp8Format::Hybrid ? "HYBRID" : "E4M3"; }
}  // namespace

std::string recipe_string(const Fp8Recipe& recipe) {
  std::ostringstream os;
  if (const auto* d = std::get_if<DelayedScaling>(&recipe)) {
    os << "DelayedScaling(margin=" << d->margin << ", " << format_name(d->fp8_format)
       << ", amax_history_len=" << d->amax_history_len
       << ", amax_compute_algo=" << (d->amax_compute_algo == AmaxComputeAlgo::Max ? "max" : "most_recent")
       << (d->power_of_2_scales ? ", power_of_2_scales" : "") << ')';
  } else if (const auto* c = std::get_if<CurrentScaling>(&recipe)) {
    os << "CurrentScaling(" << format_name(c->fp8_format) << (c->power_of_2_scales ? ", power_of_2_scales" : "")
       << ')';
  } else {
    const auto& m = std::get<MXFP8BlockScaling>(recipe);
    os << "MXFP8BlockScaling(" << format_name(m.fp8_format) << ", block_size=" << m.block_size
       << ", scale_rounding=" << (m.scale_rounding == MxScaleRounding::Up ? "up" : "spec")
       << (m.pad_tail ? ", pad_tail" : "") << ')';
  }
  return os.str();
}

Fp8Format recipe_format(const Fp8Recipe& recipe) {
  return std::visit([](const auto& r) { return r.fp8_format; }, recipe);
}

DType fp8_dtype_for(Fp8Format format, Fp8Role role) {
  return format == Fp8Format::Hybrid && role == Fp8Role::GradOutput ? DType::Float8_e5m2 : DType::Float8_e4m3fn;
}

float fp8_max(DType fp8) {
  MT_CHECK(is_float8(fp8), "fp8_max: expected Float8_e4m3fn or Float8_e5m2, got ", dtype_name(fp8));
  return fp8 == DType::Float8_e4m3fn ? static_cast<float>(Float8_e4m3fn::max()) : static_cast<float>(Float8_e5m2::max());
}

}  // namespace mixtape::amp
