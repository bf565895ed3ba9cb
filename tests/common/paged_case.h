// Test support for paged KV caches and ragged batches, shared by the CPU and
// CUDA suites:
//
//   PagedCase   one case: shape, page size, lengths, semantics;
//   PagedData   host buffers and views for it: k and v as page pools behind a
//               shuffled block table (pages of other sequences and unused
//               pages around them, -1 in the table past each sequence's
//               pages), or as a dense ragged batch; fresh random inputs,
//               poisoned outputs; and the expected result, computed by the
//               float64 reference one sequence at a time on dense copies of
//               exactly its keys (so the paged and ragged indexing of the
//               library is checked against the dense semantics, which the
//               main suites check against independent counts);
//   check_paged what a run wrote against that expectation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attention_case.h"
#include "core/tensor.h"
#include "cpu/cpu.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::test {

struct PagedCase {
  int64_t batch = 2, heads_q = 4, heads_kv = 2, len_q = 1;
  int64_t page_size = 16, max_pages = 4;  // the key capacity Lk = max_pages * page_size
  int64_t dqk = 64, dv = 64;
  DType dtype = DType::F16;
  bool paged = true;             // else dense k/v [B, Hkv, Lk, D] with seq_lens_k
  bool ragged = true;            // seq_lens_k given (always for dense)
  std::vector<int32_t> lengths;  // ragged: per-sequence lengths; empty = random
  bool padded = false;           // padded pool strides, a block table of column stride 2
  bool mla_alias = false;        // v a view of k's first Dv columns (Dv <= Dqk)
  bool causal = false;
  CausalAlign align = CausalAlign::BottomRight;
  std::optional<int64_t> window;
  bool mask = false;  // a boolean [B, 1, Lq, Lk] mask, about a fifth dropped
  bool sinks = false;
  bool lse = true;
  double softcap = 0.0;
  Policy policy = Policy::ForceFused;

  int64_t capacity() const { return max_pages * page_size; }

  std::string name() const {
    std::ostringstream s;
    s << to_string(dtype) << "_b" << batch << "h" << heads_q << "kv" << heads_kv << "_q" << len_q
      << "_"
      << (paged ? "page" + std::to_string(page_size) + "x" + std::to_string(max_pages)
                : "dense" + std::to_string(capacity()))
      << "_d" << dqk;
    if (dv != dqk) s << "v" << dv;
    if (ragged) s << "_ragged";
    if (!lengths.empty()) s << "_lens" << lengths.size();
    if (padded) s << "_padded";
    if (mla_alias) s << "_mla";
    if (causal) s << (align == CausalAlign::BottomRight ? "_causalBR" : "_causalTL");
    if (window) s << "_win" << *window;
    if (mask) s << "_mask";
    if (sinks) s << "_sinks";
    if (!lse) s << "_nolse";
    if (softcap > 0.0) s << "_cap" << static_cast<int>(softcap);
    if (policy != Policy::ForceFused) s << "_" << to_string(policy);
    return test_identifier(s.str());
  }

  Options options() const {
    Options o;
    o.causal = causal;
    o.causal_align = align;
    o.window_left = window;
    o.softcap = softcap;
    o.policy = policy;
    return o;
  }
};

inline void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name(); }

struct PagedData {
  PagedCase c;
  Storage q, k, v, out, lse, mask, sinks, table, lens;
  Tensors tensors;
  Options options;
  std::vector<int32_t> seq_len;  // the keys of each sequence
  std::vector<int32_t> pages;    // [B, max_pages]: the pool page of each table slot, -1 unused
  ReferenceResult expected;      // [B, Hq, Lq, Dv] and [B, Hq, Lq]

  PagedData() = default;
  PagedData(const PagedData&) = delete;
  PagedData& operator=(const PagedData&) = delete;
  PagedData(PagedData&&) = default;
  PagedData& operator=(PagedData&&) = default;

  std::vector<Storage*> storages() {
    return {&q, &k, &v, &out, &lse, &mask, &sinks, &table, &lens};
  }

  // Element offset of key j of sequence b, kv head g, column 0 in k or v.
  int64_t key_offset(const TensorView& t, int64_t b, int64_t g, int64_t j) const {
    if (!c.paged) return b * t.strides[0] + g * t.strides[1] + j * t.strides[2];
    const int64_t page = pages[static_cast<size_t>(b * c.max_pages + j / c.page_size)];
    return page * t.strides[0] + (j % c.page_size) * t.strides[1] + g * t.strides[2];
  }
};

