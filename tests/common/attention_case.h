// Test support shared by the attention suites (CPU now, CUDA later):
//
//   AttentionCase   the description of one test case (shape, dtype, layout,
//                   masking features, policy) with a stable name;
//   AttentionData   host buffers and views for a case: fresh random inputs
//                   (normal-ish, never zero) from a per-run seed, outputs
//                   poisoned with a NaN bit pattern;
//   check_fused / check_unfused
//                   comparison of what a run wrote against
//                   cpu::reference_attention with the metrics of DESIGN §5.
//
// Every run draws a new base seed (or takes FSDPA_TEST_SEED) and each case
// derives its own from it and its name, so a failure message that prints the
// base seed reproduces the case exactly with FSDPA_TEST_SEED=<seed>.
//
// The header needs only the library's internal target (fsdpa_internal) and
// no test framework, so a CUDA suite can build the same cases, copy the
// buffers to the device and check the copies back with the same functions.
#pragma once

#include <algorithm>
#include <bit>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "cpu/cpu.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::test {

using detail::cpu::ReferenceResult;

// ------------------------------------------------------------------ seeds

// The seed of this run: FSDPA_TEST_SEED when set, else a fresh one.
inline uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("FSDPA_TEST_SEED"); env != nullptr && *env != '\0')
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    std::random_device device;
    const uint64_t time =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return (static_cast<uint64_t>(device()) << 32) ^ device() ^ time;
  }();
  return seed;
}

// FNV-1a: a stable per-name offset so each case has its own stream.
inline uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

inline std::string seed_note() {
  return "base seed " + std::to_string(base_seed()) +
         " (rerun with FSDPA_TEST_SEED=" + std::to_string(base_seed()) + ")";
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
  int64_t below(int64_t n) {  // [0, n)
    return std::uniform_int_distribution<int64_t>(0, n - 1)(engine_);
  }
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(engine_); }
  // Normal-ish and never zero (nor tiny): |x| >= 0.05.
  double nonzero() {
    const double x = normal();
    return std::abs(x) >= 0.05 ? x : std::copysign(0.05 + std::abs(x), x);
  }

 private:
  std::mt19937_64 engine_;
};

// ------------------------------------------------------------------ case

enum class Layout : uint8_t {
  Contiguous,  // BHSD, row-major
  Padded,      // BHSD with padding in every stride and a 1-element misaligned start
  BSHD,        // [B, L, H, D] storage (the transposed view of BHSD)
  DMajor,      // [B, H, D, L] storage: the last dimension has stride L
  PackedKV,    // k and v interleaved in one buffer [B, Lk, Hkv, Dqk + Dv]
  MlaAlias,    // v is a view of the first Dv columns of k (needs Dv <= Dqk)
};

enum class MaskType : uint8_t { None, Boolean, Additive };

enum class MaskShape : uint8_t {
  Full,        // [B, Hq, Lq, Lk]
  Shared,      // [1, 1, Lq, Lk]
  PerBatch,    // [B, 1, Lq, Lk]
  PerHead,     // [1, Hq, Lq, Lk]
  Expanded,    // [B, Hq, Lq, Lk] sizes over one [Lq, Lk] buffer: strides 0 on B and H
  KeyPadding,  // [B, Hq, Lq, Lk] sizes over a [B, Lk] buffer: strides 0 on H and Lq
  KeyRow,      // [B, 1, 1, Lk]: size 1 on H and Lq
};

inline const char* name_of(Layout layout) {
  switch (layout) {
    case Layout::Contiguous:
      return "bhsd";
    case Layout::Padded:
      return "padded";
    case Layout::BSHD:
      return "bshd";
    case Layout::DMajor:
      return "dmajor";
    case Layout::PackedKV:
      return "packedkv";
    case Layout::MlaAlias:
      return "mla";
  }
  return "?";
}

inline const char* name_of(MaskShape shape) {
  switch (shape) {
    case MaskShape::Full:
      return "full";
    case MaskShape::Shared:
      return "11LL";
    case MaskShape::PerBatch:
      return "B1LL";
    case MaskShape::PerHead:
      return "1HLL";
    case MaskShape::Expanded:
      return "stride0";
    case MaskShape::KeyPadding:
      return "keypad";
    case MaskShape::KeyRow:
      return "B11L";
  }
  return "?";
}

