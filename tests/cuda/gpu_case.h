// One GPU attention case against the float64 CPU reference: random inputs in
// a chosen layout, poisoned outputs, the error measures of docs/design.md (Tests and benchmarks).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "cpu/cpu.h"
#include "cuda/common/device.h"
#include "cuda/prefill/prefill.h"
#include "fsdpa/fsdpa.h"
#include "splits_guard.h"

namespace fsdpa::gpu_test {

enum class Layout {
  BHSD,         // contiguous [B, H, L, D]
  BSHD,         // contiguous [B, L, H, D] viewed as [B, H, L, D]
  PaddedBSHD,   // BSHD with each row padded to a multiple of 8 elements plus 8
  Interleaved,  // k and v in one buffer [B, L, H, Dqk + Dv] (padded), v a view
  MlaAlias      // v a view of the first Dv columns of k (padded BSHD; Dv <= Dqk)
};

// A value written over every batch's and head's element (row, column) of
// q, k or v after the random fill (the NaN/Inf policy's cases).
struct Poison {
  char tensor;  // 'q', 'k' or 'v'
  int64_t row, column;
  float value;
};

struct Case {
  int64_t batch = 1, heads_q = 2, heads_kv = 1, len_q = 37, len_k = 97;
  int64_t head_dim_qk = 64, head_dim_v = 64;
  DType dtype = DType::BF16;
  Layout layout = Layout::PaddedBSHD;
  bool causal = false;
  CausalAlign align = CausalAlign::BottomRight;
  std::optional<int64_t> window;
  MaskKind mask = MaskKind::None;
  DType mask_dtype = DType::F32;
  bool mask_per_head = false;      // else broadcast over heads (stride 0)
  bool fully_masked_rows = false;  // boolean mask: some rows keep nothing
  bool sinks = false;
  bool lse = true;
  bool allow_tf32 = false;
  double softcap = 0.0;       // Options::softcap
  int decode_splits = 0;      // FSDPA_DECODE_SPLITS for the decode kernels; 0 = automatic
  bool kv_broadcast = false;  // K and V with stride 0 over batch and kv heads (torch's expand)
  bool offset_base = false;   // q, k, v, out start one element past an aligned address
  Policy policy = Policy::ForceFused;
  // When set, launch this row of the table directly, whatever plan() would
  // route to (the decode row takes few-query shapes first, the wgmma row
  // hides the mma.sync one on sm_90): each prefill row must be right for
  // every Lq >= 1.
  std::string row;
  std::vector<Poison> poisons;

