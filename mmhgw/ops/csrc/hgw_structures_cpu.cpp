// The components' side of the HGW structures on the CPU, for inference:
// from the components X [M, V, d] of M locations, the mixed structure
// C = (1 - beta) C_obs + beta K(X, X) (paper Eq. 18, 21) and the row factor
// f1(C) p of the KL loss (Eq. 10), one location at a time in a workspace of
// a few KiB. The torch path writes some twenty [M, V, V] intermediates and
// reads them back; this one writes C and the row factor once.
//
// The specification is the torch composition in mmhgw/ops/hgw_structures.py
// (component_structures_reference): the same power-of-two scaling of the
// embeddings before their squared distances, the same distance floor and
// clamps; the squared distances summed from differences (exact at x = y). The
// exp and log of float problems are the routing kernel's polynomials
// (hgw_routing_kernel.h), within a few ulp of libm. No gradient: callers that
// need one take the torch path.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <cstring>
#include <vector>

#include "hgw_routing_kernel.h"

namespace {

// Observed structure of the components: co-activations of their presences
// (zipf_structure), the given one (observed='counts'), or none.
enum class Observed { kCoactivation, kGiven, kNone };

// K <- 1 - exp(-max(sq, 0) / d) and x <- log(max(x, tiny)) over n
// entries (mmhgw::bounded, mmhgw::safe_log): for float eight at a time with
// the routing kernel's vector polynomials (the scalar loops do not
// vectorise), for double by libm.
inline void bounded_n(const float* sq, int n, int d, float* K) {
  using mmhgw::v8f;
  const float inv_d = 1.0f / d;
  int e = 0;
  for (; e + 8 <= n; e += 8) {
    v8f v;
    std::memcpy(&v, sq + e, sizeof v);
    v = 1.0f - mmhgw::vexp(-mmhgw::vmax(v, mmhgw::splat(0.0f)) * inv_d, -88.0f);
    std::memcpy(K + e, &v, sizeof v);
  }
  mmhgw::bounded(sq + e, n - e, d, K + e);
}
inline void bounded_n(const double* sq, int n, int d, double* K) {
  mmhgw::bounded(sq, n, d, K);
}
inline void safe_log_n(float* x, int n) {
  using mmhgw::v8f;
  int e = 0;
  for (; e + 8 <= n; e += 8) {
    v8f v;
    std::memcpy(&v, x + e, sizeof v);
    v = mmhgw::vlog(v);
    std::memcpy(x + e, &v, sizeof v);
  }
  mmhgw::safe_log(x + e, n - e);
}
inline void safe_log_n(double* x, int n) { mmhgw::safe_log(x, n); }

template <typename scalar_t>
void structures_range(const scalar_t* X, const scalar_t* obs, int64_t begin,
                      int64_t end, int V, int d, scalar_t beta, scalar_t floor,
                      Observed observed, scalar_t* C, scalar_t* row) {
  // Loops over j run along contiguous memory, without reductions, so that
  // they vectorise.
  std::vector<scalar_t> work(V * d + V + V * V);
  scalar_t* XsT = work.data();   // the scaled components, [d][V]
  scalar_t* pres = XsT + V * d;  // their presences [V]
  scalar_t* buf = pres + V;      // [V][V]
  const scalar_t big = std::numeric_limits<scalar_t>::max();
  const scalar_t inv_V = scalar_t(1) / V;
  for (int64_t m = begin; m < end; ++m) {
    const scalar_t* x = X + m * V * d;
    scalar_t* c = C + m * V * V;
    // K(X, X) on X / 2^k (mmhgw.ot.embedding_distance): squared distances
    // into buf, bounded into c.
    scalar_t top = 0;
    for (int i = 0; i < V * d; ++i) top = std::max(top, std::abs(x[i]));
    const scalar_t a = mmhgw::power_of_two_scale(top);
    for (int i = 0; i < V; ++i) {
      scalar_t u = 0;
      for (int k = 0; k < d; ++k) {
        XsT[k * V + i] = x[i * d + k] / a;
        u += x[i * d + k] * x[i * d + k];
      }
      // presence (mmhgw.ot.presence): s / (1 + s), s the mean square,
      // clamped so that an overflowing square is fully present.
      u = std::min(u / d, big);
      pres[i] = u / (1 + u);
    }
    // Summed squared differences, not |x|^2 + |y|^2 - 2 x.y: no
    // cancellation, so the diagonal is exactly 0 (the expansion of the
    // torch path leaves its rounding there, more at larger |x|), and
    // the matrix exactly symmetric.
    for (int i = 0; i < V; ++i) {
      scalar_t* sq = buf + i * V;
      for (int j = 0; j < V; ++j) sq[j] = 0;
      for (int k = 0; k < d; ++k) {
        const scalar_t xi = XsT[k * V + i];
        const scalar_t* xk = XsT + k * V;
        for (int j = 0; j < V; ++j) {
          const scalar_t t = xi - xk[j];
          sq[j] += t * t;
        }
      }
      for (int j = 0; j < V; ++j) sq[j] = sq[j] * a * a;
    }
    bounded_n(buf, V * V, d, c);  // 1 - exp(-max(sq, 0) / d)
    for (int e = 0; e < V * V; ++e) c[e] = floor + (1 - floor) * c[e];
    // C = (1 - beta) C_obs + beta K (mmhgw.ot.structure).
    if (observed == Observed::kCoactivation) {
      for (int i = 0; i < V; ++i)
        for (int j = 0; j < V; ++j)
          c[i * V + j] =
              (1 - beta) * (1 / (1 + pres[i] * pres[j])) + beta * c[i * V + j];
    } else if (observed == Observed::kGiven) {
      const scalar_t* o = obs + m * V * V;
      for (int e = 0; e < V * V; ++e) c[e] = (1 - beta) * o[e] + beta * c[e];
    }
    // Row factor of the KL loss: sum_j (C log C - C)_ij p_j, p = 1 / V.
    std::copy(c, c + V * V, buf);
    safe_log_n(buf, V * V);
    for (int e = 0; e < V * V; ++e) buf[e] = (c[e] * buf[e] - c[e]) * inv_V;
    for (int i = 0; i < V; ++i) {
      scalar_t s = 0;
      for (int j = 0; j < V; ++j) s += buf[i * V + j];
      row[m * V + i] = s;
    }
  }
}

}  // namespace