// A case name as a GoogleTest parameter name: every character that is not
// a letter or a digit becomes '_'.
inline std::string test_identifier(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

struct AttentionCase {
  int64_t batch = 1, heads_q = 1, heads_kv = 1, len_q = 1, len_k = 1;
  int64_t dqk = 64, dv = 64;
  DType dtype = DType::F32;
  Layout layout = Layout::Contiguous;
  MaskType mask = MaskType::None;
  DType mask_dtype = DType::F32;  // additive masks: f16, bf16 or f32
  MaskShape mask_shape = MaskShape::Full;
  bool masked_rows = false;  // make about a fifth of the mask's rows fully masked
  bool sinks = false;
  bool big_sinks = false;  // sinks around +4: the sink dominates the denominator
  bool lse = true;
  bool causal = false;
  CausalAlign align = CausalAlign::BottomRight;
  std::optional<int64_t> window;
  std::optional<double> scale;
  double softcap = 0.0;  // Options::softcap
  Policy policy = Policy::ForceFused;

  // A stable identifier usable as a GoogleTest parameter name.
  std::string name() const {
    std::ostringstream s;
    s << to_string(dtype) << "_b" << batch << "h" << heads_q << "kv" << heads_kv << "_q" << len_q
      << "k" << len_k << "_d" << dqk;
    if (dv != dqk) s << "v" << dv;
    s << "_" << name_of(layout);
    if (causal) s << (align == CausalAlign::BottomRight ? "_causalBR" : "_causalTL");
    if (window) s << "_win" << *window;
    if (mask == MaskType::Boolean) s << "_bool" << name_of(mask_shape);
    if (mask == MaskType::Additive) s << "_add" << to_string(mask_dtype) << name_of(mask_shape);
    if (mask != MaskType::None && masked_rows) s << "_deadrows";
    if (sinks) s << (big_sinks ? "_bigsinks" : "_sinks");
    if (!lse) s << "_nolse";
    if (scale) s << "_scale" << static_cast<int>(std::lround(*scale * 1000)) << "m";
    if (softcap > 0.0) s << "_cap" << static_cast<int>(std::lround(softcap * 1000)) << "m";
    if (policy != Policy::ForceFused) s << "_" << to_string(policy);
    return test_identifier(s.str());
  }

  Options options() const {
    Options o;
    o.scale = scale;
    o.causal = causal;
    o.causal_align = align;
    o.window_left = window;
    o.softcap = softcap;
    o.policy = policy;
    return o;
  }
};

// For test frameworks that print parameters (GoogleTest finds it by ADL).
inline void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name(); }

// ------------------------------------------------------------------ buffers

// Poison: a NaN bit pattern no computation produces by accident.
inline constexpr uint16_t kPoisonF16 = 0x7e5a;
inline constexpr uint16_t kPoisonBF16 = 0x7fa5;
inline constexpr uint32_t kPoisonF32 = 0x7fa5a5a5u;

