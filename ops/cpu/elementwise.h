// ops/cpu/elementwise.h — the CPU loops of every pointwise op (ops/pointwise_op.h instantiates
// them with the op's functor): broadcasting, strides, wrapped scalars and 16-bit rounding live
// here once. The compute dtype comes in decided (ops/pointwise_op.cpp, shared with CUDA).
#pragma once
#include <algorithm>
#include <type_traits>

#include "core/dispatcher.h"
#include "ops/cpu/bf16_rows_avx512.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/loops.h"

namespace mixtape::cpu {

// Returns t converted to dtype (t itself if it already is); not recorded by autograd.
Tensor cast_to(const Tensor& t, DType dtype);
// Copies src (broadcastable to dst) into dst converting dtypes; dst is written in place.
void copy_into(const Tensor& dst, const Tensor& src);

// A functor with a static bf16_bits(uint16_t...) (ops/activation_functors.h's Relu) computes a
// BF16 result from BF16 bits, the same bits as widening, operator() and rounding: contiguous BF16
// rows then run on the 16-bit patterns (a loop the compiler vectorizes), with no conversion.
// Where the CPU has AVX-512 BW that loop runs compiled for it (bf16_rows_avx512), and contiguous
// BF16 rows of add, sub, mul and div run on ops/cpu/bf16_rows_avx512.h (row_op_v): the
// same bits again (NaN payloads aside).
template <typename F, typename T, int Arity>
inline constexpr bool has_bf16_bits = std::is_same_v<T, BFloat16> && [] {
  if constexpr (Arity == 1) return requires { F::bf16_bits(uint16_t{}); };
  else return requires { F::bf16_bits(uint16_t{}, uint16_t{}); };
}();
template <typename F, typename... In>
void bf16_rows(const F&, int64_t n, char* out, In*... in) {
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = F::bf16_bits(reinterpret_cast<const uint16_t*>(in)[i]...);
}
// The same loop compiled for AVX-512 BW (32 lanes where SSE2 has 8): the bits_avx512 entry below.
#if MIXTAPE_X86_KERNELS
template <typename F, typename... In>
MT_TARGET_AVX512 void bf16_rows_avx512(const F&, int64_t n, char* out, In*... in) {
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = F::bf16_bits(reinterpret_cast<const uint16_t*>(in)[i]...);
}
#else
template <typename F, typename... In>
void bf16_rows_avx512(const F& f, int64_t n, char* out, In*... in) {  // never reached off x86-64
  bf16_rows(f, n, out, in...);
}
#endif

// ---- which loop BF16 rows run on: the lists of op.pass "elementwise.fwd" ----
// (ops/cpu/elementwise_kernels.cpp), first entry that applies runs, per pointwise call:
//   add, sub, mul, div (row_op_v)       rows_avx512 · generic
//   functors with bf16_bits (relu, ...)  bits_avx512 · bits · generic
// generic is the reference: widen a block to f32, apply F, round once. All three give its bits
// (rows_avx512: NaN payloads aside). Pointwise ops without a row kernel have no list.
enum class Bf16RowKernel { RowsAvx512, BitsAvx512, Bits, Generic };
// `row_strides`: the byte strides of the rows strided_loop will hand over (row_strides()), one
// per operand, output first; `scalar_operand`: one input is a wrapped number (no row kernel reads
// it). Traces the choice (MIXTAPE_TRACE=kernel; trace false: a caller asking ahead, whose op then
// makes the traced call, so that one call prints one line) and throws where MIXTAPE_CPU_KERNEL
// forces an entry that declines: call it before the loop, never inside a parallel region.
Bf16RowKernel choose_bf16_rows(const char* op, bool arithmetic, const int64_t* row_strides, int operands,
                               bool scalar_operand, bool trace = true);
template <typename F, int Arity>
constexpr bool has_bf16_row_kernel = has_bf16_bits<F, BFloat16, Arity> || row_op_v<F> != RowOp::Generic;

// out = f(x) in compute dtype `dt` (x is converted to it first; ops/pointwise_op.cpp chose it).
template <typename F>
TensorList unary_loop(const OpCall& call, DType dt, const F& f) {
  Tensor x = cast_to(call.inputs[0], dt);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(dt));
  visit_dtype(dt, call.name(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      MT_ERROR(call.name(), ": bool tensors are not supported, got ", x.describe());
    } else {
      const StridedOperands<2> ops{{static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr())},
                                   {broadcast_byte_strides(out, x.sizes()), broadcast_byte_strides(x, x.sizes())}};
      [[maybe_unused]] Bf16RowKernel rk = Bf16RowKernel::Generic;
      if constexpr (has_bf16_bits<F, T, 1>)
        rk = choose_bf16_rows(call.name(), false, row_strides(x.sizes(), ops).data(), 2, false);
      strided_loop<2>(x.sizes(), ops,
                      [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
                        if constexpr (has_bf16_bits<F, T, 1>) {
                          if (rk == Bf16RowKernel::BitsAvx512) return bf16_rows_avx512(f, n, p[0], p[1]);
                          if (rk == Bf16RowKernel::Bits) return bf16_rows(f, n, p[0], p[1]);
                        }
                        if constexpr (is_16bit_v<T>) {
                          float in[kBlock], out[kBlock];
                          for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
                            const int64_t m = std::min(kBlock, n - i0);
                            load_block<T>(p[1] + i0 * s[1], s[1], m, in);
                            for (int64_t i = 0; i < m; ++i) out[i] = f(in[i]);
                            store_block<T>(p[0] + i0 * s[0], s[0], m, out);
                          }
                        } else if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
                          T* o = reinterpret_cast<T*>(p[0]);  // contiguous: a loop the compiler vectorizes
                          const T* in = reinterpret_cast<const T*>(p[1]);
                          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(static_cast<acc_t<T>>(in[i])));
                        } else {
                          for (int64_t i = 0; i < n; ++i) store<T>(p[0] + i * s[0], f(load<T>(p[1] + i * s[1])));
                        }
                      });
    }
  });
  return {out};
}

