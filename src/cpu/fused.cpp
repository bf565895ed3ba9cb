// The CPU fused path: plan facts, threads and ISA dispatch around the kernel
// of fused_kernel.h (tiled online softmax, O(tile) memory).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#if FSDPA_HAVE_AVX2_KERNEL
#include <cpuid.h>
#endif

#include "core/semantics.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "cpu/cpu.h"
#include "cpu/fused_kernel.h"
#include "cpu/worker_pool.h"

namespace fsdpa::detail::cpu {

namespace {

constexpr int kMaxThreads = 1024;
// A key split streams at least this many keys: below it the partial write
// and the combine pass cost more than the extra thread gains.
constexpr int64_t kMinKeysPerSplit = 512;

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
int64_t round_up(int64_t x, int64_t m) { return ceil_div(x, m) * m; }

const CpuTile& tile_for(int64_t head_dim) {
  for (const CpuTile& t : kCpuTiles)
    if (head_dim <= t.max_head_dim) return t;
  throw Error("fsdpa: internal: no CPU tile row covers head_dim " + std::to_string(head_dim));
}

int64_t item_count(const FusedArgs& a) {
  return a.batch * a.heads_kv * a.head_chunks * a.query_blocks;
}

// The tiling fields of FusedArgs, from the problem and the plan's thread
// count alone (configure and launch agree by construction). Keys are split
// only when the items cannot occupy the threads (decode with few kv heads).
void set_tiling(const Problem& p, int threads, FusedArgs& a) {
  const CpuTile& tile = tile_for(std::max(p.head_dim_qk, p.head_dim_v));
  const int64_t group = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1;
  a.heads_per_tile = std::max<int64_t>(1, std::min(group, tile.rows));
  a.head_chunks = std::max<int64_t>(1, ceil_div(group, a.heads_per_tile));
  a.queries_per_tile =
      std::max<int64_t>(1, std::min(tile.rows / a.heads_per_tile, std::max<int64_t>(p.len_q, 1)));
  a.query_blocks = ceil_div(p.len_q, a.queries_per_tile);
  a.rows_pad = round_up(a.heads_per_tile * a.queries_per_tile, kCpuChunk);
  a.tile_keys = std::max<int64_t>(1, std::min(tile.keys, p.len_k));
  a.dqk = p.head_dim_qk;
  a.dv = p.head_dim_v;
  a.dqk_pad = round_up(std::max<int64_t>(p.head_dim_qk, 1), kCpuChunk);
  a.dv_pad = round_up(std::max<int64_t>(p.head_dim_v, 1), kCpuChunk);
  a.batch = p.batch;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.len_q = p.len_q;
  a.len_k = p.len_k;
  const int64_t items = item_count(a);
  a.key_splits = 1;
  if (items > 0 && items < threads)
    a.key_splits =
        std::max<int64_t>(1, std::min(ceil_div(threads, items), p.len_k / kMinKeysPerSplit));
}

// Bytes of the split partials (none without key splits), 64 bytes of slack
// for their alignment.
size_t partial_bytes(const FusedArgs& a) {
  if (a.key_splits == 1) return 0;
  return static_cast<size_t>(item_count(a) * a.key_splits * fused_partial_floats(a)) *
             sizeof(float) +
         64;
}

// One ISA's entry points.
struct Kernel {
  void (*unit)(const FusedArgs&, std::byte*, int64_t);
  void (*combine)(const FusedArgs&, int64_t);
};

// AVX2+FMA+F16C when the CPU has all three, else the portable kernel.
// FSDPA_CPU_ISA=generic forces the portable one (for testing it on any CPU).
#if FSDPA_HAVE_AVX2_KERNEL
// F16C from CPUID leaf 1 (ECX bit 29): __builtin_cpu_supports("f16c") is
// GCC's only (clang 14 rejects the name).
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// Whether the CPU runs the AVX2 kernel, asked once: CPUID traps to the
// hypervisor in a virtual machine, and asking at every launch made a tiny
// call's launch 3-4x slower.
bool cpu_runs_avx2() {
  static const bool runs = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  }();
  return runs;
}
#endif

Kernel pick_kernel() {
  const char* env = std::getenv(kEnvCpuIsa);
  const std::string forced = env ? env : "";
  if (!forced.empty() && forced != "generic" && forced != "avx2")
    throw_invalid("FSDPA_CPU_ISA: expected generic or avx2, got '" + forced + "'");
  if (forced == "generic") return {fused_item_generic, fused_combine_generic};
#if FSDPA_HAVE_AVX2_KERNEL
  if (cpu_runs_avx2()) return {fused_item_avx2, fused_combine_avx2};
#endif
  if (forced == "avx2")
    throw Unsupported("fsdpa: FSDPA_CPU_ISA=avx2 but this CPU or build lacks AVX2, FMA or F16C");
  return {fused_item_generic, fused_combine_generic};
}

// FSDPA_CPU_ISA is read at every plan and launch, like the other variables
// (a value set after the first call is honoured, and a bad one is an error).
Kernel kernel() { return pick_kernel(); }

// Runs task(slot, index) for every index in [0, count) on `threads` threads
// (slot: the thread's number, for its workspace), taking indices from a
// shared counter: on the worker pool, or on threads of its own when another
// launch holds the pool.
template <typename Task>
void parallel_for(int threads, int64_t count, const Task& task) {
  std::atomic<int64_t> next{0};
  const auto work = [&](int slot) {
    for (;;) {
      const int64_t index = next.fetch_add(1, std::memory_order_relaxed);
      if (index >= count) return;
      task(slot, index);
    }
  };
  if (threads <= 1) {
    work(0);
    return;
  }
  const SlotWork job{&work, [](const void* context, int slot) {
                       (*static_cast<const decltype(work)*>(context))(slot);
                     }};
  if (worker_pool().try_run(threads, job)) return;
  std::vector<std::thread> pool;
  try {
    pool.reserve(static_cast<size_t>(threads - 1));
    for (int slot = 1; slot < threads; ++slot) pool.emplace_back(work, slot);
  } catch (...) {
  }
  work(0);
  for (std::thread& thread : pool) thread.join();
}

}  // namespace