// Host memory for one tensor: `lead` elements before the view's first element
// (for misalignment), the extent the view spans, and guard elements after.
class Storage {
 public:
  Storage() = default;
  Storage(DType dtype, int64_t elements) : dtype_(dtype), elements_(elements) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(elements, 1)) * element_size(dtype);
    data_.reset(new (std::align_val_t{64}) std::byte[bytes]);
    bytes_ = bytes;
  }
  std::byte* bytes() const { return data_.get(); }
  size_t size_bytes() const { return bytes_; }
  int64_t elements() const { return elements_; }
  DType dtype() const { return dtype_; }
  void* element(int64_t offset) const {
    return bytes() + static_cast<size_t>(offset) * element_size(dtype_);
  }

  void poison() {
    for (int64_t i = 0; i < elements_; ++i) set_bits(i, poison_bits(dtype_));
  }
  static uint32_t poison_bits(DType dtype) {
    switch (dtype) {
      case DType::F16:
        return kPoisonF16;
      case DType::BF16:
        return kPoisonBF16;
      case DType::F32:
        return kPoisonF32;
      case DType::Bool:
        return 0xa5;
      case DType::I32:
        return 0xa5a5a5a5u;
    }
    return 0;
  }
  uint32_t bits(int64_t i) const {
    switch (element_size(dtype_)) {
      case 1:
        return std::to_integer<uint32_t>(bytes()[i]);
      case 2: {
        uint16_t v;
        std::memcpy(&v, element(i), 2);
        return v;
      }
      default: {
        uint32_t v;
        std::memcpy(&v, element(i), 4);
        return v;
      }
    }
  }
  void set_bits(int64_t i, uint32_t value) {
    switch (element_size(dtype_)) {
      case 1:
        bytes()[i] = static_cast<std::byte>(value);
        return;
      case 2: {
        const uint16_t v = static_cast<uint16_t>(value);
        std::memcpy(element(i), &v, 2);
        return;
      }
      default:
        std::memcpy(element(i), &value, 4);
    }
  }
  std::vector<std::byte> snapshot() const {
    return std::vector<std::byte>(bytes(), bytes() + bytes_);
  }
  bool equals(const std::vector<std::byte>& snap) const {
    return snap.size() == bytes_ && std::memcmp(snap.data(), bytes(), bytes_) == 0;
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  DType dtype_ = DType::F32;
  int64_t elements_ = 0;
  size_t bytes_ = 0;
  std::unique_ptr<std::byte[], Free> data_;
};

// Elements from the first to one past the last element of a view.
inline int64_t extent(const TensorView& t) {
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] == 0) return 0;
    last += (t.sizes[d] - 1) * t.strides[d];
  }
  return last + 1;
}

// Offset of element (i0..i3) of a view, with size-1 dimensions broadcast
// (index ignored), written independently of the library.
inline int64_t broadcast_offset(const TensorView& t, int64_t i0, int64_t i1, int64_t i2,
                                int64_t i3) {
  const int64_t idx[4] = {i0, i1, i2, i3};
  int64_t off = 0;
  for (int d = 0; d < 4; ++d)
    if (t.sizes[d] != 1) off += idx[d] * t.strides[d];
  return off;
}

inline double rounded_to(DType dtype, double value) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case DType::F16:
      return detail::f16_to_float(detail::float_to_f16(f));
    case DType::BF16:
      return detail::bf16_to_float(detail::float_to_bf16(f));
    default:
      return f;
  }
}

// Strides of a 4-d tensor stored in the given axis order (slowest first) with
// `pad` extra elements added to each stride above the innermost.
inline std::array<int64_t, 4> layout_strides(std::array<int64_t, 4> sizes, std::array<int, 4> order,
                                             int64_t pad) {
  std::array<int64_t, 4> strides{};
  int64_t stride = 1;
  for (int k = 3; k >= 0; --k) {
    strides[order[k]] = stride;
    stride = stride * std::max<int64_t>(sizes[order[k]], 1) + pad;
  }
  return strides;
}

// A view of `rank` dims (sizes and strides past the rank unused).
inline TensorView view_n(void* data, DType dtype, int rank, std::array<int64_t, 4> sizes,
                         std::array<int64_t, 4> strides) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.rank = rank;
  t.sizes = sizes;
  t.strides = strides;
  return t;
}
inline TensorView view4(void* data, DType dtype, std::array<int64_t, 4> sizes,
                        std::array<int64_t, 4> strides) {
  return view_n(data, dtype, 4, sizes, strides);
}

// Buffers and views of one case. Movable, not copyable (views point into the
// buffers).
struct AttentionData {
  AttentionCase c;
  Storage q, kv, v, out, mask, sinks, lse;  // v unused (empty) for PackedKV and MlaAlias
  Tensors tensors;
  Options options;
  std::vector<std::vector<std::byte>> input_snapshots;

  AttentionData() = default;
  AttentionData(const AttentionData&) = delete;
  AttentionData& operator=(const AttentionData&) = delete;
  AttentionData(AttentionData&&) = default;
  AttentionData& operator=(AttentionData&&) = default;

  // Records the inputs so that check_* can tell whether a run wrote to them.
  void snapshot_inputs() {
    input_snapshots.clear();
    for (const Storage* s : inputs()) input_snapshots.push_back(s->snapshot());
  }
  std::vector<const Storage*> inputs() const { return {&q, &kv, &v, &mask, &sinks}; }