namespace mmhgw {
namespace cpu {

std::vector<torch::Tensor> hgw_structures_forward(
    torch::Tensor X, torch::Tensor beta, c10::optional<torch::Tensor> obs,
    bool use_observed, double floor) {
  TORCH_CHECK(X.device().is_cpu() && X.is_contiguous() && X.dim() == 3,
              "hgw_structures_cpu: X must be a contiguous CPU tensor "
              "[M, V, d]");
  TORCH_CHECK(beta.numel() == 1 && beta.device().is_cpu(),
              "hgw_structures_cpu: beta must be a one-element CPU tensor");
  const auto M = X.size(0), V = X.size(1), d = X.size(2);
  Observed observed = use_observed ? Observed::kCoactivation : Observed::kNone;
  if (use_observed && obs.has_value()) {
    TORCH_CHECK(obs->is_contiguous() && obs->scalar_type() == X.scalar_type() &&
                    obs->dim() == 3 && obs->size(0) == M && obs->size(1) == V &&
                    obs->size(2) == V,
                "hgw_structures_cpu: obs must be a contiguous [M, V, V] "
                "tensor of X's dtype");
    observed = Observed::kGiven;
  }
  auto C = torch::empty({M, V, V}, X.options());
  auto row = torch::empty({M, V}, X.options());
  AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "hgw_structures_forward", [&] {
    const scalar_t* x = X.data_ptr<scalar_t>();
    const scalar_t* o =
        observed == Observed::kGiven ? obs->data_ptr<scalar_t>() : nullptr;
    const scalar_t b = static_cast<scalar_t>(beta.item<double>());
    scalar_t* c = C.data_ptr<scalar_t>();
    scalar_t* r = row.data_ptr<scalar_t>();
    at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
      structures_range<scalar_t>(x, o, begin, end, static_cast<int>(V),
                                 static_cast<int>(d), b,
                                 static_cast<scalar_t>(floor), observed, c, r);
    });
  });
  return {C, row};
}

}  // namespace cpu
}  // namespace mmhgw
