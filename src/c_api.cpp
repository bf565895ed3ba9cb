// The C ABI: converts the plain structs of c_api.h to the C++ API and every
// exception to a status code plus a thread-local message.
#include "fsdpa/c_api.h"

#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "core/validate.h"
#include "fsdpa/fsdpa.h"
#include "select/table.h"

// The C constants are the C++ enum values, so values pass through unchanged.
static_assert(FSDPA_DTYPE_F16 == static_cast<int>(fsdpa::DType::F16));
static_assert(FSDPA_DTYPE_BF16 == static_cast<int>(fsdpa::DType::BF16));
static_assert(FSDPA_DTYPE_F32 == static_cast<int>(fsdpa::DType::F32));
static_assert(FSDPA_DTYPE_BOOL == static_cast<int>(fsdpa::DType::Bool));
static_assert(FSDPA_DTYPE_I32 == static_cast<int>(fsdpa::DType::I32));
static_assert(FSDPA_DEVICE_CPU == static_cast<int>(fsdpa::DeviceType::CPU));
static_assert(FSDPA_DEVICE_CUDA == static_cast<int>(fsdpa::DeviceType::CUDA));
static_assert(FSDPA_CAUSAL_ALIGN_BOTTOM_RIGHT == static_cast<int>(fsdpa::CausalAlign::BottomRight));
static_assert(FSDPA_CAUSAL_ALIGN_TOP_LEFT == static_cast<int>(fsdpa::CausalAlign::TopLeft));
static_assert(FSDPA_POLICY_AUTO == static_cast<int>(fsdpa::Policy::Auto));
static_assert(FSDPA_POLICY_FUSED == static_cast<int>(fsdpa::Policy::ForceFused));
static_assert(FSDPA_POLICY_UNFUSED == static_cast<int>(fsdpa::Policy::Unfused));
static_assert(FSDPA_BACKEND_CPU == static_cast<int>(fsdpa::Backend::CPU));
static_assert(FSDPA_BACKEND_CUDA == static_cast<int>(fsdpa::Backend::CUDA));
static_assert(FSDPA_PATH_FUSED_PREFILL == static_cast<int>(fsdpa::Path::FusedPrefill));
static_assert(FSDPA_PATH_FUSED_DECODE == static_cast<int>(fsdpa::Path::FusedDecode));
static_assert(FSDPA_PATH_UNFUSED == static_cast<int>(fsdpa::Path::Unfused));
static_assert(FSDPA_MASK_NONE == static_cast<int>(fsdpa::MaskKind::None));
static_assert(FSDPA_MASK_ADDITIVE == static_cast<int>(fsdpa::MaskKind::Additive));
static_assert(FSDPA_MASK_BOOLEAN == static_cast<int>(fsdpa::MaskKind::Boolean));
static_assert(FSDPA_MAX_RANK == fsdpa::kMaxRank);
// The layouts the header promises (and the Python wrapper mirrors).
static_assert(sizeof(fsdpa_tensor) == 88);
static_assert(sizeof(fsdpa_options) == 48);
static_assert(sizeof(fsdpa_tensors) == 392);
static_assert(sizeof(fsdpa_plan_info) == 1336);

struct fsdpa_plan {
  fsdpa::Plan plan;
  std::string explanation;
};

