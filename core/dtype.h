// core/dtype.h — the element types of mixtape, their facts in ONE traits table, and PyTorch's
// type-promotion rules. Adding a dtype means adding one row to MIXTAPE_FORALL_DTYPES.
#pragma once
#include <cstdint>
#include <ostream>
#include <string_view>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/half.h"

namespace mixtape {

// X(enum name, C++ type, short name, size, is_floating, is_integral, category rank)
#define MIXTAPE_FORALL_DTYPES(X)               \
  X(Bool, bool, "bool", 1)                     \
  X(UInt8, uint8_t, "u8", 1)                   \
  X(Int32, int32_t, "i32", 4)                  \
  X(Int64, int64_t, "i64", 8)                  \
  X(Float16, ::mixtape::Half, "f16", 2)        \
  X(BFloat16, ::mixtape::BFloat16, "bf16", 2)  \
  X(Float32, float, "f32", 4)                  \
  X(Float64, double, "f64", 8)

enum class DType : uint8_t {
#define MIXTAPE_DTYPE_ENUM(name, T, short_name, size) name,
  MIXTAPE_FORALL_DTYPES(MIXTAPE_DTYPE_ENUM)
#undef MIXTAPE_DTYPE_ENUM
};
inline constexpr int kNumDTypes = 8;

std::string_view dtype_name(DType t);   // "Float32"
std::string_view dtype_short(DType t);  // "f32", used in traces and tape printing
std::ostream& operator<<(std::ostream& os, DType t);

constexpr size_t element_size(DType t) {
  switch (t) {
#define MIXTAPE_DTYPE_SIZE(name, T, short_name, size) \
  case DType::name:                                   \
    return size;
    MIXTAPE_FORALL_DTYPES(MIXTAPE_DTYPE_SIZE)
#undef MIXTAPE_DTYPE_SIZE
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
constexpr bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::UInt8 || t == DType::Int32 || t == DType::Int64 || (include_bool && t == DType::Bool);
}

// C++ type <-> DType.
template <typename T> struct dtype_of;
#define MIXTAPE_DTYPE_OF(name, T, short_name, size) \
  template <> struct dtype_of<T> { static constexpr DType value = DType::name; };
MIXTAPE_FORALL_DTYPES(MIXTAPE_DTYPE_OF)
#undef MIXTAPE_DTYPE_OF
template <typename T> inline constexpr DType dtype_v = dtype_of<T>::value;

// The type kernels compute in: 16-bit floats are widened to float and rounded once on store.
template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

// promote_types follows PyTorch's table: bool < integers < floats; f16 with bf16 gives f32;
// an unsigned and a signed integer give the next signed type that holds both.
DType promote_types(DType a, DType b);

// The dtype a floating op computes in for integral inputs (PyTorch's default dtype).
inline constexpr DType kDefaultFloat = DType::Float32;

}  // namespace mixtape

// visit_dtype(dtype, "op", []<typename T>() {...}): calls the lambda with T the C++ type of
// dtype; visit_floating restricts to floating dtypes and names the op in the error.
// (Functions, not macros, so OpenMP pragmas may appear inside the lambda.)
#define MT_DTYPE_CASE(name, T, short_name, size) \
  case ::mixtape::DType::name:                   \
    return fn.template operator()<T>();

namespace mixtape {
template <typename F>
decltype(auto) visit_dtype(DType t, const char* op, F&& fn) {
  switch (t) { MIXTAPE_FORALL_DTYPES(MT_DTYPE_CASE) }
  MT_ERROR(op, ": unknown dtype");
}
template <typename F>
decltype(auto) visit_floating(DType t, const char* op, F&& fn) {
  switch (t) {
    case DType::Float16: return fn.template operator()<Half>();
    case DType::BFloat16: return fn.template operator()<BFloat16>();
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
    default: break;
  }
  MT_ERROR(op, ": expected a floating dtype (f16, bf16, f32, f64), got ", dtype_name(t));
}
}  // namespace mixtape
