// Fused HGW routing on the CPU, per location: the cross cost, the
// proximal-point solve of paper Eq. 25 / 25a, the value of Eq. 21, the
// barycentric parts, and the envelope gradient of both. Every plan-sized
// array lives in a per-thread workspace of a few KiB: nothing of size
// locations x types x V_p x V_q is written.
//
// The specification is the torch reference in mmhgw/ops/hgw_routing.py
// (hgw_routing_reference): same iterates, floors and rounding, the same
// power-of-two scaling of the embeddings in the cross cost (no overflow for
// large embeddings), and a NaN plan for a problem with a non-finite input
// (nothing of it is solved). This header has no torch dependency (the
// bindings are in hgw_routing_cpu.cpp).
// Layout: a problem is row-major [V_p][V_q]; its transpose [V_q][V_p] is
// kept where sums along the other axis are needed, so that every inner
// loop runs along contiguous memory and vectorises.
#pragma once

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace mmhgw {

struct Options {
  int Vp, Vq, N, d;
  double beta, eps;
  int outer, inner;
  bool proximal, uniform;
  // False only to study convergence: the plan before rounding.
  bool round_plan = true;
};

// ---------------------------------------------------------------- numerics
// Vectorisable exp and log for float: called over contiguous arrays, these
// loops become SIMD code (libm calls would not). Both are within ~2 ulp of
// libm over the ranges used here. Double precision (tests, oracles) calls
// libm.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
// Adding and subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to
// the nearest integer without a libm call.
constexpr float kRoundMagic = 12582912.0f;

// The polynomials below serve float and the SIMD vectors alike (V float,
// v8f or v16f; I the integers of the same width), so each has one home.
template <typename I, typename V>
inline I to_int(V x) {
  if constexpr (std::is_same_v<V, float>)
    return static_cast<I>(x);
  else
    return __builtin_convertvector(x, I);
}
template <typename V, typename I>
inline V to_float(I x) {
  if constexpr (std::is_same_v<V, float>)
    return static_cast<V>(x);
  else
    return __builtin_convertvector(x, V);
}

// exp(x) = 2^n exp(r) with r = x - n ln 2 for the integer n nearest to
// x log2 e: r in two parts (Cody-Waite), exp(r) by the degree-6 polynomial
// of Cephes expf (|r| <= ln 2 / 2).
template <typename V>
inline V exp_reduced(V x, V n) {
  V r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

// exp(x) for x already in [lo, 88]: exp(r) times 2^n built in the exponent
// bits.
template <typename V, typename I>
inline V exp_clamped(V x) {
  const V n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  const I e = (to_int<I>(n) + 127) << 23;
  return exp_reduced(x, n) * __builtin_bit_cast(V, e);
}

// log(x) for normal x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// log x = e ln 2 + log m, log m by the Cephes logf polynomial.
template <typename V, typename I>
inline V log_normal(V x) {
  const I b = __builtin_bit_cast(I, x);
  I e = ((b >> 23) & 0xff) - 127;
  V m = __builtin_bit_cast(V, I((b & 0x007fffff) | 0x3f800000));  // [1, 2)
  const auto big = m > 1.41421356237f;
  m = big ? m * 0.5f : m;
  e = big ? e + 1 : e;
  const V f = m - 1.0f, z = f * f;
  V y = V{} + 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  const V fe = to_float<V>(e);
  y = y + fe * kLn2Lo - 0.5f * z;
  return f + y + fe * kLn2Hi;
}

// exp(x), x clamped to [lo, 88] (a NaN stays NaN).
inline float exp_poly(float x, float lo) {
  return exp_clamped<float, int32_t>(x < lo ? lo : (x > 88.0f ? 88.0f : x));
}
// log(x) for normal x > 0.
inline float log_poly(float x) { return log_normal<float, int32_t>(x); }

template <typename scalar_t>
inline scalar_t tiny() {
  return std::numeric_limits<scalar_t>::min();
}
// mmhgw.ot.exp_floor: log(tiny) / 2, so that products of two floored
// entries are still normal numbers (subnormals are ~10x slower on x86).
template <typename scalar_t>
inline scalar_t exp_floor() {
  return scalar_t(0.5) * std::log(tiny<scalar_t>());
}

// x <- exp(max(x, lo)) (mmhgw.ot.floored_exp).
inline void floored_exp(float* __restrict__ x, int n, float lo) {
  for (int i = 0; i < n; ++i) x[i] = exp_poly(x[i], lo);
}
inline void floored_exp(double* __restrict__ x, int n, double lo) {
  for (int i = 0; i < n; ++i) x[i] = std::exp(x[i] < lo ? lo : x[i]);
}
// x <- log(max(x, tiny)) (mmhgw.ot.safe_log).
inline void safe_log(float* __restrict__ x, int n) {
  const float t = tiny<float>();
  for (int i = 0; i < n; ++i) x[i] = log_poly(x[i] < t ? t : x[i]);
}
inline void safe_log(double* __restrict__ x, int n) {
  const double t = tiny<double>();
  for (int i = 0; i < n; ++i) x[i] = std::log(x[i] < t ? t : x[i]);
}
// K <- 1 - exp(-max(sq, 0) / d) (mmhgw.ot.bound_distance, floor 0).
inline void bounded(const float* __restrict__ sq, int n, int d,
                    float* __restrict__ K) {
  const float inv_d = 1.0f / d;
  for (int i = 0; i < n; ++i)
    K[i] = 1.0f - exp_poly(-(sq[i] > 0 ? sq[i] : 0.0f) * inv_d, -88.0f);
}
inline void bounded(const double* __restrict__ sq, int n, int d,
                    double* __restrict__ K) {
  for (int i = 0; i < n; ++i) K[i] = -std::expm1(-std::max(sq[i], 0.0) / d);
}

// The largest power of two not above top = max |x| of a set of embeddings,
// and 1 below 2 (mmhgw.ot.power_of_two_scale): dividing by it is exact.
template <typename scalar_t>
inline scalar_t power_of_two_scale(scalar_t top) {
  if (!(top >= 2) || !std::isfinite(top)) return 1;
  int e;
  std::frexp(top, &e);  // top = f 2^e, f in [1/2, 1)
  return std::ldexp(scalar_t(1), e - 1);
}

// Scales of one problem: c = max(a, b) of the location's (a) and the type's
// (b) power-of-two scales, ra = a / c, rb = b / c
// (mmhgw.ot.scaled_squared_distance).
template <typename scalar_t>
struct Scaling {
  scalar_t c = 1, ra = 1, rb = 1;
  Scaling() = default;
  Scaling(scalar_t a, scalar_t b)
      : c(a > b ? a : b), ra(a / (a > b ? a : b)), rb(b / (a > b ? a : b)) {}
};

template <typename scalar_t>
inline bool all_finite(const scalar_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

template <typename scalar_t>
inline void transpose(const scalar_t* __restrict__ in, int rows, int cols,
                      scalar_t* __restrict__ out) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) out[j * rows + i] = in[i * cols + j];
}

// out[c] = sum_r w[r] x[r cols + c] over the rows of a row-major rows x cols
// matrix (w = nullptr: weight 1), the inner loop along a row so that it
// vectorises. Rows are summed in order: the sums equal the loops they
// replace to the bit.
template <typename scalar_t>
inline void column_sums(const scalar_t* __restrict__ x, int rows, int cols,
                        scalar_t* __restrict__ out,
                        const scalar_t* __restrict__ w = nullptr) {
  for (int c = 0; c < cols; ++c) out[c] = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      out[c] += w ? w[r] * x[r * cols + c] : x[r * cols + c];
}

// One log-domain Sinkhorn half step along the rows of the row-major
// rows x cols log-kernel x: out[c] = log_m - LSE_r(x[r cols + c] + a[r])
// (mmhgw.ot.sinkhorn_log), with the maximum over r taken out before the
// floored exp. The row update f takes x = logk^T and a = g, the column
// update g takes x = logk and a = f. buf (rows x cols) and mx (cols) are
// scratch.
template <typename scalar_t>
inline void log_marginal_step(const scalar_t* __restrict__ x, int rows,
                              int cols, const scalar_t* __restrict__ a,
                              scalar_t log_m, scalar_t lo,
                              scalar_t* __restrict__ buf,
                              scalar_t* __restrict__ mx,
                              scalar_t* __restrict__ out) {
  const scalar_t ninf = -std::numeric_limits<scalar_t>::infinity();
  for (int c = 0; c < cols; ++c) mx[c] = ninf;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const scalar_t v = x[r * cols + c] + a[r];
      buf[r * cols + c] = v;
      mx[c] = v > mx[c] ? v : mx[c];
    }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) buf[r * cols + c] -= mx[c];
  floored_exp(buf, rows * cols, lo);
  column_sums(buf, rows, cols, out);
  safe_log(out, cols);
  for (int c = 0; c < cols; ++c) out[c] = log_m - (out[c] + mx[c]);
}

// ------------------------------------------- SIMD path: V_q = 8, float
// GCC/Clang vector extensions (AVX2 or AVX-512 code; two AVX-512
// intrinsics in vexp). The cross cost, the solve and the backward hold one
// problem per lane (cross_cost_lanes, solve_plans_lanes, backward_lanes):
// the output types of a location share h1 and the row marginal, so W of
// them are solved in lockstep and every reduction along a row or a column
// is lane-wise, with no shuffle; only the backward's sums over the types
// (the location's gradients) cross the lanes, through a shuffle tree.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

template <typename V>
struct Lanes;
template <>
struct Lanes<v8f> {
  using I = v8i;
  static constexpr int W = 8;
  static constexpr I iota = {0, 1, 2, 3, 4, 5, 6, 7};
};
template <>
struct Lanes<v16f> {
  using I = v16i;
  static constexpr int W = 16;
  static constexpr I iota = {0, 1, 2,  3,  4,  5,  6,  7,
                             8, 9, 10, 11, 12, 13, 14, 15};
};

