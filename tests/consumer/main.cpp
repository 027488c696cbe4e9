// tests/consumer/main.cpp — smallest program against an installed mixtape: the umbrella
// header, two tensors, an add, backward, and the gradients checked. Exit 0 on success.
#include <cmath>
#include <iostream>
#include <vector>

#include <mixtape/mixtape.h>

using namespace mixtape;

static bool close(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - want[i]) > 1e-6f) return false;  // small exact integers in f32
  return true;
}

int main() {
  Tensor a = tensor({1.0, 2.0, 3.0}).requires_grad_();  // (3,) f32
  Tensor b = tensor({4.0, 5.0, 6.0}).requires_grad_();  // (3,) f32
  Tensor loss = ((a + b) * a).sum();                     // d/da = 2a + b, d/db = a
  loss.backward();

  const bool ok_loss = std::fabs(loss.item<float>() - 46.0f) < 1e-6f;  // 5 + 14 + 27
  const bool ok_ga = close(a.grad().to_vector<float>(), {6.0f, 9.0f, 12.0f});
  const bool ok_gb = close(b.grad().to_vector<float>(), {1.0f, 2.0f, 3.0f});
  std::cout << "consumer: loss = " << loss << "\na.grad = " << a.grad() << "\nb.grad = " << b.grad()
            << "\n";
  if (!(ok_loss && ok_ga && ok_gb)) {
    std::cerr << "consumer: WRONG (loss " << ok_loss << ", a.grad " << ok_ga << ", b.grad " << ok_gb
              << ")\n";
    return 1;
  }
  std::cout << "consumer: OK\n";
  return 0;
}
