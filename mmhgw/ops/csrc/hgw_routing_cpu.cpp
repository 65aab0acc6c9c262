// Bindings of the fused CPU HGW routing (hgw_routing_kernel.h): argument
// checks, dtype dispatch and ATen's parallel_for over locations. beta comes
// as a one-element tensor (the op keeps it a tensor; read here, on the
// CPU).
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <vector>

#include "hgw_routing_kernel.h"

namespace {

void check_inputs(const torch::Tensor& X_p, const torch::Tensor& X_q,
                  const torch::Tensor& h1, const torch::Tensor& h2,
                  const torch::Tensor& row, const torch::Tensor& col) {
  for (const auto& t : {X_p, X_q, h1, h2, row, col}) {
    TORCH_CHECK(t.device().is_cpu(),
                "hgw_routing_cpu: tensors must be on the CPU");
    TORCH_CHECK(t.is_contiguous(),
                "hgw_routing_cpu: tensors must be contiguous");
    TORCH_CHECK(t.scalar_type() == X_p.scalar_type(),
                "hgw_routing_cpu: tensors must share one dtype");
  }
  TORCH_CHECK(X_p.dim() == 3 && X_q.dim() == 3 && h1.dim() == 3 &&
                  h2.dim() == 3 && row.dim() == 2 && col.dim() == 2,
              "hgw_routing_cpu: expected X_p [M, Vp, d], X_q [N, Vq, d], "
              "h1 [M, Vp, Vp], h2 [N, Vq, Vq], row [M, Vp], col [N, Vq]");
  const auto M = X_p.size(0), Vp = X_p.size(1), d = X_p.size(2);
  const auto N = X_q.size(0), Vq = X_q.size(1);
  TORCH_CHECK(X_q.size(2) == d && h1.size(0) == M && h1.size(1) == Vp &&
                  h1.size(2) == Vp && h2.size(0) == N && h2.size(1) == Vq &&
                  h2.size(2) == Vq && row.size(0) == M && row.size(1) == Vp &&
                  col.size(0) == N && col.size(1) == Vq,
              "hgw_routing_cpu: inconsistent shapes");
}

double beta_value(const torch::Tensor& beta) {
  TORCH_CHECK(beta.numel() == 1 && beta.device().is_cpu(),
              "hgw_routing_cpu: beta must be a one-element CPU tensor");
  return beta.item<double>();
}

mmhgw::Options make_options(const torch::Tensor& X_p, const torch::Tensor& X_q,
                            double beta, double eps, int64_t outer,
                            int64_t inner, bool proximal, bool uniform) {
  return mmhgw::Options{static_cast<int>(X_p.size(1)),
                        static_cast<int>(X_q.size(1)),
                        static_cast<int>(X_q.size(0)),
                        static_cast<int>(X_p.size(2)),
                        beta,
                        eps,
                        static_cast<int>(outer),
                        static_cast<int>(inner),
                        proximal,
                        uniform};
}

template <typename scalar_t>
mmhgw::Inputs<scalar_t> pointers(const torch::Tensor& X_p,
                                 const torch::Tensor& X_q,
                                 const torch::Tensor& h1,
                                 const torch::Tensor& h2,
                                 const torch::Tensor& row,
                                 const torch::Tensor& col) {
  return {X_p.data_ptr<scalar_t>(), X_q.data_ptr<scalar_t>(),
          h1.data_ptr<scalar_t>(),  h2.data_ptr<scalar_t>(),
          row.data_ptr<scalar_t>(), col.data_ptr<scalar_t>()};
}

}  // namespace