// out = f(a, b) in compute dtype `dt`, broadcast; stored as dt, or as bool when kBool.
template <bool kBool, typename F>
TensorList binary_loop(const OpCall& call, DType dt, const F& f) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  IntList shape = broadcast_shapes(a.sizes(), b.sizes(), call.name());
  Tensor out = Tensor::empty(shape, TensorOptions(kBool ? DType::Bool : dt));
  visit_dtype(dt, call.name(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      MT_ERROR(call.name(), ": bool tensors are not supported, got ", a.describe(), " and ", b.describe());
    } else {
      using A = acc_t<T>;
      auto emit = [&](char* o, A v) {
        if constexpr (kBool) {
          bool bv = v != A(0);
          std::memcpy(o, &bv, 1);
        } else {
          store<T>(o, v);
        }
      };
      // A wrapped number keeps its full value in the compute type (PyTorch's "opmath" scalar):
      // f16 * 0.1 multiplies by 0.1f, not by the f16 nearest to 0.1.
      if (b.is_wrapped_number() || a.is_wrapped_number()) {
        if constexpr (std::is_same_v<T, BFloat16> && !kBool && has_bf16_row_kernel<F, 2>)
          (void)choose_bf16_rows(call.name(), row_op_v<F> != RowOp::Generic, nullptr, 3, true);  // generic
        bool b_scalar = b.is_wrapped_number();
        A s = static_cast<A>(get_element(b_scalar ? b : a, 0));
        Tensor t = cast_to(b_scalar ? a : b, dt);
        strided_loop<2>(shape, {{static_cast<char*>(out.data_ptr()), static_cast<char*>(t.data_ptr())},
                                {broadcast_byte_strides(out, shape), broadcast_byte_strides(t, shape)}},
                        [&](std::array<char*, 2> p, std::array<int64_t, 2> st, int64_t n) {
                          if constexpr (is_16bit_v<T> && !kBool) {
                            float in[kBlock], out[kBlock];
                            for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
                              const int64_t m = std::min(kBlock, n - i0);
                              load_block<T>(p[1] + i0 * st[1], st[1], m, in);
                              if (b_scalar)
                                for (int64_t i = 0; i < m; ++i) out[i] = f(in[i], s);
                              else
                                for (int64_t i = 0; i < m; ++i) out[i] = f(s, in[i]);
                              store_block<T>(p[0] + i0 * st[0], st[0], m, out);
                            }
                          } else if (b_scalar) {
                            for (int64_t i = 0; i < n; ++i) emit(p[0] + i * st[0], f(load<T>(p[1] + i * st[1]), s));
                          } else {
                            for (int64_t i = 0; i < n; ++i) emit(p[0] + i * st[0], f(s, load<T>(p[1] + i * st[1])));
                          }
                        });
        return;
      }
      Tensor ca = cast_to(a, dt), cb = cast_to(b, dt);
      const StridedOperands<3> ops{{static_cast<char*>(out.data_ptr()), static_cast<char*>(ca.data_ptr()),
                                    static_cast<char*>(cb.data_ptr())},
                                   {broadcast_byte_strides(out, shape), broadcast_byte_strides(ca, shape),
                                    broadcast_byte_strides(cb, shape)}};
      [[maybe_unused]] Bf16RowKernel rk = Bf16RowKernel::Generic;
      if constexpr (std::is_same_v<T, BFloat16> && !kBool && has_bf16_row_kernel<F, 2>)
        rk = choose_bf16_rows(call.name(), row_op_v<F> != RowOp::Generic, row_strides(shape, ops).data(), 3,
                              false);
      strided_loop<3>(shape, ops,
                      [&](std::array<char*, 3> p, std::array<int64_t, 3> st, int64_t n) {
                        if constexpr (row_op_v<F> != RowOp::Generic && std::is_same_v<T, BFloat16> && !kBool) {
                          if (rk == Bf16RowKernel::RowsAvx512)
                            return bf16_binary_rows(row_op_v<F>, n, p[0], p[1], p[2]);
                        }
                        if constexpr (has_bf16_bits<F, T, 2> && !kBool) {
                          if (rk == Bf16RowKernel::BitsAvx512) return bf16_rows_avx512(f, n, p[0], p[1], p[2]);
                          if (rk == Bf16RowKernel::Bits) return bf16_rows(f, n, p[0], p[1], p[2]);
                        }
                        if constexpr (is_16bit_v<T> && !kBool) {
                          float x[kBlock], y[kBlock];
                          for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
                            const int64_t m = std::min(kBlock, n - i0);
                            load_block<T>(p[1] + i0 * st[1], st[1], m, x);
                            load_block<T>(p[2] + i0 * st[2], st[2], m, y);
                            for (int64_t i = 0; i < m; ++i) x[i] = f(x[i], y[i]);
                            store_block<T>(p[0] + i0 * st[0], st[0], m, x);
                          }
                        } else if (st[0] == sizeof(T) && st[1] == sizeof(T) && st[2] == sizeof(T)) {
                          for (int64_t i = 0; i < n; ++i)
                            emit(p[0] + i * sizeof(T), f(load<T>(p[1] + i * sizeof(T)), load<T>(p[2] + i * sizeof(T))));
                        } else {
                          for (int64_t i = 0; i < n; ++i)
                            emit(p[0] + i * st[0], f(load<T>(p[1] + i * st[1]), load<T>(p[2] + i * st[2])));
                        }
                      });
    }
  });
  return {out};
}

}  // namespace mixtape::cpu
