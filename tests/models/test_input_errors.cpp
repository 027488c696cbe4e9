// tests/models/test_input_errors.cpp — a wrong input shape names the layer, its qualified name in
// the model (Sequential children by index) and the expected vs actual shapes.
#include <gtest/gtest.h>

#include <mixtape/mixtape.h>

#include "models/nn.h"
#include "models/test_util.h"

namespace mixtape {
namespace {

using test::error_of;

TEST(ModuleInputErrors, ConvInsideAModelNamesItsPath) {
  models::SmallCNN cnn(10, 1);
  EXPECT_EQ(error_of([&] { cnn(zeros({8, 3, 28, 28})); }),
            "Conv2d 'conv1' (in_channels=1, out_channels=32, kernel_size=(3, 3)): expected input [N, 1, H, W], got "
            "f32[8, 3, 28, 28]");
  try {
    cnn(zeros({8, 3, 28, 28}));
    FAIL() << "no error";
  } catch (const nn::ModuleInputError& e) {
    EXPECT_EQ(e.type(), "Conv2d");
    EXPECT_EQ(e.path(), "conv1");
  }
  // The model still works afterwards (no stale failure state).
  EXPECT_EQ(cnn(zeros({2, 1, 28, 28})).sizes(), (IntList{2, 10}));
}

TEST(ModuleInputErrors, LayersCalledOnTheirOwnHaveNoPath) {
  nn::Linear fc(4, 2);
  EXPECT_EQ(error_of([&] { fc(zeros({3, 5})); }),
            "Linear (in_features=4, out_features=2): expected input [..., 4], got f32[3, 5]");
  nn::Conv2d conv(3, 8, 3);
  EXPECT_EQ(error_of([&] { conv(zeros({2, 8, 8})); }),
            "Conv2d (in_channels=3, out_channels=8, kernel_size=(3, 3)): expected input [N, 3, H, W], got f32[2, 8, 8]");
  nn::BatchNorm2d bn(4);
  EXPECT_EQ(error_of([&] { bn(zeros({2, 3, 5, 5})); }),
            "BatchNorm2d (num_features=4): expected a 4-D input [N, 4, H, W], got f32[2, 3, 5, 5]");
}

TEST(ModuleInputErrors, FlattenToLinearMismatchInNestedSequentialNamesTheIndexPath) {
  // The training example's MLP: Sequential(Flatten, MLP(Flatten, Linear, ReLU, Linear, ...)).
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(),
                                              std::make_shared<models::MLP>(784, std::vector<int64_t>{32}, 10));
  EXPECT_EQ(error_of([&] { (*net)(zeros({8, 3, 28, 28})); }),
            "Linear '1.1' (in_features=784, out_features=32): expected input [..., 784], got f32[8, 2352]");
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::Flatten>(),
                                              std::make_shared<nn::Linear>(4 * 26 * 26, 10));
  EXPECT_EQ(error_of([&] { (*seq)(zeros({2, 1, 20, 20})); }),
            "Linear '2' (in_features=2704, out_features=10): expected input [..., 2704], got f32[2, 1296]");
}

TEST(ModuleInputErrors, ResNetNamesTheNestedLayer) {
  models::ResNet net(8, 10, 3);
  std::string err = error_of([&] { net(zeros({2, 1, 32, 32})); });
  EXPECT_EQ(err.find("Conv2d 'conv1' (in_channels=3, "), 0u) << err;
  EXPECT_NE(err.find("expected input [N, 3, H, W], got f32[2, 1, 32, 32]"), std::string::npos) << err;
  // A layer two levels down: Sequential children by index, joined with dots.
  auto inner = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(5));
  nn::Sequential outer(std::make_shared<nn::ReLU>(), inner);
  EXPECT_EQ(error_of([&] { outer(zeros({2, 1, 8, 8})); }),
            "BatchNorm2d '1.1' (num_features=5): expected a 4-D input [N, 5, H, W], got f32[2, 4, 6, 6]");
}

TEST(ModuleInputErrors, OtherErrorsFromALayerGetItsPathAppended) {
  // max_pool2d's own check fails inside child "1"; the op's message is kept and located.
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::MaxPool2d>(2));
  std::string err = error_of([&] { (*seq)(zeros({2, 4, 4, 4})); });
  EXPECT_NE(err.find("(in MaxPool2d '1' of Sequential)"), std::string::npos) << err;
  // The model's own check is reported as it is, with nothing appended.
  models::SmallCNN cnn(10, 1);
  EXPECT_EQ(error_of([&] { cnn(zeros({2, 1, 32, 32})); }), "SmallCNN: expected input (N, 1, 28, 28), got f32[2, 1, 32, 32]");
}

}  // namespace
}  // namespace mixtape