namespace {

thread_local std::string t_last_error;
// Used when recording the message itself runs out of memory.
constexpr const char* kOutOfMemoryMessage = "fsdpa: out of memory (std::bad_alloc)";
thread_local const char* t_last_error_fallback = nullptr;

void set_last_error(const char* message) noexcept {
  try {
    t_last_error.assign(message);
    t_last_error_fallback = nullptr;
  } catch (...) {
    t_last_error_fallback = kOutOfMemoryMessage;
  }
}

// Runs body, mapping each exception to its status and recording its message.
template <typename Body>
fsdpa_status guarded(Body&& body) noexcept {
  try {
    body();
    return FSDPA_OK;
  } catch (const fsdpa::InvalidArgument& e) {
    set_last_error(e.what());
    return FSDPA_ERROR_INVALID_ARGUMENT;
  } catch (const fsdpa::Unsupported& e) {
    set_last_error(e.what());
    return FSDPA_ERROR_UNSUPPORTED;
  } catch (const fsdpa::DeviceError& e) {
    set_last_error(e.what());
    return FSDPA_ERROR_DEVICE;
  } catch (const fsdpa::Error& e) {
    set_last_error(e.what());
    return FSDPA_ERROR_INTERNAL;
  } catch (const std::bad_alloc&) {
    set_last_error(kOutOfMemoryMessage);
    return FSDPA_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    try {
      set_last_error(("fsdpa: internal error: " + std::string(e.what())).c_str());
    } catch (...) {
      set_last_error(kOutOfMemoryMessage);
    }
    return FSDPA_ERROR_INTERNAL;
  } catch (...) {
    set_last_error("fsdpa: internal error: unknown exception");
    return FSDPA_ERROR_INTERNAL;
  }
}

void require(const void* pointer, const char* name) {
  if (pointer == nullptr) fsdpa::detail::throw_invalid(std::string(name) + ": null pointer");
}

// The C++ enums are 8-bit. Values that fit reach the C++ validation as they
// are; values that do not would wrap to a valid one, so they are rejected
// here with the same message the C++ validation gives ("<name>: <what>
// value <v>"). The message is made only on that error: this runs for every
// view of every call.
template <typename Enum>
Enum to_enum(int32_t value, const char* name, const char* what) {
  if (value < 0 || value > 255)
    fsdpa::detail::throw_invalid(std::string(name) + ": " + what + " value " +
                                 std::to_string(value));
  return static_cast<Enum>(value);
}

fsdpa::TensorView to_view(const fsdpa_tensor& t, const char* name) {
  fsdpa::TensorView view;
  view.data = t.data;
  view.dtype = to_enum<fsdpa::DType>(t.dtype, name, "unknown dtype");
  view.device.type = to_enum<fsdpa::DeviceType>(t.device_type, name, "unknown device type");
  view.device.index = t.device_index;
  view.rank = t.rank;
  for (int d = 0; d < fsdpa::kMaxRank; ++d) {
    view.sizes[d] = t.sizes[d];
    view.strides[d] = t.strides[d];
  }
  return view;
}

fsdpa::Tensors to_tensors(const fsdpa_tensors* t) {
  require(t, "tensors");
  fsdpa::Tensors tensors;
  tensors.q = to_view(t->q, "q");
  tensors.k = to_view(t->k, "k");
  tensors.v = to_view(t->v, "v");
  tensors.out = to_view(t->out, "out");
  if (t->mask) tensors.mask = to_view(*t->mask, "mask");
  if (t->sinks) tensors.sinks = to_view(*t->sinks, "sinks");
  if (t->lse) tensors.lse = to_view(*t->lse, "lse");
  if (t->block_table) tensors.block_table = to_view(*t->block_table, "block_table");
  if (t->seq_lens_k) tensors.seq_lens_k = to_view(*t->seq_lens_k, "seq_lens_k");
  return tensors;
}

fsdpa::Options to_options(const fsdpa_options* o) {
  fsdpa::Options options;
  if (o == nullptr) return options;
  if (o->has_scale) options.scale = o->scale;
  options.causal = o->causal != 0;
  options.causal_align = to_enum<fsdpa::CausalAlign>(o->causal_align, "causal_align", "unknown");
  if (o->has_window) options.window_left = o->window_left;
  if (o->policy != FSDPA_POLICY_DEFAULT)
    options.policy = to_enum<fsdpa::Policy>(o->policy, "policy", "unknown");
  options.allow_tf32 = o->allow_tf32 != 0;
  options.softcap = o->softcap;
  return options;
}

// Copies text into a fixed array, cutting it with "..." when it does not fit.
template <size_t N>
void copy_text(char (&destination)[N], const std::string& text) {
  static_assert(N > 4);
  if (text.size() < N) {
    std::memcpy(destination, text.c_str(), text.size() + 1);
    return;
  }
  std::memcpy(destination, text.data(), N - 4);
  std::memcpy(destination + N - 4, "...", 4);
}

}  // namespace

