// core/dtype.cpp — dtype names and the promotion lattice.
#include "core/dtype.h"

namespace mixtape {

std::string_view dtype_name(DType t) {
  switch (t) {
#define MIXTAPE_DTYPE_NAME(name, T, short_name, size) \
  case DType::name:                                   \
    return #name;
    MIXTAPE_FORALL_DTYPES(MIXTAPE_DTYPE_NAME)
#undef MIXTAPE_DTYPE_NAME
  }
  return "?";
}

std::string_view dtype_short(DType t) {
  switch (t) {
#define MIXTAPE_DTYPE_SHORT(name, T, short_name, size) \
  case DType::name:                                    \
    return short_name;
    MIXTAPE_FORALL_DTYPES(MIXTAPE_DTYPE_SHORT)
#undef MIXTAPE_DTYPE_SHORT
  }
  return "?";
}

void throw_no_float8_kernel(DType t, const char* op) {
  MT_ERROR(op, ": no ", dtype_name(t), " kernel (FP8 tensors support to()/copy, fill, item/printing, add and mul "
           "for now; convert with .to(Float32) first, see docs/FP8.md)");
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // Neither FP8 format holds the other's values, nor a wider type's: the caller converts
  // explicitly (PyTorch refuses the promotion in the same words).
  MT_CHECK(!is_float8(a) && !is_float8(b), "promote_types: promotion for Float8 types is not supported, attempted to promote ",
           dtype_name(a), " and ", dtype_name(b), "; convert one operand with to() first");
  // Rank inside each category; categories: bool < integral < floating.
  auto category = [](DType t) { return t == DType::Bool ? 0 : is_integral(t) ? 1 : 2; };
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    // Two different 16-bit formats cannot represent each other: PyTorch widens to f32.
    if (is_reduced_float(a) && is_reduced_float(b)) return DType::Float32;
    auto rank = [](DType t) { return t == DType::Float64 ? 3 : t == DType::Float32 ? 2 : 1; };
    return rank(a) >= rank(b) ? a : b;
  }
  // Integers: u8 with a signed type needs a signed type wider than 8 bits; the signed ones
  // here (i32, i64) already are, so the wider signed type wins.
  auto rank = [](DType t) { return t == DType::Int64 ? 3 : t == DType::Int32 ? 2 : 1; };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace mixtape
