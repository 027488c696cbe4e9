// tests/amp/policy_doc/test_autocast_policy_doc.cpp — docs/autocast-policy.md's table against the
// op registry. Its own binary (ctest label amp), so that the registry holds the library's ops
// only: the test files of tests/amp define ops of their own.
//
// Rules (each fails the test; the message names the op and the cell):
//   - every registered op that autocast casts or refuses (a policy other than none, or a CUDA
//     ban), or that is named like an op on one of PyTorch's casting lists (kPyTorchCastOps), has
//     exactly one row; another op (policy none, or in-place) may have one, and without one means
//     "none, as PyTorch's fallthrough" (PyTorch's lists too name only the ops they cast); every row
//     names a registered op, and a row that exists is checked in full;
//   - "mixtape CPU" / "mixtape CUDA" equal what the Autocast layer does with the op on that device
//     type: its policy's name, `banned` for a CUDA ban, `in-place` for in-place ops;
//   - "PyTorch CUDA" / "PyTorch CPU" hold one of PyTorch's policy names (or `none`, `banned`,
//     `in-place`, `n/a` for an op PyTorch has no counterpart of);
//   - "deliberate difference" is `—` exactly when mixtape does on both device types what the
//     PyTorch lists say, and a reason otherwise.
// A cell's value is its first `code span`; any text after it is commentary.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/dispatcher.h"
#include "mixtape/mixtape.h"