  void poison_outputs() {
    out.poison();
    lse.poison();
  }
};

namespace detail_case {

// Allocates storage for a 4-d view with the given strides and `lead` extra
// elements in front, plus 8 guard elements after.
inline TensorView allocate(Storage& storage, DType dtype, std::array<int64_t, 4> sizes,
                           std::array<int64_t, 4> strides, int64_t lead) {
  TensorView t = view4(nullptr, dtype, sizes, strides);
  storage = Storage(dtype, lead + extent(t) + 8);
  t.data = storage.element(lead);
  return t;
}

inline void fill_random(Storage& s, Rng& rng, double scale = 1.0) {
  for (int64_t i = 0; i < s.elements(); ++i)
    detail::store_from_float(s.bytes(), s.dtype(), i, static_cast<float>(scale * rng.nonzero()));
}

// Storage axis order (slowest first) of a q/k/v/out tensor of a layout.
inline std::array<int, 4> order_of(Layout layout) {
  switch (layout) {
    case Layout::BSHD:
      return {0, 2, 1, 3};
    case Layout::DMajor:
      return {0, 1, 3, 2};
    default:
      return {0, 1, 2, 3};
  }
}

}  // namespace detail_case

// Builds buffers and views for a case with fresh random inputs and poisoned
// outputs.
inline AttentionData make_data(const AttentionCase& c, Rng& rng) {
  using detail_case::allocate;
  using detail_case::fill_random;
  AttentionData d;
  d.c = c;
  d.options = c.options();
  const int64_t B = c.batch, Hq = c.heads_q, Hkv = c.heads_kv, Lq = c.len_q, Lk = c.len_k;
  const bool padded = c.layout == Layout::Padded;
  const int64_t pad = padded ? 3 : 0;
  const int64_t lead = padded ? 1 : 0;
  const auto order = detail_case::order_of(c.layout);

  Tensors& t = d.tensors;
  t.q = allocate(d.q, c.dtype, {B, Hq, Lq, c.dqk}, layout_strides({B, Hq, Lq, c.dqk}, order, pad),
                 lead);
  t.out = allocate(d.out, c.dtype, {B, Hq, Lq, c.dv}, layout_strides({B, Hq, Lq, c.dv}, order, pad),
                   lead);
  fill_random(d.q, rng);

  switch (c.layout) {
    case Layout::PackedKV: {
      const int64_t w = c.dqk + c.dv;
      // [B, Lk, Hkv, Dqk + Dv]: k is columns [0, Dqk), v columns [Dqk, Dqk + Dv).
      const std::array<int64_t, 4> strides{Lk * Hkv * w, w, Hkv * w, 1};
      d.kv = Storage(c.dtype, B * Lk * Hkv * w + 8);
      t.k = view4(d.kv.element(0), c.dtype, {B, Hkv, Lk, c.dqk}, strides);
      t.v = view4(d.kv.element(c.dqk), c.dtype, {B, Hkv, Lk, c.dv}, strides);
      fill_random(d.kv, rng);
      break;
    }
    case Layout::MlaAlias: {
      t.k = allocate(d.kv, c.dtype, {B, Hkv, Lk, c.dqk},
                     layout_strides({B, Hkv, Lk, c.dqk}, order, 0), 0);
      t.v = t.k;
      t.v.sizes[3] = c.dv;
      fill_random(d.kv, rng);
      break;
    }
    default:
      t.k = allocate(d.kv, c.dtype, {B, Hkv, Lk, c.dqk},
                     layout_strides({B, Hkv, Lk, c.dqk}, order, pad), lead);
      t.v = allocate(d.v, c.dtype, {B, Hkv, Lk, c.dv},
                     layout_strides({B, Hkv, Lk, c.dv}, order, pad), lead);
      fill_random(d.kv, rng);
      fill_random(d.v, rng);
  }

  if (c.mask != MaskType::None) {
    const DType mdt = c.mask == MaskType::Boolean ? DType::Bool : c.mask_dtype;
    // Storage rows [mb, mh, mq] of Lk values, and the view's sizes/strides.
    int64_t mb = B, mh = Hq, mq = Lq;
    switch (c.mask_shape) {
      case MaskShape::Full:
        break;
      case MaskShape::Shared:
      case MaskShape::Expanded:
        mb = 1, mh = 1;
        break;
      case MaskShape::PerBatch:
        mh = 1;
        break;
      case MaskShape::PerHead:
        mb = 1;
        break;
      case MaskShape::KeyPadding:
      case MaskShape::KeyRow:
        mh = 1, mq = 1;
        break;
    }
    const int64_t row = Lk + (padded ? 5 : 0);
    const int64_t rows = mb * mh * mq;
    d.mask = Storage(mdt, rows * row + 8);
    std::array<int64_t, 4> sizes{mb, mh, mq, Lk};
    std::array<int64_t, 4> strides{mh * mq * row, mq * row, row, 1};
    if (c.mask_shape == MaskShape::Expanded) sizes = {B, Hq, Lq, Lk}, strides = {0, 0, row, 1};
    if (c.mask_shape == MaskShape::KeyPadding) sizes = {B, Hq, Lq, Lk}, strides = {row, 0, 0, 1};
    t.mask = view4(d.mask.element(0), mdt, sizes, strides);
    // Which storage rows are fully masked: about a fifth, at least one.
    std::vector<bool> dead(static_cast<size_t>(rows), false);
    if (c.masked_rows && rows > 0) {
      for (int64_t r = 0; r < rows; ++r) dead[static_cast<size_t>(r)] = rng.uniform() < 0.2;
      dead[static_cast<size_t>(rng.below(rows))] = true;
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < row; ++j) {
        const int64_t i = r * row + j;
        const bool kill = dead[static_cast<size_t>(r)] || rng.uniform() < 0.2;
        if (mdt == DType::Bool)
          d.mask.set_bits(i, kill ? 0u : 1u);
        else
          detail::store_from_float(d.mask.bytes(), mdt, i,
                                   kill ? -std::numeric_limits<float>::infinity()
                                        : static_cast<float>(1.5 * rng.normal()));
      }
    }
    for (int64_t i = rows * row; i < d.mask.elements(); ++i) d.mask.set_bits(i, 0);
  }

  if (c.sinks) {
    const int64_t stride = padded ? 3 : 1;
    d.sinks = Storage(DType::F32, Hq * stride + 8);
    fill_random(d.sinks, rng);
    if (c.big_sinks)
      for (int64_t h = 0; h < Hq; ++h)
        detail::store_from_float(d.sinks.bytes(), DType::F32, h * stride,
                                 static_cast<float>(4.0 + 0.5 * rng.normal()));
    TensorView s;
    s.data = d.sinks.element(0);
    s.dtype = DType::F32;
    s.rank = 1;
    s.sizes[0] = Hq;
    s.strides[0] = stride;
    t.sinks = s;
  }

  if (c.lse) {
    std::array<int64_t, 3> strides{Hq * Lq, Lq, 1};
    if (padded) strides = {Hq * (Lq + 2) + 1, Lq + 2, 1};
    if (c.layout == Layout::BSHD) strides = {Lq * Hq, 1, Hq};
    TensorView l;
    l.dtype = DType::F32;
    l.rank = 3;
    l.sizes = {B, Hq, Lq, 0};
    l.strides = {strides[0], strides[1], strides[2], 0};
    int64_t ext = 1;
    for (int dim = 0; dim < 3; ++dim)
      ext += (std::max<int64_t>(l.sizes[dim], 1) - 1) * strides[dim];
    d.lse = Storage(DType::F32, lead + ext + 8);
    l.data = d.lse.element(lead);
    t.lse = l;
  } else {
    d.lse = Storage(DType::F32, 0);
  }
  if (!d.v.bytes()) d.v = Storage(c.dtype, 0);
  if (!d.mask.bytes()) d.mask = Storage(DType::Bool, 0);
  if (!d.sinks.bytes()) d.sinks = Storage(DType::F32, 0);

  d.poison_outputs();
  d.snapshot_inputs();
  return d;
}