template <typename V = v8f>
inline V splat(float x) {
  return V{} + x;
}
// a > b ? a : b (kMax) or a < b ? a : b lane by lane, NaN and signed zeros
// included: the definition of vmaxps / vminps (b where the comparison is
// false), which compilers do not derive from the select (a compare and a
// blend, two instructions where one does).
template <bool kMax, typename V>
inline V select_extreme(V a, V b) {
#ifdef __AVX512F__
  if constexpr (Lanes<V>::W == 16) {
    const __m512 x = __builtin_bit_cast(__m512, a);
    const __m512 y = __builtin_bit_cast(__m512, b);
    return __builtin_bit_cast(V,
                              kMax ? _mm512_max_ps(x, y) : _mm512_min_ps(x, y));
  }
#endif
#ifdef __AVX__
  if constexpr (Lanes<V>::W == 8) {
    const __m256 x = __builtin_bit_cast(__m256, a);
    const __m256 y = __builtin_bit_cast(__m256, b);
    return __builtin_bit_cast(V,
                              kMax ? _mm256_max_ps(x, y) : _mm256_min_ps(x, y));
  }
#endif
  if constexpr (kMax)
    return a > b ? a : b;
  else
    return a < b ? a : b;
}
template <typename V>
inline V vmax(V a, V b) {
  return select_extreme<true>(a, b);
}
template <typename V>
inline V vmin(V a, V b) {
  return select_extreme<false>(a, b);
}

template <typename V>
inline V vexp(V x, float lo) {
  x = vmin(vmax(x, splat<V>(lo)), splat<V>(88.0f));
#ifdef __AVX512F__
  // The same numbers in fewer instructions: n rounded by vrndscaleps
  // (nearest, ties to even, as the magic constant rounds), 2^n applied by
  // vscalefps (exact, as the exponent bits are). The zero-masking forms
  // with every lane set: the unmasked ones read an undefined register.
  if constexpr (Lanes<V>::W == 16) {
    const __m512 n = _mm512_maskz_roundscale_ps(
        0xffff, __builtin_bit_cast(__m512, x * kLog2e),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const V p = exp_reduced(x, __builtin_bit_cast(V, n));
    return __builtin_bit_cast(
        V, _mm512_maskz_scalef_ps(0xffff, __builtin_bit_cast(__m512, p), n));
  }
#endif
  return exp_clamped<V, typename Lanes<V>::I>(x);
}

// log(max(x, tiny)) (see log_normal).
template <typename V>
inline V vlog(V x) {
  return log_normal<V, typename Lanes<V>::I>(vmax(x, splat<V>(tiny<float>())));
}

// Reduces each of the rows r[0..7] along the lanes of each half: lane k of
// a half of the result is op over that half of r[k]. Level s pairs lanes s
// apart: lane t of a half takes r[2k]'s lane t & ~s where t & s is clear,
// r[2k + 1]'s otherwise (index W + ... of the two-vector shuffle).
template <typename V, typename Op>
inline V reduce_rows(const V* r, Op op) {
  using I = typename Lanes<V>::I;
  constexpr I iota = Lanes<V>::iota;
  constexpr int W = Lanes<V>::W;
  auto lo = [&](int s) -> I {
    const I t = iota & 7;
    return (((t & s) != 0) & W) + (iota & ~7) + (t & ~s);
  };
  V a[4], b[2];
  const I lo1 = lo(1), lo2 = lo(2), lo4 = lo(4);
  for (int k = 0; k < 4; ++k)
    a[k] = op(__builtin_shuffle(r[2 * k], r[2 * k + 1], lo1),
              __builtin_shuffle(r[2 * k], r[2 * k + 1], lo1 + 1));
  for (int k = 0; k < 2; ++k)
    b[k] = op(__builtin_shuffle(a[2 * k], a[2 * k + 1], lo2),
              __builtin_shuffle(a[2 * k], a[2 * k + 1], lo2 + 2));
  return op(__builtin_shuffle(b[0], b[1], lo4),
            __builtin_shuffle(b[0], b[1], lo4 + 4));
}
// Whether every lane of a comparison's mask is set.
template <typename M>
inline bool all_lanes(M mask) {
  for (int k = 0; k < static_cast<int>(sizeof(M) / sizeof(mask[0])); ++k)
    if (!mask[k]) return false;
  return true;
}
// The smallest column sum of exp(logk + f + g_old), relative to p, from
// which the column update is formed in the kernel domain: the floored
// entries (exp_floor relative to their row's largest) then weigh at most
// exp_floor / kSafeColumn ~ 1e-13 of q in any entry of M.
constexpr float kSafeColumn = 0x1p-20f;

template <typename V>
inline V add_op(V a, V b) {
  return a + b;
}

// Transposes the W x W block r[0..W-1] (row k in r[k]) in place: one stage
// per bit H of the index, each swapping bit H of the row with bit H of the
// lane through two-vector shuffles of rows H apart (unrolled, so that every
// shuffle pattern is a constant).
template <typename V, int H>
inline void transpose_stage(V* r) {
  using I = typename Lanes<V>::I;
  constexpr int W = Lanes<V>::W;
  constexpr I iota = Lanes<V>::iota;
  constexpr I low = iota + (((iota & H) != 0) & (W - H)), high = low + H;
#pragma GCC unroll 16
  for (int i = 0; i < W; ++i)
    if (!(i & H)) {
      const V a = r[i], b = r[i + H];
      r[i] = __builtin_shuffle(a, b, low);
      r[i + H] = __builtin_shuffle(a, b, high);
    }
}
template <typename V>
inline void transpose_block(V* r) {
  transpose_stage<V, 1>(r);
  transpose_stage<V, 2>(r);
  transpose_stage<V, 4>(r);
  if constexpr (Lanes<V>::W == 16) transpose_stage<V, 8>(r);
}

// Lane layout from W arrays src[s] of n floats (n a multiple of W): out[e]
// holds entry e of every src[s] in lane s.
template <typename V>
inline void to_lanes(const float* const* src, int n, V* out) {
  constexpr int W = Lanes<V>::W;
  for (int e = 0; e < n; e += W) {
    for (int s = 0; s < W; ++s) std::memcpy(&out[e + s], src[s] + e, sizeof(V));
    transpose_block(out + e);
  }
}

// The inverse of to_lanes for the first count lanes, into dst[s].
template <typename V>
inline void from_lanes(const V* in, int n, int count, float* const* dst) {
  constexpr int W = Lanes<V>::W;
  V block[W];
  for (int e = 0; e < n; e += W) {
    std::memcpy(block, in + e, sizeof(block));
    transpose_block(block);
    for (int s = 0; s < count; ++s)
      std::memcpy(dst[s] + e, &block[s], sizeof(V));
  }
}

// out = h1 X for the plans X [VP * 8] of the lanes: h1 [VP, VP] is the
// location's (one number, broadcast), X the lanes' own. Blocks of 4 rows by
// 4 columns of the result, accumulated over k in registers.
template <typename V, int VP>
inline void h1_times(const float* __restrict__ h1, const V* X, V* out) {
  static_assert(VP % 4 == 0, "VP must be a multiple of 4");
  for (int i = 0; i < VP; i += 4)
    for (int l = 0; l < 8; l += 4) {
      V acc[4][4];
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) acc[r][c] = splat<V>(0.0f);
      for (int k = 0; k < VP; ++k) {
        V x[4];
        for (int c = 0; c < 4; ++c) x[c] = X[8 * k + l + c];
        for (int r = 0; r < 4; ++r) {
          const float h = h1[(i + r) * VP + k];
          for (int c = 0; c < 4; ++c) acc[r][c] += h * x[c];
        }
      }
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) out[8 * (i + r) + l + c] = acc[r][c];
    }
}

// out [8] = the column sums of X [VP * 8], lane by lane.
template <typename V, int VP>
inline void lane_column_sums(const V* X, V* out) {
  for (int j = 0; j < 8; ++j) out[j] = splat<V>(0.0f);
  for (int i = 0; i < VP; ++i)
    for (int j = 0; j < 8; ++j) out[j] += X[8 * i + j];
}

// Entry j of a row of A h2^T from that row a [8] of A (H2T[l][j] is h2^T's
// entry of each lane).
template <typename V>
inline V times_h2t_entry(const V* a, const V (*H2T)[8], int j) {
  V acc = splat<V>(0.0f);
  for (int l = 0; l < 8; ++l) acc += a[l] * H2T[l][j];
  return acc;
}

