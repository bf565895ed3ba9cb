// libFuzzer target for the C ABI: random tensor descriptions (sizes, strides,
// dtypes, devices, masks, sinks, lse, paged KV caches with block tables and
// per-sequence lengths, options), small real buffers that hold
// exactly what each description addresses, one fsdpa_attention call. Checks:
// no crash or sanitizer report; a failure is a nonzero status with a message
// starting "fsdpa: "; a success on the fused path equals the float64
// reference (fsdpa_attention with the unfused policy) within the dtype's
// tolerance, and wrote every output element.
//
// Sizes are mostly small but sometimes huge (to reach the overflow checks):
// a description whose extent is past the fuzzer's allocation limit gets null
// data, which the library must refuse whenever the tensor has elements.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fsdpa/c_api.h"

namespace {

constexpr int64_t kMaxBufferElements = 1 << 16;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_c_api finding: %s\n", what.c_str());
  std::abort();
}

int64_t pick_size(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      return in.PickValueInArray<int64_t>({int64_t{1} << 31, int64_t{1} << 40, int64_t{1} << 59,
                                           int64_t{1} << 62, std::numeric_limits<int64_t>::max()});
    case 1:
      return -in.ConsumeIntegralInRange<int64_t>(1, 3);
    case 2:
      return 0;
    default:
      return in.ConsumeIntegralInRange<int64_t>(1, 7);
  }
}

size_t element_bytes(int32_t dtype) {
  switch (dtype) {
    case FSDPA_DTYPE_F16:
    case FSDPA_DTYPE_BF16:
      return 2;
    case FSDPA_DTYPE_F32:
      return 4;
    case FSDPA_DTYPE_BOOL:
      return 1;
    default:
      return 4;
  }
}

// One tensor: its description and, when it addresses few enough elements,
// a buffer that holds exactly them (filled with values in [-2, 2]).
struct Buffer {
  fsdpa_tensor view{};
  std::vector<unsigned char> bytes;
};

// The number of elements from the base to the last addressed one plus one,
// or -1 when it is not small (or sizes are invalid): computed with checks,
// as an honest caller would.
int64_t extent(const fsdpa_tensor& t) {
  if (t.rank < 0 || t.rank > FSDPA_MAX_RANK) return -1;
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 0) return 0;  // no elements, whatever the other sizes
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0) return -1;
    if (t.sizes[d] > kMaxBufferElements || t.strides[d] > kMaxBufferElements) return -1;
    last += (t.sizes[d] - 1) * t.strides[d];
    if (last > kMaxBufferElements) return -1;
  }
  return last + 1;
}