// ------------------------------------------------------------------ checks

// The visibility rules of DESIGN §1, written independently of the library:
// key j is visible to query i unless causal or the window excludes it.
inline bool position_visible(const AttentionCase& c, int64_t i, int64_t j) {
  const int64_t offset = c.align == CausalAlign::BottomRight ? c.len_k - c.len_q : 0;
  if (c.causal && j > i + offset) return false;
  if (c.window && j < i + offset - *c.window) return false;
  return true;
}

// Number of keys query row (b, h, i) attends to (positions and array mask).
inline int64_t visible_count(const AttentionData& d, int64_t b, int64_t h, int64_t i) {
  int64_t n = 0;
  for (int64_t j = 0; j < d.c.len_k; ++j) {
    if (!position_visible(d.c, i, j)) continue;
    if (d.tensors.mask) {
      const TensorView& m = *d.tensors.mask;
      const float value = detail::load_as_float(m.data, m.dtype, broadcast_offset(m, b, h, i, j));
      if (m.dtype == DType::Bool ? value == 0.0f : value == -std::numeric_limits<float>::infinity())
        continue;
    }
    ++n;
  }
  return n;
}

// The bounds of DESIGN §5.
inline double relative_tolerance(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return 1e-2;
    case DType::F16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

// "No more than 2x the error of the unfused path at the same precision", on
// the CPU. The CPU unfused path *is* the float64 reference, rounded once to
// the output dtype (check_unfused mode verifies exactly that). Its error is
// the rounding error e_round = ||round_dtype(ref) - ref||, so "2x the
// unfused path" alone would demand a float64-accurate fused path. The fused
// path is allowed float32 scores, softmax and accumulation (DESIGN §1),
// which the unfused path does not have, so the fair bound is
//
//   ||out - ref|| <= 2 e_round + a_f32 ||ref||,
//   a_f32 = 2 u (sqrt(Lk + Dqk) + M),      u = 2^-24,
//
// with M = max over rows of scale * ||q_i|| * max_j ||k_j|| (>= the sum of
// |scale q_id k_jd| that bounds a float32 score's absolute error, which
// moves the output by the same relative amount), and sqrt(Lk + Dqk) the
// random-walk drift of float32 sums of that many terms. For f16/bf16 a_f32 is
// one to two orders below the rounding term, so the bound is "2x the output
// rounding"; for f32 it is what the float32 arithmetic permits, and the
// DESIGN bound 1e-5 applies on top.
inline double f32_compute_allowance(const AttentionCase& c, double score_magnitude) {
  return 2.0 * std::ldexp(1.0, -24) *
         (std::sqrt(static_cast<double>(c.len_k + c.dqk)) + score_magnitude);
}

// LSE is float32 whatever the dtype; the same error model per row:
// |lse - ref| <= 4 u (1 + |ref| + M_row + sqrt(Lk)).
inline double lse_tolerance(double ref, double row_magnitude, int64_t len_k) {
  return 4.0 * std::ldexp(1.0, -24) *
         (1.0 + std::abs(ref) + row_magnitude + std::sqrt(static_cast<double>(len_k)));
}

// scale * ||q_i|| * max_j ||k_j|| for every row [B, Hq, Lq] (see above).
inline std::vector<double> score_magnitudes(const AttentionData& d) {
  const AttentionCase& c = d.c;
  const Tensors& t = d.tensors;
  const double scale =
      c.scale ? *c.scale : (c.dqk > 0 ? 1.0 / std::sqrt(static_cast<double>(c.dqk)) : 1.0);
  std::vector<double> kmax(static_cast<size_t>(c.batch * c.heads_kv), 0.0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t g = 0; g < c.heads_kv; ++g)
      for (int64_t j = 0; j < c.len_k; ++j) {
        double n2 = 0;
        for (int64_t e = 0; e < c.dqk; ++e) {
          const double x =
              detail::load_as_float(t.k.data, c.dtype, detail::offset_of(t.k, b, g, j, e));
          n2 += x * x;
        }
        double& m = kmax[static_cast<size_t>(b * c.heads_kv + g)];
        m = std::max(m, std::sqrt(n2));
      }
  std::vector<double> rows(static_cast<size_t>(c.batch * c.heads_q * c.len_q), 0.0);
  const int64_t group = c.heads_kv > 0 ? c.heads_q / c.heads_kv : 1;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.len_q; ++i) {
        double n2 = 0;
        for (int64_t e = 0; e < c.dqk; ++e) {
          const double x =
              detail::load_as_float(t.q.data, c.dtype, detail::offset_of(t.q, b, h, i, e));
          n2 += x * x;
        }
        rows[static_cast<size_t>((b * c.heads_q + h) * c.len_q + i)] =
            scale * std::sqrt(n2) * kmax[static_cast<size_t>(b * c.heads_kv + h / group)];
      }
  return rows;
}

