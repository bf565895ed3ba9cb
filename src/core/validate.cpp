#include "core/validate.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "core/kv_cache.h"
#include "core/semantics.h"
#include "core/tensor.h"

namespace fsdpa {

namespace detail {

void throw_invalid(const std::string& message) { throw InvalidArgument("fsdpa: " + message); }

namespace {

std::string str(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

bool known(DType dtype) {
  switch (dtype) {
    case DType::F16:
    case DType::BF16:
    case DType::F32:
    case DType::Bool:
    case DType::I32:
      return true;
  }
  return false;
}

bool known(DeviceType type) {
  switch (type) {
    case DeviceType::CPU:
    case DeviceType::CUDA:
      return true;
  }
  return false;
}

std::string list(const std::array<int64_t, kMaxRank>& values, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += (d > 0 ? ", " : "") + std::to_string(values[d]);
  return s + "]";
}

// The memory a view may span (kMaxSpanBytes), checked without overflow: its
// element count and its extent (the offset of its last element, plus one)
// times the element size. Every size, offset and workspace product the
// library forms from sizes under this bound fits in 64 bits.
void check_span(const TensorView& t, const char* name) {
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 0) return;  // no element: nothing is read or written
  const int64_t bytes = static_cast<int64_t>(element_size(t.dtype));
  int64_t count = 1, last = 0;
  for (int d = 0; d < t.rank; ++d) {
    int64_t term = 0;
    const bool overflow = __builtin_mul_overflow(count, t.sizes[d], &count) ||
                          __builtin_mul_overflow(t.sizes[d] - 1, t.strides[d], &term) ||
                          __builtin_add_overflow(last, term, &last);
    if (overflow || count > kMaxSpanBytes / bytes || last >= kMaxSpanBytes / bytes)
      throw_invalid(std::string(name) + ": sizes " + list(t.sizes, t.rank) + " with strides " +
                    list(t.strides, t.rank) + " span more than " + std::to_string(kMaxSpanBytes) +
                    " bytes (2^52) from dimension " + std::to_string(d) + " on (size " +
                    std::to_string(t.sizes[d]) + ", stride " + std::to_string(t.strides[d]) + ")");
  }
}

std::string device_name(Device device) {
  return std::string(to_string(device.type)) + ":" + std::to_string(device.index);
}

// Checks that hold for every tensor argument, whatever its role.
void check_view(const TensorView& t, const char* name, int rank, const char* layout) {
  if (t.rank != rank)
    throw_invalid(std::string(name) + ": expected rank " + std::to_string(rank) + " " + layout +
                  ", got rank " + std::to_string(t.rank));
  if (!known(t.dtype))
    throw_invalid(std::string(name) + ": unknown dtype value " +
                  std::to_string(static_cast<int>(t.dtype)));
  if (!known(t.device.type))
    throw_invalid(std::string(name) + ": unknown device type value " +
                  std::to_string(static_cast<int>(t.device.type)));
  if (t.device.index < 0)
    throw_invalid(std::string(name) + ": device index must be >= 0, got " +
                  std::to_string(t.device.index));
  for (int d = 0; d < rank; ++d) {
    if (t.sizes[d] < 0)
      throw_invalid(std::string(name) + ": size " + std::to_string(d) + " must be >= 0, got " +
                    std::to_string(t.sizes[d]));
    if (t.strides[d] < 0)
      throw_invalid(std::string(name) + ": stride " + std::to_string(d) + " is " +
                    std::to_string(t.strides[d]) + "; negative strides are not supported");
  }
  check_span(t, name);
  if (t.data == nullptr && element_count(t) > 0)
    throw_invalid(std::string(name) + ": data is null but the tensor has " +
                  std::to_string(element_count(t)) + " elements");
}

void check_same_device(const TensorView& t, const char* name, const TensorView& q) {
  if (t.device.type != q.device.type || t.device.index != q.device.index)
    throw_invalid(std::string(name) + ": on device " + device_name(t.device) +
                  ", expected q's device " + device_name(q.device));
}

// An optional tensor of a fixed dtype on q's device (block table, lengths,
// sinks, lse): the common checks, then its dtype and its device.
void check_side_view(const TensorView& t, const char* name, int rank, const char* layout,
                     DType dtype, const TensorView& q) {
  check_view(t, name, rank, layout);
  if (t.dtype != dtype)
    throw_invalid(std::string(name) + ": dtype must be " + to_string(dtype) + ", got " +
                  to_string(t.dtype));
  check_same_device(t, name, q);
}

void check_size(const TensorView& t, const char* name, int dim, const char* what, int64_t expected,
                const char* source) {
  if (t.sizes[dim] != expected)
    throw_invalid(std::string(name) + ": size " + std::to_string(dim) + " (" + what + ") is " +
                  std::to_string(t.sizes[dim]) + ", expected " + std::to_string(expected) + " (" +
                  source + ")");
}

// Broadcastable dim of a mask: the full size or 1.
void check_broadcast_size(const TensorView& t, const char* name, int dim, const char* what,
                          int64_t expected, const char* source) {
  if (t.sizes[dim] != expected && t.sizes[dim] != 1)
    throw_invalid(std::string(name) + ": size " + std::to_string(dim) + " (" + what + ") is " +
                  std::to_string(t.sizes[dim]) + ", expected 1 or " + std::to_string(expected) +
                  " (" + source + "); the mask must broadcast to [B, Hq, Lq, Lk]");
}

// Outputs must not write one element twice.
void check_no_zero_stride(const TensorView& t, const char* name) {
  if (element_count(t) == 0) return;  // nothing is written (numpy gives empty arrays 0 strides)
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] > 1 && t.strides[d] == 0)
      throw_invalid(std::string(name) + ": stride " + std::to_string(d) + " is 0 with size " +
                    std::to_string(t.sizes[d]) + "; an output cannot be broadcast");
}

// Outputs must not write one element twice: with the dims of size > 1
// sorted by stride, each stride spans the extent of the dims below it.
void check_no_self_overlap(const TensorView& t, const char* name) {
  if (element_count(t) == 0) return;
  int order[kMaxRank];
  int count = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] <= 1) continue;
    int i = count++;  // insertion sort by stride: at most four dims
    for (; i > 0 && t.strides[order[i - 1]] > t.strides[d]; --i) order[i] = order[i - 1];
    order[i] = d;
  }
  int64_t extent = 1;  // elements spanned by the dims below
  for (int i = 0; i < count; ++i) {
    const int d = order[i];
    if (t.strides[d] < extent) {
      std::string sizes, strides;
      for (int e = 0; e < t.rank; ++e) {
        if (e > 0) {
          sizes.append(", ");
          strides.append(", ");
        }
        sizes.append(std::to_string(t.sizes[e]));
        strides.append(std::to_string(t.strides[e]));
      }
      throw_invalid(std::string(name) + ": sizes [" + sizes + "] with strides [" + strides +
                    "] make elements overlap; an output must not alias itself");
    }
    extent = t.strides[d] * t.sizes[d];
  }
}

