// plan(), run(), attention() and the support matrix: everything here reads
// the selection table and nothing else.
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <memory>
#include <sstream>
#include <vector>

#include "core/validate.h"
#include "select/plan_cache.h"
#include "select/table.h"

#if FSDPA_WITH_CUDA
#include "cuda/common/device.h"
#endif

namespace fsdpa {

using detail::KernelRow;
using detail::selection_table;

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::CPU:
      return "cpu";
    case Backend::CUDA:
      return "cuda";
  }
  return "unknown-backend";
}

const char* to_string(Path path) {
  switch (path) {
    case Path::FusedPrefill:
      return "fused-prefill";
    case Path::FusedDecode:
      return "fused-decode";
    case Path::Unfused:
      return "unfused";
  }
  return "unknown-path";
}

const char* to_string(Policy policy) {
  switch (policy) {
    case Policy::Auto:
      return "auto";
    case Policy::ForceFused:
      return "fused";
    case Policy::Unfused:
      return "unfused";
  }
  return "unknown-policy";
}

const char* version() { return FSDPA_VERSION; }

namespace {

Backend backend_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU:
      return Backend::CPU;
    case DeviceType::CUDA:
      return Backend::CUDA;
  }
  detail::throw_invalid("device: unknown device type value " +
                        std::to_string(static_cast<int>(device.type)));
}

Plan make_plan(const Problem& problem, const Options& options, Policy policy, int row_index,
               std::string fallback_reason) {
  const KernelRow& row = selection_table()[row_index];
  Plan p;
  p.problem = problem;
  p.options = options;
  p.policy = policy;
  p.scale = detail::resolve_scale(options, problem.head_dim_qk);
  p.backend = row.backend;
  p.path = row.path;
  p.kernel = row.name;
  p.table_row = row_index;
  p.fallback_reason = std::move(fallback_reason);
  row.configure(problem, p);
  return p;
}

// The decline that decided an unfused plan: the last fused row of the
// backend whose reason is not just that the problem is another row's, as
// "row: reason" (the last reason when all are routed; "" when none declined).
std::string deciding_reason(const Problem& problem, const Options& options) {
  std::string deciding, last;
  for (const KernelRow& row : selection_table()) {
    if (row.backend != backend_for(problem.device) || row.path == Path::Unfused) continue;
    const detail::Verdict verdict = row.supports(problem, options);
    if (verdict.ok) continue;
    last = std::string(row.name) + ": " + verdict.reason;
    if (!verdict.routed) deciding = last;
  }
  return deciding.empty() ? last : deciding;
}

}  // namespace

namespace detail {

Plan plan_for_row(const Problem& problem, const Options& options, int row_index) {
  check_options(options);
  check_problem(problem);
  if (row_index < 0 || row_index >= static_cast<int>(selection_table().size()))
    throw_invalid("plan_for_row: row " + std::to_string(row_index) + " of a table of " +
                  std::to_string(selection_table().size()));
  return make_plan(problem, options, resolve_policy(options), row_index, "");
}

}  // namespace detail

Plan plan(const Problem& problem, const Options& options) {
  detail::check_options(options);
  detail::check_problem(problem);
  const Policy policy = detail::resolve_policy(options);
  const Backend backend = backend_for(problem.device);
  if (!detail::backend_built(backend))
    throw Unsupported(std::string("fsdpa: no kernel: backend ") + to_string(backend) +
                      " is not built into this library (configure with FSDPA_CUDA=ON and nvcc)");

  auto table = selection_table();
  std::string reasons;  // why each fused row of this backend declined
  int unfused_row = -1;
  for (int i = 0; i < static_cast<int>(table.size()); ++i) {
    const KernelRow& row = table[i];
    if (row.backend != backend) continue;
    if (row.path == Path::Unfused) {
      if (unfused_row < 0) unfused_row = i;
      continue;
    }
    if (policy == Policy::Unfused) continue;
    detail::Verdict verdict = row.supports(problem, options);
    if (verdict.ok) return make_plan(problem, options, policy, i, "");
    reasons += (reasons.empty() ? "" : "; ") + std::string(row.name) + ": " + verdict.reason;
  }
  if (reasons.empty() && policy != Policy::Unfused)
    reasons = std::string("backend ") + to_string(backend) + " has no fused kernel yet";

  if (policy == Policy::ForceFused) throw Unsupported("fsdpa: no fused kernel: " + reasons);
  if (unfused_row < 0)
    throw Unsupported(std::string("fsdpa: no kernel: backend ") + to_string(backend) +
                      " has no unfused path yet" + (reasons.empty() ? "" : "; " + reasons));
  if (const detail::Verdict verdict = table[unfused_row].supports(problem, options); !verdict.ok)
    throw Unsupported("fsdpa: no kernel: " + reasons + (reasons.empty() ? "" : "; ") +
                      table[unfused_row].name + ": " + verdict.reason);
  return make_plan(problem, options, policy, unfused_row,
                   policy == Policy::Unfused ? "policy is unfused" : reasons);
}

