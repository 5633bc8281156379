// The MoE layer (trainer/moe.h) against an independent float64
// implementation written here with plain loops (no LibTorch op): the same
// routing decisions (each token's experts, which assignments the capacity
// drops), output, load-balancing loss and gradients (central differences of
// the reference) — the module run in float64 to 1e-10, in float32 to 1e-5.
#include "trainer/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#if HOLDFAST_HAVE_GLOO
#include "trainer/gloo_ranks_test_util.h"
#endif

namespace holdfast {
namespace {

using Matrix = std::vector<std::vector<double>>;  // [rows][cols]

Matrix ToMatrix(const torch::Tensor& t) {
  const torch::Tensor d = t.detach().to(torch::kDouble).contiguous();
  Matrix m(static_cast<size_t>(d.size(0)), std::vector<double>(static_cast<size_t>(d.size(1))));
  for (size_t i = 0; i < m.size(); ++i) {
    for (size_t j = 0; j < m[i].size(); ++j) m[i][j] = d[static_cast<int64_t>(i)][static_cast<int64_t>(j)].item<double>();
  }
  return m;
}

std::vector<double> ToVector(const torch::Tensor& t) {
  const torch::Tensor d = t.detach().to(torch::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// y = W x + b for one row.
std::vector<double> Linear(const Matrix& w, const std::vector<double>& b, const std::vector<double>& x) {
  std::vector<double> y(w.size(), 0.0);
  for (size_t o = 0; o < w.size(); ++o) {
    double s = b.empty() ? 0.0 : b[o];
    for (size_t i = 0; i < x.size(); ++i) s += w[o][i] * x[i];
    y[o] = s;
  }
  return y;
}

struct Expert {
  Matrix fc_w, proj_w;
  std::vector<double> fc_b, proj_b;
  std::vector<double> Apply(const std::vector<double>& x) const {
    std::vector<double> h = Linear(fc_w, fc_b, x);
    for (double& v : h) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));  // exact GELU
    return Linear(proj_w, proj_b, h);
  }
};

// The layer's parameters, by the module's names.
struct Params {
  Matrix router;  // [E][C]
  std::vector<Expert> experts;
};

struct RefResult {
  std::vector<std::vector<int>> choice;  // [token][j]: expert of token's j-th choice
  std::vector<std::vector<bool>> kept;   // [token][j]
  Matrix y;                              // [token][C]
  double aux = 0;
};

// The routing and output as moe.h writes them down, in float64.
RefResult Reference(const Params& p, const Matrix& x, int k, double capacity_factor) {
  const size_t n = x.size(), experts = p.router.size();
  RefResult r;
  Matrix probs(n);
  for (size_t t = 0; t < n; ++t) {
    std::vector<double> logit = Linear(p.router, {}, x[t]);
    const double mx = *std::max_element(logit.begin(), logit.end());
    double z = 0;
    for (double& v : logit) z += (v = std::exp(v - mx));
    for (double& v : logit) v /= z;
    probs[t] = logit;
    std::vector<int> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[t][a] > probs[t][b]; });
    r.choice.emplace_back(order.begin(), order.begin() + k);
  }
  const auto capacity = static_cast<size_t>(std::ceil(capacity_factor * static_cast<double>(n * k) / experts));
  std::vector<size_t> filled(experts, 0), chosen(experts, 0);
  r.kept.assign(n, std::vector<bool>(static_cast<size_t>(k), false));
  r.y.assign(n, std::vector<double>(x[0].size(), 0.0));
  for (int j = 0; j < k; ++j) {  // choice-major: every first choice before any second
    for (size_t t = 0; t < n; ++t) {
      const int e = r.choice[t][static_cast<size_t>(j)];
      ++chosen[static_cast<size_t>(e)];
      if (filled[static_cast<size_t>(e)] >= capacity) continue;
      ++filled[static_cast<size_t>(e)];
      r.kept[t][static_cast<size_t>(j)] = true;
      const std::vector<double> out = p.experts[static_cast<size_t>(e)].Apply(x[t]);
      for (size_t c = 0; c < out.size(); ++c) r.y[t][c] += probs[t][static_cast<size_t>(e)] * out[c];
    }
  }
  for (size_t e = 0; e < experts; ++e) {
    double mean_p = 0;
    for (size_t t = 0; t < n; ++t) mean_p += probs[t][e];
    mean_p /= static_cast<double>(n);
    r.aux += static_cast<double>(chosen[e]) / static_cast<double>(n * k) * mean_p;
  }
  r.aux *= static_cast<double>(experts);
  return r;
}