// The plans of W problems of one location (V_p = VP rows, V_q = 8), one
// problem per lane: entry e = 8 i + j of every problem's plan is one
// vector, so that every sum and maximum along a row or a column is a
// lane-wise add or max, with no shuffle. The same iterates as
// Solver::solve_plan. h1 [VP, VP], h1T0 [VP] (the location's h1 T_0, one
// number per row: T_0 is constant) and row [VP] are the location's;
// col [8], H2T [8][8] (h2^T) and K [VP * 8] (the bounded cross cost) the
// lanes'. Out: the plans T [VP * 8], h1 T at them A [VP * 8] and their
// values (Eq. 21).
// log T of a step is kept as its parts LK + f + g (LK is the step's log
// kernel, f and g the potentials): the next step's log kernel replaces LK
// in place.
template <typename V, int VP>
void solve_plans_lanes(const float* __restrict__ h1,
                       const float* __restrict__ h1T0,
                       const float* __restrict__ row, const V* col,
                       const V (*H2T)[8], const V* K, const Options& o, V* T,
                       V* A, V& value) {
  constexpr int P = VP * 8;
  const float p = 1.0f / VP, q = 1.0f / 8;
  const float log_p = std::log(p), log_q = std::log(q);
  const float lo = exp_floor<float>(), tn = tiny<float>();
  const float beta = static_cast<float>(o.beta);
  // M, the step's kernel, is kept in T: T is read only at the step's
  // start (h1 T).
  V LK[P];
  V* const M = T;
  V f[VP], u[VP], g[8], v[8];
  const V T0 = splat<V>(std::exp(log_p + log_q));
  for (int e = 0; e < P; ++e) T[e] = T0;
  // A = h1 X: of the uniform plan from h1 T_0 (step 0, or uniform
  // routing), of the lanes' plans T otherwise.
  auto h1_plan = [&](bool at_uniform) {
    if (!at_uniform) return h1_times<V, VP>(h1, T, A);
    for (int i = 0; i < VP; ++i)
      for (int l = 0; l < 8; ++l) A[8 * i + l] = splat<V>(h1T0[i]);
  };
  // Entry (i, j) of row 1^T + 1 col^T - h1 X h2^T + beta K (Eq. 10,
  // 25a), with A = h1 X.
  auto cost = [&](int i, int j) {
    const V c = times_h2t_entry(A + 8 * i, H2T, j);
    return (row[i] + col[j]) - c + beta * K[8 * i + j];
  };
  // Value at the plan: <cost, T>.
  auto finish = [&]() {
    h1_plan(o.uniform);
    value = splat<V>(0.0f);
    for (int i = 0; i < VP; ++i)
      for (int j = 0; j < 8; ++j) value += cost(i, j) * T[8 * i + j];
  };
  if (o.uniform) return finish();
  for (int j = 0; j < 8; ++j) g[j] = splat<V>(0.0f);
  const float prox = o.proximal ? 1.0f : 0.0f;
  // Times -1 / eps rather than dividing by eps as the reference does: one
  // rounding more, against a division per entry and step.
  const float minus_inv_eps = -1.0f / static_cast<float>(o.eps);
  for (int step = 0; step < o.outer; ++step) {
    // log k = -cost / eps + log T_prev (Eq. 25); from the uniform plan,
    // h1 T is the location's h1 T_0 and log T_prev = log p + log q.
    h1_plan(step == 0);
    for (int i = 0; i < VP; ++i)
      for (int j = 0; j < 8; ++j) {
        const int e = 8 * i + j;
        const V lt =
            step == 0 ? splat<V>(log_p + log_q) : (LK[e] + f[i]) + g[j];
        LK[e] = cost(i, j) * minus_inv_eps + prox * lt;
      }
    // One log-domain iteration, then M = exp(logk + f + g). f = log p -
    // LSE_j(logk + g), keeping the shifted kernel exp(logk + g - max_j) in
    // M and u = p / its row sums: M u is then exp(logk + f + g) with the
    // old g, so the column update g += log(q / (u^T M)) and M = M u q /
    // (u^T M) need no further exp. Exact unless a column of M u is so
    // small that the floor of its entries matters; then the column update
    // runs in the log domain (for every lane).
    for (int i = 0; i < VP; ++i) {
      V x[8], mx = LK[8 * i] + g[0];
      for (int j = 0; j < 8; ++j) {
        x[j] = LK[8 * i + j] + g[j];
        mx = vmax(mx, x[j]);
      }
      V sum = splat<V>(0.0f);  // >= 1: the row's max is 1
      for (int j = 0; j < 8; ++j) {
        x[j] = vexp(x[j] - mx, lo);
        sum += x[j];
      }
      f[i] = log_p - (vlog(sum) + mx);
      u[i] = p / sum;
      for (int j = 0; j < 8; ++j) M[8 * i + j] = x[j] * u[i];
    }
    V cs[8];
    lane_column_sums<V, VP>(M, cs);
    bool safe = true;
    for (int j = 0; j < 8; ++j) safe &= all_lanes(cs[j] >= p * kSafeColumn);
    if (safe) {
      for (int j = 0; j < 8; ++j) {
        const V w = q / cs[j];
        g[j] += vlog(w);
        cs[j] = w;
      }
      for (int i = 0; i < VP; ++i)
        for (int j = 0; j < 8; ++j) M[8 * i + j] *= cs[j];
    } else {
      // g = log q - LSE_i(logk + f), then M (M holds logk + f first).
      V cm[8];
      for (int j = 0; j < 8; ++j)
        cm[j] = splat<V>(-std::numeric_limits<float>::infinity());
      for (int i = 0; i < VP; ++i)
        for (int j = 0; j < 8; ++j) {
          M[8 * i + j] = LK[8 * i + j] + f[i];
          cm[j] = vmax(cm[j], M[8 * i + j]);
        }
      for (int j = 0; j < 8; ++j) cs[j] = splat<V>(0.0f);
      for (int i = 0; i < VP; ++i)
        for (int j = 0; j < 8; ++j) cs[j] += vexp(M[8 * i + j] - cm[j], lo);
      for (int j = 0; j < 8; ++j) g[j] = log_q - (vlog(cs[j]) + cm[j]);
      for (int i = 0; i < VP; ++i)
        for (int j = 0; j < 8; ++j)
          M[8 * i + j] = vexp(M[8 * i + j] + g[j], lo);
    }
    if (o.inner > 1) {
      // Stabilised kernel-domain iterations on M.
      for (int j = 0; j < 8; ++j) v[j] = splat<V>(1.0f);
      for (int it = 0; it < o.inner - 1; ++it) {
        // One pass over M: row i's scaling, then its share of the column
        // sums (the sums run over i in order, as in two passes).
        for (int j = 0; j < 8; ++j) cs[j] = splat<V>(0.0f);
        for (int i = 0; i < VP; ++i) {
          V m[8];
          for (int j = 0; j < 8; ++j) m[j] = M[8 * i + j];
          // Two partial sums: half the dependent chain of multiply-adds.
          V s0 = m[0] * v[0], s1 = m[1] * v[1];
          for (int j = 2; j < 8; j += 2) {
            s0 += m[j] * v[j];
            s1 += m[j + 1] * v[j + 1];
          }
          u[i] = p / vmax(s0 + s1, splat<V>(tn));
          for (int j = 0; j < 8; ++j) cs[j] += u[i] * m[j];
        }
        for (int j = 0; j < 8; ++j) v[j] = q / vmax(cs[j], splat<V>(tn));
      }
      for (int i = 0; i < VP; ++i) f[i] += vlog(u[i]);
      for (int j = 0; j < 8; ++j) g[j] += vlog(v[j]);
      for (int i = 0; i < VP; ++i)
        for (int j = 0; j < 8; ++j) T[8 * i + j] = T[8 * i + j] * u[i] * v[j];
    }
  }
  if (!o.round_plan) return finish();
  // Rounding onto Gamma(p, q) (mmhgw.ot.round_to_polytope).
  V cs[8], d[VP];  // column sums, the rows' deficits
  auto row_sum = [&](int i) {
    V s = T[8 * i];
    for (int j = 1; j < 8; ++j) s += T[8 * i + j];
    return s;
  };
  for (int i = 0; i < VP; ++i) {
    const V k = vmin(p / vmax(row_sum(i), splat<V>(tn)), splat<V>(1.0f));
    for (int j = 0; j < 8; ++j) T[8 * i + j] *= k;
  }
  lane_column_sums<V, VP>(T, cs);
  for (int j = 0; j < 8; ++j) {
    const V k = vmin(q / vmax(cs[j], splat<V>(tn)), splat<V>(1.0f));
    for (int i = 0; i < VP; ++i) T[8 * i + j] *= k;
  }
  V total = splat<V>(0.0f);
  for (int i = 0; i < VP; ++i) {
    d[i] = vmax(p - row_sum(i), splat<V>(0.0f));
    total += d[i];
  }
  lane_column_sums<V, VP>(T, cs);
  // Per lane: no correction below sqrt(tiny) (see Solver).
  const V has = total > std::sqrt(tn) ? splat<V>(1.0f) : splat<V>(0.0f);
  for (int j = 0; j < 8; ++j)
    cs[j] = vmax(q - cs[j], splat<V>(0.0f)) / vmax(total, splat<V>(tn)) * has;
  for (int i = 0; i < VP; ++i)
    for (int j = 0; j < 8; ++j) T[8 * i + j] += d[i] * cs[j];
  return finish();
}

// Cross cost for V_q = 8 from the scaled embeddings x' = x / a, y' = y / b
// (see Scaling), one type per lane: sq = (ra^2 |x'_i|^2 + rb^2 |y'_j|^2 -
// 2 ra rb x'_i . y'_j) c^2 and K = 1 - exp(-max(sq, 0) / d), entry 8 i + j
// of every lane's [Vp][8] in one vector. xp [Vp][d] and sqp [Vp] are the
// location's; parts [8 d] (coordinate e of part j at j d + e), sqq [8] and
// the scalings the lanes'.
template <typename V>
inline void cross_cost_lanes(const float* __restrict__ xp,
                             const float* __restrict__ sqp, int Vp, int d,
                             const V* parts, const V* sqq, V ra2, V rb2,
                             V two_rab, V c, V* K, V* sq) {
  const float inv_d = 1.0f / d;
  for (int i = 0; i < Vp; ++i)
    for (int j = 0; j < 8; ++j) {
      V acc = ra2 * sqp[i] + rb2 * sqq[j];
      for (int e = 0; e < d; ++e)
        acc -= (two_rab * xp[i * d + e]) * parts[j * d + e];
      acc = acc * c * c;
      sq[8 * i + j] = acc;
      K[8 * i + j] = 1.0f - vexp(-vmax(acc, splat<V>(0.0f)) * inv_d, -88.0f);
    }
}