void describe(FuzzedDataProvider& in, Buffer& b, int rank, const int64_t* sizes, int32_t dtype,
              std::mt19937& rng, bool exotic_strides) {
  fsdpa_tensor& t = b.view;
  t.dtype = dtype;
  t.device_type =
      in.ConsumeIntegralInRange<int>(0, 15) == 0 ? in.ConsumeIntegral<int32_t>() : FSDPA_DEVICE_CPU;
  t.device_index = 0;
  t.rank =
      in.ConsumeIntegralInRange<int>(0, 31) == 0 ? in.ConsumeIntegralInRange<int>(-1, 5) : rank;
  int64_t stride = 1;
  for (int d = FSDPA_MAX_RANK - 1; d >= 0; --d) {
    t.sizes[d] = d < rank ? sizes[d] : 0;
    if (d >= rank) continue;
    const int64_t padded = stride;
    t.strides[d] = padded;
    if (exotic_strides) {
      switch (in.ConsumeIntegralInRange<int>(0, 7)) {
        case 0:
          t.strides[d] = 0;
          break;
        case 1:
          t.strides[d] = padded + in.ConsumeIntegralInRange<int64_t>(1, 9);
          break;
        case 2:
          t.strides[d] = in.PickValueInArray<int64_t>(
              {int64_t{1} << 62, std::numeric_limits<int64_t>::max(), -1});
          break;
        default:
          break;
      }
    }
    const int64_t size = t.sizes[d] > 0 && t.sizes[d] < kMaxBufferElements ? t.sizes[d] : 1;
    stride = t.strides[d] > 0 && t.strides[d] < kMaxBufferElements ? t.strides[d] * size : stride;
  }
  const int64_t count = t.rank == rank ? extent(t) : -1;
  if (count > 0) {
    b.bytes.resize(static_cast<size_t>(count) * element_bytes(dtype));
    std::uniform_real_distribution<float> value(-2.0f, 2.0f);
    for (int64_t i = 0; i < count; ++i) {
      const float x = value(rng);
      unsigned char* at = b.bytes.data() + static_cast<size_t>(i) * element_bytes(dtype);
      if (dtype == FSDPA_DTYPE_F32) {
        std::memcpy(at, &x, 4);
      } else if (dtype == FSDPA_DTYPE_BOOL) {
        *at = static_cast<unsigned char>(rng() % 3);  // 0, 1, 2: any nonzero byte is true
      } else if (dtype == FSDPA_DTYPE_I32) {
        // Indices: the caller sets them (fill_indices); small values meanwhile.
        const int32_t index = static_cast<int32_t>(rng() % 4);
        std::memcpy(at, &index, 4);
      } else {
        uint32_t bits = 0;
        std::memcpy(&bits, &x, 4);
        // bf16: the top half; f16: a small exact value (x * 64 rounded, /64).
        const uint16_t half =
            dtype == FSDPA_DTYPE_BF16
                ? static_cast<uint16_t>(bits >> 16)
                : static_cast<uint16_t>(0x3c00 ^ (rng() & 0x83ff));  // +-[1, 2) with 10 bits
        std::memcpy(at, &half, 2);
      }
    }
    t.data = b.bytes.data();
  } else {
    t.data = nullptr;
  }
}

// Block-table ids or lengths: mostly in [0, valid), sometimes just outside
// it (-1, valid, a huge value), written at every element the view addresses.
void fill_indices(FuzzedDataProvider& in, Buffer& b, int64_t valid) {
  for (size_t at = 0; at + 4 <= b.bytes.size(); at += 4) {
    int32_t x =
        valid > 0 ? static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(0, valid - 1)) : 0;
    switch (in.ConsumeIntegralInRange<int>(0, 31)) {
      case 0:
        x = -1;
        break;
      case 1:
        x = static_cast<int32_t>(std::min<int64_t>(valid, INT32_MAX));
        break;
      case 2:
        x = INT32_MAX;
        break;
      default:
        break;
    }
    std::memcpy(b.bytes.data() + at, &x, 4);
  }
}

double tolerance(int32_t dtype) {
  return dtype == FSDPA_DTYPE_F32 ? 1e-4 : dtype == FSDPA_DTYPE_F16 ? 4e-3 : 2e-2;
}

