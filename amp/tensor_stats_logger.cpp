// amp/tensor_stats_logger.cpp — see amp/tensor_stats_logger.h.
#include "amp/tensor_stats_logger.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "amp/svg_plot.h"
#include "core/error.h"

namespace mixtape::amp {

const char* tensor_role_name(TensorRole r) {
  switch (r) {
    case TensorRole::Activation: return "activation";
    case TensorRole::Weight: return "weight";
    case TensorRole::Gradient: return "gradient";
  }
  return "?";
}

struct TensorStatsLogger::State {
  int64_t every = 1;
  int64_t step = 0;
  bool active = true;
  double scale[3] = {1, 1, 1};
  ScaleFn scale_fn;
  std::vector<TensorStatRow> rows;

  bool due() const { return active && step % every == 0; }
  void record(const std::string& layer, const std::string& tensor, TensorRole role, const Tensor& t) {
    if (!due()) return;
    MT_CHECK(t.defined(), "TensorStatsLogger: '", layer, ".", tensor, "' is an undefined tensor");
    if (!t.is_floating_point() && !is_float8(t.dtype())) return;  // integers have no format to fit
    double s = scale[static_cast<int>(role)];
    if (scale_fn) {
      if (const std::optional<double> own = scale_fn(layer, tensor, role)) {
        MT_CHECK(*own > 0 && std::isfinite(*own), "TensorStatsLogger: the scale function gave ", *own, " for '", layer,
                 ".", tensor, "'; a scale must be positive and finite");
        s = *own;
      }
    }
    rows.push_back({step, layer, tensor, role, t.dtype(), tensor_stat(t, s)});
  }
};

TensorStatsLogger::TensorStatsLogger(int64_t every_n_steps) : state_(std::make_shared<State>()) {
  MT_CHECK(every_n_steps >= 1, "TensorStatsLogger: every_n_steps must be at least 1, got ", every_n_steps);
  state_->every = every_n_steps;
}
TensorStatsLogger::~TensorStatsLogger() { detach(); }

void TensorStatsLogger::set_scale(TensorRole role, double scale) {
  MT_CHECK(scale > 0 && std::isfinite(scale), "TensorStatsLogger::set_scale: the ", tensor_role_name(role),
           " scale must be positive and finite, got ", scale);
  state_->scale[static_cast<int>(role)] = scale;
}
void TensorStatsLogger::set_scale_fn(ScaleFn fn) { state_->scale_fn = std::move(fn); }
int64_t TensorStatsLogger::every_n_steps() const { return state_->every; }
int64_t TensorStatsLogger::current_step() const { return state_->step; }
bool TensorStatsLogger::due() const { return state_->due(); }

void TensorStatsLogger::record(const std::string& layer, const std::string& tensor, TensorRole role,
                               const Tensor& t) {
  state_->record(layer, tensor, role, t);
}

void TensorStatsLogger::on_output(const std::shared_ptr<State>& state, const std::string& layer, const Tensor& out) {
  if (!state->due() || !out.defined()) return;
  state->record(layer, "output", TensorRole::Activation, out);
  if (!out.requires_grad()) return;
  // The hook keeps the state alive, never the logger: after detach() it records nothing.
  out.register_hook([state, layer](const Tensor& g) {
    if (g.defined()) state->record(layer, "output.grad", TensorRole::Gradient, g);
    return Tensor();
  });
}

void TensorStatsLogger::watch(const std::string& layer, const std::string& tensor, const Tensor& activation) {
  if (!state_->due()) return;
  MT_CHECK(activation.defined(), "TensorStatsLogger::watch: '", layer, ".", tensor, "' is an undefined tensor");
  state_->record(layer, tensor, TensorRole::Activation, activation);
  if (!activation.requires_grad()) return;
  auto state = state_;
  activation.register_hook([state, layer, tensor](const Tensor& g) {
    if (g.defined()) state->record(layer, tensor + ".grad", TensorRole::Gradient, g);
    return Tensor();
  });
}

void TensorStatsLogger::record_parameters(const std::vector<std::pair<std::string, Tensor>>& named) {
  if (!state_->due()) return;
  for (const auto& [name, p] : named) {
    const size_t dot = name.rfind('.');
    const std::string layer = dot == std::string::npos ? "model" : name.substr(0, dot);
    const std::string tensor = dot == std::string::npos ? name : name.substr(dot + 1);
    state_->record(layer, tensor, TensorRole::Weight, p);
    if (p.grad().defined()) state_->record(layer, tensor + ".grad", TensorRole::Gradient, p.grad());
  }
}

void TensorStatsLogger::detach() {
  state_->active = false;
  params_ = nullptr;
}

void TensorStatsLogger::step() {
  if (params_) record_parameters(params_());
  ++state_->step;
}

const std::vector<TensorStatRow>& TensorStatsLogger::rows() const { return state_->rows; }

namespace {
std::string g9(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace

std::string TensorStatsLogger::csv() const {
  std::ostringstream os;
  os << "step,layer,tensor,role,dtype,numel,scale,amax,min_nonzero,binades,zeros,nonfinite";
  for (StatFormat f : kStatFormats) os << ',' << stat_format_name(f) << "_overflow," << stat_format_name(f) << "_flushed";
  os << '\n';
  for (const TensorStatRow& r : state_->rows) {
    const TensorStat& s = r.stat;
    os << r.step << ',' << r.layer << ',' << r.tensor << ',' << tensor_role_name(r.role) << ','
       << dtype_short(r.dtype) << ',' << s.numel << ',' << g9(s.scale) << ',' << g9(s.amax) << ','
       << g9(s.min_nonzero) << ',' << g9(s.binades()) << ',' << s.zeros << ',' << s.nonfinite;
    for (StatFormat f : kStatFormats) os << ',' << g9(s.overflow_frac(f)) << ',' << g9(s.flushed_frac(f));
    os << '\n';
  }
  return os.str();
}

namespace {
void write_text(const std::string& path, const std::string& text, const char* who) {
  std::ofstream out(path);
  out << text;
  out.close();
  MT_CHECK(static_cast<bool>(out), "TensorStatsLogger::", who, ": cannot write '", path, "'");
}
}  // namespace

void TensorStatsLogger::write_csv(const std::string& path) const { write_text(path, csv(), "write_csv"); }

std::string TensorStatsLogger::svg(StatFormat format, std::optional<TensorRole> role) const {
  // One series per tensor, in the order each first appeared.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const TensorStatRow*>> by_tensor;
  for (const TensorStatRow& r : state_->rows) {
    if (role && r.role != *role) continue;
    const std::string key = r.layer + "." + r.tensor;
    auto& v = by_tensor[key];
    if (v.empty()) order.push_back(key);
    v.push_back(&r);
  }
  const std::string fmt = stat_format_name(format);
  svg::Plot range{"amax (markers) and smallest nonzero (faint line), times the scale", {"step"},
                  {"|x| x scale", svg::Scale::Log2}};
  range.lines.push_back({stat_format_max(format), fmt + " largest finite", "#444444", false});
  range.lines.push_back({stat_format_denorm_min(format), fmt + " smallest subnormal", "#888888", false});
  svg::Plot over{"fraction that overflows in " + fmt, {"step"}, {"fraction of elements"}};
  svg::Plot flush{"fraction flushed to zero in " + fmt, {"step"}, {"fraction of elements"}};
  over.y.include_zero = flush.y.include_zero = true;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string color = svg::detail::kPalette[i % 8];
    svg::Series amax{order[i], {}, {}, svg::Style::LineMarkers, color};
    svg::Series least{"", {}, {}, svg::Style::Line, color};
    least.opacity = 0.5;
    svg::Series o{order[i], {}, {}, svg::Style::LineMarkers, color}, z{order[i], {}, {}, svg::Style::LineMarkers, color};
    for (const TensorStatRow* r : by_tensor[order[i]]) {
      const double x = static_cast<double>(r->step);
      amax.x.push_back(x);
      amax.y.push_back(r->stat.amax * r->stat.scale);
      least.x.push_back(x);
      least.y.push_back(r->stat.min_nonzero * r->stat.scale);
      o.x.push_back(x);
      o.y.push_back(r->stat.overflow_frac(format));
      z.x.push_back(x);
      z.y.push_back(r->stat.flushed_frac(format));
    }
    range.series.push_back(std::move(amax));
    range.series.push_back(std::move(least));
    over.series.push_back(std::move(o));
    flush.series.push_back(std::move(z));
  }
  const std::string what = role ? std::string(tensor_role_name(*role)) + "s" : "tensor";
  return svg::render(svg::Figure{"Statistics of " + what + " in " + fmt, {range, over, flush}});
}

void TensorStatsLogger::write_svg(const std::string& path, StatFormat format, std::optional<TensorRole> role) const {
  write_text(path, svg(format, role), "write_svg");
}

}  // namespace mixtape::amp