// out[k] += the sum over the lanes of r[k], for k < n (a multiple of 8):
// eight rows at a time through reduce_rows, then, with 16 lanes, its two
// halves.
template <typename V>
inline void add_lane_sums(const V* r, int n, float* __restrict__ out) {
  for (int k = 0; k < n; k += 8) {
    const V h = reduce_rows(r + k, add_op<V>);
    v8f sum;
    if constexpr (Lanes<V>::W == 16)
      sum = __builtin_shufflevector(h, h, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(h, h, 8, 9, 10, 11, 12, 13, 14, 15);
    else
      sum = h;
    v8f acc;
    std::memcpy(&acc, out + k, sizeof(acc));
    acc += sum;
    std::memcpy(out + k, &acc, sizeof(acc));
  }
}

// dst[s][e] += lane s of in[e], for e < n and the first count lanes (the
// inverse of to_lanes, adding).
template <typename V>
inline void add_from_lanes(const V* in, int n, int count, float* const* dst) {
  constexpr int W = Lanes<V>::W;
  int e = 0;
  for (; e + W <= n; e += W) {
    V block[W];
    std::memcpy(block, in + e, sizeof(block));
    transpose_block(block);
    for (int s = 0; s < count; ++s) {
      V x;
      std::memcpy(&x, dst[s] + e, sizeof(V));
      x += block[s];
      std::memcpy(dst[s] + e, &x, sizeof(V));
    }
  }
  for (; e < n; ++e)
    for (int s = 0; s < count; ++s) dst[s][e] += in[e][s];
}

// Envelope gradient of the W problems of one location in lane layout (the
// specification is Solver::backward), at the plans T, A = h1 T, cross costs
// K and squared distances sq [VP * 8] that solve_plans_lanes and
// cross_cost_lanes leave. gd is each lane's upstream gradient of the value,
// gp [8 * d] of the parts (null: none); both are 0 in a lane that holds no
// problem, which then adds nothing. xp [VP][d] is the location's components,
// xq [8 * d] and H2T the lanes' parts (as given, not scaled) and h2^T.
// What the problems share (dXp, dh1, drow, dbeta: the location's) is summed
// lane-wise and reduced across the lanes once; each type's own gradients
// (dXq [8 * d], dh2 [64], dcol [8]) are returned per lane, for the caller to
// add to the type's slices.
//   value: d/drow_i = (T 1)_i, d/dcol_j = (T^T 1)_j, d/dK = beta T,
//   d/dbeta = <K, T>, d/dh1 = -T h2 T^T, d/dh2 = -T^T h1 T;
//   K = 1 - exp(-max(sq, 0) / d): G = 2 beta T (1 - K) / d where sq >= 0,
//   dX_p[i] += (G 1)_i x_i - sum_j G[i, j] y_j,
//   dX_q[j] -= sum_i G[i, j] x_i - (G^T 1)_j y_j;
//   parts V_q T^T X_p: dX_p += V_q T gp.
template <typename V, int VP>
void backward_lanes(const V* T, const V* A, const V* K, const V* SQ,
                    const float* __restrict__ xp, int d, const V* xq,
                    const V (*H2T)[8], float beta, V gd, const V* gp,
                    float* __restrict__ dXp, float* __restrict__ dh1,
                    float* __restrict__ drow, float* dbeta, V* dXq, V* dh2,
                    V* dcol) {
  constexpr int W = Lanes<V>::W;
  constexpr int P = VP * 8;
  // Every term but the parts' is linear in gd T.
  V Tg[P];
  for (int e = 0; e < P; ++e) Tg[e] = gd * T[e];
  V sums[VP];
  for (int i = 0; i < VP; ++i) {
    V r = Tg[8 * i];
    for (int j = 1; j < 8; ++j) r += Tg[8 * i + j];
    sums[i] = r;
  }
  add_lane_sums(sums, VP, drow);
  V kt = splat<V>(0.0f);
  for (int e = 0; e < P; ++e) kt += K[e] * Tg[e];
  float ktsum = 0;
  for (int s = 0; s < W; ++s) ktsum += kt[s];
  *dbeta += ktsum;
  for (int j = 0; j < 8; ++j) dcol[j] = splat<V>(0.0f);
  for (int i = 0; i < VP; ++i)
    for (int j = 0; j < 8; ++j) dcol[j] += Tg[8 * i + j];
  // dh1[i, k] -= (gd T h2)_i . T_k: row i of gd T h2 in registers, against
  // every row k of T.
  for (int i = 0; i < VP; ++i) {
    V b[8];
    for (int l = 0; l < 8; ++l) b[l] = Tg[8 * i] * H2T[l][0];
    for (int j = 1; j < 8; ++j)
      for (int l = 0; l < 8; ++l) b[l] += Tg[8 * i + j] * H2T[l][j];
    for (int k = 0; k < VP; ++k) {
      V acc = b[0] * T[8 * k];
      for (int l = 1; l < 8; ++l) acc += b[l] * T[8 * k + l];
      sums[k] = -acc;
    }
    add_lane_sums(sums, VP, dh1 + i * VP);
  }
  // dh2[j, l] -= sum_i gd T[i, j] A[i, l].
  for (int j = 0; j < 8; ++j) {
    V acc[8];
    for (int l = 0; l < 8; ++l) acc[l] = splat<V>(0.0f);
    for (int i = 0; i < VP; ++i)
      for (int l = 0; l < 8; ++l) acc[l] += Tg[8 * i + j] * A[8 * i + l];
    for (int l = 0; l < 8; ++l) dh2[8 * j + l] = -acc[l];
  }
  // The cross cost: G in place of Tg.
  const float scale = 2 * beta / d;
  V* const G = Tg;
  for (int e = 0; e < P; ++e)
    G[e] = SQ[e] >= 0.0f ? scale * G[e] * (1.0f - K[e]) : splat<V>(0.0f);
  V gcol[8];
  for (int j = 0; j < 8; ++j) gcol[j] = splat<V>(0.0f);
  for (int i = 0; i < VP; ++i)
    for (int j = 0; j < 8; ++j) gcol[j] += G[8 * i + j];
  for (int j = 0; j < 8; ++j)
    for (int e = 0; e < d; ++e) {
      V acc = splat<V>(0.0f);
      for (int i = 0; i < VP; ++i) acc += G[8 * i + j] * xp[i * d + e];
      dXq[j * d + e] = gcol[j] * xq[j * d + e] - acc;
    }
  for (int i = 0; i < VP; ++i) {
    V grow = G[8 * i];
    for (int j = 1; j < 8; ++j) grow += G[8 * i + j];
    // Eight coordinates at a time, reduced across the lanes together.
    for (int e0 = 0; e0 < d; e0 += 8) {
      const int n = std::min(8, d - e0);
      for (int e = e0; e < e0 + n; ++e) {
        V acc = grow * xp[i * d + e];
        for (int j = 0; j < 8; ++j) acc -= G[8 * i + j] * xq[j * d + e];
        if (gp)
          for (int j = 0; j < 8; ++j)
            acc += (8.0f * T[8 * i + j]) * gp[j * d + e];
        sums[e - e0] = acc;
      }
      if (n == 8) {
        add_lane_sums(sums, 8, dXp + i * d + e0);
        continue;
      }
      for (int e = 0; e < n; ++e) {
        float x = 0;
        for (int s = 0; s < W; ++s) x += sums[e][s];
        dXp[i * d + e0 + e] += x;
      }
    }
  }
}

// ------------------------------------------------------------- the solver

// Inputs of one call, flattened: X_p [M, Vp, d], X_q [N, Vq, d],
// h1 [M, Vp, Vp], h2 [N, Vq, Vq], row [M, Vp], col [N, Vq].
template <typename scalar_t>
struct Inputs {
  const scalar_t *Xp, *Xq, *h1, *h2, *row, *col;
};

// Per output type, computed once per call: the parts scaled by their
// power-of-two scale (xq [N, Vq, d]), their squared norms (sqq [N, Vq]),
// the scale, and whether any input of the type is non-finite.
template <typename scalar_t>
struct Types {
  std::vector<scalar_t> xq, sqq, scale;
  std::vector<uint8_t> bad;
};

template <typename scalar_t>
Types<scalar_t> prepare_types(const Inputs<scalar_t>& in, const Options& o) {
  const int Vq = o.Vq, d = o.d;
  Types<scalar_t> ty;
  ty.xq.resize(int64_t(o.N) * Vq * d);
  ty.sqq.resize(int64_t(o.N) * Vq);
  ty.scale.resize(o.N);
  ty.bad.resize(o.N);
  for (int64_t n = 0; n < o.N; ++n) {
    const scalar_t* x = in.Xq + n * Vq * d;
    ty.bad[n] =
        !(all_finite(x, Vq * d) && all_finite(in.h2 + n * Vq * Vq, Vq * Vq) &&
          all_finite(in.col + n * Vq, Vq));
    scalar_t top = 0;
    for (int k = 0; k < Vq * d; ++k) top = std::max(top, std::abs(x[k]));
    const scalar_t b = power_of_two_scale(top);
    ty.scale[n] = b;
    for (int j = 0; j < Vq; ++j) {
      scalar_t acc = 0;
      for (int e = 0; e < d; ++e) {
        const scalar_t y = x[j * d + e] / b;
        ty.xq[(n * Vq + j) * d + e] = y;
        acc += y * y;
      }
      ty.sqq[n * Vq + j] = acc;
    }
  }
  return ty;
}

// VP, VQ: problem sizes fixed at compile time (0: taken from Options), so
// that the loops over a row or a column of the common shapes become whole
// SIMD vectors.
// What a caller of Solver reads from its slots besides the values: the
// plans (parts, plans) or nothing. The SIMD path, which solves in lane
// layout, writes the plans back only when asked (its gradient is taken in
// lane layout, see solve_backward).
enum SlotNeeds : int { kValuesOnly = 0, kPlans = 1 };

template <typename scalar_t, int VP, int VQ>
class Solver {
 public:
  explicit Solver(const Options& o)
      : o_(o),
        Vp(VP > 0 ? VP : o.Vp),
        Vq(VQ > 0 ? VQ : o.Vq),
        P(Vp * Vq),
        beta_(static_cast<scalar_t>(o.beta)),
        eps_(static_cast<scalar_t>(o.eps)) {
    // One slot per problem of a group (see solve).
    for (auto* a : {&Kc, &sq, &T, &A}) a->resize(kGroup * P);
    for (auto* a : {&logT, &logk, &logkT, &M, &MT, &C, &B, &BT}) a->resize(P);
    h2T.resize(Vq * Vq);
    for (auto* a : {&f, &u, &s, &rmax, &sqp, &h1T0}) a->resize(Vp);
    for (auto* a : {&g, &v, &c, &cmax}) a->resize(Vq);
    xps.resize(Vp * o.d);
  }

  // Per location m: whether an input is non-finite, the components scaled
  // by their power-of-two scale and their squared norms, and h1 T_0 (one
  // number per row, shared by every type's first proximal step).
  void set_location(const Inputs<scalar_t>& in, int64_t m) {
    const int d = o_.d;
    xp_ = in.Xp + m * Vp * d;
    h1_ = in.h1 + m * Vp * Vp;
    row_ = in.row + m * Vp;
    const scalar_t T0 = uniform_entry();
    for (int i = 0; i < Vp; ++i) {
      scalar_t acc = 0;
      for (int k = 0; k < Vp; ++k) acc += h1_[i * Vp + k] * T0;
      h1T0[i] = acc;
    }
    bad_location_ = !(std::isfinite(o_.beta) && all_finite(xp_, Vp * d) &&
                      all_finite(h1_, Vp * Vp) && all_finite(row_, Vp));
    scalar_t top = 0;
    for (int k = 0; k < Vp * d; ++k) top = std::max(top, std::abs(xp_[k]));
    scale_ = power_of_two_scale(top);
    for (int i = 0; i < Vp; ++i) {
      scalar_t acc = 0;
      for (int e = 0; e < d; ++e) {
        const scalar_t x = xp_[i * d + e] / scale_;
        xps[i * d + e] = x;
        acc += x * x;
      }
      sqp[i] = acc;
    }
  }

  // An entry of the uniform plan T_0 = p q^T, as the iterations form it.
  scalar_t uniform_entry() const {
    const scalar_t p = scalar_t(1) / Vp, q = scalar_t(1) / Vq;
    return std::exp(std::log(p) + std::log(q));
  }

  // Whether problem (this location, type n) has a non-finite input.
  bool poisoned(const Types<scalar_t>& ty, int64_t n) const {
    return bad_location_ || ty.bad[n];
  }

  // Problems solved together on the SIMD path: one per lane of a vector
  // (see solve_plans_lanes); one elsewhere.
#ifdef __AVX512F__
  static constexpr int kLanes = 16;
#else
  static constexpr int kLanes = 8;
#endif
  static constexpr int kGroup =
      (std::is_same_v<scalar_t, float> && VQ == 8 && VP > 0 && VP % 8 == 0)
          ? kLanes
          : 1;

  // Per location m and types n .. n + count - 1 (count <= kGroup): cross
  // costs, then the plans; problem n + s is then in slot s.
  // A poisoned problem (see poisoned) must come alone (count = 1): it gets
  // a NaN plan, value and h1 T, and is not solved.
  void solve(const Inputs<scalar_t>& in, const Types<scalar_t>& ty, int n,
             int count = 1) {
    const int d = o_.d;
    for (int s = 0; s < count; ++s) {
      const int64_t t = n + s;
      xq_[s] = in.Xq + t * Vq * d;
      h2_[s] = in.h2 + t * Vq * Vq;
      col_[s] = in.col + t * Vq;
      bad_[s] = poisoned(ty, t);
    }
    if (bad_[0]) {
      const scalar_t nan = std::numeric_limits<scalar_t>::quiet_NaN();
      std::fill(T.begin(), T.begin() + P, nan);
      std::fill(A.begin(), A.begin() + P, nan);
      value_[0] = nan;
      return;
    }
    if constexpr (kSimd) {
#ifdef __AVX512F__
      if (count > 8) return solve_to_slots<v16f>(in, ty, n, count);
#endif
      return solve_to_slots<v8f>(in, ty, n, count);
    }
    for (int s = 0; s < count; ++s)
      cross_cost(ty.xq.data() + (n + s) * Vq * d, ty.sqq.data() + (n + s) * Vq,
                 ty.scale[n + s], s);
    solve_plan(count);
  }

  // Per location m and types n .. n + count - 1 (as solve): the plans, then
  // their envelope gradients for the upstream gradients gd [count] of the
  // values and gp [count, Vq, d] of the parts (null: none). The location's
  // gradients are added to dXp, dh1 and drow, each type's to its slices of
  // dXq [N, Vq, d], dh2 [N, Vq, Vq] and dcol [N, Vq], and dbeta. Unless
  // null, parts_out [count, Vq, d] receives the parts.
  void solve_backward(const Inputs<scalar_t>& in, const Types<scalar_t>& ty,
                      int n, int count, const scalar_t* gd, const scalar_t* gp,
                      scalar_t* dXp, scalar_t* dh1, scalar_t* drow,
                      scalar_t* dXq, scalar_t* dh2, scalar_t* dcol,
                      scalar_t* dbeta, scalar_t* parts_out) {
    const int d = o_.d;
    if constexpr (kSimd) {
      if (!poisoned(ty, n)) {
#ifdef __AVX512F__
        if (count > 8)
          return solve_backward_lanes<v16f>(in, ty, n, count, gd, gp, dXp, dh1,
                                            drow, dXq, dh2, dcol, dbeta,
                                            parts_out);
#endif
        return solve_backward_lanes<v8f>(in, ty, n, count, gd, gp, dXp, dh1,
                                         drow, dXq, dh2, dcol, dbeta,
                                         parts_out);
      }
    }
    solve(in, ty, n, count);
    for (int s = 0; s < count; ++s) {
      value(s);  // leaves h1 T for the gradient of h2
      if (parts_out) parts(parts_out + s * Vq * d, s);
      backward(gd[s], gp ? gp + s * Vq * d : nullptr, dXp, dh1, drow,
               dXq + (n + s) * Vq * d, dh2 + (n + s) * Vq * Vq,
               dcol + (n + s) * Vq, dbeta, s);
    }
  }

  // What the caller will read from the slots (SlotNeeds).
  void set_needs(int needs) { needs_ = needs; }

  const scalar_t* plan(int s = 0) const { return T.data() + s * P; }

  // <L (x) T + beta K, T> at the plan of slot s (Eq. 21); leaves h1 T in
  // A.
  scalar_t value(int s = 0) {
    if (kSimd || bad_[s]) return value_[s];
    const scalar_t* __restrict__ col_ = this->col_[0];
    if (o_.uniform)
      gw_product_uniform(C.data());
    else
      gw_product(T.data(), C.data());
    scalar_t acc = 0;
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) {
        const int e = i * Vq + j;
        acc += (row_[i] + col_[j] - C[e] + beta_ * Kc[e]) * T[e];
      }
    return acc;
  }

  // out [Vq, d] <- V_q T^T X_p (columns of T sum to 1 / V_q), slot s.
  void parts(scalar_t* __restrict__ out, int s = 0) const {
    const int d = o_.d;
    const scalar_t* __restrict__ T = plan(s);
    if constexpr (kSimd) {
      if (d == 8) {
        // Eight independent sums (one per part) rather than one chain of
        // Vp dependent additions per part.
        v8f acc[8];
        for (int j = 0; j < 8; ++j) acc[j] = splat(0.0f);
        for (int i = 0; i < Vp; ++i) {
          v8f x;
          std::memcpy(&x, xp_ + i * 8, sizeof(x));
          for (int j = 0; j < 8; ++j) acc[j] += T[i * 8 + j] * x;
        }
        for (int j = 0; j < 8; ++j) {
          acc[j] *= 8.0f;
          std::memcpy(out + j * 8, &acc[j], sizeof(acc[j]));
        }
        return;
      }
    }
    std::fill(out, out + Vq * d, scalar_t(0));
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) {
        const scalar_t t = T[i * Vq + j] * Vq;
        for (int e = 0; e < d; ++e) out[j * d + e] += t * xp_[i * d + e];
      }
  }

  // Envelope gradient at the plan of a slot, for upstream gradients gd (of
  // the value) and gp [Vq, d] (of the parts; null: none). Per-location
  // outputs dXp, dh1, drow are accumulated; shared ones (dXq, dh2, dcol
  // [this type's slices], dbeta) too. Requires value(slot) to have run
  // (A = h1 T).
  void backward(scalar_t gd, const scalar_t* __restrict__ gp,
                scalar_t* __restrict__ dXp, scalar_t* __restrict__ dh1,
                scalar_t* __restrict__ drow, scalar_t* __restrict__ dXq,
                scalar_t* __restrict__ dh2, scalar_t* __restrict__ dcol,
                scalar_t* dbeta, int slot = 0) {
    const int d = o_.d;
    if (bad_[slot]) {
      // The gradient of a NaN output: NaN in every input it depends on.
      const scalar_t nan = std::numeric_limits<scalar_t>::quiet_NaN();
      std::fill(dXp, dXp + Vp * d, nan);
      std::fill(dh1, dh1 + Vp * Vp, nan);
      std::fill(drow, drow + Vp, nan);
      std::fill(dXq, dXq + Vq * d, nan);
      std::fill(dh2, dh2 + Vq * Vq, nan);
      std::fill(dcol, dcol + Vq, nan);
      *dbeta = nan;
      return;
    }
    // This slot's plan, h1 T, cross cost and type.
    const int o = slot * P;
    const scalar_t* __restrict__ T = this->T.data() + o;
    const scalar_t* __restrict__ A = this->A.data() + o;
    const scalar_t* __restrict__ Kc = this->Kc.data() + o;
    const scalar_t* __restrict__ sq = this->sq.data() + o;
    const scalar_t* __restrict__ xq_ = this->xq_[slot];
    const scalar_t* __restrict__ h2_ = this->h2_[slot];
    // Parts: d(V_q T^T X_p)/dX_p = V_q T gp.
    if (gp)
      for (int i = 0; i < Vp; ++i)
        for (int j = 0; j < Vq; ++j) {
          const scalar_t t = T[i * Vq + j] * Vq;
          for (int e = 0; e < d; ++e) dXp[i * d + e] += t * gp[j * d + e];
        }
    if (gd == 0) return;
    // Value at the fixed plan: d/drow_i = (T 1)_i, d/dcol_j = (T^T 1)_j,
    // d/dK = beta T, d/dbeta = <K, T>, d/dh1 = -T h2 T^T,
    // d/dh2 = -T^T h1 T.
    scalar_t kt = 0;
    for (int i = 0; i < Vp; ++i) {
      scalar_t r = 0;
      for (int j = 0; j < Vq; ++j) {
        r += T[i * Vq + j];
        kt += Kc[i * Vq + j] * T[i * Vq + j];
        dcol[j] += gd * T[i * Vq + j];
      }
      drow[i] += gd * r;
    }
    *dbeta += gd * kt;
    // B = T h2: B[i, l] = sum_j T[i, j] h2[j, l]; dh1[i, k] -= gd B[i] . T[k].
    for (int i = 0; i < Vp; ++i) {
      for (int l = 0; l < Vq; ++l) B[i * Vq + l] = 0;
      for (int j = 0; j < Vq; ++j) {
        const scalar_t t = T[i * Vq + j];
        for (int l = 0; l < Vq; ++l) B[i * Vq + l] += t * h2_[j * Vq + l];
      }
    }
    transpose(B.data(), Vp, Vq, BT.data());
    transpose(T, Vp, Vq, MT.data());
    for (int i = 0; i < Vp; ++i) {
      for (int k = 0; k < Vp; ++k) s[k] = 0;
      for (int l = 0; l < Vq; ++l) {
        const scalar_t b = B[i * Vq + l];
        for (int k = 0; k < Vp; ++k) s[k] += b * MT[l * Vp + k];
      }
      for (int k = 0; k < Vp; ++k) dh1[i * Vp + k] -= gd * s[k];
    }
    // dh2[j, l] -= gd sum_i T[i, j] A[i, l], with A = h1 T from value().
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) {
        const scalar_t t = gd * T[i * Vq + j];
        for (int l = 0; l < Vq; ++l) dh2[j * Vq + l] -= t * A[i * Vq + l];
      }
    // K = 1 - exp(-max(sq, 0) / d): dK/dsq = (1 - K) / d where sq >= 0;
    // sq = |x_i|^2 + |y_j|^2 - 2 x_i . y_j.
    const scalar_t scale = 2 * gd * beta_ / d;
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) {
        const int e = i * Vq + j;
        const scalar_t gij =
            sq[e] >= 0 ? scale * T[e] * (1 - Kc[e]) : scalar_t(0);
        for (int k = 0; k < d; ++k) {
          const scalar_t diff = xp_[i * d + k] - xq_[j * d + k];
          dXp[i * d + k] += gij * diff;
          dXq[j * d + k] -= gij * diff;
        }
      }
  }

 private:
  // From the scaled parts xq [Vq, d] of a type, their squared norms sqq
  // and scale b: the squared distances (sq, true scale) and cross cost K
  // of slot s.
  void cross_cost(const scalar_t* __restrict__ xq, const scalar_t* sqq,
                  scalar_t b, int s) {
    const int d = o_.d;
    const Scaling<scalar_t> sc(scale_, b);
    const scalar_t* __restrict__ xp = xps.data();
    scalar_t* __restrict__ q2 = sq.data();
    const scalar_t ra2 = sc.ra * sc.ra, rb2 = sc.rb * sc.rb;
    const scalar_t two_rab = 2 * (sc.ra * sc.rb);
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) q2[i * Vq + j] = ra2 * sqp[i] + rb2 * sqq[j];
    for (int i = 0; i < Vp; ++i)
      for (int e = 0; e < d; ++e) {
        const scalar_t x = -two_rab * xp[i * d + e];
        for (int j = 0; j < Vq; ++j) q2[i * Vq + j] += x * xq[j * d + e];
      }
    for (int e = 0; e < P; ++e) q2[e] = q2[e] * sc.c * sc.c;
    bounded(q2, P, d, Kc.data());
  }

  // out = h1 @ T @ h2^T, the plan-dependent part of L (x) T (Eq. 10);
  // A <- h1 @ T.
  void gw_product(const scalar_t* __restrict__ Tm, scalar_t* __restrict__ out) {
    const scalar_t* __restrict__ h1 = h1_;
    scalar_t* __restrict__ a = A.data();
    for (int i = 0; i < Vp; ++i) {
      scalar_t* __restrict__ ai = a + i * Vq;
      for (int l = 0; l < Vq; ++l) ai[l] = 0;
      for (int k = 0; k < Vp; ++k) {
        const scalar_t h = h1[i * Vp + k];
        for (int l = 0; l < Vq; ++l) ai[l] += h * Tm[k * Vq + l];
      }
    }
    times_h2t(out);
  }

  // out = h1 T_0 h2^T from the location's h1 T_0 (the first proximal step
  // starts from the uniform plan T_0, so h1 T_0 has one value per row);
  // leaves h1 T_0 in A.
  void gw_product_uniform(scalar_t* __restrict__ out) {
    scalar_t* __restrict__ a = A.data();
    for (int i = 0; i < Vp; ++i)
      for (int l = 0; l < Vq; ++l) a[i * Vq + l] = h1T0[i];
    times_h2t(out);
  }

  // out = A h2^T: the second factor of gw_product.
  void times_h2t(scalar_t* __restrict__ out) {
    const scalar_t* __restrict__ a = A.data();
    const scalar_t* __restrict__ h2t = h2T.data();
    for (int i = 0; i < Vp; ++i) {
      scalar_t* __restrict__ oi = out + i * Vq;
      for (int j = 0; j < Vq; ++j) oi[j] = 0;
      for (int l = 0; l < Vq; ++l) {
        const scalar_t x = a[i * Vq + l];
        for (int j = 0; j < Vq; ++j) oi[j] += x * h2t[l * Vq + j];
      }
    }
  }

  // The rounded plan into T (the fixed-count hot path of
  // mmhgw.ot.plan_from_terms): each proximal step forms the cost
  // L (x) T + beta K, its log-kernel (plus log T_prev when proximal), one
  // log-domain Sinkhorn iteration and inner - 1 stabilised kernel-domain
  // ones; the plan is then rounded onto Gamma(p, q) (Altschuler et al.).
  static constexpr bool kSimd =
      std::is_same_v<scalar_t, float> && VQ == 8 && VP > 0 && VP % 8 == 0;

  void solve_plan(int count) {
    transpose(h2_[0], Vq, Vq, h2T.data());
    const scalar_t p = scalar_t(1) / Vp, q = scalar_t(1) / Vq;
    const scalar_t log_p = std::log(p), log_q = std::log(q);
    const scalar_t lo = exp_floor<scalar_t>(), tn = tiny<scalar_t>();
    scalar_t* __restrict__ t = T.data();
    scalar_t* __restrict__ lt = logT.data();
    scalar_t* __restrict__ lk = logk.data();
    scalar_t* __restrict__ lkT = logkT.data();
    scalar_t* __restrict__ m = M.data();
    scalar_t* __restrict__ mT = MT.data();
    scalar_t* __restrict__ w = B.data();
    scalar_t* __restrict__ wT = BT.data();
    scalar_t* __restrict__ cost = C.data();
    const scalar_t* __restrict__ kc = Kc.data();
    scalar_t* __restrict__ F = f.data();
    scalar_t* __restrict__ G = g.data();
    scalar_t* __restrict__ U = u.data();
    scalar_t* __restrict__ W = v.data();
    scalar_t* __restrict__ S = s.data();
    scalar_t* __restrict__ Cs = c.data();
    scalar_t* __restrict__ rm = rmax.data();
    scalar_t* __restrict__ cm = cmax.data();
    const scalar_t* __restrict__ rw = row_;
    const scalar_t* __restrict__ cl = col_[0];
    const scalar_t T0 = uniform_entry();
    for (int e = 0; e < P; ++e) t[e] = T0;
    if (o_.uniform) return;
    for (int j = 0; j < Vq; ++j) G[j] = 0;
    for (int e = 0; e < P; ++e) lt[e] = log_p + log_q;
    const scalar_t prox = o_.proximal ? scalar_t(1) : scalar_t(0);
    for (int step = 0; step < o_.outer; ++step) {
      if (step == 0)
        gw_product_uniform(cost);
      else
        gw_product(t, cost);
      // Eq. 25a (the paper's "+ eps" constant is absorbed by the
      // potentials) plus the KL(T || T_prev) proximal term of Eq. 25.
      // Division, not multiplication by 1/eps: the reference divides.
      for (int i = 0; i < Vp; ++i)
        for (int j = 0; j < Vq; ++j) {
          const int e = i * Vq + j;
          lk[e] =
              -(rw[i] + cl[j] - cost[e] + beta_ * kc[e]) / eps_ + prox * lt[e];
        }
      transpose(lk, Vp, Vq, lkT);
      // One log-domain iteration: f = log p - LSE_j(logk + g), then
      // g = log q - LSE_i(logk + f).
      log_marginal_step(lkT, Vq, Vp, G, log_p, lo, wT, rm, F);
      log_marginal_step(lk, Vp, Vq, F, log_q, lo, w, cm, G);

      if (o_.inner > 1) {
        // Stabilised kernel-domain iterations on M = exp(logk + f + g).
        for (int i = 0; i < Vp; ++i)
          for (int j = 0; j < Vq; ++j)
            m[i * Vq + j] = lk[i * Vq + j] + F[i] + G[j];
        floored_exp(m, P, lo);
        transpose(m, Vp, Vq, mT);
        for (int j = 0; j < Vq; ++j) W[j] = 1;
        for (int it = 0; it < o_.inner - 1; ++it) {
          column_sums(mT, Vq, Vp, S, W);
          for (int i = 0; i < Vp; ++i) U[i] = p / (S[i] > tn ? S[i] : tn);
          column_sums(m, Vp, Vq, Cs, U);
          for (int j = 0; j < Vq; ++j) W[j] = q / (Cs[j] > tn ? Cs[j] : tn);
        }
        for (int i = 0; i < Vp; ++i) S[i] = U[i];
        for (int j = 0; j < Vq; ++j) Cs[j] = W[j];
        safe_log(S, Vp);
        safe_log(Cs, Vq);
        for (int i = 0; i < Vp; ++i) F[i] += S[i];
        for (int j = 0; j < Vq; ++j) G[j] += Cs[j];
        for (int i = 0; i < Vp; ++i)
          for (int j = 0; j < Vq; ++j) {
            const int e = i * Vq + j;
            t[e] = m[e] * U[i] * W[j];
            lt[e] = lk[e] + F[i] + G[j];
          }
      } else {
        for (int i = 0; i < Vp; ++i)
          for (int j = 0; j < Vq; ++j) {
            const int e = i * Vq + j;
            lt[e] = lk[e] + F[i] + G[j];
            t[e] = lt[e];
          }
        floored_exp(t, P, lo);
      }
    }
    if (o_.round_plan) round_to_polytope(p, q);
  }

  // Types n .. n + count - 1 in lane layout, type n + s in lane s (lanes
  // beyond count repeat the last type, a group's tail): what the SIMD path
  // needs of them, the same at every location.
  template <typename V>
  struct TypeLanes {
    std::vector<V> parts;  // coordinate e of part j at j d + e
    std::vector<V> xq;     // the parts as given, not scaled (the gradient's)
    V sqq[8], col[8], H2T[8][8], scale;
  };

  template <typename V>
  void build_lanes(const Inputs<scalar_t>& in, const Types<scalar_t>& ty,
                   int64_t n, int count, TypeLanes<V>& tl) const {
    constexpr int W = Lanes<V>::W;
    const int d = o_.d;
    tl.parts.assign(8 * d, V{});
    tl.xq.assign(8 * d, V{});
    const float* h2[W];
    for (int s = 0; s < W; ++s) {
      const int64_t src = n + std::min(s, count - 1);
      tl.scale[s] = ty.scale[src];
      for (int j = 0; j < 8; ++j) {
        tl.col[j][s] = in.col[src * 8 + j];
        tl.sqq[j][s] = ty.sqq[src * 8 + j];
      }
      for (int e = 0; e < 8 * d; ++e) {
        tl.parts[e][s] = ty.xq[src * 8 * d + e];
        tl.xq[e][s] = in.Xq[src * 8 * d + e];
      }
      h2[s] = in.h2 + src * 64;
    }
    to_lanes(h2, 64, &tl.H2T[0][0]);  // h2 [j][l] so far
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < j; ++l) std::swap(tl.H2T[j][l], tl.H2T[l][j]);
  }

  // The lanes of a whole group (n a multiple of kGroup), built by the first
  // location that solves it: a solver serves one call (one set of types).
  template <typename V>
  const TypeLanes<V>& group_lanes(const Inputs<scalar_t>& in,
                                  const Types<scalar_t>& ty, int64_t n,
                                  int count) {
    auto& cache = [this]() -> auto& {
      if constexpr (Lanes<V>::W == 16)
        return lanes16_;
      else
        return lanes8_;
    }();
    const size_t g = n / kGroup;
    if (cache.size() <= g) cache.resize(g + 1);
    if (cache[g].parts.empty()) build_lanes(in, ty, n, count, cache[g]);
    return cache[g];
  }

  // What the SIMD path leaves of a group (lane s: type n + s): the types'
  // lanes, the cross costs, squared distances, plans, h1 T at them and the
  // values.
  template <typename V>
  struct LaneSolution {
    const TypeLanes<V>* tl;
    V K[VP * 8], SQ[VP * 8], T[VP * 8], A[VP * 8], values;
  };

  // The SIMD path for types n .. n + count - 1 (see TypeLanes): the cross
  // costs and the plans in lane layout (cross_cost_lanes,
  // solve_plans_lanes) into out. `alone` holds the lanes of a problem
  // solved alone (see for_each_group).
  template <typename V>
  void solve_lanes(const Inputs<scalar_t>& in, const Types<scalar_t>& ty,
                   int64_t n, int count, TypeLanes<V>& alone,
                   LaneSolution<V>& out) {
    const bool group =
        n % kGroup == 0 && count == std::min<int64_t>(kGroup, o_.N - n);
    if (!group) build_lanes(in, ty, n, count, alone);
    const TypeLanes<V>& tl = group ? group_lanes<V>(in, ty, n, count) : alone;
    out.tl = &tl;
    // Scaling, lane by lane: c = max(a, b), ra = a / c, rb = b / c.
    const V a = splat<V>(scale_), c = vmax(a, tl.scale);
    const V ra = a / c, rb = tl.scale / c;
    cross_cost_lanes<V>(xps.data(), sqp.data(), VP, o_.d, tl.parts.data(),
                        tl.sqq, ra * ra, rb * rb, 2 * (ra * rb), c, out.K,
                        out.SQ);
    solve_plans_lanes<V, VP>(h1_, h1T0.data(), row_, tl.col, tl.H2T, out.K, o_,
                             out.T, out.A, out.values);
  }

  // solve on the SIMD path: the values of the first count lanes, and their
  // plans if needs_ asks, into the slots.
  template <typename V>
  void solve_to_slots(const Inputs<scalar_t>& in, const Types<scalar_t>& ty,
                      int64_t n, int count) {
    TypeLanes<V> alone;
    LaneSolution<V> sol;
    solve_lanes<V>(in, ty, n, count, alone, sol);
    if (needs_ & kPlans) plans_to_slots(sol, count);
    for (int s = 0; s < count; ++s) value_[s] = sol.values[s];
  }

  // The plans of the first count lanes into the slots.
  template <typename V>
  void plans_to_slots(const LaneSolution<V>& sol, int count) {
    float* t[Lanes<V>::W];
    for (int s = 0; s < count; ++s) t[s] = T.data() + s * P;
    from_lanes(sol.T, VP * 8, count, t);
  }

  // solve_backward on the SIMD path: the envelope gradients of the lanes'
  // problems (backward_lanes) straight from the lane layout.
  template <typename V>
  void solve_backward_lanes(const Inputs<scalar_t>& in,
                            const Types<scalar_t>& ty, int64_t n, int count,
                            const float* gd, const float* gp, float* dXp,
                            float* dh1, float* drow, float* dXq, float* dh2,
                            float* dcol, float* dbeta, float* parts_out) {
    constexpr int W = Lanes<V>::W;
    const int d = o_.d;
    TypeLanes<V> alone;
    LaneSolution<V> sol;
    solve_lanes<V>(in, ty, n, count, alone, sol);
    if (parts_out) {
      plans_to_slots(sol, count);
      for (int s = 0; s < count; ++s) parts(parts_out + s * 8 * d, s);
    }
    // Lanes that hold no problem get a zero upstream gradient.
    V g = splat<V>(0.0f);
    for (int s = 0; s < count; ++s) g[s] = gd[s];
    std::vector<V> gpl;
    if (gp) {
      gpl.assign(8 * d, splat<V>(0.0f));
      for (int s = 0; s < count; ++s)
        for (int e = 0; e < 8 * d; ++e) gpl[e][s] = gp[s * 8 * d + e];
    }
    std::vector<V> dXqL(8 * d);
    V dh2L[64], dcolL[8];
    backward_lanes<V, VP>(sol.T, sol.A, sol.K, sol.SQ, xp_, d,
                          sol.tl->xq.data(), sol.tl->H2T, beta_, g,
                          gp ? gpl.data() : nullptr, dXp, dh1, drow, dbeta,
                          dXqL.data(), dh2L, dcolL);
    float *q[W], *h[W], *c[W];
    for (int s = 0; s < count; ++s) {
      q[s] = dXq + (n + s) * 8 * d;
      h[s] = dh2 + (n + s) * 64;
      c[s] = dcol + (n + s) * 8;
    }
    add_from_lanes(dXqL.data(), 8 * d, count, q);
    add_from_lanes(dh2L, 64, count, h);
    add_from_lanes(dcolL, 8, count, c);
  }

  // mmhgw.ot.round_to_polytope: scale down rows over p, then columns over
  // q, then add the outer product of the deficits over their total.
  void round_to_polytope(scalar_t p, scalar_t q) {
    const scalar_t tn = tiny<scalar_t>();
    scalar_t* __restrict__ t = T.data();
    scalar_t* __restrict__ tT = BT.data();
    scalar_t* __restrict__ S = s.data();
    scalar_t* __restrict__ U = u.data();
    scalar_t* __restrict__ W = v.data();
    scalar_t* __restrict__ Cs = c.data();
    transpose(t, Vp, Vq, tT);
    column_sums(tT, Vq, Vp, S);
    for (int i = 0; i < Vp; ++i) {
      const scalar_t k = p / (S[i] > tn ? S[i] : tn);
      U[i] = k < 1 ? k : scalar_t(1);
    }
    for (int j = 0; j < Vq; ++j) Cs[j] = 0;
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) {
        t[i * Vq + j] *= U[i];
        Cs[j] += t[i * Vq + j];
      }
    for (int j = 0; j < Vq; ++j) {
      const scalar_t k = q / (Cs[j] > tn ? Cs[j] : tn);
      W[j] = k < 1 ? k : scalar_t(1);
    }
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) t[i * Vq + j] *= W[j];
    transpose(t, Vp, Vq, tT);
    column_sums(tT, Vq, Vp, S);
    scalar_t total = 0;
    for (int i = 0; i < Vp; ++i) {
      U[i] = p - S[i] > 0 ? p - S[i] : scalar_t(0);
      total += U[i];
    }
    column_sums(t, Vp, Vq, Cs);
    for (int j = 0; j < Vq; ++j) W[j] = q - Cs[j] > 0 ? q - Cs[j] : scalar_t(0);
    // Below sqrt(tiny) the correction adds nothing the dtype resolves (and
    // the reference skips it: its gradient scales as 1 / total^2).
    if (!(total > std::sqrt(tn))) return;
    for (int i = 0; i < Vp; ++i)
      for (int j = 0; j < Vq; ++j) t[i * Vq + j] += U[i] * W[j] / total;
  }

  const Options o_;
  const int Vp, Vq, P;
  // What the caller reads from the slots besides the values (SlotNeeds).
  int needs_ = kPlans;
  scalar_t value_[kGroup] = {};  // SIMD path: values computed with the plans
  bool bad_[kGroup] = {};        // per slot: a poisoned problem
  bool bad_location_ = false;
  scalar_t scale_ = 1;  // the location's power-of-two scale
  const scalar_t beta_, eps_;
  const scalar_t *xp_ = nullptr, *h1_ = nullptr, *row_ = nullptr;
  // Per slot: this type's parts, h2 and column term.
  const scalar_t *xq_[kGroup] = {}, *h2_[kGroup] = {}, *col_[kGroup] = {};
  std::vector<scalar_t> Kc, sq, T, logT, logk, logkT, M, MT, A, C, B, BT, h2T,
      f, g, u, v, s, c, rmax, cmax, sqp, xps, h1T0;
  // SIMD path: the lanes of each group of types (group_lanes).
  std::vector<TypeLanes<v8f>> lanes8_;
  std::vector<TypeLanes<v16f>> lanes16_;
};