Params ParamsOf(MoeMlpImpl& m, int experts) {
  Params p;
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& np : m.named_parameters()) by_name[np.key()] = np.value();
  p.router = ToMatrix(by_name.at("router.weight"));
  for (int e = 0; e < experts; ++e) {
    const std::string at = "experts." + std::to_string(e) + ".";
    Expert x;
    x.fc_w = ToMatrix(by_name.at(at + "c_fc.weight"));
    x.fc_b = ToVector(by_name.at(at + "c_fc.bias"));
    x.proj_w = ToMatrix(by_name.at(at + "c_proj.weight"));
    x.proj_b = ToVector(by_name.at(at + "c_proj.bias"));
    p.experts.push_back(x);
  }
  return p;
}

// The scalar both sides differentiate: sum(y * w) + aux.
double RefLoss(const Params& p, const Matrix& x, int k, double cf, const Matrix& w) {
  RefResult r = Reference(p, x, k, cf);
  double s = r.aux;
  for (size_t t = 0; t < x.size(); ++t) {
    for (size_t c = 0; c < x[t].size(); ++c) s += r.y[t][c] * w[t][c];
  }
  return s;
}

ModelConfig Small() {
  ModelConfig cfg;
  cfg.n_embd = 8;
  cfg.n_head = 2;
  cfg.block_size = 8;
  return cfg;
}

struct Case {
  int experts, top_k;
  double capacity_factor;
};

class MoeTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeTest, RoutingOutputAndLossAreTheFloat64Reference) {
  const Case c = GetParam();
  torch::manual_seed(7);
  auto made = MoeMlpImpl::Create(Small(), {c.experts, c.top_k, c.capacity_factor});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::shared_ptr<MoeMlpImpl> m = *made;
  const torch::Tensor x32 = torch::randn({2, 8, 8});
  // float32, as it trains.
  const torch::Tensor y32 = m->forward(x32);
  const MoeRouting routing32 = m->routing();
  const torch::Tensor aux32 = m->aux_loss();
  // float64: the same module and input in double.
  m->to(torch::kDouble);
  const torch::Tensor x = x32.to(torch::kDouble);
  const torch::Tensor y = m->forward(x);
  const Matrix xm = ToMatrix(x.reshape({-1, 8}));
  const RefResult ref = Reference(ParamsOf(*m, c.experts), xm, c.top_k, c.capacity_factor);

  // Routing: which experts, how many kept and dropped.
  std::vector<int64_t> assigned(static_cast<size_t>(c.experts), 0), kept(static_cast<size_t>(c.experts), 0);
  int64_t dropped = 0;
  for (size_t t = 0; t < ref.choice.size(); ++t) {
    for (size_t j = 0; j < ref.choice[t].size(); ++j) {
      const auto e = static_cast<size_t>(ref.choice[t][j]);
      ++assigned[e];
      if (ref.kept[t][j]) {
        ++kept[e];
      } else {
        ++dropped;
      }
    }
  }
  EXPECT_EQ(m->routing().assigned, assigned);
  EXPECT_EQ(m->routing().kept, kept);
  EXPECT_EQ(m->routing().dropped, dropped);
  EXPECT_EQ(routing32.kept, kept) << "float32 routes as float64 does on this input";
  if (c.capacity_factor < 1.0) {
    EXPECT_GT(dropped, 0) << "a tight capacity must drop assignments";
  }

  // Output and loss.
  const Matrix ym = ToMatrix(y.reshape({-1, 8}));
  const Matrix y32m = ToMatrix(y32.reshape({-1, 8}));
  double scale = 0, diff64 = 0, diff32 = 0;
  for (size_t t = 0; t < ym.size(); ++t) {
    for (size_t d = 0; d < ym[t].size(); ++d) {
      scale = std::max(scale, std::abs(ref.y[t][d]));
      diff64 = std::max(diff64, std::abs(ym[t][d] - ref.y[t][d]));
      diff32 = std::max(diff32, std::abs(y32m[t][d] - ref.y[t][d]));
    }
  }
  ASSERT_GT(scale, 0);
  EXPECT_LT(diff64 / scale, 1e-10);
  EXPECT_LT(diff32 / scale, 1e-5);
  EXPECT_NEAR(m->aux_loss().item<double>(), ref.aux, 1e-12);
  EXPECT_NEAR(aux32.item<double>(), ref.aux, 1e-5 * ref.aux);
}

