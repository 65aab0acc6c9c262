// The components' side of the HGW structures on the CPU: from the
// components X [M, V, d] of M locations, the mixed structure
// C = (1 - beta) C_obs + beta K(X, X) (paper Eq. 18, 21), the row factor
// f1(C) p of the KL loss (Eq. 10) and, for training, the regulariser's
// off-diagonal KL of K against C_obs (Eq. reg) per location and the
// gradient of all three, one location at a time in a workspace of a few
// KiB. The torch path writes some twenty [M, V, V] intermediates and reads
// them back (twice in training, where they are recomputed for backward);
// this one writes C and the row factor once and keeps nothing but X.
//
// The specification is the torch composition in mmhgw/ops/hgw_structures.py
// (component_structures_reference): the same power-of-two scaling of the
// embeddings before their squared distances, the same distance floor and
// clamps; the squared distances summed from differences (exact at x = y). The
// exp and log of float problems are the routing kernel's polynomials
// (hgw_routing_kernel.h), within a few ulp of libm.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <cstring>
#include <vector>

#include "hgw_routing_kernel.h"

namespace {

// Observed structure of the components: co-activations of their presences
// (zipf_structure), the given one (observed='counts'), or none.
enum class Observed { kCoactivation, kGiven, kNone };

// y <- f(x) over n floats: eight at a time by fv (the routing kernel's
// vector polynomials; the scalar loops do not vectorise), the rest by fs.
template <typename FV, typename FS>
inline void map_v8(const float* x, int n, float* y, FV fv, FS fs) {
  int e = 0;
  for (; e + 8 <= n; e += 8) {
    mmhgw::v8f v;
    std::memcpy(&v, x + e, sizeof v);
    v = fv(v);
    std::memcpy(y + e, &v, sizeof v);
  }
  for (; e < n; ++e) y[e] = fs(x[e]);
}

// K <- 1 - exp(-max(sq, 0) / d), x <- log(max(x, tiny)) and
// x <- exp(-max(x, 0) / d) (the derivative's factor of the first) over n
// entries (mmhgw::bounded, mmhgw::safe_log); double by libm.
inline void bounded_n(const float* sq, int n, int d, float* K) {
  const float inv_d = 1.0f / d;
  map_v8(
      sq, n, K,
      [&](mmhgw::v8f v) {
        return 1.0f -
               mmhgw::vexp(-mmhgw::vmax(v, mmhgw::splat(0.0f)) * inv_d, -88.0f);
      },
      [&](float x) {
        float k;
        mmhgw::bounded(&x, 1, d, &k);
        return k;
      });
}
inline void bounded_n(const double* sq, int n, int d, double* K) {
  mmhgw::bounded(sq, n, d, K);
}
inline void safe_log_n(float* x, int n) {
  map_v8(
      x, n, x, [](mmhgw::v8f v) { return mmhgw::vlog(v); },
      [](float v) {
        mmhgw::safe_log(&v, 1);
        return v;
      });
}
inline void safe_log_n(double* x, int n) { mmhgw::safe_log(x, n); }
inline void neg_exp_n(float* x, int n, int d) {
  const float inv_d = 1.0f / d;
  map_v8(
      x, n, x,
      [&](mmhgw::v8f v) {
        return mmhgw::vexp(-mmhgw::vmax(v, mmhgw::splat(0.0f)) * inv_d, -88.0f);
      },
      [&](float v) { return std::exp(-std::max(v, 0.0f) * inv_d); });
}
inline void neg_exp_n(double* x, int n, int d) {
  for (int e = 0; e < n; ++e) x[e] = std::exp(-std::max(x[e], 0.0) / d);
}

// One location's components x [V][d]: XsT [d][V] <- x / a (a, the
// power-of-two scale, returned), s [V] <- the mean squares (clamped so that
// an overflowing square is fully present), pres [V] <- s / (1 + s)
// (mmhgw.ot.presence), sq [V][V] <- the squared distances.
template <typename scalar_t>
scalar_t location_distances(const scalar_t* x, int V, int d, scalar_t* XsT,
                            scalar_t* s, scalar_t* pres, scalar_t* sq) {
  const scalar_t big = std::numeric_limits<scalar_t>::max();
  scalar_t top = 0;
  for (int i = 0; i < V * d; ++i) top = std::max(top, std::abs(x[i]));
  const scalar_t a = mmhgw::power_of_two_scale(top);
  for (int i = 0; i < V; ++i) {
    scalar_t u = 0;
    for (int k = 0; k < d; ++k) {
      XsT[k * V + i] = x[i * d + k] / a;
      u += x[i * d + k] * x[i * d + k];
    }
    s[i] = std::min(u / d, big);
    pres[i] = s[i] / (1 + s[i]);
  }
  // Summed squared differences, not |x|^2 + |y|^2 - 2 x.y: no
  // cancellation, so the diagonal is exactly 0 (the expansion of the torch
  // path leaves its rounding there, more at larger |x|), and the matrix
  // exactly symmetric. Loops over j run along contiguous memory, without
  // reductions, so that they vectorise.
  for (int i = 0; i < V; ++i) {
    scalar_t* r = sq + i * V;
    for (int j = 0; j < V; ++j) r[j] = 0;
    for (int k = 0; k < d; ++k) {
      const scalar_t xi = XsT[k * V + i];
      const scalar_t* xk = XsT + k * V;
      for (int j = 0; j < V; ++j) {
        const scalar_t t = xi - xk[j];
        r[j] += t * t;
      }
    }
    for (int j = 0; j < V; ++j) r[j] = r[j] * a * a;
  }
  return a;
}

// The observed structure's entry (i, j): co-activation 1 / (1 + a_i a_j)
// (zipf_structure), the given one, or 1 (none: the regulariser's target).
template <typename scalar_t>
inline scalar_t observed_entry(Observed observed, const scalar_t* pres,
                               const scalar_t* o, int V, int i, int j) {
  if (observed == Observed::kCoactivation) return 1 / (1 + pres[i] * pres[j]);
  if (observed == Observed::kGiven) return o[i * V + j];
  return 1;
}

// sum_{i != j} K (log K - log C_obs) - K + C_obs over V (V - 1)
// (mmhgw.ot.kl_off_diagonal, C_obs the target) of one location's K [V][V],
// with lk, lt [V][V] as workspace.
template <typename scalar_t>
scalar_t kl_off_diagonal(const scalar_t* K, Observed observed,
                         const scalar_t* pres, const scalar_t* o, int V,
                         scalar_t* lk, scalar_t* lt) {
  scalar_t acc = 0;
  for (int i = 0; i < V; ++i)
    for (int j = 0; j < V; ++j) {
      lt[i * V + j] = observed_entry(observed, pres, o, V, i, j);
      if (i != j) acc += lt[i * V + j];
    }
  std::copy(K, K + V * V, lk);
  safe_log_n(lk, V * V);
  safe_log_n(lt, V * V);
  for (int i = 0; i < V; ++i)
    for (int j = 0; j < V; ++j) {
      const int e = i * V + j;
      if (i != j) acc += K[e] * (lk[e] - lt[e]) - K[e];
    }
  return V < 2 ? scalar_t(0) : acc / (V * (V - 1));  // no entry: 0
}

template <typename scalar_t>
void structures_range(const scalar_t* X, const scalar_t* obs, int64_t begin,
                      int64_t end, int V, int d, scalar_t beta, scalar_t floor,
                      Observed observed, scalar_t* C, scalar_t* row,
                      scalar_t* kl) {
  std::vector<scalar_t> work(V * d + 2 * V + 2 * V * V);
  scalar_t* XsT = work.data();   // the scaled components, [d][V]
  scalar_t* s = XsT + V * d;     // their mean squares [V]
  scalar_t* pres = s + V;        // their presences [V]
  scalar_t* buf = pres + V;      // [V][V]
  scalar_t* buf2 = buf + V * V;  // [V][V]
  const scalar_t inv_V = scalar_t(1) / V;
  for (int64_t m = begin; m < end; ++m) {
    const scalar_t* x = X + m * V * d;
    const scalar_t* o = obs ? obs + m * V * V : nullptr;
    scalar_t* c = C + m * V * V;
    // K(X, X) (mmhgw.ot.embedding_distance): squared distances into buf,
    // bounded into c.
    location_distances(x, V, d, XsT, s, pres, buf);
    bounded_n(buf, V * V, d, c);  // 1 - exp(-max(sq, 0) / d)
    for (int e = 0; e < V * V; ++e) c[e] = floor + (1 - floor) * c[e];
    if (kl) kl[m] = kl_off_diagonal(c, observed, pres, o, V, buf, buf2);
    // C = (1 - beta) C_obs + beta K (mmhgw.ot.structure); K alone without
    // observed structure.
    if (observed != Observed::kNone)
      for (int i = 0; i < V; ++i)
        for (int j = 0; j < V; ++j)
          c[i * V + j] =
              (1 - beta) * observed_entry(observed, pres, o, V, i, j) +
              beta * c[i * V + j];
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

// Gradient of structures_range's C, row and kl (upstream gC [M, V, V],
// grow [M, V], gkl [M] or null) with respect to X [M, V, d] (into gX) and
// beta (per location, into gbeta [M]); C_obs the co-activations or none.
// Per location, with Ct the upstream of C once the row factor's
// (log C / V per row) is added:
//   d/dbeta = <K - C_obs, Ct>,
//   dK = beta Ct + gkl (log K - log C_obs) / (V (V - 1)) off the diagonal,
//   dC_obs = (1 - beta) Ct (the regulariser's target is fixed),
//   dsq = dK (1 - floor) exp(-sq / d) / d, dX_i += 2 sum_j (dsq + dsq^T)_ij
//   (x_i - x_j), and through the presences a = s / (1 + s) of the mean
//   squares s: da_i = -sum_j (dC_obs + dC_obs^T)_ij a_j C_obs_ij^2,
//   dX_i += da_i / (1 + s_i)^2 2 x_i / d (none where s was clamped).
template <typename scalar_t>
void structures_backward_range(const scalar_t* gC, const scalar_t* grow,
                               const scalar_t* gkl, const scalar_t* X,
                               int64_t begin, int64_t end, int V, int d,
                               scalar_t beta, scalar_t floor, Observed observed,
                               scalar_t* gX, scalar_t* gbeta) {
  std::vector<scalar_t> work(V * d + 3 * V + 5 * V * V);
  scalar_t* XsT = work.data();
  scalar_t* s = XsT + V * d;
  scalar_t* pres = s + V;
  scalar_t* da = pres + V;
  scalar_t* sq = da + V;      // squared distances, then exp(-sq / d)
  scalar_t* K = sq + V * V;   // K, then its log
  scalar_t* Ob = K + V * V;   // C_obs, then its log
  scalar_t* Ct = Ob + V * V;  // upstream of C with the row factor's
  scalar_t* G = Ct + V * V;   // log C, then dsq, then dsq + dsq^T
  const scalar_t big = std::numeric_limits<scalar_t>::max();
  const scalar_t inv_V = scalar_t(1) / V;
  const bool mixed = observed == Observed::kCoactivation;
  const scalar_t* none = nullptr;  // no given observed structure
  for (int64_t m = begin; m < end; ++m) {
    const scalar_t* x = X + m * V * d;
    const scalar_t* gc = gC + m * V * V;
    const scalar_t a = location_distances(x, V, d, XsT, s, pres, sq);
    bounded_n(sq, V * V, d, K);
    neg_exp_n(sq, V * V, d);
    for (int e = 0; e < V * V; ++e) K[e] = floor + (1 - floor) * K[e];
    // C_obs, C, its log, and Ct.
    for (int i = 0; i < V; ++i)
      for (int j = 0; j < V; ++j)
        Ob[i * V + j] = observed_entry(observed, pres, none, V, i, j);
    for (int e = 0; e < V * V; ++e)
      G[e] = mixed ? (1 - beta) * Ob[e] + beta * K[e] : K[e];
    safe_log_n(G, V * V);
    for (int i = 0; i < V; ++i) {
      const scalar_t gr = grow[m * V + i] * inv_V;
      for (int j = 0; j < V; ++j)
        Ct[i * V + j] = gc[i * V + j] + gr * G[i * V + j];
    }
    scalar_t gb = 0;
    if (mixed) {
      for (int e = 0; e < V * V; ++e) gb += (K[e] - Ob[e]) * Ct[e];
      // Presences: dC_obs = (1 - beta) Ct, symmetric C_obs.
      for (int i = 0; i < V; ++i) {
        scalar_t acc = 0;
        for (int j = 0; j < V; ++j) {
          const scalar_t t = Ob[i * V + j];
          acc += (Ct[i * V + j] + Ct[j * V + i]) * pres[j] * t * t;
        }
        da[i] = -(1 - beta) * acc;
      }
    }
    gbeta[m] = gb;
    // dK into G (the regulariser's term needs log K and log C_obs).
    const scalar_t wk = mixed ? beta : scalar_t(1);
    for (int e = 0; e < V * V; ++e) G[e] = wk * Ct[e];
    const scalar_t g_kl = gkl && V > 1 ? gkl[m] / (V * (V - 1)) : scalar_t(0);
    if (g_kl != 0) {
      // log K - log C_obs off the diagonal.
      safe_log_n(K, V * V);
      safe_log_n(Ob, V * V);
      for (int i = 0; i < V; ++i)
        for (int j = 0; j < V; ++j)
          if (i != j) G[i * V + j] += g_kl * (K[i * V + j] - Ob[i * V + j]);
    }
    // dsq, symmetrised.
    const scalar_t ck = (1 - floor) / d;
    for (int e = 0; e < V * V; ++e) G[e] *= ck * sq[e];
    for (int i = 0; i < V; ++i)
      for (int j = i; j < V; ++j) {
        const scalar_t t = G[i * V + j] + G[j * V + i];
        G[i * V + j] = t;
        G[j * V + i] = t;
      }
    // dX_i = 2 a (x'_i sum_j G_ij - sum_j G_ij x'_j) (+ the presences').
    scalar_t* gx = gX + m * V * d;
    for (int i = 0; i < V; ++i) {
      const scalar_t* gi = G + i * V;
      scalar_t rs = 0;
      for (int j = 0; j < V; ++j) rs += gi[j];
      const scalar_t dp =
          mixed && s[i] < big ? da[i] / ((1 + s[i]) * (1 + s[i])) : 0;
      for (int k = 0; k < d; ++k) {
        const scalar_t* xk = XsT + k * V;
        scalar_t acc = 0;
        for (int j = 0; j < V; ++j) acc += gi[j] * xk[j];
        gx[i * d + k] = 2 * a * (xk[i] * rs - acc) + dp * 2 * x[i * d + k] / d;
      }
    }
  }
}

}  // namespace

namespace mmhgw {
namespace cpu {

namespace {

Observed check_inputs(const torch::Tensor& X, const torch::Tensor& beta,
                      const c10::optional<torch::Tensor>& obs,
                      bool use_observed) {
  TORCH_CHECK(X.device().is_cpu() && X.is_contiguous() && X.dim() == 3,
              "hgw_structures_cpu: X must be a contiguous CPU tensor "
              "[M, V, d]");
  TORCH_CHECK(beta.numel() == 1 && beta.device().is_cpu(),
              "hgw_structures_cpu: beta must be a one-element CPU tensor");
  if (!use_observed) return Observed::kNone;
  if (!obs.has_value()) return Observed::kCoactivation;
  const auto M = X.size(0), V = X.size(1);
  TORCH_CHECK(obs->is_contiguous() && obs->scalar_type() == X.scalar_type() &&
                  obs->dim() == 3 && obs->size(0) == M && obs->size(1) == V &&
                  obs->size(2) == V,
              "hgw_structures_cpu: obs must be a contiguous [M, V, V] "
              "tensor of X's dtype");
  return Observed::kGiven;
}

}  // namespace

std::vector<torch::Tensor> hgw_structures_forward(
    torch::Tensor X, torch::Tensor beta, c10::optional<torch::Tensor> obs,
    bool use_observed, double floor, bool want_kl) {
  const Observed observed = check_inputs(X, beta, obs, use_observed);
  const auto M = X.size(0), V = X.size(1), d = X.size(2);
  auto C = torch::empty({M, V, V}, X.options());
  auto row = torch::empty({M, V}, X.options());
  auto kl = torch::empty({want_kl ? M : 0}, X.options());
  AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "hgw_structures_forward", [&] {
    const scalar_t* x = X.data_ptr<scalar_t>();
    const scalar_t* o =
        observed == Observed::kGiven ? obs->data_ptr<scalar_t>() : nullptr;
    const scalar_t b = static_cast<scalar_t>(beta.item<double>());
    scalar_t* c = C.data_ptr<scalar_t>();
    scalar_t* r = row.data_ptr<scalar_t>();
    scalar_t* k = want_kl ? kl.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
      structures_range<scalar_t>(
          x, o, begin, end, static_cast<int>(V), static_cast<int>(d), b,
          static_cast<scalar_t>(floor), observed, c, r, k);
    });
  });
  return {C, row, kl};
}

std::vector<torch::Tensor> hgw_structures_backward(
    torch::Tensor grad_C, torch::Tensor grad_row,
    c10::optional<torch::Tensor> grad_kl, torch::Tensor X, torch::Tensor beta,
    bool use_observed, double floor) {
  const Observed observed = check_inputs(X, beta, c10::nullopt, use_observed);
  const auto M = X.size(0), V = X.size(1), d = X.size(2);
  TORCH_CHECK(grad_C.is_contiguous() &&
                  grad_C.sizes() == at::IntArrayRef({M, V, V}) &&
                  grad_row.is_contiguous() &&
                  grad_row.sizes() == at::IntArrayRef({M, V}) &&
                  grad_C.scalar_type() == X.scalar_type() &&
                  grad_row.scalar_type() == X.scalar_type(),
              "hgw_structures_cpu: grad_C [M, V, V] and grad_row [M, V] "
              "must be contiguous, of X's dtype");
  if (grad_kl.has_value())
    TORCH_CHECK(grad_kl->is_contiguous() &&
                    grad_kl->sizes() == at::IntArrayRef({M}) &&
                    grad_kl->scalar_type() == X.scalar_type(),
                "hgw_structures_cpu: grad_kl must be a contiguous [M] tensor "
                "of X's dtype");
  auto gX = torch::empty_like(X);
  auto gbeta = torch::empty({M}, X.options());
  AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "hgw_structures_backward", [&] {
    const scalar_t b = static_cast<scalar_t>(beta.item<double>());
    const scalar_t* gk =
        grad_kl.has_value() ? grad_kl->data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
      structures_backward_range<scalar_t>(
          grad_C.data_ptr<scalar_t>(), grad_row.data_ptr<scalar_t>(), gk,
          X.data_ptr<scalar_t>(), begin, end, static_cast<int>(V),
          static_cast<int>(d), b, static_cast<scalar_t>(floor), observed,
          gX.data_ptr<scalar_t>(), gbeta.data_ptr<scalar_t>());
    });
  });
  return {gX, gbeta.sum()};
}

}  // namespace cpu
}  // namespace mmhgw