namespace mixtape {
namespace {

std::string doc_path() {
  std::string here = __FILE__;  // tests/amp/policy_doc/<this file>
  for (int i = 0; i < 4; ++i) here = here.substr(0, here.find_last_of("/\\"));
  return here + "/docs/autocast-policy.md";
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "| a | b |" -> {"a", "b"}.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line.substr(1));
  std::string cell;
  while (std::getline(ss, cell, '|')) out.push_back(trim(cell));
  if (!out.empty() && out.back().empty()) out.pop_back();  // after the closing '|'
  return out;
}

// The first `code span` of a cell, or the whole cell when it has none ("—").
std::string value_of(const std::string& cell) {
  const size_t b = cell.find('`');
  if (b == std::string::npos) return cell;
  const size_t e = cell.find('`', b + 1);
  return e == std::string::npos ? cell : cell.substr(b + 1, e - b - 1);
}

const std::vector<std::string> kColumns = {"op",           "mixtape CPU", "mixtape CUDA",         "PyTorch op",
                                           "PyTorch CUDA", "PyTorch CPU", "deliberate difference"};

struct Row {
  int line = 0;
  std::vector<std::string> cells;
};

// The rows of the table whose header is kColumns, keyed by op name.
std::map<std::string, Row> read_table(std::string& error) {
  std::ifstream in(doc_path());
  if (!in) {
    error = "cannot open " + doc_path();
    return {};
  }
  std::map<std::string, Row> rows;
  std::string line;
  int n = 0;
  bool in_table = false, header_seen = false;
  while (std::getline(in, line)) {
    ++n;
    if (!in_table) {
      if (line.rfind("| op |", 0) == 0) {
        if (cells(line) != kColumns) {
          error = doc_path() + ":" + std::to_string(n) + ": the table's columns changed; expected " +
                  "op | mixtape CPU | mixtape CUDA | PyTorch op | PyTorch CUDA | PyTorch CPU | deliberate difference";
          return {};
        }
        in_table = header_seen = true;
        std::getline(in, line);  // |---|---|...
        ++n;
      }
      continue;
    }
    if (line.empty() || line[0] != '|') break;  // the table ends at its first non-row line
    Row r{n, cells(line)};
    if (r.cells.size() != kColumns.size()) {
      error += doc_path() + ":" + std::to_string(n) + ": expected " + std::to_string(kColumns.size()) +
               " cells, got " + std::to_string(r.cells.size()) + "\n";
      continue;
    }
    const std::string op = value_of(r.cells[0]);
    if (!rows.emplace(op, r).second)
      error += doc_path() + ":" + std::to_string(n) + ": a second row for " + op + "\n";
  }
  if (!header_seen) error = doc_path() + ": no table with the columns op | mixtape CPU | ... found";
  return rows;
}

// What the Autocast layer does with `op` on `dev`, spelt as the table does.
std::string mixtape_policy(const OpSchema& op, DeviceType dev) {
  if (op.inplace) return "in-place";
  if (dev == DeviceType::CUDA && !op.cuda_autocast_ban.empty()) return "banned";
  return amp_policy_name(op.amp_policy);
}

// Every op name on one of PyTorch's casting lists (lower_precision_fp, fp32, fp32_set_opt_dtype,
// fp32_append_dtype, promote, and the binary_cross_entropy ban), CUDA and CPU, 2.1 line and later
// (aten/src/ATen/autocast_mode.{h,cpp}; overloads dropped). An op of mixtape's named like one of
// these needs a row even with policy none: its author states what PyTorch does and why mixtape
// differs (a forgotten .policy() cannot pass as "none, like the fallthrough").
const std::set<std::string> kPyTorchCastOps = {
    // lower_precision_fp
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "lstm_cell",
    "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention", "cudnn_convolution",
    "cudnn_convolution_transpose", "mkldnn_rnn_layer", "_native_multi_head_attention",
    // fp32
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp", "avg_pool3d",
    "binary_cross_entropy", "grid_sampler", "polar", "prod", "quantile", "nanquantile", "stft", "trace",
    "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d", "cross_entropy_loss",
    "cross_entropy", "ctc_loss", "fractional_max_pool2d", "fractional_max_pool3d",
    // fp32_set_opt_dtype, fp32_append_dtype
    "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "linalg_matrix_norm", "sum", "norm",
    // promote
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "index_put", "tensordot", "scatter_add", "stack", "cat",
    "index_copy"};

// PyTorch's name for a policy -> mixtape's; "" for a value that is not one.
std::string as_mixtape(const std::string& pytorch) {
  static const std::map<std::string, std::string> names = {
      {"lower_precision_fp", "lower_precision"}, {"fp32", "fp32"},         {"fp32_set_opt_dtype", "fp32_unless_dtype"},
      {"fp32_append_dtype", "fp32_append_dtype"}, {"promote", "promote"}, {"none", "none"},
      {"banned", "banned"},                       {"in-place", "in-place"}, {"n/a", "n/a"}};
  auto it = names.find(pytorch);
  return it == names.end() ? "" : it->second;
}

TEST(AutocastPolicyDoc, EveryOpHasARowThatMatchesTheRegistry) {
  std::string error;
  const std::map<std::string, Row> rows = read_table(error);
  ASSERT_TRUE(error.empty()) << error;
  std::vector<std::string> missing;
  for (const OpSchema* op : all_ops()) {
    auto it = rows.find(op->name);
    if (it == rows.end()) {
      const std::string cpu = mixtape_policy(*op, DeviceType::CPU);
      const bool cast_or_banned =
          (cpu != "none" && cpu != "in-place") || mixtape_policy(*op, DeviceType::CUDA) == "banned";
      if (cast_or_banned) missing.push_back(op->name + " (" + amp_policy_name(op->amp_policy) + ")");
      else if (kPyTorchCastOps.count(op->name) && cpu != "in-place")
        missing.push_back(op->name + " (policy none, but PyTorch's autocast lists name it)");
      continue;
    }
    const Row& r = it->second;
    const std::string where = doc_path() + ":" + std::to_string(r.line) + ": " + op->name + ": ";
    const std::string cpu = mixtape_policy(*op, DeviceType::CPU), cuda = mixtape_policy(*op, DeviceType::CUDA);
    EXPECT_EQ(value_of(r.cells[1]), cpu) << where << "the mixtape CPU cell says `" << value_of(r.cells[1])
                                         << "`, the registry `" << cpu << "`";
    EXPECT_EQ(value_of(r.cells[2]), cuda) << where << "the mixtape CUDA cell says `" << value_of(r.cells[2])
                                          << "`, the registry `" << cuda << "`";
    const std::string pt_cuda = as_mixtape(value_of(r.cells[4])), pt_cpu = as_mixtape(value_of(r.cells[5]));
    EXPECT_FALSE(pt_cuda.empty()) << where << "PyTorch CUDA cell `" << value_of(r.cells[4]) << "` is not a policy name";
    EXPECT_FALSE(pt_cpu.empty()) << where << "PyTorch CPU cell `" << value_of(r.cells[5]) << "` is not a policy name";
    const bool same = pt_cuda == cuda && pt_cpu == cpu;
    const std::string diff = r.cells[6];
    if (same)
      EXPECT_EQ(diff, "—") << where << "mixtape does what PyTorch's lists say on both device types, yet the row "
                           << "claims a difference: " << diff;
    else
      EXPECT_TRUE(diff != "—" && !diff.empty())
          << where << "mixtape (CPU " << cpu << ", CUDA " << cuda << ") differs from PyTorch (CPU "
          << value_of(r.cells[5]) << ", CUDA " << value_of(r.cells[4]) << ") but the row gives no reason";
  }
  std::string missing_list;
  for (const std::string& m : missing) missing_list += " " + m;
  EXPECT_TRUE(missing.empty()) << "ops that need a row (cast, refused, or on PyTorch's lists), missing from " << doc_path() << ":" << missing_list;
  for (const auto& [name, r] : rows)
    EXPECT_NE(find_op(name), nullptr) << doc_path() << ":" << r.line << ": a row for " << name
                                      << ", which is not a registered op";
}

}  // namespace
}  // namespace mixtape