  std::string name() const {
    std::ostringstream s;
    s << "B" << batch << "_H" << heads_q << "x" << heads_kv << "_L" << len_q << "x" << len_k << "_D"
      << head_dim_qk << "x" << head_dim_v << "_" << to_string(dtype) << "_"
      << (layout == Layout::BHSD         ? "bhsd"
          : layout == Layout::BSHD       ? "bshd"
          : layout == Layout::PaddedBSHD ? "padded"
          : layout == Layout::MlaAlias   ? "mla"
                                         : "interleaved");
    if (causal) s << (align == CausalAlign::TopLeft ? "_causalTL" : "_causalBR");
    if (window) s << "_win" << *window;
    if (mask == MaskKind::Additive)
      s << "_add" << to_string(mask_dtype) << (mask_per_head ? "H" : "");
    if (mask == MaskKind::Boolean) s << "_bool" << (fully_masked_rows ? "Empty" : "");
    if (sinks) s << "_sinks";
    if (allow_tf32) s << "_tf32";
    if (softcap > 0.0) s << "_cap" << static_cast<int>(softcap);
    if (kv_broadcast) s << "_kvbroadcast";
    if (offset_base) s << "_offset";
    if (decode_splits > 0) s << "_splits" << decode_splits;
    for (const Poison& x : poisons)
      s << "_" << x.tensor << x.row << "c" << x.column
        << (std::isnan(x.value) ? "nan"
            : x.value > 0       ? "inf"
                                : "minf");
    s << (policy == Policy::Unfused      ? "_unfused"
          : policy == Policy::ForceFused ? "_fused"
                                         : "_auto");
    return s.str();
  }
};

// The prefill rows that serve `dtype` with this build on device 0: the exact
// f32 row, or the MLA, wide and wgmma rows (sm_90, when built) and the
// mma.sync row.
inline std::vector<std::string> prefill_rows(DType dtype) {
  if (dtype == DType::F32) return {"cuda_fused_prefill_f32"};
  bool hopper_built = false;
  for (const auto& pair : detail::cuda::prefill_bucket_pairs())
    hopper_built = hopper_built || pair.hopper_compiled;
  if (hopper_built && detail::cuda::device_info(0).compute_capability == 90)
    return {"cuda_fused_prefill_mla_alternating", "cuda_fused_prefill_mla",
            "cuda_fused_prefill_wide", "cuda_fused_prefill_hopper", "cuda_fused_prefill"};
  return {"cuda_fused_prefill"};
}

struct Outcome {
  Plan plan;
  double relative_error = 0;  // ||out - ref|| / ||ref||
  double max_abs_error = 0;
  double lse_error = 0;   // max |lse - ref| / (1 + |ref|), -inf must match exactly
  int64_t unwritten = 0;  // output elements still poisoned (or NaN where the reference is finite)
  int64_t non_finite_mismatch =
      0;  // elements where the reference is NaN or infinite and got is not the same
  int64_t padding_touched = 0;  // padding bytes of out that changed
  std::vector<double> out;      // the output [B, Hq, Lq, Dv] as computed, for cross-checks
  std::string declined;         // Case::row's reason for not serving the case (nothing ran)
};

inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A host buffer mirrored on the device, with a view over each.
struct Buffer {
  std::vector<unsigned char> host;
  void* device = nullptr;
  Buffer() = default;
  explicit Buffer(size_t bytes) : host(bytes) {
    if (bytes) cuda_ok(cudaMalloc(&device, bytes), "cudaMalloc");
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (device) (void)cudaFree(device);
  }
  void upload() {
    if (!host.empty())
      cuda_ok(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  }
  void download() {
    if (!host.empty())
      cuda_ok(cudaMemcpy(host.data(), device, host.size(), cudaMemcpyDeviceToHost), "download");
  }
};

inline int64_t padded(int64_t d) { return (d + 7) / 8 * 8 + 8; }

// Sizes [B, H, L, D] with the strides of `layout` over a row pitch.
inline std::array<int64_t, 4> strides_for(Layout layout, int64_t heads, int64_t len,
                                          int64_t pitch) {
  if (layout == Layout::BHSD) return {heads * len * pitch, len * pitch, pitch, 1};
  return {len * heads * pitch, pitch, heads * pitch, 1};
}

inline TensorView make_view(void* data, DType dtype, std::array<int64_t, 4> sizes,
                            std::array<int64_t, 4> strides, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = 4;
  t.sizes = sizes;
  t.strides = strides;
  return t;
}

// The float64 reference of the last case that run_case checked, with the
// generator state its inputs were drawn from: expect_case runs one case's
// very inputs through the unfused path and every row, and a large case's
// reference (128 heads at 576/512) costs most of its time.
struct ReferenceMemo {
  std::string problem;  // Case::name() without its row and policy
  std::mt19937_64 inputs;
  detail::cpu::ReferenceResult ref;
};

inline const detail::cpu::ReferenceResult& memo_reference(const Case& c,
                                                          const std::mt19937_64& inputs,
                                                          const Tensors& host,
                                                          const Options& options) {
  static std::optional<ReferenceMemo> memo;
  Case problem = c;
  problem.row.clear();
  problem.policy = Policy::Auto;
  const std::string key = problem.name();
  if (!memo || memo->problem != key || memo->inputs != inputs)
    memo = ReferenceMemo{key, inputs, detail::cpu::reference_attention(host, options)};
  return memo->ref;
}

inline Outcome run_case(const Case& c, std::mt19937_64& rng) {
  const std::mt19937_64 inputs = rng;  // the generator state the inputs come from
  const size_t elt = element_size(c.dtype);
  const int64_t qk_pitch =
      c.layout == Layout::BHSD || c.layout == Layout::BSHD ? c.head_dim_qk : padded(c.head_dim_qk);
  const int64_t v_pitch =
      c.layout == Layout::BHSD || c.layout == Layout::BSHD ? c.head_dim_v : padded(c.head_dim_v);
  const Layout base_layout = c.layout == Layout::BHSD ? Layout::BHSD : Layout::BSHD;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](Buffer& b, DType dtype) {
    const size_t n = b.host.size() / element_size(dtype);
    for (size_t i = 0; i < n; ++i)
      detail::store_from_float(b.host.data(), dtype, static_cast<int64_t>(i), normal(rng));
  };