struct ByteRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;  // one past the last byte
  bool empty() const { return begin == end; }
};

ByteRange byte_range(const TensorView& t) {
  if (t.data == nullptr || element_count(t) == 0) return {};
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.sizes[d] - 1) * t.strides[d];
  uintptr_t begin = reinterpret_cast<uintptr_t>(t.data);
  return {begin, begin + static_cast<uintptr_t>((last + 1) * element_size(t.dtype))};
}

void check_disjoint(const TensorView& output, const char* output_name, const TensorView& input,
                    const char* input_name) {
  ByteRange a = byte_range(output), b = byte_range(input);
  if (a.empty() || b.empty()) return;
  if (a.begin < b.end && b.begin < a.end)
    throw_invalid(std::string(output_name) + ": overlaps the memory of " + input_name +
                  "; outputs must not alias inputs");
}

// A GEMM operand: one of the two inner dims has stride 1 and the other
// spans at least the first one's extent (size-1 dims impose nothing).
bool blas_compatible(const TensorView& t, bool row_major_only) {
  const int64_t rows = t.sizes[2], cols = t.sizes[3];
  if (rows <= 1 || cols <= 1) return true;
  if (t.strides[3] == 1 && t.strides[2] >= cols) return true;
  return !row_major_only && t.strides[2] == 1 && t.strides[3] >= rows;
}

