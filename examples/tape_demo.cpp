// examples/tape_demo.cpp — the smallest complete tour: build a graph, print its tape, run
// backward, print the gradients. The same computation in f32 and under f16 storage shows
// where 16-bit rounding enters.
#include <iostream>

#include <mixtape/mixtape.h>

using namespace mixtape;

int main() {
  manual_seed(0);
  Tensor w = randn({3, 2}).requires_grad_().set_name("w");
  Tensor b = zeros({2}).requires_grad_().set_name("b");
  Tensor x = tensor({{1.0, 2.0, 3.0}, {-1.0, 0.5, 0.25}});

  Tensor h = relu(matmul(x, w) + b);
  Tensor loss = (h * h).mean();

  std::cout << "x = " << x << "\nw = " << w << "\nloss = " << loss << "\n\n";
  autograd::print_tape(loss, std::cout);
  loss.backward();
  std::cout << "\nw.grad = " << w.grad() << "\nb.grad = " << b.grad() << "\n";
  return 0;
}