namespace detail_paged {

inline void copy_element(const TensorView& from, int64_t from_offset, void* to, int64_t to_offset,
                         DType dtype) {
  const size_t bytes = element_size(dtype);
  std::memcpy(static_cast<char*>(to) + to_offset * static_cast<int64_t>(bytes),
              static_cast<const char*>(from.data) + from_offset * static_cast<int64_t>(bytes),
              bytes);
}

}  // namespace detail_paged

// The expected output: for each sequence, the float64 reference of a dense
// call on copies of exactly its keys (its own length, so its own causal
// diagonal and window), its slice of the mask, q and the sinks.
inline ReferenceResult paged_expectation(const PagedData& d) {
  const PagedCase& c = d.c;
  const Tensors& t = d.tensors;
  ReferenceResult result;
  result.out.assign(static_cast<size_t>(c.batch * c.heads_q * c.len_q * c.dv), 0.0);
  result.lse.assign(static_cast<size_t>(c.batch * c.heads_q * c.len_q), 0.0);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = d.seq_len[static_cast<size_t>(b)];
    Storage kd(c.dtype, std::max<int64_t>(1, c.heads_kv * len * c.dqk));
    Storage vd(c.dtype, std::max<int64_t>(1, c.heads_kv * len * c.dv));
    for (int64_t g = 0; g < c.heads_kv; ++g)
      for (int64_t j = 0; j < len; ++j) {
        const int64_t ko = d.key_offset(t.k, b, g, j), vo = d.key_offset(t.v, b, g, j);
        for (int64_t e = 0; e < c.dqk; ++e)
          detail_paged::copy_element(t.k, ko + e * t.k.strides[3], kd.bytes(),
                                     (g * len + j) * c.dqk + e, c.dtype);
        for (int64_t e = 0; e < c.dv; ++e)
          detail_paged::copy_element(t.v, vo + e * t.v.strides[3], vd.bytes(),
                                     (g * len + j) * c.dv + e, c.dtype);
      }
    Storage od(c.dtype, c.heads_q * c.len_q * std::max<int64_t>(c.dv, 1));
    Tensors s;
    s.q = t.q;
    s.q.data = static_cast<char*>(t.q.data) +
               b * t.q.strides[0] * static_cast<int64_t>(element_size(c.dtype));
    s.q.sizes[0] = 1;
    s.k = view_n(kd.bytes(), c.dtype, 4, {1, c.heads_kv, len, c.dqk},
                 {c.heads_kv * len * c.dqk, len * c.dqk, c.dqk, 1});
    s.v = view_n(vd.bytes(), c.dtype, 4, {1, c.heads_kv, len, c.dv},
                 {c.heads_kv * len * c.dv, len * c.dv, c.dv, 1});
    s.out = view_n(od.bytes(), c.dtype, 4, {1, c.heads_q, c.len_q, c.dv},
                   {c.heads_q * c.len_q * c.dv, c.len_q * c.dv, c.dv, 1});
    if (t.mask) {
      TensorView m = *t.mask;
      m.data = static_cast<char*>(m.data) + b * m.strides[0];  // bool: 1-byte elements
      m.sizes[0] = 1;
      m.sizes[3] = len;
      s.mask = m;
    }
    s.sinks = t.sinks;
    const ReferenceResult r = detail::cpu::reference_attention(s, d.options);
    const int64_t rows = c.heads_q * c.len_q;
    std::copy(r.out.begin(), r.out.end(),
              result.out.begin() + static_cast<std::ptrdiff_t>(b * rows * c.dv));
    std::copy(r.lse.begin(), r.lse.end(),
              result.lse.begin() + static_cast<std::ptrdiff_t>(b * rows));
  }
  return result;
}