size_t fused_thread_bytes(const FusedArgs& a) {
  auto section = [](int64_t floats) { return round_up(floats, 16); };
  const int64_t floats = section(a.dqk * a.rows_pad) + section(a.tile_keys * a.dqk_pad) +
                         section(a.tile_keys * a.dv_pad) + section(a.tile_keys * a.rows_pad) +
                         section(a.rows_pad * a.dv_pad) + 3 * section(a.rows_pad) +
                         2 * section(2 * a.rows_pad);
  return static_cast<size_t>(floats) * sizeof(float) + 64;
}

int default_num_threads() {
  const unsigned hardware = std::thread::hardware_concurrency();
  const int64_t machine = hardware == 0 ? 1 : std::min<int64_t>(hardware, kMaxThreads);
  return static_cast<int>(env_integer(kEnvNumThreads, 1, kMaxThreads, machine));
}

Verdict fused_supports(const Problem&, const Options&) { return Verdict::yes(); }

void fused_configure(const Problem& problem, Plan& plan) {
  kernel();  // surfaces a bad FSDPA_CPU_ISA at plan time
  plan.num_threads = default_num_threads();
  plan.head_dim_qk_bucket = 0;
  plan.head_dim_v_bucket = 0;
  plan.pad_ratio = 1.0;
  // Nothing to write (writes_output), or only the LSE of rows without head
  // dims (lse_only): no tiles and no workspace, however large the sizes the
  // tiling would multiply.
  if (!writes_output(problem) || lse_only(problem)) return;
  FusedArgs a;
  set_tiling(problem, plan.num_threads, a);
  plan.tile_q = a.heads_per_tile * a.queries_per_tile;
  plan.tile_k = a.tile_keys;
  plan.num_kv_splits = a.key_splits;
  plan.workspace_bytes =
      fused_thread_bytes(a) * static_cast<size_t>(plan.num_threads) + partial_bytes(a);
}