float load(const fsdpa_tensor& t, int64_t offset) {
  const unsigned char* at = static_cast<const unsigned char*>(t.data) +
                            static_cast<size_t>(offset) * element_bytes(t.dtype);
  if (t.dtype == FSDPA_DTYPE_F32) {
    float x;
    std::memcpy(&x, at, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, at, 2);
  if (t.dtype == FSDPA_DTYPE_BF16) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
  }
  // f16
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::mt19937 rng(in.ConsumeIntegral<uint32_t>());
  const int32_t dtype =
      in.ConsumeIntegralInRange<int>(0, 19) == 0
          ? in.ConsumeIntegralInRange<int32_t>(-1, 5)
          : in.PickValueInArray<int32_t>({FSDPA_DTYPE_F16, FSDPA_DTYPE_BF16, FSDPA_DTYPE_F32});
  const int64_t batch = pick_size(in), heads_kv = pick_size(in);
  const int64_t group = in.ConsumeIntegralInRange<int64_t>(1, 3);
  int64_t heads_q = 0;
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0 ||
      __builtin_mul_overflow(heads_kv, group, &heads_q))
    heads_q = pick_size(in);
  const int64_t len_q = pick_size(in), len_k = pick_size(in);
  const int64_t dqk = pick_size(in);
  const int64_t dv = in.ConsumeBool() ? dqk : pick_size(in);
  const bool exotic = in.ConsumeIntegralInRange<int>(0, 3) == 0;

  // A paged cache: k and v pools of `pages` pages of `page_size` keys behind
  // a block table of `max_pages` columns (the key capacity replaces len_k).
  const bool paged = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  const int64_t page_size = paged ? pick_size(in) : 0, pages = paged ? pick_size(in) : 0;
  const int64_t max_pages = paged ? pick_size(in) : 0;
  int64_t capacity = len_k;
  if (paged && __builtin_mul_overflow(page_size, max_pages, &capacity)) capacity = len_k;
  Buffer q, k, v, out, mask, sinks, lse, table, lens;
  const int64_t q_sizes[4] = {batch, heads_q, len_q, dqk};
  const int64_t k_sizes[4] = {paged ? pages : batch, paged ? page_size : heads_kv,
                              paged ? heads_kv : len_k, dqk};
  const int64_t v_sizes[4] = {paged ? pages : batch, paged ? page_size : heads_kv,
                              paged ? heads_kv : len_k, dv};
  const int64_t out_sizes[4] = {batch, heads_q, len_q, dv};
  describe(in, q, 4, q_sizes, dtype, rng, exotic);
  describe(in, k, 4, k_sizes, dtype, rng, exotic);
  describe(in, v, 4, v_sizes, dtype, rng, exotic);
  describe(in, out, 4, out_sizes, dtype, rng, false);  // outputs: no overlap
  fsdpa_tensors t{};
  t.q = q.view;
  t.k = k.view;
  t.v = v.view;
  t.out = out.view;
  if (in.ConsumeBool()) {
    const bool boolean = in.ConsumeBool();
    const int64_t mask_sizes[4] = {in.ConsumeBool() ? batch : 1, in.ConsumeBool() ? heads_q : 1,
                                   len_q, capacity};
    describe(in, mask, 4, mask_sizes, boolean ? FSDPA_DTYPE_BOOL : dtype, rng, exotic);
    t.mask = &mask.view;
  }
  if (in.ConsumeBool()) {
    const int64_t sink_sizes[1] = {heads_q};
    describe(in, sinks, 1, sink_sizes, FSDPA_DTYPE_F32, rng, false);
    t.sinks = &sinks.view;
  }
  // With Dqk = Dv = 0 no tensor bounds Lk: the CPU paths then write the LSE
  // without a loop over the keys (cpu/lse_only.cpp), so a huge Lk stays.
  if (in.ConsumeBool()) {
    const int64_t lse_sizes[3] = {batch, heads_q, len_q};
    describe(in, lse, 3, lse_sizes, FSDPA_DTYPE_F32, rng, false);
    t.lse = &lse.view;
  }

  if (paged) {
    const int64_t table_sizes[2] = {batch, max_pages};
    describe(in, table, 2, table_sizes, FSDPA_DTYPE_I32, rng, exotic);
    fill_indices(in, table, pages);
    t.block_table = &table.view;
  }
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {  // per-sequence lengths, paged or dense
    const int64_t lens_sizes[1] = {batch};
    describe(in, lens, 1, lens_sizes, FSDPA_DTYPE_I32, rng, false);
    fill_indices(in, lens, capacity < INT32_MAX ? capacity + 1 : 1);
    t.seq_lens_k = &lens.view;
  }

  fsdpa_options o = fsdpa_options_init();
  o.causal = in.ConsumeBool();
  o.causal_align = in.ConsumeIntegralInRange<int>(0, 9) == 0 ? in.ConsumeIntegral<int32_t>()
                                                             : in.ConsumeIntegralInRange<int>(0, 1);
  if (in.ConsumeBool()) {
    o.has_window = 1;
    o.window_left = in.ConsumeIntegralInRange<int64_t>(-1, 9);
  }
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    o.has_scale = 1;
    o.scale = in.PickValueInArray<double>({0.1, 0.7, 2.0, 0.0, -1.0, 1e39, NAN, INFINITY});
  }
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0)
    o.softcap = in.PickValueInArray<double>({0.5, 5.0, 50.0, -1.0, NAN, 1e39});
  o.policy = FSDPA_POLICY_FUSED;

  if (std::getenv("FUZZ_VERBOSE")) {  // replaying a finding: what was called
    auto print = [](const char* name, const fsdpa_tensor& x) {
      std::fprintf(stderr,
                   "%s: data %p dtype %d device %d rank %d sizes [%lld %lld %lld %lld] strides "
                   "[%lld %lld %lld %lld]\n",
                   name, x.data, x.dtype, x.device_type, x.rank, (long long)x.sizes[0],
                   (long long)x.sizes[1], (long long)x.sizes[2], (long long)x.sizes[3],
                   (long long)x.strides[0], (long long)x.strides[1], (long long)x.strides[2],
                   (long long)x.strides[3]);
    };
    print("q", t.q);
    print("k", t.k);
    print("v", t.v);
    print("out", t.out);
    if (t.mask) print("mask", *t.mask);
    if (t.sinks) print("sinks", *t.sinks);
    if (t.lse) print("lse", *t.lse);
    if (t.block_table) print("block_table", *t.block_table);
    if (t.seq_lens_k) print("seq_lens_k", *t.seq_lens_k);
    std::fprintf(stderr, "causal %d align %d window %d/%lld scale %d/%g softcap %g\n", o.causal,
                 o.causal_align, o.has_window, (long long)o.window_left, o.has_scale, o.scale,
                 o.softcap);
  }
  // Poison the output so that an unwritten element shows.
  for (size_t i = 0; i < out.bytes.size(); ++i) out.bytes[i] = 0xff;  // NaN in every dtype
  const fsdpa_status status = fsdpa_attention(&t, &o, nullptr);
  if (status != FSDPA_OK) {
    const char* message = fsdpa_last_error();
    if (std::strncmp(message, "fsdpa: ", 7) != 0)
      finding(std::string("status ") + std::to_string(status) + " with message '" + message + "'");
    return 0;
  }
  // Accepted: the description must have been one the fuzzer could back.
  for (const Buffer* b : {&q, &k, &v, &out})
    if (b->view.data == nullptr && extent(b->view) != 0)
      finding("accepted a tensor the fuzzer gave no memory (its extent is not small)");

  // The float64 reference into a second output: the call's layout with the
  // outputs' data replaced (fsdpa_attention_data), so that call is fuzzed too.
  Buffer ref_out = out, ref_lse = lse;
  ref_out.view.data = ref_out.bytes.empty() ? nullptr : ref_out.bytes.data();
  ref_lse.view.data = ref_lse.bytes.empty() ? nullptr : ref_lse.bytes.data();
  fsdpa_tensors r = t;
  r.out = ref_out.view;
  if (t.lse) r.lse = &ref_lse.view;
  fsdpa_options unfused = o;
  unfused.policy = FSDPA_POLICY_UNFUSED;
  auto data_of = [](const fsdpa_tensor* view) -> const void* {
    return view != nullptr ? view->data : nullptr;
  };
  const void* optional[5] = {data_of(t.mask), data_of(t.sinks), data_of(r.lse),
                             data_of(t.block_table), data_of(t.seq_lens_k)};
  if (fsdpa_attention_data(&t, t.q.data, t.k.data, t.v.data, r.out.data, optional, &unfused,
                           nullptr) != FSDPA_OK)
    finding(std::string("fused accepted what the reference refused: ") + fsdpa_last_error());

  double diff2 = 0, ref2 = 0;
  const fsdpa_tensor& ov = t.out;
  if (extent(ov) == 0) return 0;  // no elements (the row loops could still be long)
  for (int64_t b = 0; b < ov.sizes[0]; ++b)
    for (int64_t h = 0; h < ov.sizes[1]; ++h)
      for (int64_t i = 0; i < ov.sizes[2]; ++i)
        for (int64_t d = 0; d < ov.sizes[3]; ++d) {
          const int64_t at =
              b * ov.strides[0] + h * ov.strides[1] + i * ov.strides[2] + d * ov.strides[3];
          const double got = load(ov, at), want = load(r.out, at);
          if (std::isnan(got) && !std::isnan(want)) finding("an output element was not written");
          diff2 += (got - want) * (got - want);
          ref2 += want * want;
        }
  if (std::sqrt(diff2) > tolerance(dtype) * std::sqrt(ref2) + 1e-6)
    finding("fused differs from the reference: ||diff|| " + std::to_string(std::sqrt(diff2)) +
            ", ||ref|| " + std::to_string(std::sqrt(ref2)));
  return 0;
}