// Buffers, views and the expectation of a case: fresh random inputs,
// poisoned outputs.
inline PagedData make_paged(const PagedCase& c, Rng& rng) {
  using detail_case::fill_random;
  PagedData d;
  d.c = c;
  d.options = c.options();
  const int64_t B = c.batch, Hq = c.heads_q, Hkv = c.heads_kv, Lq = c.len_q, Lk = c.capacity();
  const int64_t pad = c.padded ? 3 : 0;
  Tensors& t = d.tensors;

  d.q = Storage(c.dtype, B * Hq * Lq * (c.dqk + pad) + 8);
  t.q = view_n(d.q.bytes(), c.dtype, 4, {B, Hq, Lq, c.dqk},
               {Hq * Lq * (c.dqk + pad), Lq * (c.dqk + pad), c.dqk + pad, 1});
  fill_random(d.q, rng);
  d.out = Storage(c.dtype, B * Hq * Lq * (c.dv + pad) + 8);
  t.out = view_n(d.out.bytes(), c.dtype, 4, {B, Hq, Lq, c.dv},
                 {Hq * Lq * (c.dv + pad), Lq * (c.dv + pad), c.dv + pad, 1});

  // Sequence lengths: given, else random in [0, Lk] with the first full and,
  // from three sequences on, one empty.
  d.seq_len.assign(static_cast<size_t>(B), static_cast<int32_t>(Lk));
  if (c.ragged || !c.paged) {
    for (int64_t b = 0; b < B; ++b)
      d.seq_len[static_cast<size_t>(b)] = !c.lengths.empty() ? c.lengths[static_cast<size_t>(b)]
                                          : b == 0           ? static_cast<int32_t>(Lk)
                                          : b == 2           ? 0
                                                   : static_cast<int32_t>(rng.below(Lk + 1));
  }

  const int64_t row_k = c.mla_alias ? c.dqk : c.dqk + pad, row_v = c.dv + pad;
  if (c.paged) {
    // The pool: every sequence's pages plus spares, in a shuffled order.
    int64_t used = 0;
    for (int64_t b = 0; b < B; ++b)
      used += (d.seq_len[static_cast<size_t>(b)] + c.page_size - 1) / c.page_size;
    const int64_t num_pages = used + 3;
    std::vector<int32_t> order(static_cast<size_t>(num_pages));
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = num_pages - 1; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.below(i + 1))]);
    d.pages.assign(static_cast<size_t>(B * c.max_pages), -1);
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t p = 0; p * c.page_size < d.seq_len[static_cast<size_t>(b)]; ++p)
        d.pages[static_cast<size_t>(b * c.max_pages + p)] = order[static_cast<size_t>(next++)];
    // [num_pages, page_size, Hkv, D], padded rows and pages.
    const std::array<int64_t, 4> k_strides{c.page_size * Hkv * row_k + pad, Hkv * row_k, row_k, 1};
    d.k = Storage(c.dtype, num_pages * k_strides[0] + 8);
    t.k = view_n(d.k.bytes(), c.dtype, 4, {num_pages, c.page_size, Hkv, c.dqk}, k_strides);
    fill_random(d.k, rng);
    if (c.mla_alias) {
      t.v = t.k;
      t.v.sizes[3] = c.dv;
    } else {
      const std::array<int64_t, 4> v_strides{c.page_size * Hkv * row_v + pad, Hkv * row_v, row_v,
                                             1};
      d.v = Storage(c.dtype, num_pages * v_strides[0] + 8);
      t.v = view_n(d.v.bytes(), c.dtype, 4, {num_pages, c.page_size, Hkv, c.dv}, v_strides);
      fill_random(d.v, rng);
    }
    const int64_t column = c.padded ? 2 : 1;
    d.table = Storage(DType::I32, B * c.max_pages * column + 8);
    for (int64_t i = 0; i < d.table.elements(); ++i) d.table.set_bits(i, 0xffffffffu);  // -1
    for (int64_t b = 0; b < B; ++b)
      for (int64_t p = 0; p < c.max_pages; ++p)
        d.table.set_bits((b * c.max_pages + p) * column,
                         static_cast<uint32_t>(d.pages[static_cast<size_t>(b * c.max_pages + p)]));
    t.block_table = view_n(d.table.bytes(), DType::I32, 2, {B, c.max_pages, 0, 0},
                           {c.max_pages * column, column, 0, 0});
  } else {
    const std::array<int64_t, 4> k_strides{Hkv * Lk * row_k, Lk * row_k, row_k, 1};
    d.k = Storage(c.dtype, B * k_strides[0] + 8);
    t.k = view_n(d.k.bytes(), c.dtype, 4, {B, Hkv, Lk, c.dqk}, k_strides);
    fill_random(d.k, rng);
    if (c.mla_alias) {
      t.v = t.k;
      t.v.sizes[3] = c.dv;
    } else {
      const std::array<int64_t, 4> v_strides{Hkv * Lk * row_v, Lk * row_v, row_v, 1};
      d.v = Storage(c.dtype, B * v_strides[0] + 8);
      t.v = view_n(d.v.bytes(), c.dtype, 4, {B, Hkv, Lk, c.dv}, v_strides);
      fill_random(d.v, rng);
    }
  }
  if (c.ragged || !c.paged) {
    d.lens = Storage(DType::I32, B + 8);
    for (int64_t b = 0; b < B; ++b)
      d.lens.set_bits(b, static_cast<uint32_t>(d.seq_len[static_cast<size_t>(b)]));
    t.seq_lens_k = view_n(d.lens.bytes(), DType::I32, 1, {B, 0, 0, 0}, {1, 0, 0, 0});
  }
  if (c.mask) {
    d.mask = Storage(DType::Bool, B * Lq * Lk + 8);
    for (int64_t i = 0; i < d.mask.elements(); ++i)
      d.mask.set_bits(i, rng.uniform() < 0.2 ? 0u : 1u);
    t.mask = view_n(d.mask.bytes(), DType::Bool, 4, {B, 1, Lq, Lk}, {Lq * Lk, 0, Lk, 1});
  }
  if (c.sinks) {
    d.sinks = Storage(DType::F32, Hq + 8);
    fill_random(d.sinks, rng);
    t.sinks = view_n(d.sinks.bytes(), DType::F32, 1, {Hq, 0, 0, 0}, {1, 0, 0, 0});
  }
  if (c.lse) {
    d.lse = Storage(DType::F32, B * Hq * Lq + 8);
    t.lse = view_n(d.lse.bytes(), DType::F32, 3, {B, Hq, Lq, 0}, {Hq * Lq, Lq, 1, 0});
  }
  for (Storage* s : d.storages())
    if (!s->bytes()) *s = Storage(DType::F32, 0);
  d.out.poison();
  d.lse.poison();
  d.expected = paged_expectation(d);
  return d;
}