// Calls fn(m, n, count) for every location m in [begin, end), set on the
// solver, and its types in groups [n, n + count) of kGroup (the last group
// shorter), one type at a time in a group with a poisoned problem, so that
// poisoned problems come alone.
template <typename Solver_, typename scalar_t, typename Fn>
void for_each_group(Solver_& solver, const Inputs<scalar_t>& in,
                    const Types<scalar_t>& ty, int N, int64_t begin,
                    int64_t end, Fn&& fn) {
  for (int64_t m = begin; m < end; ++m) {
    solver.set_location(in, m);
    for (int n = 0; n < N; n += Solver_::kGroup) {
      const int count = std::min(Solver_::kGroup, N - n);
      bool alone = false;
      for (int s = 0; s < count; ++s) alone |= solver.poisoned(ty, n + s);
      if (!alone) {
        fn(m, n, count);
        continue;
      }
      for (int s = 0; s < count; ++s) fn(m, n + s, 1);
    }
  }
}

// Solves every (location m in [begin, end), type n) problem, a group of
// types at a time, and calls fn(solver, m, n, slot) for each, with the
// problem's value and what needs asks for (SlotNeeds) in that slot of the
// solver.
template <typename scalar_t, int VP, int VQ, typename Fn>
void solve_range(const Inputs<scalar_t>& in, const Options& o,
                 const Types<scalar_t>& ty, int64_t begin, int64_t end,
                 int needs, Fn&& fn) {
  Solver<scalar_t, VP, VQ> solver(o);
  solver.set_needs(needs);
  for_each_group(solver, in, ty, o.N, begin, end,
                 [&](int64_t m, int n, int count) {
                   solver.solve(in, ty, n, count);
                   for (int s = 0; s < count; ++s)
                     fn(solver, m, int64_t(n + s), s);
                 });
}