  // offset_base: one element of slack before each view.
  const size_t lead = c.offset_base ? elt : 0;
  Buffer q(static_cast<size_t>(c.batch * c.heads_q * c.len_q * qk_pitch) * elt + lead);
  fill(q, c.dtype);
  TensorView qh = make_view(q.host.data(), c.dtype, {c.batch, c.heads_q, c.len_q, c.head_dim_qk},
                            strides_for(base_layout, c.heads_q, c.len_q, qk_pitch), {});
  std::unique_ptr<Buffer> k_buffer, v_buffer;
  TensorView kh, vh;
  if (c.layout == Layout::Interleaved) {
    const int64_t pitch = qk_pitch + v_pitch;
    k_buffer = std::make_unique<Buffer>(
        static_cast<size_t>(c.batch * c.heads_kv * c.len_k * pitch) * elt + lead);
    fill(*k_buffer, c.dtype);
    kh = make_view(k_buffer->host.data(), c.dtype, {c.batch, c.heads_kv, c.len_k, c.head_dim_qk},
                   strides_for(Layout::BSHD, c.heads_kv, c.len_k, pitch), {});
    vh = kh;
    vh.data = k_buffer->host.data() + qk_pitch * elt;
    vh.sizes[3] = c.head_dim_v;
  } else if (c.layout == Layout::MlaAlias) {
    k_buffer = std::make_unique<Buffer>(
        static_cast<size_t>(c.batch * c.heads_kv * c.len_k * qk_pitch) * elt + lead);
    fill(*k_buffer, c.dtype);
    kh = make_view(k_buffer->host.data(), c.dtype, {c.batch, c.heads_kv, c.len_k, c.head_dim_qk},
                   strides_for(Layout::BSHD, c.heads_kv, c.len_k, qk_pitch), {});
    vh = kh;
    vh.sizes[3] = c.head_dim_v;
  } else {
    k_buffer = std::make_unique<Buffer>(
        static_cast<size_t>(c.batch * c.heads_kv * c.len_k * qk_pitch) * elt + lead);
    v_buffer = std::make_unique<Buffer>(
        static_cast<size_t>(c.batch * c.heads_kv * c.len_k * v_pitch) * elt + lead);
    fill(*k_buffer, c.dtype);
    fill(*v_buffer, c.dtype);
    kh = make_view(k_buffer->host.data(), c.dtype, {c.batch, c.heads_kv, c.len_k, c.head_dim_qk},
                   strides_for(base_layout, c.heads_kv, c.len_k, qk_pitch), {});
    vh = make_view(v_buffer->host.data(), c.dtype, {c.batch, c.heads_kv, c.len_k, c.head_dim_v},
                   strides_for(base_layout, c.heads_kv, c.len_k, v_pitch), {});
  }
  if (c.kv_broadcast)  // every batch and kv head reads the first one's keys and values
    for (TensorView* t : {&kh, &vh}) t->strides[0] = t->strides[1] = 0;
  Buffer out(static_cast<size_t>(c.batch * c.heads_q * c.len_q * v_pitch) * elt + lead);
  TensorView outh = make_view(out.host.data(), c.dtype, {c.batch, c.heads_q, c.len_q, c.head_dim_v},
                              strides_for(base_layout, c.heads_q, c.len_q, v_pitch), {});
  std::memset(out.host.data(), 0xFF, out.host.size());  // NaN in every dtype
  if (c.offset_base)
    for (TensorView* t : {&qh, &kh, &vh, &outh}) t->data = static_cast<char*>(t->data) + lead;
  for (const Poison& x : c.poisons) {
    const TensorView& t = x.tensor == 'q' ? qh : x.tensor == 'k' ? kh : vh;
    for (int64_t b = 0; b < t.sizes[0]; ++b)
      for (int64_t h = 0; h < t.sizes[1]; ++h)
        detail::store_from_float(t.data, c.dtype, detail::offset_of(t, b, h, x.row, x.column),
                                 x.value);
  }