struct CheckResult {
  bool ok = true;
  std::string report;  // the first few problems, then the metrics
  double rel_error = 0, max_abs_error = 0, rounding_rel = 0, bound_rel = 0;
  int64_t dead_rows = 0;
};

enum class CheckMode : uint8_t { Fused, Unfused };

// Compares what a run wrote (d's out and lse buffers) with the float64
// reference. Checks: every element of out/lse written (no poison left) and
// no NaN; nothing outside the out/lse views written; inputs unchanged; fully
// masked rows exactly 0 with lse = -inf (or the sink); the oracle agrees with
// an independent count of visible keys; the error bounds of the mode.
inline CheckResult check_output(const AttentionData& d, const ReferenceResult& ref,
                                CheckMode mode) {
  CheckResult r;
  const AttentionCase& c = d.c;
  const Tensors& t = d.tensors;
  std::ostringstream problems;
  int reported = 0;
  // Records a problem; only the first few are printed.
  problems.precision(9);
  auto fail = [&](const auto&... parts) {
    r.ok = false;
    if (reported++ < 8) {
      problems << "  ";
      (problems << ... << parts);
      problems << "\n";
    }
  };
  auto index_of = [](const Storage& s, const TensorView& v) {
    return (static_cast<const std::byte*>(v.data) - s.bytes()) /
           static_cast<int64_t>(element_size(v.dtype));
  };

  // Nothing outside the output views is written.
  auto check_untouched = [&](const Storage& s, const TensorView& v, const char* name) {
    std::vector<bool> inside(static_cast<size_t>(s.elements()), false);
    const int64_t base = index_of(s, v);
    const int64_t n = detail::element_count(v);
    for (int64_t e = 0; e < n; ++e) {
      int64_t rem = e, off = 0;
      for (int dim = v.rank - 1; dim >= 0; --dim) {
        off += (rem % v.sizes[dim]) * v.strides[dim];
        rem /= v.sizes[dim];
      }
      inside[static_cast<size_t>(base + off)] = true;
    }
    const uint32_t poison = Storage::poison_bits(v.dtype);
    for (int64_t i = 0; i < s.elements(); ++i)
      if (!inside[static_cast<size_t>(i)] && s.bits(i) != poison) {
        fail(name, ": element ", i, " of the buffer, outside the view, was written");
        break;
      }
  };
  check_untouched(d.out, t.out, "out");
  if (t.lse) check_untouched(d.lse, *t.lse, "lse");

  const auto inputs = d.inputs();
  const char* input_names[] = {"q", "k", "v", "mask", "sinks"};
  for (size_t i = 0; i < inputs.size(); ++i)
    if (i < d.input_snapshots.size() && !inputs[i]->equals(d.input_snapshots[i]))
      fail("input buffer of ", input_names[i], " was modified");

  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> magnitude = score_magnitudes(d);
  double max_magnitude = 0;
  for (double m : magnitude) max_magnitude = std::max(max_magnitude, m);
  const int64_t out_base = index_of(d.out, t.out);
  double err2 = 0, ref2 = 0, round2 = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.len_q; ++i) {
        const int64_t row = (b * c.heads_q + h) * c.len_q + i;
        std::ostringstream at;
        at << "[" << b << "," << h << "," << i << "]";
        const std::string where = at.str();
        const bool dead = visible_count(d, b, h, i) == 0;
        r.dead_rows += dead;
        const double sink =
            t.sinks ? detail::load_as_float(t.sinks->data, DType::F32, h * t.sinks->strides[0])
                    : -inf;
        const double ref_lse = ref.lse[static_cast<size_t>(row)];
        // The oracle against the independent count: a fully masked row has
        // lse = sink (-inf without sinks); any other row a finite lse.
        if (dead ? ref_lse != sink : !std::isfinite(ref_lse))
          fail("oracle disagrees with the visible-key count at row ", where, " (count says ",
               dead ? "fully masked" : "visible", ", reference lse ", ref_lse, ")");
        for (int64_t e = 0; e < c.dv; ++e) {
          const int64_t off = detail::offset_of(t.out, b, h, i, e);
          const double got = detail::load_as_float(t.out.data, c.dtype, off);
          const double want = ref.out[static_cast<size_t>(row * c.dv + e)];
          if (std::isnan(got)) {
            fail("out", where, "[", e, "] is NaN (",
                 d.out.bits(out_base + off) == Storage::poison_bits(c.dtype) ? "never written"
                                                                             : "computed",
                 ")");
            continue;
          }
          if (!std::isfinite(got)) fail("out", where, "[", e, "] is ", got);
          if (dead && got != 0.0)
            fail("out", where, "[", e, "] of a fully masked row is ", got, ", expected exactly 0");
          const double diff = got - want;
          err2 += diff * diff;
          ref2 += want * want;
          const double rounded = rounded_to(c.dtype, want) - want;
          round2 += rounded * rounded;
          r.max_abs_error = std::max(r.max_abs_error, std::abs(diff));
          if (mode == CheckMode::Unfused) {
            // One rounding of the float64 value (through float): <= 1 ulp.
            const int mantissa = c.dtype == DType::F32 ? 23 : c.dtype == DType::F16 ? 10 : 7;
            const int min_exponent = c.dtype == DType::F16 ? -14 : -126;
            const int exponent =
                want == 0 ? min_exponent
                          : std::max(min_exponent,
                                     static_cast<int>(std::floor(std::log2(std::abs(want)))));
            if (std::abs(diff) > std::ldexp(1.0, exponent - mantissa))
              fail("out", where, "[", e, "] = ", got, " is more than 1 ulp from the reference ",
                   want);
          }
        }
        if (t.lse) {
          const double got =
              detail::load_as_float(t.lse->data, DType::F32, detail::offset_of(*t.lse, b, h, i));
          if (std::isnan(got)) {
            fail("lse", where, " is NaN");
          } else if (dead && !t.sinks) {
            if (got != -inf)
              fail("lse", where, " of a fully masked row is ", got, ", expected -inf");
          } else if (!std::isfinite(got) ||
                     std::abs(got - ref_lse) >
                         lse_tolerance(ref_lse, magnitude[static_cast<size_t>(row)], c.len_k)) {
            fail("lse", where, " is ", got, ", reference ", ref_lse,
                 dead ? " (fully masked row: lse = sink)" : "");
          }
        }
      }

  const double ref_norm = std::sqrt(ref2);
  r.rel_error = ref_norm > 0 ? std::sqrt(err2) / ref_norm : std::sqrt(err2);
  r.rounding_rel = ref_norm > 0 ? std::sqrt(round2) / ref_norm : 0.0;
  const double tolerance = relative_tolerance(c.dtype);
  if (mode == CheckMode::Fused) {
    r.bound_rel = 2.0 * r.rounding_rel + f32_compute_allowance(c, max_magnitude);
    if (ref_norm > 0 || err2 > 0) {
      if (r.rel_error > tolerance)
        fail("relative error ", r.rel_error, " exceeds the ", to_string(c.dtype), " tolerance ",
             tolerance);
      if (r.rel_error > r.bound_rel)
        fail("relative error ", r.rel_error,
             " exceeds 2x the rounding error of the reference plus the f32 allowance (",
             r.bound_rel, ")");
    }
  }

  std::ostringstream s;
  s << problems.str() << "  metrics: rel " << r.rel_error << " (bound "
    << (mode == CheckMode::Fused ? std::min(r.bound_rel, tolerance) : 0.0)
    << ", reference rounding " << r.rounding_rel << "), max abs " << r.max_abs_error
    << ", fully masked rows " << r.dead_rows << ", score magnitude M " << max_magnitude << "\n  "
    << seed_note();
  r.report = s.str();
  return r;
}

}  // namespace fsdpa::test