extern "C" {

fsdpa_options fsdpa_options_init(void) {
  fsdpa_options options = FSDPA_OPTIONS_INIT;
  return options;
}

fsdpa_status fsdpa_attention(const fsdpa_tensors* tensors, const fsdpa_options* options,
                             void* stream) {
  return guarded([&] { fsdpa::attention(to_tensors(tensors), to_options(options), stream); });
}

fsdpa_status fsdpa_attention_data(const fsdpa_tensors* layout, const void* q, const void* k,
                                  const void* v, void* out, const void* const* optional,
                                  const fsdpa_options* options, void* stream) {
  return guarded([&] {
    fsdpa::Tensors t = to_tensors(layout);
    t.q.data = const_cast<void*>(q);
    t.k.data = const_cast<void*>(k);
    t.v.data = const_cast<void*>(v);
    t.out.data = out;
    // optional's order (c_api.h).
    const std::pair<const char*, std::optional<fsdpa::TensorView>*> views[] = {
        {"mask", &t.mask},
        {"sinks", &t.sinks},
        {"lse", &t.lse},
        {"block_table", &t.block_table},
        {"seq_lens_k", &t.seq_lens_k}};
    for (size_t i = 0; i < std::size(views); ++i) {
      std::optional<fsdpa::TensorView>& view = *views[i].second;
      if (!view) continue;
      if (optional == nullptr)
        fsdpa::detail::throw_invalid(std::string("optional: null, but the layout has ") +
                                     views[i].first + " (its data goes in optional[" +
                                     std::to_string(i) + "])");
      view->data = const_cast<void*>(optional[i]);
    }
    fsdpa::attention(t, to_options(options), stream);
  });
}

fsdpa_status fsdpa_plan_create(const fsdpa_tensors* tensors, const fsdpa_options* options,
                               fsdpa_plan** plan) {
  if (plan) *plan = nullptr;
  return guarded([&] {
    require(plan, "plan");
    const fsdpa::Tensors t = to_tensors(tensors);
    const fsdpa::Options o = to_options(options);
    auto handle = std::make_unique<fsdpa_plan>();
    handle->plan = fsdpa::plan(fsdpa::describe(t, o), o);
    handle->explanation = handle->plan.explain();
    *plan = handle.release();
  });
}

fsdpa_status fsdpa_plan_get_info(const fsdpa_plan* plan, fsdpa_plan_info* info) {
  return guarded([&] {
    require(plan, "plan");
    require(info, "info");
    const fsdpa::Plan& p = plan->plan;
    const fsdpa::Problem& pr = p.problem;
    fsdpa_plan_info i{};
    i.backend = static_cast<int32_t>(p.backend);
    i.path = static_cast<int32_t>(p.path);
    i.policy = static_cast<int32_t>(p.policy);
    i.dtype = static_cast<int32_t>(pr.dtype);
    i.device_type = static_cast<int32_t>(pr.device.type);
    i.device_index = pr.device.index;
    i.mask = static_cast<int32_t>(pr.mask);
    i.has_sinks = pr.has_sinks;
    i.has_lse = pr.has_lse;
    i.num_threads = p.num_threads;
    i.batch = pr.batch;
    i.heads_q = pr.heads_q;
    i.heads_kv = pr.heads_kv;
    i.len_q = pr.len_q;
    i.len_k = pr.len_k;
    i.head_dim_qk = pr.head_dim_qk;
    i.head_dim_v = pr.head_dim_v;
    i.head_dim_qk_bucket = p.head_dim_qk_bucket;
    i.head_dim_v_bucket = p.head_dim_v_bucket;
    i.tile_q = p.tile_q;
    i.tile_k = p.tile_k;
    i.num_kv_splits = p.num_kv_splits;
    i.page_size = pr.page_size;
    i.num_pages = pr.num_pages;
    i.has_seq_lens_k = pr.has_seq_lens_k;
    i.num_v_slices = static_cast<int32_t>(p.num_v_slices);
    i.workspace_bytes = p.workspace_bytes;
    i.scale = p.scale;
    i.pad_ratio = p.pad_ratio;
    copy_text(i.kernel, p.kernel);
    copy_text(i.fallback_reason, p.fallback_reason);
    *info = i;
  });
}

const char* fsdpa_plan_explain(const fsdpa_plan* plan) {
  if (plan == nullptr) {
    set_last_error("fsdpa: plan: null pointer");
    return nullptr;
  }
  return plan->explanation.c_str();
}

fsdpa_status fsdpa_run(const fsdpa_plan* plan, const fsdpa_tensors* tensors, void* workspace,
                       size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    fsdpa::run(plan->plan, to_tensors(tensors), workspace, workspace_bytes, stream);
  });
}

void fsdpa_plan_destroy(fsdpa_plan* plan) { delete plan; }

const char* fsdpa_support_matrix(void) {
  const char* text = "";
  guarded([&] {
    static const std::string matrix = fsdpa::support_matrix();
    text = matrix.c_str();
  });
  return text;
}

const char* fsdpa_plan_environment(void) {
  static const std::string names = [] {
    std::string joined;
    for (const char* name : fsdpa::detail::kPlanEnvironment) {
      if (!joined.empty()) joined += ',';
      joined += name;
    }
    return joined;
  }();
  return names.c_str();
}

int32_t fsdpa_backend_built(int32_t backend) {
  switch (backend) {
    case FSDPA_BACKEND_CPU:
      return fsdpa::detail::backend_built(fsdpa::Backend::CPU) ? 1 : 0;
    case FSDPA_BACKEND_CUDA:
      return fsdpa::detail::backend_built(fsdpa::Backend::CUDA) ? 1 : 0;
    default:
      return 0;
  }
}

const char* fsdpa_version(void) { return fsdpa::version(); }

int32_t fsdpa_abi_version(void) { return FSDPA_ABI_VERSION; }

const char* fsdpa_last_error(void) {
  if (t_last_error_fallback != nullptr) return t_last_error_fallback;
  return t_last_error.c_str();
}

const char* fsdpa_status_string(fsdpa_status status) {
  switch (status) {
    case FSDPA_OK:
      return "ok";
    case FSDPA_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case FSDPA_ERROR_UNSUPPORTED:
      return "unsupported";
    case FSDPA_ERROR_DEVICE:
      return "device error";
    case FSDPA_ERROR_INTERNAL:
      return "internal error";
    default:
      return "unknown status";
  }
}

}  // extern "C"