// Backward: the module's gradients (float64) against central differences of
// the reference's sum(y * w) + aux, for the router, one expert's weights and
// the input. The routing must not flip within the step: eps is small.
TEST(MoeTest, GradientsAreTheReferencesFiniteDifferences) {
  torch::manual_seed(11);
  const int experts = 4, k = 2;
  const double cf = 0.75;  // some assignments dropped: their tokens get no gradient from that expert
  auto made = MoeMlpImpl::Create(Small(), {experts, k, cf});
  ASSERT_TRUE(made.ok());
  std::shared_ptr<MoeMlpImpl> m = *made;
  m->to(torch::kDouble);
  const torch::Tensor x = torch::randn({1, 8, 8}, torch::kDouble).requires_grad_(true);
  const torch::Tensor w = torch::randn({1, 8, 8}, torch::kDouble);
  ((m->forward(x) * w).sum() + m->aux_loss()).backward();
  ASSERT_GT(m->routing().dropped, 0);

  const Matrix wm = ToMatrix(w.reshape({-1, 8}));
  const Matrix xm = ToMatrix(x.detach().reshape({-1, 8}));
  const Params base = ParamsOf(*m, experts);
  const double eps = 1e-6;
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& np : m->named_parameters()) by_name[np.key()] = np.value();
  // d/d router[e][i] and d/d experts.1.c_fc.weight[o][i] for a few entries, d/d x.
  // An expert no token reached has no gradient: zeros.
  auto grad_of = [&](const std::string& name) {
    const torch::Tensor& p = by_name.at(name);
    return p.grad().defined() ? p.grad() : torch::zeros_like(p);
  };
  const torch::Tensor router_grad = grad_of("router.weight");
  const torch::Tensor fc_grad = grad_of("experts.1.c_fc.weight");
  for (int e = 0; e < experts; ++e) {
    for (int i = 0; i < 8; i += 3) {
      Params up = base, down = base;
      up.router[static_cast<size_t>(e)][static_cast<size_t>(i)] += eps;
      down.router[static_cast<size_t>(e)][static_cast<size_t>(i)] -= eps;
      const double fd = (RefLoss(up, xm, k, cf, wm) - RefLoss(down, xm, k, cf, wm)) / (2 * eps);
      EXPECT_NEAR(router_grad[e][i].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << "router " << e << "," << i;
    }
  }
  for (int o = 0; o < 32; o += 7) {
    for (int i = 0; i < 8; i += 5) {
      Params up = base, down = base;
      up.experts[1].fc_w[static_cast<size_t>(o)][static_cast<size_t>(i)] += eps;
      down.experts[1].fc_w[static_cast<size_t>(o)][static_cast<size_t>(i)] -= eps;
      const double fd = (RefLoss(up, xm, k, cf, wm) - RefLoss(down, xm, k, cf, wm)) / (2 * eps);
      EXPECT_NEAR(fc_grad[o][i].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << "fc " << o << "," << i;
    }
  }
  for (int t = 0; t < 8; t += 3) {
    for (int c = 0; c < 8; c += 3) {
      Matrix up = xm, down = xm;
      up[static_cast<size_t>(t)][static_cast<size_t>(c)] += eps;
      down[static_cast<size_t>(t)][static_cast<size_t>(c)] -= eps;
      const double fd = (RefLoss(base, up, k, cf, wm) - RefLoss(base, down, k, cf, wm)) / (2 * eps);
      EXPECT_NEAR(x.grad()[0][t][c].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << "x " << t << "," << c;
    }
  }
}

TEST(MoeTest, ImpossibleOptionsAreRefusedNamingTheKey) {
  ModelConfig cfg = Small();
  EXPECT_NE(MoeMlpImpl::Create(cfg, {0, 1, 1.0}).status().message().find("moe.experts"), std::string::npos);
  EXPECT_NE(MoeMlpImpl::Create(cfg, {4, 5, 1.0}).status().message().find("moe.top_k"), std::string::npos);
  EXPECT_NE(MoeMlpImpl::Create(cfg, {4, 0, 1.0}).status().message().find("moe.top_k"), std::string::npos);
  EXPECT_NE(MoeMlpImpl::Create(cfg, {4, 2, 0.0}).status().message().find("moe.capacity_factor"), std::string::npos);
  EXPECT_NE(MoeMlpImpl::Create(cfg, {4, 2, NAN}).status().message().find("moe.capacity_factor"), std::string::npos);
  cfg.dropout = 0.1;
  EXPECT_NE(MoeMlpImpl::Create(cfg, {4, 2, 1.25}).status().message().find("model.dropout"), std::string::npos);
}

#if HOLDFAST_HAVE_GLOO

double RelativeDiff(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// Expert parallel (EP ranks as threads, a Gloo group over loopback), float32:
// each rank routes its own 16 tokens; its output, input gradient, router
// gradient, auxiliary loss and routing are one process's routing the same
// tokens with every expert (within 1e-5), and the gradient of each expert it
// holds is the sum over every rank's tokens of one process's gradients. The
// loss differentiated is sum(y * w) + aux on each rank.
class MoeExpertParallelTest : public ::testing::TestWithParam<std::tuple<int, Case>> {};

TEST_P(MoeExpertParallelTest, EachRankIsOneProcessRoutingItsTokens) {
  const auto [ep_size, c] = GetParam();
  torch::set_num_threads(1);
  torch::manual_seed(21);
  ModelConfig cfg = Small();
  cfg.n_embd = 16;
  const MoeOptions options{c.experts, c.top_k, c.capacity_factor};
  auto full = MoeMlpImpl::Create(cfg, options);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  struct Want {
    torch::Tensor x, w, y, x_grad, router_grad;
    double aux = 0;
    std::vector<int64_t> kept;
  };
  std::vector<Want> want(static_cast<size_t>(ep_size));
  std::map<std::string, torch::Tensor> expert_grads;  // summed over the ranks' tokens
  int64_t dropped = 0;
  for (Want& r : want) {
    r.x = torch::randn({2, 8, cfg.n_embd});
    r.w = torch::randn({2, 8, cfg.n_embd});
    for (auto& p : (*full)->parameters()) p.mutable_grad() = torch::Tensor();
    auto x = r.x.clone().requires_grad_(true);
    r.y = (*full)->forward(x);
    ((r.y * r.w).sum() + (*full)->aux_loss()).backward();
    r.y = r.y.detach();
    r.x_grad = x.grad().clone();
    r.aux = (*full)->aux_loss().item<double>();
    r.kept = (*full)->routing().kept;
    dropped += (*full)->routing().dropped;
    for (const auto& p : (*full)->named_parameters()) {
      if (p.key() == "router.weight") {
        r.router_grad = p.value().grad().clone();
      } else if (p.value().grad().defined()) {
        auto& sum = expert_grads[p.key()];
        sum = sum.defined() ? sum + p.value().grad() : p.value().grad().clone();
      }
    }
  }
  if (c.capacity_factor < 1) {
    EXPECT_GT(dropped, 0) << "this case is meant to drop assignments";
  }

  // Twice: holding only its own experts, and holding every expert (as
  // holdfast-train does), computing its own.
  RunGlooRanks(ep_size, [&, ep_size = ep_size, c = c](int r, Communicator& ep) {
    for (bool hold_every : {false, true}) {
      SCOPED_TRACE(hold_every ? "holding every expert" : "holding its own experts");
      auto layer = MoeMlpImpl::Create(cfg, options, ComputeOptions{}, &ep, hold_every);
      ASSERT_TRUE(layer.ok()) << layer.status().ToString();
      ASSERT_TRUE((*layer)->LoadFromFull(**full).ok());
      const int local = c.experts / ep_size;
      EXPECT_EQ((*layer)->local_experts(), local);
      EXPECT_EQ((*layer)->first_expert(), r * local);
      const Want& ref = want[static_cast<size_t>(r)];
      auto x = ref.x.clone().requires_grad_(true);
      auto y = (*layer)->forward(x);
      ((y * ref.w).sum() + (*layer)->aux_loss()).backward();
      EXPECT_LT(RelativeDiff(y, ref.y), 1e-5) << "output, ep rank " << r;
      EXPECT_LT(RelativeDiff(x.grad(), ref.x_grad), 1e-5) << "input gradient, ep rank " << r;
      EXPECT_NEAR((*layer)->aux_loss().item<double>(), ref.aux, 1e-6 * std::fabs(ref.aux)) << "ep rank " << r;
      EXPECT_EQ((*layer)->routing().kept, ref.kept) << "ep rank " << r;
      size_t experts_checked = 0, held = 0;
      for (const auto& p : (*layer)->named_parameters()) {
        if (p.key() == "router.weight") {
          ASSERT_TRUE(p.value().grad().defined());
          EXPECT_LT(RelativeDiff(p.value().grad(), ref.router_grad), 1e-5) << "router, ep rank " << r;
          continue;
        }
        ++held;
        const int e = std::stoi(p.key().substr(std::string("experts.").size()));
        const bool mine = e >= r * local && e < (r + 1) * local;
        if (!mine) {
          EXPECT_TRUE(hold_every) << p.key() << " held on ep rank " << r;
          EXPECT_FALSE(p.value().grad().defined()) << p.key() << " is not computed on ep rank " << r;
          continue;
        }
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        auto sum = expert_grads.find(p.key());
        if (sum == expert_grads.end()) {
          EXPECT_EQ(p.value().grad().abs().max().item<double>(), 0.0) << p.key() << ": no token chose it";
        } else {
          EXPECT_LT(RelativeDiff(p.value().grad(), sum->second), 1e-5) << p.key() << ", ep rank " << r;
        }
        ++experts_checked;
      }
      EXPECT_EQ(experts_checked, static_cast<size_t>(local) * 4) << "c_fc and c_proj, weight and bias, per expert";
      EXPECT_EQ(held, static_cast<size_t>(hold_every ? c.experts : local) * 4);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, MoeExpertParallelTest,
                         ::testing::Values(std::make_tuple(2, Case{4, 2, 1.25}), std::make_tuple(2, Case{4, 1, 0.5}),
                                           std::make_tuple(4, Case{8, 2, 1.25}), std::make_tuple(4, Case{4, 2, 0.75})));

// A rank whose experts no token chooses (the router sends every token to
// experts 0 and 1, held by ep rank 0) still runs both exchanges in backward:
// without that its peer waits for it until the timeout. Outputs and input
// gradients are one process's.
TEST(MoeExpertParallelSkewTest, ARankWhoseExpertsGetNoTokenKeepsInStep) {
  torch::set_num_threads(1);
  torch::manual_seed(4);
  ModelConfig cfg = Small();
  cfg.n_embd = 16;
  const MoeOptions options{4, 1, 2.0};
  auto full = MoeMlpImpl::Create(cfg, options);
  ASSERT_TRUE(full.ok());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : (*full)->named_parameters()) {
      if (p.key() != "router.weight") continue;
      p.value().zero_();
      p.value()[0][0] = 1.0;  // x[0] is around +5: experts 0 and 1 win, 2 and 3 lose
      p.value()[1][0] = 1.0;
      p.value()[1][1] = 0.5;
      p.value()[2][0] = -1.0;
      p.value()[3][0] = -1.0;
    }
  }
  std::vector<torch::Tensor> xs, ys, grads;
  for (int r = 0; r < 2; ++r) {
    auto x = torch::randn({2, 8, cfg.n_embd});
    x.select(2, 0).add_(5.0);
    xs.push_back(x);
    auto xr = x.clone().requires_grad_(true);
    auto y = (*full)->forward(xr);
    EXPECT_EQ((*full)->routing().kept[2] + (*full)->routing().kept[3], 0) << "experts 2 and 3 get no token";
    y.sum().backward();
    ys.push_back(y.detach());
    grads.push_back(xr.grad().clone());
  }
  RunGlooRanks(2, [&](int r, Communicator& ep) {
    auto layer = MoeMlpImpl::Create(cfg, options, ComputeOptions{}, &ep);
    ASSERT_TRUE(layer.ok());
    ASSERT_TRUE((*layer)->LoadFromFull(**full).ok());
    for (int step = 0; step < 2; ++step) {  // twice: the exchanges stay paired
      auto x = xs[static_cast<size_t>(r)].clone().requires_grad_(true);
      auto y = (*layer)->forward(x);
      y.sum().backward();
      EXPECT_LT(RelativeDiff(y, ys[static_cast<size_t>(r)]), 1e-5) << "ep rank " << r;
      EXPECT_LT(RelativeDiff(x.grad(), grads[static_cast<size_t>(r)]), 1e-5) << "ep rank " << r;
    }
  });
}

TEST(MoeExpertParallelRefusalTest, ExpertsThatDoNotSpreadAreRefused) {
  RunGlooRanks(2, [](int, Communicator& ep) {
    auto layer = MoeMlpImpl::Create(Small(), {3, 1, 1.0}, ComputeOptions{}, &ep);
    ASSERT_FALSE(layer.ok());
    EXPECT_NE(layer.status().message().find("moe.experts = 3 does not spread over 2 expert-parallel ranks"),
              std::string::npos)
        << layer.status().message();
  });
}

#endif  // HOLDFAST_HAVE_GLOO

INSTANTIATE_TEST_SUITE_P(Layouts, MoeTest,
                         ::testing::Values(Case{4, 1, 1.25}, Case{4, 2, 1.25}, Case{4, 2, 0.5}, Case{3, 3, 1.0},
                                           Case{8, 2, 2.0}));

}  // namespace
}  // namespace holdfast