struct PagedCheck {
  bool ok = true;
  std::string report;
  double rel_error = 0;
};

// Compares out and lse as written (the host buffers of d) with the
// expectation: every element written, rows without a visible key exactly 0
// with the expected lse, the relative error within the dtype's bound
// (DESIGN §5: 1e-2 bf16, 2e-3 f16, 1e-5 f32), lse within 1e-4 (1 + |ref|).
inline PagedCheck check_paged(const PagedData& d) {
  const PagedCase& c = d.c;
  const Tensors& t = d.tensors;
  PagedCheck r;
  std::ostringstream problems;
  problems.precision(9);
  int reported = 0;
  auto fail = [&](const auto&... parts) {
    r.ok = false;
    if (reported++ < 8) {
      problems << "  ";
      (problems << ... << parts);
      problems << "\n";
    }
  };
  double err2 = 0, ref2 = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.len_q; ++i) {
        const int64_t row = (b * c.heads_q + h) * c.len_q + i;
        const double ref_lse = d.expected.lse[static_cast<size_t>(row)];
        for (int64_t e = 0; e < c.dv; ++e) {
          const double x =
              detail::load_as_float(d.out.bytes(), c.dtype, detail::offset_of(t.out, b, h, i, e));
          const double ref = d.expected.out[static_cast<size_t>(row * c.dv + e)];
          if (std::isnan(x)) {
            fail("out[", b, ",", h, ",", i, ",", e, "] is NaN (unwritten or poisoned)");
            continue;
          }
          if (ref == 0.0 && x != 0.0 && std::isinf(ref_lse))
            fail("out[", b, ",", h, ",", i, ",", e, "] = ", x, ", expected exactly 0");
          err2 += (x - ref) * (x - ref);
          ref2 += ref * ref;
        }
        if (!t.lse) continue;
        const double l =
            detail::load_as_float(d.lse.bytes(), DType::F32, detail::offset_of(*t.lse, b, h, i));
        if (std::isinf(ref_lse) ? l != ref_lse
                                : !(std::abs(l - ref_lse) <= 1e-4 * (1.0 + std::abs(ref_lse))))
          fail("lse[", b, ",", h, ",", i, "] = ", l, ", expected ", ref_lse);
      }
  r.rel_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const double bound = c.dtype == DType::BF16 ? 1e-2 : c.dtype == DType::F16 ? 2e-3 : 1e-5;
  if (!(r.rel_error <= bound)) fail("relative error ", r.rel_error, " exceeds ", bound);
  std::ostringstream s;
  s << problems.str() << "  relative error " << r.rel_error << " (bound " << bound << "), "
    << seed_note();
  r.report = s.str();
  return r;
}

}  // namespace fsdpa::test