// Forward over locations [begin, end): dist [M, N], parts [M, N, Vq, d]
// (none when parts is null).
template <typename scalar_t, int VP, int VQ>
void forward_range(const Inputs<scalar_t>& in, const Options& o,
                   const Types<scalar_t>& ty, int64_t begin, int64_t end,
                   scalar_t* dist, scalar_t* parts) {
  const int64_t part_size = int64_t(o.Vq) * o.d;
  solve_range<scalar_t, VP, VQ>(
      in, o, ty, begin, end, parts ? kPlans : kValuesOnly,
      [&](auto& solver, int64_t m, int64_t n, int s) {
        dist[m * o.N + n] = solver.value(s);
        if (parts) solver.parts(parts + (m * o.N + n) * part_size, s);
      });
}

// Forward over locations [begin, end) with the pose map fused:
// dist [M, N] and poses [M, N, O], pose = vec(parts) W[n] with W
// [N, Vq d, O]. Each problem's parts stay in a workspace (one pass over
// them while in cache, instead of writing [M, N, Vq, d] and reading it
// back for a batched product).
template <typename scalar_t, int VP, int VQ>
void forward_pose_range(const Inputs<scalar_t>& in, const Options& o,
                        const Types<scalar_t>& ty, int64_t begin, int64_t end,
                        const scalar_t* W, int O, scalar_t* dist,
                        scalar_t* poses) {
  const int K = o.Vq * o.d;
  std::vector<scalar_t> part(K);
  solve_range<scalar_t, VP, VQ>(in, o, ty, begin, end, kPlans,
                                [&](auto& solver, int64_t m, int64_t n, int s) {
                                  dist[m * o.N + n] = solver.value(s);
                                  solver.parts(part.data(), s);
                                  scalar_t* out = poses + (m * o.N + n) * O;
                                  const scalar_t* w = W + n * K * O;
                                  for (int q = 0; q < O; ++q) out[q] = 0;
                                  for (int k = 0; k < K; ++k) {
                                    const scalar_t pk = part[k];
                                    const scalar_t* wk = w + k * O;
                                    for (int q = 0; q < O; ++q)
                                      out[q] += pk * wk[q];
                                  }
                                });
}