  Tensors host;
  host.q = qh, host.k = kh, host.v = vh, host.out = outh;
  std::unique_ptr<Buffer> mask, sinks, lse;
  if (c.mask != MaskKind::None) {
    const DType mdt = c.mask == MaskKind::Boolean ? DType::Bool : c.mask_dtype;
    const int64_t mh = c.mask_per_head ? c.heads_q : 1;
    const int64_t n = c.batch * mh * c.len_q * c.len_k;
    mask = std::make_unique<Buffer>(static_cast<size_t>(n) * element_size(mdt));
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = (i / c.len_k) % c.len_q;
      if (mdt == DType::Bool) {
        const bool keep = !(c.fully_masked_rows && row % 5 == 3) && uniform(rng) < 0.7f;
        mask->host[static_cast<size_t>(i)] = keep ? 1 : 0;
      } else {
        const float u = uniform(rng);
        const float value = u < 0.05f ? -std::numeric_limits<float>::infinity() : -4.0f * u;
        detail::store_from_float(mask->host.data(), mdt, i, value);
      }
    }
    host.mask =
        make_view(mask->host.data(), mdt, {c.batch, mh, c.len_q, c.len_k},
                  {mh * c.len_q * c.len_k, mh == 1 ? 0 : c.len_q * c.len_k, c.len_k, 1}, {});
  }
  if (c.sinks) {
    sinks = std::make_unique<Buffer>(static_cast<size_t>(c.heads_q) * sizeof(float));
    std::uniform_real_distribution<float> uniform(-1.0f, 2.0f);
    for (int64_t h = 0; h < c.heads_q; ++h)
      reinterpret_cast<float*>(sinks->host.data())[h] = uniform(rng);
    TensorView s;
    s.data = sinks->host.data();
    s.dtype = DType::F32;
    s.rank = 1;
    s.sizes[0] = c.heads_q;
    s.strides[0] = 1;
    host.sinks = s;
  }
  if (c.lse) {
    lse = std::make_unique<Buffer>(static_cast<size_t>(c.batch * c.heads_q * c.len_q) *
                                   sizeof(float));
    std::memset(lse->host.data(), 0xFF, lse->host.size());
    TensorView l;
    l.data = lse->host.data();
    l.dtype = DType::F32;
    l.rank = 3;
    l.sizes = {c.batch, c.heads_q, c.len_q, 0};
    l.strides = {c.heads_q * c.len_q, c.len_q, 1, 0};
    host.lse = l;
  }

  Options options;
  options.causal = c.causal;
  options.causal_align = c.align;
  options.window_left = c.window;
  options.policy = c.policy;
  options.allow_tf32 = c.allow_tf32;
  options.softcap = c.softcap;

  // Device copies with the same strides.
  const std::vector<unsigned char> out_poison = out.host;
  Buffer* buffers[] = {&q,         k_buffer.get(), v_buffer.get(), &out,
                       mask.get(), sinks.get(),    lse.get()};
  for (Buffer* b : buffers)
    if (b) b->upload();
  auto on_device = [](TensorView t, const Buffer& b) {
    t.data = static_cast<unsigned char*>(b.device) +
             (static_cast<unsigned char*>(t.data) - b.host.data());
    t.device = {DeviceType::CUDA, 0};
    return t;
  };
  Tensors device;
  device.q = on_device(qh, q);
  device.k = on_device(kh, *k_buffer);
  device.v = on_device(vh, v_buffer ? *v_buffer : *k_buffer);
  device.out = on_device(outh, out);
  if (host.mask) device.mask = on_device(*host.mask, *mask);
  if (host.sinks) device.sinks = on_device(*host.sinks, *sinks);
  if (host.lse) device.lse = on_device(*host.lse, *lse);