namespace mmhgw {
namespace cpu {

// With pose_weight [N, Vq d, O]: the poses [M, N, O] instead of the parts
// (the pose map fused into the solve). With distance_only: neither (an
// empty [M, N, 0]), the distances alone.
std::vector<torch::Tensor> hgw_routing_forward(
    torch::Tensor X_p, torch::Tensor X_q, torch::Tensor h1, torch::Tensor h2,
    torch::Tensor row, torch::Tensor col, torch::Tensor beta, double eps,
    int64_t outer, int64_t inner, bool proximal, bool uniform,
    c10::optional<torch::Tensor> pose_weight, bool distance_only) {
  check_inputs(X_p, X_q, h1, h2, row, col);
  const auto M = X_p.size(0), N = X_q.size(0), Vq = X_q.size(1),
             d = X_p.size(2);
  const bool fused = pose_weight.has_value() && !distance_only;
  if (fused)
    TORCH_CHECK(pose_weight->is_contiguous() &&
                    pose_weight->scalar_type() == X_p.scalar_type() &&
                    pose_weight->dim() == 3 && pose_weight->size(0) == N &&
                    pose_weight->size(1) == Vq * d,
                "hgw_routing_cpu: pose_weight must be a contiguous "
                "[N, Vq * d, O] tensor of the inputs' dtype");
  auto dist = torch::empty({M, N}, X_p.options());
  auto out = distance_only ? torch::empty({M, N, 0}, X_p.options())
             : fused ? torch::empty({M, N, pose_weight->size(2)}, X_p.options())
                     : torch::empty({M, N, Vq, d}, X_p.options());
  const auto o = make_options(X_p, X_q, beta_value(beta), eps, outer, inner,
                              proximal, uniform);
  AT_DISPATCH_FLOATING_TYPES(X_p.scalar_type(), "hgw_routing_forward", [&] {
    const auto in = pointers<scalar_t>(X_p, X_q, h1, h2, row, col);
    const auto types = mmhgw::prepare_types(in, o);
    scalar_t* dist_p = dist.data_ptr<scalar_t>();
    scalar_t* out_p = distance_only ? nullptr : out.data_ptr<scalar_t>();
    const scalar_t* W = fused ? pose_weight->data_ptr<scalar_t>() : nullptr;
    const int O = fused ? static_cast<int>(pose_weight->size(2)) : 0;
    mmhgw::dispatch_sizes(o.Vp, o.Vq, [&]<int VP, int VQ>() {
      at::parallel_for(0, M, 1, [&](int64_t begin, int64_t end) {
        if (fused)
          mmhgw::forward_pose_range<scalar_t, VP, VQ>(in, o, types, begin, end,
                                                      W, O, dist_p, out_p);
        else
          mmhgw::forward_range<scalar_t, VP, VQ>(in, o, types, begin, end,
                                                 dist_p, out_p);
      });
    });
  });
  return {dist, out};
}

torch::Tensor hgw_routing_plans(torch::Tensor X_p, torch::Tensor X_q,
                                torch::Tensor h1, torch::Tensor h2,
                                torch::Tensor row, torch::Tensor col,
                                double beta, double eps, int64_t outer,
                                int64_t inner, bool proximal, bool uniform,
                                bool round_plan) {
  check_inputs(X_p, X_q, h1, h2, row, col);
  const auto M = X_p.size(0), N = X_q.size(0), Vp = X_p.size(1),
             Vq = X_q.size(1);
  auto out = torch::empty({M, N, Vp, Vq}, X_p.options());
  auto o = make_options(X_p, X_q, beta, eps, outer, inner, proximal, uniform);
  o.round_plan = round_plan;
  AT_DISPATCH_FLOATING_TYPES(X_p.scalar_type(), "hgw_routing_plans", [&] {
    const auto in = pointers<scalar_t>(X_p, X_q, h1, h2, row, col);
    const auto types = mmhgw::prepare_types(in, o);
    scalar_t* out_p = out.data_ptr<scalar_t>();
    mmhgw::dispatch_sizes(o.Vp, o.Vq, [&]<int VP, int VQ>() {
      at::parallel_for(0, M, 1, [&](int64_t begin, int64_t end) {
        mmhgw::plans_range<scalar_t, VP, VQ>(in, o, types, begin, end, out_p);
      });
    });
  });
  return out;
}

std::vector<torch::Tensor> hgw_routing_backward(
    torch::Tensor grad_dist, torch::Tensor grad_parts, torch::Tensor X_p,
    torch::Tensor X_q, torch::Tensor h1, torch::Tensor h2, torch::Tensor row,
    torch::Tensor col, torch::Tensor beta, double eps, int64_t outer,
    int64_t inner, bool proximal, bool uniform, bool want_parts) {
  check_inputs(X_p, X_q, h1, h2, row, col);
  TORCH_CHECK(grad_dist.is_contiguous() && grad_parts.is_contiguous() &&
                  grad_dist.scalar_type() == X_p.scalar_type() &&
                  grad_parts.scalar_type() == X_p.scalar_type(),
              "hgw_routing_cpu: gradients must be contiguous, of the "
              "inputs' dtype");
  const auto M = X_p.size(0), N = X_q.size(0), Vq = X_q.size(1),
             d = X_p.size(2);
  // An empty grad_parts: the parts received no gradient; theirs is skipped.
  const bool with_parts_grad = grad_parts.numel() != 0;
  TORCH_CHECK(grad_dist.numel() == M * N &&
                  (!with_parts_grad || grad_parts.numel() == M * N * Vq * d),
              "hgw_routing_cpu: grad_dist must have M * N entries and "
              "grad_parts M * N * Vq * d (or none)");
  auto dX_p = torch::zeros_like(X_p), dh1 = torch::zeros_like(h1);
  auto drow = torch::zeros_like(row);
  // Gradients of the inputs shared by all locations (X_q, h2, col, beta):
  // one set per thread, summed at the end.
  const int threads = at::get_num_threads();
  auto dX_q = torch::zeros({threads, N, Vq, d}, X_p.options());
  auto dh2 = torch::zeros({threads, N, Vq, Vq}, X_p.options());
  auto dcol = torch::zeros({threads, N, Vq}, X_p.options());
  auto dbeta = torch::zeros({threads}, X_p.options());
  // The parts at the plans solved again, for a caller that did not keep
  // the forward's (empty unless asked for).
  auto parts = torch::empty({want_parts ? M : 0, N, Vq, d}, X_p.options());
  const auto o = make_options(X_p, X_q, beta_value(beta), eps, outer, inner,
                              proximal, uniform);
  AT_DISPATCH_FLOATING_TYPES(X_p.scalar_type(), "hgw_routing_backward", [&] {
    const auto in = pointers<scalar_t>(X_p, X_q, h1, h2, row, col);
    const auto types = mmhgw::prepare_types(in, o);
    const scalar_t* gd = grad_dist.data_ptr<scalar_t>();
    const scalar_t* gp =
        with_parts_grad ? grad_parts.data_ptr<scalar_t>() : nullptr;
    scalar_t* dXp = dX_p.data_ptr<scalar_t>();
    scalar_t* dh1p = dh1.data_ptr<scalar_t>();
    scalar_t* drowp = drow.data_ptr<scalar_t>();
    scalar_t* dXq = dX_q.data_ptr<scalar_t>();
    scalar_t* dh2p = dh2.data_ptr<scalar_t>();
    scalar_t* dcolp = dcol.data_ptr<scalar_t>();
    scalar_t* dbetap = dbeta.data_ptr<scalar_t>();
    scalar_t* parts_p = want_parts ? parts.data_ptr<scalar_t>() : nullptr;
    mmhgw::dispatch_sizes(o.Vp, o.Vq, [&]<int VP, int VQ>() {
      at::parallel_for(0, M, 1, [&](int64_t begin, int64_t end) {
        const int64_t t = at::get_thread_num();
        mmhgw::backward_range<scalar_t, VP, VQ>(
            in, o, types, gd, gp, begin, end, dXp, dh1p, drowp,
            dXq + t * N * Vq * d, dh2p + t * N * Vq * Vq, dcolp + t * N * Vq,
            dbetap + t, parts_p);
      });
    });
  });
  return {dX_p, dX_q.sum(0), dh1,         dh2.sum(0),
          drow, dcol.sum(0), dbeta.sum(), parts};
}

}  // namespace cpu
}  // namespace mmhgw
