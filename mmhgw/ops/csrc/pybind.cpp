// The module mmhgw._ext: the CPU kernels of every op, with named arguments.
#include <torch/extension.h>

#include <vector>

namespace mmhgw {
namespace cpu {

std::vector<torch::Tensor> hgw_routing_forward(
    torch::Tensor X_p, torch::Tensor X_q, torch::Tensor h1, torch::Tensor h2,
    torch::Tensor row, torch::Tensor col, torch::Tensor beta, double eps,
    int64_t outer, int64_t inner, bool proximal, bool uniform,
    c10::optional<torch::Tensor> pose_weight, bool distance_only);

torch::Tensor hgw_routing_plans(torch::Tensor X_p, torch::Tensor X_q,
                                torch::Tensor h1, torch::Tensor h2,
                                torch::Tensor row, torch::Tensor col,
                                double beta, double eps, int64_t outer,
                                int64_t inner, bool proximal, bool uniform,
                                bool round_plan);

std::vector<torch::Tensor> hgw_routing_backward(
    torch::Tensor grad_dist, torch::Tensor grad_parts, torch::Tensor X_p,
    torch::Tensor X_q, torch::Tensor h1, torch::Tensor h2, torch::Tensor row,
    torch::Tensor col, torch::Tensor beta, double eps, int64_t outer,
    int64_t inner, bool proximal, bool uniform, bool want_parts);

std::vector<torch::Tensor> hgw_structures_forward(
    torch::Tensor X, torch::Tensor beta, c10::optional<torch::Tensor> obs,
    bool use_observed, double floor, bool want_kl);

std::vector<torch::Tensor> hgw_structures_backward(
    torch::Tensor grad_C, torch::Tensor grad_row,
    c10::optional<torch::Tensor> grad_kl, torch::Tensor X, torch::Tensor beta,
    bool use_observed, double floor);

}  // namespace cpu
}  // namespace mmhgw

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace mmhgw::cpu;
  m.def("hgw_routing_forward", &hgw_routing_forward,
        "Fused HGW routing: distance [M, N] and barycentric parts "
        "[M, N, Vq, d], or with pose_weight [N, Vq * d, O] the poses "
        "[M, N, O], or with distance_only neither (empty [M, N, 0])",
        py::arg("X_p"), py::arg("X_q"), py::arg("h1"), py::arg("h2"),
        py::arg("row"), py::arg("col"), py::arg("beta"), py::arg("eps"),
        py::arg("outer"), py::arg("inner"), py::arg("proximal"),
        py::arg("uniform"), py::arg("pose_weight") = py::none(),
        py::arg("distance_only") = false);
  m.def("hgw_routing_plans", &hgw_routing_plans,
        "The plans [M, N, Vp, Vq] (rounded or not), for convergence studies",
        py::arg("X_p"), py::arg("X_q"), py::arg("h1"), py::arg("h2"),
        py::arg("row"), py::arg("col"), py::arg("beta"), py::arg("eps"),
        py::arg("outer"), py::arg("inner"), py::arg("proximal"),
        py::arg("uniform"), py::arg("round_plan"));
  m.def("hgw_routing_backward", &hgw_routing_backward,
        "Envelope gradient of the fused HGW routing (solves the plans "
        "again); an empty grad_parts skips the parts' gradient; with "
        "want_parts, also the parts at those plans",
        py::arg("grad_dist"), py::arg("grad_parts"), py::arg("X_p"),
        py::arg("X_q"), py::arg("h1"), py::arg("h2"), py::arg("row"),
        py::arg("col"), py::arg("beta"), py::arg("eps"), py::arg("outer"),
        py::arg("inner"), py::arg("proximal"), py::arg("uniform"),
        py::arg("want_parts"));
  m.def("hgw_structures_forward", &hgw_structures_forward,
        "The components' mixed structure C [M, V, V], KL row factor [M, V] "
        "and, with want_kl, the regulariser's off-diagonal KL of K against "
        "the observed structure per location [M] (else empty)",
        py::arg("X"), py::arg("beta"), py::arg("obs") = py::none(),
        py::arg("use_observed"), py::arg("floor"), py::arg("want_kl") = false);
  m.def("hgw_structures_backward", &hgw_structures_backward,
        "Gradient of hgw_structures_forward (co-activations or no observed "
        "structure) with respect to X [M, V, d] and beta (0-dim)",
        py::arg("grad_C"), py::arg("grad_row"), py::arg("grad_kl") = py::none(),
        py::arg("X"), py::arg("beta"), py::arg("use_observed"),
        py::arg("floor"));
}