// The lengths and page ids a call uses, where the host can read them (CPU
// tensors): each length in [0, Lk], each id of a page holding one of the
// sequence's keys in [0, num_pages). Device-resident ones are the kernels'
// to clamp (KvIndex).
void check_kv_index(const Tensors& t, const Problem& p) {
  const bool host = t.q.device.type == DeviceType::CPU;
  if (!host) {  // the kernels load the indices as int32
    for (const auto& [view, name] :
         {std::pair{&t.block_table, "block_table"}, std::pair{&t.seq_lens_k, "seq_lens_k"}})
      if (*view && reinterpret_cast<uintptr_t>((*view)->data) % 4 != 0)
        throw_invalid(std::string(name) +
                      ": a CUDA i32 tensor must be 4-byte aligned, the address is " +
                      std::to_string(reinterpret_cast<uintptr_t>((*view)->data) % 4) +
                      " bytes past a multiple of 4");
    return;
  }
  // Nothing to check without a table or lengths, and a call that writes
  // nothing reads nothing (its batch may be past any memory: q can have no
  // element).
  if ((!t.block_table && !t.seq_lens_k) || !writes_output(p)) return;
  const KvIndex kv = make_kv_index(t, p);
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t len = p.len_k;
    if (kv.seq_lens_k != nullptr) {
      len = load_index(kv.seq_lens_k, b * kv.seq_lens_stride);
      if (len < 0 || len > p.len_k)
        throw_invalid("seq_lens_k: element " + std::to_string(b) + " is " + std::to_string(len) +
                      ", expected 0.." + std::to_string(p.len_k) +
                      (p.page_size > 0 ? " (max_pages * page_size)" : " (k's len_k)"));
    }
    if (kv.block_table == nullptr) continue;
    // The pages the sequence uses; a column stride of 0 repeats one id.
    const int64_t used = (len + p.page_size - 1) / p.page_size;
    const int64_t distinct = kv.block_table_strides[1] == 0 ? std::min<int64_t>(used, 1) : used;
    for (int64_t page = 0; page < distinct; ++page) {
      const int64_t id = load_index(
          kv.block_table, b * kv.block_table_strides[0] + page * kv.block_table_strides[1]);
      if (id < 0 || id >= p.num_pages)
        throw_invalid("block_table: element [" + std::to_string(b) + ", " + std::to_string(page) +
                      "] is " + std::to_string(id) + ", outside the pool's " +
                      std::to_string(p.num_pages) + " pages (k's size 0); sequence " +
                      std::to_string(b) + " uses its first " + std::to_string(used) + " pages");
    }
  }
}

}  // namespace

int64_t extent_bytes(const TensorView& t) {
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] == 0) return 0;
    last += (t.sizes[d] - 1) * t.strides[d];
  }
  return (last + 1) * static_cast<int64_t>(element_size(t.dtype));
}

int row_alignment(const TensorView& t) {
  if (t.strides[3] != 1 && t.sizes[3] > 1) return 0;
  const uint64_t bytes = element_size(t.dtype);
  uint64_t bits = reinterpret_cast<uintptr_t>(t.data) | 16;
  for (int d = 0; d < 3; ++d)
    if (t.sizes[d] > 1) bits |= static_cast<uint64_t>(t.strides[d]) * bytes;
  return static_cast<int>(bits & (~bits + 1));  // the lowest set bit: at most 16
}

int row_alignment(const Tensors& t) {
  return std::min(
      {row_alignment(t.q), row_alignment(t.k), row_alignment(t.v), row_alignment(t.out)});
}