namespace {

// run() once the tensors are known to match the plan.
void launch(const Plan& plan, const Tensors& tensors, void* workspace, size_t workspace_bytes,
            void* stream) {
  if (workspace_bytes < plan.workspace_bytes)
    detail::throw_invalid("workspace: " + std::to_string(workspace_bytes) +
                          " bytes given, the plan needs " + std::to_string(plan.workspace_bytes));
  if (plan.workspace_bytes > 0 && workspace == nullptr)
    detail::throw_invalid("workspace: null, the plan needs " +
                          std::to_string(plan.workspace_bytes) + " bytes");
  if (plan.backend == Backend::CUDA && reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
    detail::throw_invalid("workspace: a CUDA plan needs it 16-byte aligned, the address is " +
                          std::to_string(reinterpret_cast<uintptr_t>(workspace) % 16) +
                          " bytes past a multiple of 16");
  if (plan.backend == Backend::CPU && stream != nullptr)
    detail::throw_invalid("stream: must be null for a CPU plan");
  selection_table()[plan.table_row].launch(plan, tensors, workspace, stream);
}

}  // namespace

void run(const Plan& plan, const Tensors& tensors, void* workspace, size_t workspace_bytes,
         void* stream) {
  auto table = selection_table();
  if (plan.table_row < 0 || plan.table_row >= static_cast<int>(table.size()) ||
      plan.kernel != table[plan.table_row].name)
    detail::throw_invalid("plan: not made by fsdpa::plan() of this library (kernel '" +
                          plan.kernel + "')");
  const Problem actual = describe(tensors, plan.options);
  detail::check_matches_plan(plan.problem, actual);
  launch(plan, tensors, workspace, workspace_bytes, stream);
}

void attention(const Tensors& tensors, const Options& options, void* stream) {
  // Planned once per shape (the cache), for exactly these tensors: no second
  // describe() as run() would do.
  const std::shared_ptr<const Plan> cached =
      detail::plan_cache().plan(describe(tensors, options), options);
  const Plan& p = *cached;
  if (p.backend == Backend::CPU) {
    std::unique_ptr<std::byte[]> workspace(p.workspace_bytes ? new std::byte[p.workspace_bytes]
                                                             : nullptr);
    launch(p, tensors, workspace.get(), p.workspace_bytes, stream);
    return;
  }
#if FSDPA_WITH_CUDA
  detail::cuda::StreamWorkspace workspace(p.workspace_bytes, p.problem.device.index, stream);
  launch(p, tensors, workspace.data(), p.workspace_bytes, stream);
#else
  throw Unsupported("fsdpa: no kernel: backend cuda is not built into this library");
#endif
}

std::string Plan::explain() const {
  std::ostringstream s;
  const Problem& pr = problem;
  s << "problem   B=" << pr.batch << " Hq=" << pr.heads_q << " Hkv=" << pr.heads_kv
    << " Lq=" << pr.len_q << " Lk=" << pr.len_k << " Dqk=" << pr.head_dim_qk
    << " Dv=" << pr.head_dim_v << " dtype=" << to_string(pr.dtype)
    << " device=" << to_string(pr.device.type) << ":" << pr.device.index << "\n";
  s << "features  causal="
    << (options.causal
            ? (options.causal_align == CausalAlign::TopLeft ? "top-left" : "bottom-right")
            : "no")
    << " window=" << (options.window_left ? std::to_string(*options.window_left) : "none")
    << " mask="
    << (pr.mask == MaskKind::None       ? "none"
        : pr.mask == MaskKind::Additive ? std::string("additive-") + to_string(pr.mask_dtype)
                                        : "boolean")
    << " sinks=" << (pr.has_sinks ? "yes" : "no") << " lse=" << (pr.has_lse ? "yes" : "no")
    << " scale=" << scale
    << " softcap=" << (options.softcap > 0.0 ? std::to_string(options.softcap) : "none") << "\n";
  if (pr.page_size > 0 || pr.has_seq_lens_k)
    s << "kv cache  "
      << (pr.page_size > 0 ? "paged: page_size=" + std::to_string(pr.page_size) + ", " +
                                 std::to_string(pr.num_pages) + " pages, " +
                                 std::to_string(pr.len_k / pr.page_size) + " per sequence"
                           : std::string("dense"))
      << (pr.has_seq_lens_k ? "; per-sequence lengths (seq_lens_k), Lk is the capacity" : "")
      << "\n";
  s << "policy    " << to_string(policy) << "\n";
  s << "backend   " << to_string(backend) << "\n";
  s << "path      " << to_string(path) << "\n";
  s << "kernel    " << kernel << "\n";
  if (head_dim_qk_bucket > 0)
    s << "bucket    " << head_dim_qk_bucket << "/" << head_dim_v_bucket
      << (num_v_slices > 1 ? " x " + std::to_string(num_v_slices) + " column slices" : "")
      << " (pad ratio " << std::fixed << std::setprecision(3) << pad_ratio << std::defaultfloat
      << ")\n";
  else if (num_v_slices > 1)
    s << "slices    Dv in " << num_v_slices << " column slices\n";
  if (tile_q > 0) s << "tiles     " << tile_q << " queries x " << tile_k << " keys\n";
  if (!loads.empty()) s << "loads     " << loads << "\n";
  s << "splits    " << num_kv_splits;
  if (kv_split_slots > 0)
    s << " at most a sequence; " << kv_split_slots
      << " for one of the batch's mean length (a list over the lengths)";
  s << "\n";
  if (backend == Backend::CPU) s << "threads   " << num_threads << "\n";
  s << "workspace " << workspace_bytes << " bytes\n";
  if (!fallback_reason.empty()) s << "fallback  " << fallback_reason << "\n";
  return s.str();
}

std::string support_matrix() {
  struct Shape {
    int64_t dqk, dv;
    const char* where;
    bool v_aliases_k = false;  // v a view of k's first dv columns (MLA's latent cache)
  };
  // Head dims of docs/design.md's model shapes plus the awkward ones and one past every limit.
  static const Shape kShapes[] = {
      {1, 1, "smallest"},
      {64, 64, "llama, whisper"},
      {72, 72, "qwen3-vl, siglip"},
      {80, 80, "vit-h14"},
      {90, 90, "odd-90"},
      {96, 96, "phi3"},
      {96, 64, "minicpm3"},
      {104, 104, "clip-bigg"},
      {128, 128, "llama3"},
      {160, 160, "-"},
      {192, 128, "deepseek prefill"},
      {256, 256, "gemma2, qwen3.6"},
      {288, 288, "paligemma2"},
      {512, 512, "gemma4"},
      {576, 512, "deepseek mla, v = k[..., :512]", true},
      {576, 512, "-"},
      {1040, 1040, "-"},
  };
  // Rows padded to 16 bytes, and contiguous rows (D * 2 bytes apart: 72 and 90
  // give 16- and 4-byte alignment), which is what most callers pass.
  struct Column {
    const char* title;
    int64_t len_q;
    bool contiguous;
  };
  static const Column kColumns[] = {{"prefill (Lq=4096), rows padded to 16 B", 4096, false},
                                    {"prefill (Lq=4096), contiguous rows", 4096, true},
                                    {"decode (Lq=1), contiguous rows", 1, true}};
  auto contiguous_alignment = [](int64_t dqk, int64_t dv) {
    const int64_t bits = 2 * dqk | 2 * dv | 16;  // bf16 rows of q, k (Dqk) and v, out (Dv)
    return static_cast<int>(bits & -bits);
  };

  std::ostringstream s;
  s << "Selection table rows (priority order within a backend):\n\n";
  s << "| backend | path | kernel | serves |\n|---|---|---|---|\n";
  for (const KernelRow& row : selection_table())
    s << "| " << to_string(row.backend) << " | " << to_string(row.path) << " | `" << row.name
      << "` | " << row.summary << " |\n";

  for (Backend backend : {Backend::CPU, Backend::CUDA}) {
    s << "\nBackend " << to_string(backend) << ", bf16, policy auto";
    if (!detail::backend_built(backend)) {
      s << ": not built into this library\n";
      continue;
    }
    s << ":\n\n| Dqk/Dv | model |";
    for (const Column& column : kColumns) s << " " << column.title << " |";
    s << "\n|---|---|---|---|---|\n";
    for (const Shape& shape : kShapes) {
      s << "| " << shape.dqk << "/" << shape.dv << " | " << shape.where << " |";
      for (const Column& column : kColumns) {
        Problem problem;
        problem.batch = 1;
        problem.heads_q = 8;
        problem.heads_kv = 8;
        problem.len_q = column.len_q;
        problem.len_k = 4096;
        problem.head_dim_qk = shape.dqk;
        problem.head_dim_v = shape.dv;
        problem.dtype = DType::BF16;
        problem.device = {backend == Backend::CPU ? DeviceType::CPU : DeviceType::CUDA, 0};
        problem.row_alignment = column.contiguous ? contiguous_alignment(shape.dqk, shape.dv) : 16;
        problem.v_aliases_k = shape.v_aliases_k;
        if (shape.v_aliases_k) problem.heads_kv = 1;
        Options options;
        options.policy = Policy::Auto;
        try {
          Plan p = plan(problem, options);
          s << " " << to_string(p.path) << " `" << p.kernel << "`";
          if (p.head_dim_qk_bucket > 0)
            s << " " << p.head_dim_qk_bucket << "/" << p.head_dim_v_bucket
              << (p.num_v_slices > 1 ? " x" + std::to_string(p.num_v_slices) + " slices" : "")
              << " (x" << std::fixed << std::setprecision(2) << p.pad_ratio << std::defaultfloat
              << ")";
          if (p.path == Path::Unfused) s << " (" << deciding_reason(problem, options) << ")";
          s << " |";
        } catch (const Error& e) {
          s << " none: " << e.what() << " |";
        }
      }
      s << "\n";
    }
  }
  return s.str();
}

}  // namespace fsdpa
