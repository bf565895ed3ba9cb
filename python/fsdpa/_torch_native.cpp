// fsdpa's compiled torch binding: attention() on torch tensors in one call
// from Python, for the fast path of fsdpa.attention (python/fsdpa/_api.py).
// It reads the tensors' layouts, allocates out (and lse) with torch's
// allocator and calls fsdpa_attention on torch's current stream; the
// library's plan cache serves the plan. Python's per-call cost of the same
// (the attribute reads of a key, torch.empty_like, ctypes) was two thirds of
// a CUDA decode call (docs/python.md). It does not link libfsdpa: Python
// hands it the address of fsdpa_attention in the library its ctypes wrapper
// loaded (set_library), so both run one library and its plan cache.
//
// What it does not serve it hands back (returns None) to the Python path,
// which names the error or handles the case: dtypes and devices fsdpa does
// not take, ranks above 4, q or v not of rank 4 (out's shape), empty
// tensors (whose strides the Python views rewrite). Under CUDA-graph
// capture it runs a plan of its own with the workspace from torch's
// allocator (the graph's pool), as the Python path does. An fsdpa error
// status goes to the `check` function that Python installs with the
// library, which raises fsdpa's exception.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#if FSDPA_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>

#include "fsdpa/c_api.h"

namespace {

namespace py = pybind11;

// What set_library installed (once, at the module's load).
struct Library {
  decltype(&fsdpa_attention) attention = nullptr;
  decltype(&fsdpa_plan_create) plan_create = nullptr;
  decltype(&fsdpa_plan_get_info) plan_get_info = nullptr;
  decltype(&fsdpa_run) run = nullptr;
  decltype(&fsdpa_plan_destroy) plan_destroy = nullptr;
  py::object* check = nullptr;  // never destroyed: it would outlive the interpreter
};
Library library;

// The view of `t` (padded on the left to `rank_at_least` dims of size 1 and
// stride 0, as the Python views pad a mask), or nothing where fsdpa's view
// cannot describe it.
bool to_view(const at::Tensor& t, fsdpa_tensor& view, int rank_at_least = 0) {
  if (t.numel() == 0) return false;
  switch (t.scalar_type()) {
    case at::kHalf:
      view.dtype = FSDPA_DTYPE_F16;
      break;
    case at::kBFloat16:
      view.dtype = FSDPA_DTYPE_BF16;
      break;
    case at::kFloat:
      view.dtype = FSDPA_DTYPE_F32;
      break;
    case at::kBool:
      view.dtype = FSDPA_DTYPE_BOOL;
      break;
    case at::kInt:
      view.dtype = FSDPA_DTYPE_I32;
      break;
    default:
      return false;
  }
  const at::Device device = t.device();
  if (device.is_cpu()) {
    view.device_type = FSDPA_DEVICE_CPU;
    view.device_index = 0;
  } else if (device.is_cuda()) {
    view.device_type = FSDPA_DEVICE_CUDA;
    view.device_index = device.index();
  } else {
    return false;
  }
  const int64_t dims = t.dim();
  const int64_t rank = dims < rank_at_least ? rank_at_least : dims;
  if (rank > FSDPA_MAX_RANK) return false;
  const int64_t pad = rank - dims;
  for (int64_t i = 0; i < pad; ++i) {
    view.sizes[i] = 1;
    view.strides[i] = 0;
  }
  for (int64_t i = 0; i < dims; ++i) {
    view.sizes[pad + i] = t.size(i);
    view.strides[pad + i] = t.stride(i);
  }
  view.rank = static_cast<int32_t>(rank);
  view.data = t.data_ptr();
  return true;
}

// A run while torch captures a CUDA graph: a plan of this call's layout,
// its workspace from torch's allocator (the graph's pool, stream-ordered),
// fsdpa_run. The plan is destroyed after the launch: the graph keeps the
// kernel's parameters by value.
fsdpa_status run_captured(const fsdpa_tensors& tensors, const fsdpa_options* options, void* stream,
                          const at::Tensor& q) {
  fsdpa_plan* plan = nullptr;
  fsdpa_status status = library.plan_create(&tensors, options, &plan);
  if (status != FSDPA_OK) return status;
  fsdpa_plan_info info{};
  status = library.plan_get_info(plan, &info);
  if (status == FSDPA_OK) {
    at::Tensor workspace;
    if (info.workspace_bytes > 0)
      workspace =
          at::empty({static_cast<int64_t>(info.workspace_bytes)}, q.options().dtype(at::kByte));
    status = library.run(plan, &tensors, info.workspace_bytes > 0 ? workspace.data_ptr() : nullptr,
                         info.workspace_bytes, stream);
  }
  library.plan_destroy(plan);
  return status;
}

// fsdpa.attention on torch tensors (the caller has checked that q, k, v and
// the optional arrays are exactly torch.Tensor and that none needs a
// gradient); `options` is the address of an fsdpa_options that outlives
// the call. Returns out, or (out, lse) when return_lse; None for the Python
// path.
py::object attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     std::uintptr_t options, bool return_lse, const std::optional<at::Tensor>& mask,
                     const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& out,
                     const std::optional<at::Tensor>& block_table,
                     const std::optional<at::Tensor>& seq_lens_k) {
  if (library.attention == nullptr) throw std::logic_error("fsdpa: internal: set_library first");
  if (q.dim() != 4 || v.dim() != 4) return py::none();
  fsdpa_tensors tensors{};
  if (!to_view(q, tensors.q) || !to_view(k, tensors.k) || !to_view(v, tensors.v)) return py::none();
  void* stream = nullptr;
  bool capturing = false;
  if (tensors.q.device_type == FSDPA_DEVICE_CUDA) {
#if FSDPA_TORCH_CUDA
    cudaStream_t current = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(current, &capture) != cudaSuccess) return py::none();
    capturing = capture != cudaStreamCaptureStatusNone;
    stream = current;
#else
    return py::none();
#endif
  }
  std::array<fsdpa_tensor, 5> optional{};
  struct Optional {
    const std::optional<at::Tensor>& tensor;
    const fsdpa_tensor** field;
    int rank_at_least;
  };
  const Optional optionals[] = {{mask, &tensors.mask, 4},
                                {sinks, &tensors.sinks, 0},
                                {block_table, &tensors.block_table, 0},
                                {seq_lens_k, &tensors.seq_lens_k, 0}};
  for (size_t i = 0; i < std::size(optionals); ++i) {
    if (!optionals[i].tensor.has_value()) continue;
    if (!to_view(*optionals[i].tensor, optional[i], optionals[i].rank_at_least)) return py::none();
    *optionals[i].field = &optional[i];
  }
  const at::Tensor result =
      out.has_value() ? *out : at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
  if (!to_view(result, tensors.out)) return py::none();
  at::Tensor lse;
  if (return_lse) {
    lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    if (!to_view(lse, optional[4])) return py::none();
    tensors.lse = &optional[4];
  }
  const auto* fsdpa_options_of_call = reinterpret_cast<const fsdpa_options*>(options);
  fsdpa_status status;
  if (capturing) {
    status = run_captured(tensors, fsdpa_options_of_call, stream, q);
  } else {
    py::gil_scoped_release no_gil;  // as ctypes releases it around the library's calls
    status = library.attention(&tensors, fsdpa_options_of_call, stream);
  }
  if (status != FSDPA_OK) {
    (*library.check)(status);  // raises fsdpa's exception
    throw std::logic_error("fsdpa: internal: check returned on an error status");
  }
  py::object result_object = py::cast(result);
  if (return_lse) return py::make_tuple(result_object, py::cast(lse));
  return result_object;
}

}  // namespace

PYBIND11_MODULE(_torch_native, m) {
  m.doc() = "fsdpa's compiled torch binding (the fast path of fsdpa.attention)";
  m.def("set_library",
        [](std::uintptr_t attention, std::uintptr_t plan_create, std::uintptr_t plan_get_info,
           std::uintptr_t run, std::uintptr_t plan_destroy, py::object check) {
          library.attention = reinterpret_cast<decltype(&fsdpa_attention)>(attention);
          library.plan_create = reinterpret_cast<decltype(&fsdpa_plan_create)>(plan_create);
          library.plan_get_info = reinterpret_cast<decltype(&fsdpa_plan_get_info)>(plan_get_info);
          library.run = reinterpret_cast<decltype(&fsdpa_run)>(run);
          library.plan_destroy = reinterpret_cast<decltype(&fsdpa_plan_destroy)>(plan_destroy);
          library.check = new py::object(std::move(check));
        });
  m.def("abi_version", [] { return FSDPA_ABI_VERSION; });
  m.def("attention", &attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("options"),
        py::arg("return_lse"), py::arg("mask"), py::arg("sinks"), py::arg("out"),
        py::arg("block_table"), py::arg("seq_lens_k"));
}