void check_problem(const Problem& p) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", p.batch},           {"heads_q", p.heads_q},     {"heads_kv", p.heads_kv},
      {"len_q", p.len_q},           {"len_k", p.len_k},         {"head_dim_qk", p.head_dim_qk},
      {"head_dim_v", p.head_dim_v}, {"page_size", p.page_size}, {"num_pages", p.num_pages}};
  for (const auto& [what, size] : sizes)
    if (size < 0)
      throw_invalid("problem: " + std::string(what) + " must be >= 0, got " + std::to_string(size));
  if (p.heads_q > 0 && (p.heads_kv == 0 || p.heads_q % p.heads_kv != 0))
    throw_invalid("problem: heads_q=" + std::to_string(p.heads_q) +
                  " is not a multiple of heads_kv=" + std::to_string(p.heads_kv));
  if (!known(p.dtype))
    throw_invalid("problem: unknown dtype value " + std::to_string(static_cast<int>(p.dtype)));
  if (p.page_size > 0 && p.len_k % p.page_size != 0)
    throw_invalid("problem: len_k=" + std::to_string(p.len_k) + " is not a multiple of page_size=" +
                  std::to_string(p.page_size) + " (a paged call's len_k is max_pages * page_size)");
  if (p.page_size == 0 && p.num_pages != 0)
    throw_invalid("problem: num_pages=" + std::to_string(p.num_pages) +
                  " without a page_size (0: dense k and v)");
  const bool paged = p.page_size > 0;
  struct Span {
    const char* tensor;
    int64_t a, b, c, d;
  };
  const Span spans[] = {{"q", p.batch, p.heads_q, p.len_q, p.head_dim_qk},
                        {"k", paged ? p.num_pages : p.batch, paged ? p.page_size : p.heads_kv,
                         paged ? p.heads_kv : p.len_k, p.head_dim_qk},
                        {"v", paged ? p.num_pages : p.batch, paged ? p.page_size : p.heads_kv,
                         paged ? p.heads_kv : p.len_k, p.head_dim_v},
                        {"out", p.batch, p.heads_q, p.len_q, p.head_dim_v}};
  const int64_t bytes = static_cast<int64_t>(element_size(p.dtype));
  for (const Span& s : spans) {
    if (s.a == 0 || s.b == 0 || s.c == 0 || s.d == 0) continue;
    int64_t count = 0;
    if (__builtin_mul_overflow(s.a, s.b, &count) || __builtin_mul_overflow(count, s.c, &count) ||
        __builtin_mul_overflow(count, s.d, &count) || count > kMaxSpanBytes / bytes)
      throw_invalid("problem: " + std::string(s.tensor) + " of sizes [" + std::to_string(s.a) +
                    ", " + std::to_string(s.b) + ", " + std::to_string(s.c) + ", " +
                    std::to_string(s.d) + "] spans more than " + std::to_string(kMaxSpanBytes) +
                    " bytes (2^52)");
  }
}

void check_options(const Options& options) {
  if (options.scale && !(std::isfinite(*options.scale) && *options.scale > 0.0))
    throw_invalid("scale: expected a finite value > 0, got " + str(*options.scale));
  if (!(std::isfinite(options.softcap) && options.softcap >= 0.0))
    throw_invalid("softcap: expected a finite value >= 0 (0: none), got " + str(options.softcap));
  // The kernels keep scores in the exp2 domain: scale and cap times log2(e)
  // must be finite in float32, or every path but the float64 one would see
  // infinities. One bound, so every path and backend gives the same answer.
  const double max_exp2_factor = std::numeric_limits<float>::max() / kLog2eDouble;
  if (options.scale && *options.scale > max_exp2_factor)
    throw_invalid("scale: " + str(*options.scale) + " times log2(e) overflows float32; at most " +
                  str(max_exp2_factor));
  if (options.softcap > max_exp2_factor)
    throw_invalid("softcap: " + str(options.softcap) +
                  " times log2(e) overflows float32; at most " + str(max_exp2_factor));
  if (options.window_left && *options.window_left < 0)
    throw_invalid("window_left: expected >= 0, got " + std::to_string(*options.window_left));
  switch (options.causal_align) {
    case CausalAlign::BottomRight:
    case CausalAlign::TopLeft:
      break;
    default:
      throw_invalid("causal_align: unknown value " +
                    std::to_string(static_cast<int>(options.causal_align)));
  }
  if (options.policy) {
    switch (*options.policy) {
      case Policy::Auto:
      case Policy::ForceFused:
      case Policy::Unfused:
        break;
      default:
        throw_invalid("policy: unknown value " + std::to_string(static_cast<int>(*options.policy)));
    }
  }
}

double resolve_scale(const Options& options, int64_t head_dim_qk) {
  if (options.scale) return *options.scale;
  return head_dim_qk > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim_qk)) : 1.0;
}