  Outcome outcome;
  const Problem problem = describe(device, options);
  const SplitsGuard splits(c.decode_splits);
  if (!c.row.empty()) {
    const detail::KernelRow* row = nullptr;
    for (const detail::KernelRow& candidate : detail::selection_table())
      if (candidate.name == c.row) row = &candidate;
    if (row == nullptr) throw Error("fsdpa: test: no table row " + c.row);
    const detail::Verdict verdict = row->supports(problem, options);
    if (!verdict.ok) {
      outcome.declined = verdict.reason;
      return outcome;
    }
    Plan p = plan(problem, options);  // resolves scale and policy
    p.path = row->path;
    p.kernel = row->name;
    p.head_dim_qk_bucket = p.head_dim_v_bucket = 0;
    p.tile_q = p.tile_k = 0;
    p.instance = nullptr;
    row->configure(problem, p);
    outcome.plan = p;
    const Buffer workspace(p.workspace_bytes);  // split-K rows need one
    row->launch(p, device, workspace.device, nullptr);
  } else {
    outcome.plan = plan(problem, options);
    attention(device, options, nullptr);
  }
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize after attention");
  out.download();
  if (lse) lse->download();

  const detail::cpu::ReferenceResult& ref = memo_reference(c, inputs, host, options);
  double diff2 = 0, ref2 = 0;
  outcome.out.reserve(ref.out.size());
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.len_q; ++i) {
        for (int64_t d = 0; d < v_pitch; ++d) {
          // Elements from the buffer's start (outh.data is `lead` past it).
          const int64_t offset = detail::offset_of(outh, b, h, i, d) + (c.offset_base ? 1 : 0);
          if (d >= c.head_dim_v) {
            if (std::memcmp(out.host.data() + offset * elt, out_poison.data() + offset * elt,
                            elt) != 0)
              ++outcome.padding_touched;
            continue;
          }
          const double got = detail::load_as_float(out.host.data(), c.dtype, offset);
          outcome.out.push_back(got);
          const double want =
              ref.out[static_cast<size_t>(((b * c.heads_q + h) * c.len_q + i) * c.head_dim_v + d)];
          if (!std::isfinite(want)) {
            if (std::isnan(want) ? !std::isnan(got) : got != want) ++outcome.non_finite_mismatch;
            continue;
          }
          if (!std::isfinite(got)) {
            ++outcome.unwritten;
            continue;
          }
          diff2 += (got - want) * (got - want);
          ref2 += want * want;
          outcome.max_abs_error = std::max(outcome.max_abs_error, std::abs(got - want));
        }
        if (lse) {
          const double got =
              reinterpret_cast<const float*>(lse->host.data())[(b * c.heads_q + h) * c.len_q + i];
          const double want = ref.lse[static_cast<size_t>((b * c.heads_q + h) * c.len_q + i)];
          double e;
          if (std::isnan(want))
            e = std::isnan(got) ? 0.0 : 1e30;
          else if (std::isinf(want) || std::isinf(got))
            e = (std::isinf(want) && std::isinf(got) && (want < 0) == (got < 0)) ? 0.0 : 1e30;
          else if (std::isnan(got))
            e = 1e30;
          else
            e = std::abs(got - want) / (1.0 + std::abs(want));
          outcome.lse_error = std::max(outcome.lse_error, e);
        }
      }
  outcome.relative_error = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return outcome;
}

inline double tolerance(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::BF16:
      return 1e-2;
    case DType::F16:
      return 2e-3;
    default:
      return tf32 ? 1e-3 : 1e-5;
  }
}

inline std::mt19937_64& test_rng() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng;
}

}  // namespace fsdpa::gpu_test