// Plans over locations [begin, end) into plans [M, N, Vp, Vq] (for
// convergence studies; the op itself never writes them).
template <typename scalar_t, int VP, int VQ>
void plans_range(const Inputs<scalar_t>& in, const Options& o,
                 const Types<scalar_t>& ty, int64_t begin, int64_t end,
                 scalar_t* plans) {
  const int64_t P = int64_t(o.Vp) * o.Vq;
  solve_range<scalar_t, VP, VQ>(in, o, ty, begin, end, kPlans,
                                [&](auto& solver, int64_t m, int64_t n, int s) {
                                  const scalar_t* T = solver.plan(s);
                                  std::copy(T, T + P,
                                            plans + (m * o.N + n) * P);
                                });
}

// Backward over locations [begin, end): per-location gradients into dXp,
// dh1, drow; shared ones accumulated into dXq, dh2, dcol, dbeta (one set
// per thread, reduced by the caller). A null grad_parts: the parts received
// no gradient, and theirs is skipped. Unless null, parts [M, N, Vq, d]
// receives the parts at the plans solved again (for a caller that did not
// keep the forward's).
template <typename scalar_t, int VP, int VQ>
void backward_range(const Inputs<scalar_t>& in, const Options& o,
                    const Types<scalar_t>& ty, const scalar_t* grad_dist,
                    const scalar_t* grad_parts, int64_t begin, int64_t end,
                    scalar_t* dXp, scalar_t* dh1, scalar_t* drow, scalar_t* dXq,
                    scalar_t* dh2, scalar_t* dcol, scalar_t* dbeta,
                    scalar_t* parts = nullptr) {
  const int Vp = o.Vp, Vq = o.Vq, d = o.d;
  Solver<scalar_t, VP, VQ> solver(o);
  for_each_group(
      solver, in, ty, o.N, begin, end, [&](int64_t m, int n, int count) {
        const int64_t k = m * o.N + n;
        solver.solve_backward(in, ty, n, count, grad_dist + k,
                              grad_parts ? grad_parts + k * Vq * d : nullptr,
                              dXp + m * Vp * d, dh1 + m * Vp * Vp,
                              drow + m * Vp, dXq, dh2, dcol, dbeta,
                              parts ? parts + k * Vq * d : nullptr);
      });
}

// Calls fn.template operator()<VP, VQ>() with compile-time sizes for the
// shapes the layer uses by default (32 or 16 input types, 8 parts), and
// with run-time sizes (0, 0) otherwise.
template <typename Fn>
void dispatch_sizes(int Vp, int Vq, Fn&& fn) {
  if (Vq == 8 && Vp == 32) return fn.template operator()<32, 8>();
  if (Vq == 8 && Vp == 16) return fn.template operator()<16, 8>();
  return fn.template operator()<0, 0>();
}

}  // namespace mmhgw