int64_t env_integer(const char* name, int64_t min, int64_t max, int64_t absent) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return absent;
  const char* digits = env + (*env == '-' || *env == '+' ? 1 : 0);
  bool ok = *digits != '\0';
  for (const char* c = digits; *c != '\0'; ++c) ok = ok && *c >= '0' && *c <= '9';
  errno = 0;
  const long long value = ok ? std::strtoll(env, nullptr, 10) : 0;
  if (!ok || errno != 0 || value < min || value > max)
    throw_invalid(std::string(name) + ": expected an integer from " + std::to_string(min) + " to " +
                  std::to_string(max) + ", got '" + env + "'");
  return value;
}

int64_t shared_memory_limit() {
  return env_integer(kEnvSharedMemoryLimit, 0, std::numeric_limits<int32_t>::max(), -1);
}

Policy resolve_policy(const Options& options) {
  if (options.policy) return *options.policy;
  const char* env = std::getenv(kEnvPolicy);
  if (env == nullptr || *env == '\0') return Policy::Auto;
  if (std::strcmp(env, "auto") == 0) return Policy::Auto;
  if (std::strcmp(env, "fused") == 0) return Policy::ForceFused;
  if (std::strcmp(env, "unfused") == 0) return Policy::Unfused;
  throw_invalid(std::string("FSDPA_POLICY: expected auto, fused or unfused, got '") + env + "'");
}

void check_matches_plan(const Problem& planned, const Problem& actual) {
  auto differ = [](const char* what, int64_t expected, int64_t got) {
    throw_invalid("tensors do not match the plan: " + std::string(what) + " is " +
                  std::to_string(got) + ", the plan was made for " + std::to_string(expected));
  };
  if (planned.batch != actual.batch) differ("batch", planned.batch, actual.batch);
  if (planned.heads_q != actual.heads_q) differ("heads_q", planned.heads_q, actual.heads_q);
  if (planned.heads_kv != actual.heads_kv) differ("heads_kv", planned.heads_kv, actual.heads_kv);
  if (planned.len_q != actual.len_q) differ("len_q", planned.len_q, actual.len_q);
  if (planned.len_k != actual.len_k) differ("len_k", planned.len_k, actual.len_k);
  if (planned.head_dim_qk != actual.head_dim_qk)
    differ("head_dim_qk", planned.head_dim_qk, actual.head_dim_qk);
  if (planned.head_dim_v != actual.head_dim_v)
    differ("head_dim_v", planned.head_dim_v, actual.head_dim_v);
  if (planned.dtype != actual.dtype)
    throw_invalid(std::string("tensors do not match the plan: dtype is ") +
                  to_string(actual.dtype) + ", the plan was made for " + to_string(planned.dtype));
  if (planned.device.type != actual.device.type || planned.device.index != actual.device.index)
    throw_invalid("tensors do not match the plan: device is " + device_name(actual.device) +
                  ", the plan was made for " + device_name(planned.device));
  if (planned.mask != actual.mask ||
      (actual.mask == MaskKind::Additive && planned.mask_dtype != actual.mask_dtype))
    throw_invalid("tensors do not match the plan: the mask kind or dtype differs");
  if (planned.has_sinks != actual.has_sinks)
    throw_invalid("tensors do not match the plan: sinks are " +
                  std::string(actual.has_sinks ? "given" : "missing"));
  if (planned.has_lse != actual.has_lse)
    throw_invalid("tensors do not match the plan: lse is " +
                  std::string(actual.has_lse ? "given" : "missing"));
  if (actual.row_alignment < planned.row_alignment)
    throw_invalid("tensors do not match the plan: the plan needs rows with stride 1 and " +
                  std::to_string(planned.row_alignment) + "-byte alignment, the tensors have " +
                  (actual.row_alignment == 0 ? std::string("a last dimension of stride != 1")
                                             : std::to_string(actual.row_alignment) + "-byte"));
  if (planned.matrices_blas_compatible && !actual.matrices_blas_compatible)
    throw_invalid(
        "tensors do not match the plan: the plan needs matrices with a unit stride (a BLAS "
        "layout)");
  if (planned.v_aliases_k != actual.v_aliases_k)
    throw_invalid("tensors do not match the plan: v aliasing k differs");
  if (planned.page_size != actual.page_size)
    differ("page_size", planned.page_size, actual.page_size);
  if (planned.num_pages != actual.num_pages)
    differ("num_pages", planned.num_pages, actual.num_pages);
  if (planned.has_seq_lens_k != actual.has_seq_lens_k)
    throw_invalid("tensors do not match the plan: seq_lens_k is " +
                  std::string(actual.has_seq_lens_k ? "given" : "missing"));
}

}  // namespace detail

