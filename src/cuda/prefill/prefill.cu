// The fused prefill rows of the selection table (wgmma, mma.sync, exact f32):
// which problems their compiled instances serve (and why not), their
// configuration, the launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/semantics.h"
#include "core/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/device.h"
#include "cuda/prefill/config.h"
#include "cuda/prefill/dispatch.h"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/simt_f32.h"
#include "cuda/prefill/trace.h"

#ifndef FSDPA_HEAD_DIMS_STRING
#define FSDPA_HEAD_DIMS_STRING "all"
#endif
#ifndef FSDPA_CUDA_ARCHS_STRING
#define FSDPA_CUDA_ARCHS_STRING "?"
#endif

namespace fsdpa::detail::cuda {

namespace {

constexpr int kBucketStep = 16;  // the mma k step
// The fused sizes of DESIGN §3: every Dqk <= 576 and Dv <= 512.
constexpr int kLargestHeadDimQk = 576;
constexpr int kLargestHeadDimV = 512;

int64_t bucket_of(int64_t head_dim) {
  const int64_t rounded = (head_dim + kBucketStep - 1) / kBucketStep * kBucketStep;
  return rounded < kBucketStep ? kBucketStep : rounded;
}

// The smallest compiled pair covering Dqk and one column slice of Dv (by
// bucket_qk + bucket_v, the cost of a row); nullptr when none. The wgmma
// kernel is built for the pairs its tiles fit (hopper_fits), or for none.
const PrefillInstance* find_instance(int64_t head_dim_qk, int64_t head_dim_v) {
  const int64_t qk = bucket_of(head_dim_qk), dv = bucket_of(v_slice_columns(head_dim_v));
  const PrefillInstance* best = nullptr;
  for (const PrefillInstance& instance : kPrefillInstances) {
    if (!instance.compiled || instance.head_dim_qk_bucket < qk || instance.head_dim_v_bucket < dv)
      continue;
    if (best == nullptr || instance.head_dim_qk_bucket + instance.head_dim_v_bucket <
                               best->head_dim_qk_bucket + best->head_dim_v_bucket)
      best = &instance;
  }
  return best;
}

std::string str(int64_t x) { return std::to_string(x); }

}  // namespace

std::vector<PrefillBucketPair> prefill_bucket_pairs() {
  std::vector<PrefillBucketPair> pairs;
  for (const PrefillInstance& instance : kPrefillInstances)
    pairs.push_back({instance.head_dim_qk_bucket, instance.head_dim_v_bucket, instance.compiled,
                     instance.hopper_bf16 != nullptr});
  return pairs;
}

namespace {

// Constraints shared by the 16-bit rows (wgmma, mma.sync) and the exact f32 row.
Verdict prefill_layout_and_size(const Problem& p) {
  if (Verdict dense = dense_kv_only(p); !dense.ok) return dense;
  if (p.row_alignment == 0)
    return Verdict::no("rows must have stride 1 (q, k, v and out: last-dimension stride 1)");
  if (p.row_alignment < static_cast<int>(element_size(p.dtype)))
    return Verdict::no("rows are " + str(p.row_alignment) + "-byte aligned, below the " +
                       str(static_cast<int64_t>(element_size(p.dtype))) +
                       "-byte elements the kernels load whole");
  if (p.head_dim_qk > kLargestHeadDimQk)
    return Verdict::no("head_dim_qk=" + str(p.head_dim_qk) + " exceeds the largest fused size " +
                       str(kLargestHeadDimQk));
  if (p.head_dim_v > kLargestHeadDimV)
    return Verdict::no("head_dim_v=" + str(p.head_dim_v) + " exceeds the largest fused size " +
                       str(kLargestHeadDimV));
  // With Dv = 0 the kernels would return before writing anything: an LSE
  // asked for goes to the unfused path.
  if (p.head_dim_v == 0 && p.has_lse)
    return Verdict::no(
        "head_dim_v=0 with lse: the prefill kernels write no rows without output "
        "columns");
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (p.len_q > kIntMax || p.len_k > kIntMax)
    return Verdict::no("len_q=" + str(p.len_q) + ", len_k=" + str(p.len_k) +
                       ": prefill supports lengths up to " + str(kIntMax));
  if (p.batch > 65535 || p.heads_q > 65535)
    return Verdict::no("batch=" + str(p.batch) + ", heads_q=" + str(p.heads_q) +
                       ": prefill supports at most 65535 of each (grid limits)");
  return Verdict::yes();
}

// The checks both 16-bit rows share: dtype, layout, sizes, a compiled pair.
Verdict prefill_16bit_supports(const Problem& p, const char* kernel) {
  if (p.dtype != DType::BF16 && p.dtype != DType::F16)
    return Verdict::other_row(std::string("dtype ") + to_string(p.dtype) +
                              " is not one of bf16, f16 (the " + kernel + " instances)");
  if (Verdict common = prefill_layout_and_size(p); !common.ok) return common;
  if (find_instance(p.head_dim_qk, p.head_dim_v) == nullptr)
    return Verdict::no(
        "head_dim_qk=" + str(p.head_dim_qk) + ", head_dim_v=" + str(p.head_dim_v) +
        " need bucket " + str(bucket_of(p.head_dim_qk)) + "/" +
        str(bucket_of(v_slice_columns(p.head_dim_v))) +
        (v_slices_of(p.head_dim_v) > 1
             ? " (Dv in " + str(v_slices_of(p.head_dim_v)) + " column slices)"
             : std::string()) +
        ", which is not compiled into this build (FSDPA_HEAD_DIMS=" + FSDPA_HEAD_DIMS_STRING ")");
  return Verdict::yes();
}

Verdict instance_fits_shared_memory(const Problem& p, const DeviceInfo& device,
                                    const PrefillInstance& instance, size_t needed) {
  return fits_shared_memory(
      "bucket " + str(instance.head_dim_qk_bucket) + "/" + str(instance.head_dim_v_bucket), needed,
      block_shared_memory(device), p);
}

// What the mma.sync row launches for a call in `slices` column slices of a
// bucket pair under a shared-memory budget: the pair kernel where it serves
// the call (pair_kernel_serves, launch_prefill's rule; Q K^T once for both
// slices), else the mma.sync kernel's tile, one block a slice.
struct MmaShape {
  int64_t tile_q, tile_k;
  int shared_bytes;
  bool scores_once;  // the slices share one Q K^T
};
MmaShape mma_shape(int qk, int dv, int64_t slices, int budget) {
  if (pair_kernel_serves(qk, dv, slices, budget)) {
    const PairTile pair = prefill_pair_tile(qk, dv, budget);
    return {kPairTileQ, pair.tile_k, pair_shared_bytes(pair, qk, dv), true};
  }
  const PrefillTile tile = prefill_tile(qk, dv, budget);
  return {prefill_tile_q(tile), tile.tile_k, prefill_shared_bytes(tile, qk, dv, 2), slices == 1};
}

// The plan facts both 16-bit rows share; the tile is the row's own. The pad
// ratio counts the work a row does against the work its head dims need: with
// Dv in column slices that each compute Q K^T again (`scores_once` false),
// 512/512 in two 256-column slices does (512 + 256) x 2 for 1024, a ratio of
// 1.5; the pair kernel's 512 + 2 x 256, 1.0.
// The plan carries the instance's launch for the dtype, `bf16` or `f16` (the
// mma.sync launch of the device's shared-memory class or the wgmma one; null
// where that kernel is not built, which only plan_for_row reaches).
void configure_16bit(const Problem& p, Plan& plan, const PrefillInstance& instance, int64_t tile_q,
                     int64_t tile_k, bool scores_once, PrefillLaunch bf16, PrefillLaunch f16) {
  plan.num_kv_splits = 1;
  plan.workspace_bytes = 0;
  const PrefillLaunch launch = p.dtype == DType::BF16  ? bf16
                               : p.dtype == DType::F16 ? f16
                                                       : nullptr;
  plan.instance = reinterpret_cast<void (*)()>(launch);
  plan.head_dim_qk_bucket = instance.head_dim_qk_bucket;
  plan.head_dim_v_bucket = instance.head_dim_v_bucket;
  plan.num_v_slices = v_slices_of(p.head_dim_v);
  const int64_t dims = p.head_dim_qk + p.head_dim_v;
  const int64_t score_passes = scores_once ? 1 : plan.num_v_slices;
  plan.pad_ratio = dims > 0 ? static_cast<double>(plan.head_dim_qk_bucket * score_passes +
                                                  plan.head_dim_v_bucket * plan.num_v_slices) /
                                  static_cast<double>(dims)
                            : 1.0;
  plan.tile_q = tile_q;
  plan.tile_k = tile_k;
}

}  // namespace

Verdict prefill_supports(const Problem& p, const Options&) {
  if (Verdict common = prefill_16bit_supports(p, "mma.sync"); !common.ok) return common;
  if (const DeviceInfo* device = planning_device(p.device.index)) {
    if (device->compute_capability < 80)
      return Verdict::no("compute capability " + std::to_string(device->compute_capability) +
                         " of device " + std::to_string(p.device.index) +
                         " is below the sm_80 that mma.sync prefill needs");
    const PrefillInstance* instance = find_instance(p.head_dim_qk, p.head_dim_v);
    const MmaShape shape =
        mma_shape(instance->head_dim_qk_bucket, instance->head_dim_v_bucket,
                  v_slices_of(p.head_dim_v), kSharedBudgets[shared_class_of(device)]);
    return instance_fits_shared_memory(p, *device, *instance,
                                       static_cast<size_t>(shape.shared_bytes));
  }
  return Verdict::yes();
}

void prefill_configure(const Problem& p, Plan& plan) {
  const PrefillInstance* instance = find_instance(p.head_dim_qk, p.head_dim_v);
  const int shared_class = shared_class_of(planning_device(p.device.index));
  if (instance == nullptr) throw Error("fsdpa: internal: prefill_configure without an instance");
  const MmaShape shape = mma_shape(instance->head_dim_qk_bucket, instance->head_dim_v_bucket,
                                   v_slices_of(p.head_dim_v), kSharedBudgets[shared_class]);
  configure_16bit(p, plan, *instance, shape.tile_q, shape.tile_k, shape.scores_once,
                  instance->bf16[shared_class], instance->f16[shared_class]);
  plan.loads = copy_16_loads(p.row_alignment);
}

Verdict prefill_hopper_supports(const Problem& p, const Options&) {
  if (Verdict common = prefill_16bit_supports(p, "wgmma"); !common.ok) return common;
  const PrefillInstance* instance = find_instance(p.head_dim_qk, p.head_dim_v);
  const int qk = instance->head_dim_qk_bucket, dv = instance->head_dim_v_bucket;
  if (!hopper_fits(qk, dv))
    return Verdict::no("bucket " + str(qk) + "/" + str(dv) +
                       ": the wgmma kernel's 128-row Q tile and two K/V stages need " +
                       str(hopper_shared_bytes(qk, dv)) + " bytes of shared memory, sm_90 has " +
                       str(kSm90SharedBytes));
  const HopperLoad load = hopper_load(static_cast<int>(p.row_alignment), qk, dv);
  if (load == HopperLoad::None)
    return Verdict::no("rows are " + str(p.row_alignment) + "-byte aligned; bucket " + str(qk) +
                       "/" + str(dv) + " copies them only through staging buffers, and its " +
                       "tiles and staging need " +
                       str(hopper_shared_bytes(qk, dv, HopperLoad::Staged)) +
                       " bytes of shared memory, sm_90 has " + str(kSm90SharedBytes) +
                       " (its cp.async pieces need base pointer and every batch, head and row " +
                       "stride of q, k, v and out a multiple of 4 bytes)");
  if (instance->hopper_bf16 == nullptr)
    return Verdict::no(std::string("the wgmma kernel is not built: FSDPA_CUDA_ARCHS=") +
                       FSDPA_CUDA_ARCHS_STRING + " has no 90a");
  if (const std::string why = wgmma_device_mismatch(p.device.index); !why.empty())
    return Verdict::no(why);
  if (const DeviceInfo* device = planning_device(p.device.index))
    return instance_fits_shared_memory(p, *device, *instance,
                                       static_cast<size_t>(hopper_shared_bytes(qk, dv, load)));
  return Verdict::yes();
}

void prefill_hopper_configure(const Problem& p, Plan& plan) {
  const PrefillInstance* instance = find_instance(p.head_dim_qk, p.head_dim_v);
  if (instance == nullptr) throw Error("fsdpa: internal: prefill_configure without an instance");
  const int qk = instance->head_dim_qk_bucket, dv = instance->head_dim_v_bucket;
  // The key tile of the load stage the planned alignment takes (tensors
  // aligned better at run time may take TMA and its tile).
  const HopperLoad load = hopper_load(static_cast<int>(p.row_alignment), qk, dv);
  configure_16bit(p, plan, *instance, kHopperTileQ, hopper_tile_k(qk, dv, load),
                  v_slices_of(p.head_dim_v) == 1, instance->hopper_bf16, instance->hopper_f16);
  switch (load) {
    case HopperLoad::Tma:
      plan.loads = "TMA boxes";
      break;
    case HopperLoad::Staged:
      plan.loads = "bulk copies into staging buffers, shifted into the swizzle (" +
                   str(p.row_alignment) + "-byte rows)";
      break;
    case HopperLoad::Pieces:
      plan.loads = "cp.async pieces of " + str(p.row_alignment) + " bytes";
      break;
    case HopperLoad::None:
      throw Error("fsdpa: internal: the wgmma row configured for " + str(p.row_alignment) +
                  "-byte rows of bucket " + str(qk) + "/" + str(dv) + ", which no stage copies");
  }
}

PrefillParams make_prefill_params(const Plan& plan, const Tensors& t) {
  PrefillParams params;
  static_cast<AttentionParams&>(params) = make_attention_params(plan, t);
  params.q_end = static_cast<const char*>(t.q.data) + extent_bytes(t.q);
  params.k_end = static_cast<const char*>(t.k.data) + extent_bytes(t.k);
  params.v_end = static_cast<const char*>(t.v.data) + extent_bytes(t.v);
  params.v_slice_shift = 0;
  while ((int64_t{1} << params.v_slice_shift) < plan.num_v_slices) ++params.v_slice_shift;
  if ((int64_t{1} << params.v_slice_shift) != plan.num_v_slices)
    throw Error("fsdpa: internal: " + std::to_string(plan.num_v_slices) +
                " column slices is not a power of two");
  // The 16-bit kernels step by their Dv bucket, the f32 one (runtime head
  // dims) by the columns a slice needs in whole float4s.
  params.v_slice_width = static_cast<int>(plan.head_dim_v_bucket > 0
                                              ? plan.head_dim_v_bucket
                                              : simt_f32_v_slice_width(plan.problem.head_dim_v));
#if defined(FSDPA_PREFILL_TRACE)
  params.trace = prefill_trace();
#endif
  return params;
}

#if defined(FSDPA_PREFILL_TRACE)
namespace {
uint32_t* trace_words = nullptr;
}  // namespace
void set_prefill_trace(uint32_t* device_words) { trace_words = device_words; }
uint32_t* prefill_trace() { return trace_words; }
#endif

namespace {

// Launches the instance the plan carries (configure_16bit chose it).
void launch_16bit(const Plan& plan, const Tensors& t, void* stream) {
  const Problem& p = plan.problem;
  if (p.batch == 0 || p.heads_q == 0 || p.len_q == 0 || p.head_dim_v == 0) return;
  const auto launch = reinterpret_cast<PrefillLaunch>(plan.instance);
  if (launch == nullptr)
    throw Error("fsdpa: internal: " + plan.kernel + " plan for bucket " +
                str(plan.head_dim_qk_bucket) + "/" + str(plan.head_dim_v_bucket) + " dtype " +
                to_string(p.dtype) + " has no compiled instance");
  launch(make_prefill_params(plan, t), static_cast<cudaStream_t>(stream));
}

}  // namespace

void prefill_launch(const Plan& plan, const Tensors& t, void*, void* stream) {
  launch_16bit(plan, t, stream);
}

void prefill_hopper_launch(const Plan& plan, const Tensors& t, void*, void* stream) {
  launch_16bit(plan, t, stream);
}

Verdict prefill_f32_supports(const Problem& p, const Options& options) {
  if (p.dtype != DType::F32)
    return Verdict::other_row(std::string("dtype ") + to_string(p.dtype) + " is not f32");
  if (Verdict common = prefill_layout_and_size(p); !common.ok) return common;
  return simt_f32_supports(p, options);
}

void prefill_f32_configure(const Problem& p, Plan& plan) {
  plan.num_kv_splits = 1;
  plan.workspace_bytes = 0;
  simt_f32_configure(p, plan);
  plan.num_v_slices = v_slices_of(p.head_dim_v);
}

void prefill_f32_launch(const Plan& plan, const Tensors& t, void*, void* stream) {
  const Problem& p = plan.problem;
  if (p.batch == 0 || p.heads_q == 0 || p.len_q == 0 || p.head_dim_v == 0) return;
  simt_f32_launch(plan, make_prefill_params(plan, t), static_cast<cudaStream_t>(stream));
}

}  // namespace fsdpa::detail::cuda
