// core/dtype.h — the element types of mixtape, their facts in ONE traits table, and PyTorch's
// type-promotion rules. Adding a dtype means adding one row to MIXTAPE_FORALL_DTYPES.
#pragma once
#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/float8.h"
#include "core/half.h"

namespace mixtape {

// X(enum name, C++ type, short name, size). The compute dtypes have kernels for (nearly) every
// op; the FP8 dtypes (core/float8.h, docs/FP8.md) are storage formats for now: visit_dtype
// refuses them, naming the op, and the few ops that handle them use visit_dtype_with_float8.
#define MIXTAPE_FORALL_COMPUTE_DTYPES(X)       \
  X(Bool, bool, "bool", 1)                     \
  X(UInt8, uint8_t, "u8", 1)                   \
  X(Int32, int32_t, "i32", 4)                  \
  X(Int64, int64_t, "i64", 8)                  \
  X(Float16, ::mixtape::Half, "f16", 2)        \
  X(BFloat16, ::mixtape::BFloat16, "bf16", 2)  \
  X(Float32, float, "f32", 4)                  \
  X(Float64, double, "f64", 8)
#define MIXTAPE_FORALL_FLOAT8_DTYPES(X)                        \
  X(Float8_e4m3fn, ::mixtape::Float8_e4m3fn, "f8e4m3fn", 1)    \
  X(Float8_e5m2, ::mixtape::Float8_e5m2, "f8e5m2", 1)
// Every dtype; the FP8 rows come last so the enum values of the others never change.
#define MIXTAPE_FORALL_DTYPES(X) MIXTAPE_FORALL_COMPUTE_DTYPES(X) MIXTAPE_FORALL_FLOAT8_DTYPES(X)

enum class DType : uint8_t {
#define MIXTAPE_DTYPE_ENUM(name, T, short_name, size) name,
  MIXTAPE_FORALL_DTYPES(MIXTAPE_DTYPE_ENUM)
#undef MIXTAPE_DTYPE_ENUM
};
inline constexpr int kNumDTypes = 10;

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
// is_floating means "has floating kernels": ops guard on it ("expected a floating input") and then
// compute in f32, so FP8, a storage format for now, is NOT floating here (torch.is_floating_point
// says True): every such op refuses FP8 by name instead of silently widening it. is_float8 tells
// FP8 apart; promotion still ranks it with the floats (dtype.cpp).
constexpr bool is_float8(DType t) { return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2; }
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

// The C++ types stored narrower than the float they compute in (convert with T(float(v))).
template <typename T>
inline constexpr bool is_narrow_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> ||
                                          std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;

// The type kernels compute in: 16-bit floats are widened to float and rounded once on store.
template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <> struct acc_type<Float8_e4m3fn> { using type = float; };
template <> struct acc_type<Float8_e5m2> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

// promote_types follows PyTorch's table: bool < integers < floats; f16 with bf16 gives f32;
// an unsigned and a signed integer give the next signed type that holds both. An FP8 dtype
// promotes only with itself; any other pair with FP8 throws, as PyTorch's promoteTypes does.
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
[[noreturn]] void throw_no_float8_kernel(DType t, const char* op);  // dtype.cpp

// Every compute dtype; an FP8 dtype throws "op: no Float8_e4m3fn kernel ...", never a silent
// upcast. -Wswitch still sees every enumerator, so a new dtype must be placed here.
template <typename F>
decltype(auto) visit_dtype(DType t, const char* op, F&& fn) {
  switch (t) {
    MIXTAPE_FORALL_COMPUTE_DTYPES(MT_DTYPE_CASE)
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2: throw_no_float8_kernel(t, op);
  }
  MT_ERROR(op, ": unknown dtype");
}
// Every dtype, FP8 included: for the ops that move or convert FP8 values (copy, fill, element
// access), whose lambda handles is_narrow_float_v types by widening to float.
template <typename F>
decltype(auto) visit_dtype_with_float8(DType t, const char* op, F&& fn) {
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
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2: throw_no_float8_kernel(t, op);
    default: break;
  }
  MT_ERROR(op, ": expected a floating dtype (f16, bf16, f32, f64), got ", dtype_name(t));
}
}  // namespace mixtape