using detail::check_view;

Problem describe(const Tensors& t, const Options& options) {
  using namespace detail;
  check_options(options);

  const bool paged = t.block_table.has_value();
  check_view(t.q, "q", 4, "[B, Hq, Lq, Dqk]");
  check_view(t.k, "k", 4, paged ? "[num_pages, page_size, Hkv, Dqk]" : "[B, Hkv, Lk, Dqk]");
  check_view(t.v, "v", 4, paged ? "[num_pages, page_size, Hkv, Dv]" : "[B, Hkv, Lk, Dv]");
  check_view(t.out, "out", 4, "[B, Hq, Lq, Dv]");

  const TensorView& q = t.q;
  if (q.dtype == DType::Bool || q.dtype == DType::I32)
    throw_invalid(std::string("q: dtype ") + to_string(q.dtype) +
                  " is not supported; use f16, bf16 or f32");
  for (const auto& [view, name] :
       {std::pair{&t.k, "k"}, std::pair{&t.v, "v"}, std::pair{&t.out, "out"}}) {
    if (view->dtype != q.dtype)
      throw_invalid(std::string(name) + ": dtype " + to_string(view->dtype) +
                    " differs from q's dtype " + to_string(q.dtype));
    check_same_device(*view, name, q);
  }

  Problem p;
  p.batch = q.sizes[0];
  p.heads_q = q.sizes[1];
  p.len_q = q.sizes[2];
  p.head_dim_qk = q.sizes[3];
  p.head_dim_v = t.v.sizes[3];
  p.dtype = q.dtype;
  p.device = q.device;

  check_size(t.k, "k", 3, "head_dim_qk", p.head_dim_qk, "q's head_dim_qk");
  if (paged) {
    p.num_pages = t.k.sizes[0];
    p.page_size = t.k.sizes[1];
    p.heads_kv = t.k.sizes[2];
    check_size(t.v, "v", 0, "num_pages", p.num_pages, "k's num_pages");
    check_size(t.v, "v", 1, "page_size", p.page_size, "k's page_size");
    check_size(t.v, "v", 2, "heads_kv", p.heads_kv, "k's heads_kv");
    if (p.page_size == 0)
      throw_invalid("k: page_size (size 1) is 0; a page holds at least one key");
    const TensorView& bt = *t.block_table;
    check_side_view(bt, "block_table", 2, "[B, max_pages]", DType::I32, q);
    check_size(bt, "block_table", 0, "batch", p.batch, "q's batch");
    if (__builtin_mul_overflow(bt.sizes[1], p.page_size, &p.len_k) || p.len_k > kMaxSpanBytes)
      throw_invalid("block_table: max_pages=" + std::to_string(bt.sizes[1]) +
                    " times page_size=" + std::to_string(p.page_size) +
                    " keys exceed 2^52 (the key capacity of a sequence)");
  } else {
    p.heads_kv = t.k.sizes[1];
    p.len_k = t.k.sizes[2];
    check_size(t.k, "k", 0, "batch", p.batch, "q's batch");
    check_size(t.v, "v", 0, "batch", p.batch, "q's batch");
    check_size(t.v, "v", 1, "heads_kv", p.heads_kv, "k's heads_kv");
    check_size(t.v, "v", 2, "len_k", p.len_k, "k's len_k");
  }
  check_size(t.out, "out", 0, "batch", p.batch, "q's batch");
  check_size(t.out, "out", 1, "heads_q", p.heads_q, "q's heads_q");
  check_size(t.out, "out", 2, "len_q", p.len_q, "q's len_q");
  check_size(t.out, "out", 3, "head_dim_v", p.head_dim_v, "v's head_dim_v");
  if (p.heads_kv == 0 && p.heads_q > 0)
    throw_invalid("k: heads_kv is 0 but q has heads_q=" + std::to_string(p.heads_q));
  if (p.heads_kv > 0 && p.heads_q % p.heads_kv != 0)
    throw_invalid("heads: heads_q=" + std::to_string(p.heads_q) +
                  " is not a multiple of heads_kv=" + std::to_string(p.heads_kv));
  if (t.seq_lens_k) {
    const TensorView& l = *t.seq_lens_k;
    check_side_view(l, "seq_lens_k", 1, "[B]", DType::I32, q);
    check_size(l, "seq_lens_k", 0, "batch", p.batch, "q's batch");
    p.has_seq_lens_k = true;
  }
  check_kv_index(t, p);
  check_no_zero_stride(t.out, "out");
  check_disjoint(t.out, "out", t.q, "q");
  check_disjoint(t.out, "out", t.k, "k");
  check_disjoint(t.out, "out", t.v, "v");
  if (t.block_table) check_disjoint(t.out, "out", *t.block_table, "block_table");
  if (t.seq_lens_k) check_disjoint(t.out, "out", *t.seq_lens_k, "seq_lens_k");

  if (t.mask) {
    const TensorView& m = *t.mask;
    check_view(m, "mask", 4, "[B|1, Hq|1, Lq, Lk]");
    check_same_device(m, "mask", q);
    check_broadcast_size(m, "mask", 0, "batch", p.batch, "q's batch");
    check_broadcast_size(m, "mask", 1, "heads", p.heads_q, "q's heads_q");
    check_broadcast_size(m, "mask", 2, "len_q", p.len_q, "q's len_q");
    check_broadcast_size(m, "mask", 3, "len_k", p.len_k, "k's len_k");
    if (m.dtype == DType::I32)
      throw_invalid("mask: dtype i32 is not supported; use bool (keep) or f16, bf16, f32 (added)");
    p.mask = m.dtype == DType::Bool ? MaskKind::Boolean : MaskKind::Additive;
    p.mask_dtype = m.dtype;
    check_disjoint(t.out, "out", m, "mask");
  }
  if (t.sinks) {
    const TensorView& s = *t.sinks;
    check_side_view(s, "sinks", 1, "[Hq]", DType::F32, q);
    if (s.sizes[0] != p.heads_q)
      throw_invalid("sinks: length is " + std::to_string(s.sizes[0]) +
                    ", expected heads_q=" + std::to_string(p.heads_q));
    p.has_sinks = true;
    check_disjoint(t.out, "out", s, "sinks");
  }
  if (t.lse) {
    const TensorView& l = *t.lse;
    check_side_view(l, "lse", 3, "[B, Hq, Lq]", DType::F32, q);
    check_size(l, "lse", 0, "batch", p.batch, "q's batch");
    check_size(l, "lse", 1, "heads_q", p.heads_q, "q's heads_q");
    check_size(l, "lse", 2, "len_q", p.len_q, "q's len_q");
    check_no_zero_stride(l, "lse");
    check_disjoint(l, "lse", t.q, "q");
    check_disjoint(l, "lse", t.k, "k");
    check_disjoint(l, "lse", t.v, "v");
    check_disjoint(l, "lse", t.out, "out");
    if (t.mask) check_disjoint(l, "lse", *t.mask, "mask");
    if (t.sinks) check_disjoint(l, "lse", *t.sinks, "sinks");
    if (t.block_table) check_disjoint(l, "lse", *t.block_table, "block_table");
    if (t.seq_lens_k) check_disjoint(l, "lse", *t.seq_lens_k, "seq_lens_k");
    p.has_lse = true;
  }

  check_no_self_overlap(t.out, "out");
  if (t.lse) check_no_self_overlap(*t.lse, "lse");

  p.row_alignment = row_alignment(t);
  // Page pools are no GEMM operand (the unfused GPU path takes dense k and v).
  p.matrices_blas_compatible = !paged && blas_compatible(t.q, false) &&
                               blas_compatible(t.k, false) && blas_compatible(t.v, false) &&
                               blas_compatible(t.out, true);
  p.v_aliases_k = t.v.data == t.k.data && t.v.strides[0] == t.k.strides[0] &&
                  t.v.strides[1] == t.k.strides[1] && t.v.strides[2] == t.k.strides[2] &&
                  t.v.strides[3] == t.k.strides[3] && p.head_dim_v <= p.head_dim_qk;
  return p;
}

}  // namespace fsdpa