void fused_launch(const Plan& plan, const Tensors& t, void* workspace, void*) {
  const Problem& p = plan.problem;
  if (!writes_output(p)) return;  // also keeps set_tiling's products in range
  if (lse_only(p)) return lse_only_launch(p, plan.options, t);
  FusedArgs a;
  set_tiling(p, plan.num_threads, a);
  const int64_t items = item_count(a);
  const int64_t units = items * a.key_splits;

  a.dtype = p.dtype;
  a.q = t.q.data;
  a.k = t.k.data;
  a.v = t.v.data;
  a.out = t.out.data;
  for (int d = 0; d < 4; ++d) {
    a.q_strides[d] = t.q.strides[d];
    a.out_strides[d] = t.out.strides[d];
  }
  // A tensor without elements (Dqk = 0 for q and k, Lk = 0 for k and v,
  // Dv = 0 for v and out) may be null: give the kernel a real base with zero
  // strides, so that its row pointers are defined (it touches none of them).
  static std::byte no_elements[16];
  auto defined_base = [](const TensorView& view, auto& data, int64_t(&strides)[4]) {
    if (element_count(view) != 0) return;
    data = no_elements;
    std::fill(std::begin(strides), std::end(strides), 0);
  };
  defined_base(t.q, a.q, a.q_strides);
  const bool paged = p.page_size > 0;
  a.k_roles = kv_strides(t.k, paged);
  a.v_roles = kv_strides(t.v, paged);
  if (element_count(t.k) == 0) a.k = no_elements, a.k_roles = {};
  if (element_count(t.v) == 0) a.v = no_elements, a.v_roles = {};
  defined_base(t.out, a.out, a.out_strides);
  if (t.lse) {
    a.lse = static_cast<float*>(t.lse->data);
    for (int d = 0; d < 3; ++d) a.lse_strides[d] = t.lse->strides[d];
  }
  if (t.mask && p.mask != MaskKind::None) {
    const TensorView mask = broadcast_strides(*t.mask);
    a.mask_kind = p.mask;
    a.mask_dtype = mask.dtype;
    a.mask = mask.data;
    for (int d = 0; d < 4; ++d) a.mask_strides[d] = mask.strides[d];
    defined_base(mask, a.mask, a.mask_strides);
  }
  if (t.sinks && p.has_sinks) {
    a.sinks = static_cast<const float*>(t.sinks->data);
    a.sinks_stride = t.sinks->strides[0];
  }
  a.kv = make_kv_index(t, p);
  a.options = plan.options;
  a.scale_log2 = in_exp2_domain(plan.scale);
  a.softcap_log2 = in_exp2_domain(plan.options.softcap);

  const size_t per_thread = fused_thread_bytes(a);
  const int threads = static_cast<int>(std::min<int64_t>(std::max(plan.num_threads, 1), units));
  const size_t threads_bytes = per_thread * static_cast<size_t>(threads);
  if (threads_bytes + partial_bytes(a) > plan.workspace_bytes)
    throw Error("fsdpa: internal: CPU fused workspace " + std::to_string(plan.workspace_bytes) +
                " bytes is less than " + std::to_string(per_thread) + " x " +
                std::to_string(threads) + " threads + " + std::to_string(partial_bytes(a)) +
                " bytes of split partials");
  std::byte* base = static_cast<std::byte*>(workspace);
  if (a.key_splits > 1) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(base + threads_bytes);
    a.partials = reinterpret_cast<float*>(base + threads_bytes + (64 - at % 64) % 64);
  }

  const Kernel run = kernel();
  parallel_for(threads, units, [&](int slot, int64_t unit) {
    run.unit(a, base + per_thread * static_cast<size_t>(slot), unit);
  });
  if (a.key_splits > 1)
    parallel_for(static_cast<int>(std::min<int64_t>(threads, items)), items,
                 [&](int, int64_t item) { run.combine(a, item); });
}

}  // namespace fsdpa::detail::cpu
