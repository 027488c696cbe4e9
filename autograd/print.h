// autograd/print.h — printing tensors like PyTorch, and printing the tape behind a tensor.
#pragma once
#include <ostream>
#include <string>

#include "core/tensor.h"

namespace mixtape {

// tensor([[1.0000, 2.0000], [3.0000, 4.0000]], shape=[2, 2], dtype=f16, grad_fn=<MulBackward>)
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

namespace autograd {
// The tape that produced `t`, one node per line, in sequence order (the order forward ran):
//   #3  MulBackward  mul(f32[2, 3], f32[2, 3]) -> f32[2, 3]  saved: in0 f32[2, 3], in1 f32[2, 3]
//        <- #1 AddBackward, AccumulateGrad(w f32[2, 3])
std::string tape_string(const Tensor& t);
void print_tape(const Tensor& t, std::ostream& os);
}  // namespace autograd

}  // namespace mixtape
