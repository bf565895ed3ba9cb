// The CUDA decode family's selection-table entry points: which problems it
// serves (and why not), the plan's kernel facts (bucket, tiles, splits,
// workspace), and the launch. The compiled buckets come from the generated
// decode_buckets.h: the one list that supports() and the dispatch read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/kv_cache.h"
#include "core/semantics.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "cuda/common/check.cuh"
#include "cuda/common/device.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_buckets.h"
#include "cuda/decode/decode_config.h"
#include "cuda/decode/decode_host.h"
#include "cuda/decode/decode_instances.h"
#include "cuda/decode/decode_launch.h"

namespace fsdpa::detail::cuda {

namespace {

// Without a device (plan() on a machine with no GPU, the support matrix) the
// split count is planned for an H100/H200-sized GPU.
constexpr int kAssumedMultiprocessors = 132;
constexpr int kAssumedBlocksPerSm = 2;
constexpr int kAssumedComputeCapability = 90;

const DecodeBucket* find_bucket(int64_t head_dim_qk, int64_t head_dim_v) {
  for (const DecodeBucket& bucket : kDecodeBuckets)
    if (bucket.compiled && bucket.head_dim_qk >= head_dim_qk && bucket.head_dim_v >= head_dim_v)
      return &bucket;
  return nullptr;
}

std::string compiled_bucket_list() {
  std::string list;
  for (const DecodeBucket& bucket : kDecodeBuckets)
    if (bucket.compiled)
      list += (list.empty() ? "" : ", ") + std::to_string(bucket.head_dim_qk) + "/" +
              std::to_string(bucket.head_dim_v);
  return list.empty() ? "none" : list;
}

int elem_bytes(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

// Keys [begin, end) that any query row can see (the hull of visible_keys).
// With per-sequence lengths each sequence has its own diagonal: all keys.
std::pair<int64_t, int64_t> key_hull(const Problem& p, const Options& options) {
  if (p.has_seq_lens_k) return {0, p.len_k};
  int64_t begin = p.len_k, end = 0;
  for (int64_t i = 0; i < p.len_q; ++i) {
    const KeyRange range = visible_keys(options, p.len_q, p.len_k, i);
    if (range.begin >= range.end) continue;
    begin = std::min(begin, range.begin);
    end = std::max(end, range.end);
  }
  return end > begin ? std::pair{begin, end} : std::pair<int64_t, int64_t>{0, 0};
}

template <typename T, size_t I, int C>
DecodeBucketFns fns_if_compiled() {
  if constexpr (kDecodeBuckets[I].compiled)
    return decode_bucket_fns<T, kDecodeBuckets[I].head_dim_qk, kDecodeBuckets[I].head_dim_v, C>();
  else
    return {};
}

template <typename T, size_t I>
DecodeBucketFns fns_of_class(int shared_class) {
  DecodeBucketFns fns{};
  [&]<int... C>(std::integer_sequence<int, C...>) {
    ((C == shared_class ? void(fns = fns_if_compiled<T, I, C>()) : void()), ...);
  }
  (std::make_integer_sequence<int, kSharedClasses>{});
  return fns;
}

template <typename T>
DecodeBucketFns bucket_fns_for(int64_t head_dim_qk, int64_t head_dim_v, int shared_class) {
  DecodeBucketFns fns{};
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((kDecodeBuckets[I].head_dim_qk == head_dim_qk && kDecodeBuckets[I].head_dim_v == head_dim_v
          ? void(fns = fns_of_class<T, I>(shared_class))
          : void()),
     ...);
  }
  (std::make_index_sequence<std::size(kDecodeBuckets)>{});
  return fns;
}

// The bucket's instance for the dtype and the shared-memory class of the
// tensor-core kernel's tiling (shared_budget.h; the f32 kernel's is the same
// in every class).
DecodeBucketFns bucket_fns(DType dtype, int64_t head_dim_qk, int64_t head_dim_v, int shared_class) {
  if (shared_class < 0 || shared_class >= kSharedClasses)
    throw Error("fsdpa: internal: decode shared-memory class " + std::to_string(shared_class));
  DecodeBucketFns fns{};
  switch (dtype) {
    case DType::BF16:
      fns = bucket_fns_for<__nv_bfloat16>(head_dim_qk, head_dim_v, shared_class);
      break;
    case DType::F16:
      fns = bucket_fns_for<__half>(head_dim_qk, head_dim_v, shared_class);
      break;
    case DType::F32:
      fns = bucket_fns_for<float>(head_dim_qk, head_dim_v, shared_class);
      break;
    case DType::Bool:
    case DType::I32:
      break;
  }
  if (fns.launch == nullptr)
    throw Unsupported(std::string("fsdpa: no compiled decode kernel for dtype ") +
                      to_string(dtype) + " and bucket " + std::to_string(head_dim_qk) + "/" +
                      std::to_string(head_dim_v) + " (compiled: " + compiled_bucket_list() + ")");
  return fns;
}

// FSDPA_DECODE_SPLITS=N forces N key splits (1..kDecodeMaxSplits), for tests
// of the single-pass and the combine paths on any shape; unset = automatic.
int forced_splits() {
  return static_cast<int>(env_integer(kEnvDecodeSplits, 1, kDecodeMaxSplits, 0));
}

}  // namespace

bool decode_bucket_compiled(int64_t head_dim_qk, int64_t head_dim_v) {
  return find_bucket(head_dim_qk, head_dim_v) != nullptr;
}

Verdict decode_supports(const Problem& p, const Options& options) {
  if (p.len_q > kDecodeMaxLenQ)
    return Verdict::other_row("len_q=" + std::to_string(p.len_q) + " exceeds the decode limit " +
                              std::to_string(kDecodeMaxLenQ) + " (prefill family)");
  return decode_kernel_supports(p, options);
}

Verdict decode_index_limits(const Problem& p) {
  if (p.len_k > INT_MAX || p.page_size > INT_MAX || p.num_pages > INT_MAX ||
      p.batch * p.heads_q * p.len_q > INT_MAX)
    return Verdict::no("len_k=" + std::to_string(p.len_k) + ", page_size=" +
                       std::to_string(p.page_size) + ", num_pages=" + std::to_string(p.num_pages) +
                       ", rows=" + std::to_string(p.batch * p.heads_q * p.len_q) +
                       " exceed the decode limit " + std::to_string(INT_MAX) + " (32-bit indices)");
  return Verdict::yes();
}

Verdict decode_kernel_supports(const Problem& p, const Options&) {
  if (p.head_dim_qk > kDecodeMaxHeadDimQk)
    return Verdict::no("head_dim_qk=" + std::to_string(p.head_dim_qk) +
                       " exceeds the largest fused size " + std::to_string(kDecodeMaxHeadDimQk));
  if (p.head_dim_v > kDecodeMaxHeadDimV)
    return Verdict::no("head_dim_v=" + std::to_string(p.head_dim_v) +
                       " exceeds the largest fused size " + std::to_string(kDecodeMaxHeadDimV));
  if (p.head_dim_qk < 1 || p.head_dim_v < 1)
    return Verdict::no("head_dim_qk=" + std::to_string(p.head_dim_qk) + ", head_dim_v=" +
                       std::to_string(p.head_dim_v) + ": the decode kernels need head dims >= 1");
  if (p.dtype != DType::F16 && p.dtype != DType::BF16 && p.dtype != DType::F32)
    return Verdict::no(std::string("dtype ") + to_string(p.dtype) +
                       " is not one of f16, bf16, f32");
  if (p.row_alignment == 0) return Verdict::no("rows must have stride 1 (q, k, v, out)");
  if (p.row_alignment < int(element_size(p.dtype)))
    return Verdict::no("rows are " + std::to_string(p.row_alignment) + "-byte aligned, below the " +
                       std::to_string(element_size(p.dtype)) +
                       "-byte elements the kernels load whole");
  if (Verdict indices = decode_index_limits(p); !indices.ok) return indices;
  if (find_bucket(p.head_dim_qk, p.head_dim_v) == nullptr)
    return Verdict::no(
        "no compiled decode bucket covers head_dim_qk=" + std::to_string(p.head_dim_qk) +
        ", head_dim_v=" + std::to_string(p.head_dim_v) + " (compiled: " + compiled_bucket_list() +
        "; see FSDPA_HEAD_DIMS)");
  if (const DeviceInfo* device = planning_device(p.device.index))
    return decode_fits_shared_memory(p, block_shared_memory(*device));
  return Verdict::yes();
}

Verdict decode_fits_shared_memory(const Problem& p, size_t shared_bytes_per_block) {
  const DecodeBucket* bucket = find_bucket(p.head_dim_qk, p.head_dim_v);
  if (bucket == nullptr) return Verdict::no("no compiled decode bucket");
  // The tensor-core kernel for f16/bf16 in the tiling of the budget's class,
  // the CUDA-core one for f32.
  const size_t need =
      p.dtype == DType::F32
          ? decode_smem_layout(4, bucket->head_dim_qk, bucket->head_dim_v, p.v_aliases_k).total
          : decode_mma_smem_bytes(
                bucket->head_dim_qk, bucket->head_dim_v,
                shared_class_for_bytes(static_cast<long long>(shared_bytes_per_block)),
                p.v_aliases_k, p.page_size > 0);
  return fits_shared_memory("the decode kernel of bucket " + std::to_string(bucket->head_dim_qk) +
                                "/" + std::to_string(bucket->head_dim_v) + " (" +
                                to_string(p.dtype) + ")",
                            need, shared_bytes_per_block, p);
}

void configure_decode_plan(const Problem& p, Plan& plan, const DecodeGrid& grid) {
  plan.head_dim_qk_bucket = grid.head_dim_qk_bucket;
  plan.head_dim_v_bucket = grid.head_dim_v_bucket;
  plan.pad_ratio = double(grid.head_dim_qk_bucket + grid.head_dim_v_bucket) /
                   double(p.head_dim_qk + p.head_dim_v);
  plan.tile_q = grid.rows;
  plan.tile_k = grid.keys;

  const int64_t rows_total = p.batch * p.heads_q * p.len_q;
  const int64_t kv_group_size = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 0;
  const int64_t row_chunks = (kv_group_size * p.len_q + grid.rows - 1) / grid.rows;
  const auto [key_begin, key_end] = key_hull(p, plan.options);
  const int64_t hull = key_end - key_begin;

  const DeviceInfo* device = planning_device(p.device.index);
  const int multiprocessors = device != nullptr ? device->multiprocessors : kAssumedMultiprocessors;
  int splits = forced_splits();
  if (splits == 0) {
    // One full wave: every block of the grid resident at once. With
    // per-sequence lengths, for one sequence: the longest may hold most of
    // the keys, and the splits past a shorter one's end cost next to nothing
    // (sequence_splits).
    const int64_t sequences = p.has_seq_lens_k ? 1 : p.batch;
    const int64_t base_blocks = std::max<int64_t>(1, sequences * p.heads_kv * row_chunks);
    const int64_t wave = int64_t(multiprocessors) * grid.blocks_per_sm;
    int64_t want = std::max<int64_t>(1, wave / base_blocks);
    want = std::min(want, (hull + kDecodeMinKeysPerSplit - 1) / kDecodeMinKeysPerSplit);
    if (hull < kDecodeMinKeysToSplit) want = 1;
    // A short range whose splits merge in a cluster (no combine kernel)
    // splits from fewer keys, into as many as merge in one
    // (merges_in_cluster's conditions).
    if (grid.cluster_merge && row_chunks == 1 && !p.has_seq_lens_k &&
        hull >= kDecodeMinKeysToMergeInCluster && hull <= kDecodeMaxKeysToMergeInCluster) {
      const int64_t cluster_want = std::min(
          decode_cluster_splits_limit(base_blocks, multiprocessors), hull / kDecodeMinKeysPerSplit);
      if (cluster_want >= 2) want = cluster_want;
    }
    want = std::clamp<int64_t>(want, 1, kDecodeMaxSplits);
    // Even splits of a multiple of the row's key step, none empty.
    const int64_t multiple = grid.split_keys_multiple;
    const int64_t keys_per_split =
        ((hull + want - 1) / std::max<int64_t>(want, 1) + multiple - 1) / multiple * multiple;
    splits = keys_per_split > 0 ? int((hull + keys_per_split - 1) / keys_per_split) : 1;
  }
  plan.num_kv_splits = splits;
  // A batch of several sequences with their own lengths runs a list of
  // splits (decode_common.cuh: decode_block) where the kernel takes one: a
  // sequence of the batch's mean length takes the splits its dense twin
  // would (one wave of blocks for the batch, at least 64 keys a split), each
  // sequence as many as its length needs.
  plan.kv_split_slots = 0;
  if (grid.split_list && p.has_seq_lens_k && p.batch > 1 && splits > 1) {
    const int64_t base_blocks = std::max<int64_t>(1, p.batch * p.heads_kv * row_chunks);
    const int64_t wave = int64_t(multiprocessors) * grid.blocks_per_sm;
    plan.kv_split_slots = std::clamp<int64_t>(
        std::min(wave / base_blocks, (hull + kDecodeMinKeysPerSplit - 1) / kDecodeMinKeysPerSplit),
        1, splits);
  }
  const bool merged =
      grid.merge_known && decode_merges_in_cluster(splits, row_chunks, p.has_seq_lens_k, p.batch,
                                                   p.heads_kv, multiprocessors);
  plan.workspace_bytes = splits > 1 && !merged ? size_t(rows_total) * size_t(splits) *
                                                     size_t(p.head_dim_v + 2) * sizeof(float)
                                               : 0;
}

namespace {

// Whether the tensor-core split kernel reads narrow rows (4- or 8-byte
// aligned) of a dense cache as packed spans where the tensors allow it
// (contiguous rows from 16-byte aligned bases: make_decode_params;
// decode_mma_kernel.cuh's KvLoad::Packed). The plan's loads and the launch
// ask it alike, the launch with the tensors' own alignment.
bool packs_narrow_rows(const Problem& p, int row_alignment) {
  return p.dtype != DType::F32 && p.page_size == 0 && !p.v_aliases_k && row_alignment >= 4 &&
         row_alignment < 16;
}

// What decode planning knows of the problem's device: its compute capability
// (kAssumedComputeCapability without a device), the shared-memory class
// whose tiling the tensor-core kernel takes there (shared_class_of), whether
// it is the current one (only then can the bucket's instance be asked about
// it), and the sm version of that instance's tensor-core binary there (0:
// unknown).
struct DecodeDevice {
  int compute_capability = kAssumedComputeCapability;
  int shared_class = 0;
  bool current = false;
  int mma_binary = 0;
};

DecodeDevice decode_device(const Problem& p) {
  DecodeDevice d;
  const DeviceInfo* target = planning_device(p.device.index);
  if (target != nullptr)
    d.compute_capability = target->compute_capability;  // an offline target's too
  d.shared_class = shared_class_of(target);
  if (!has_device(p.device.index)) return d;
  int current = 0;
  FSDPA_CUDA_CHECK(cudaGetDevice(&current));
  d.current = current == p.device.index;
  const DecodeBucket* covering = find_bucket(p.head_dim_qk, p.head_dim_v);
  if (d.current && covering != nullptr) {
    const DecodeBucketFns fns =
        bucket_fns(p.dtype, covering->head_dim_qk, covering->head_dim_v, d.shared_class);
    if (fns.mma_binary_version != nullptr) d.mma_binary = fns.mma_binary_version();
  }
  return d;
}

}  // namespace

bool decode_page_box_binary(const Problem& p) {
  const DecodeDevice d = decode_device(p);
  return d.mma_binary != 0 ? d.mma_binary >= 90 : d.compute_capability >= 90;
}

int decode_split_keys_multiple(const Problem& p) {
  return p.page_size > 0 || p.has_seq_lens_k ? kDecodeMmaKeysPerStream : 1;
}

void decode_configure(const Problem& p, Plan& plan) {
  const DecodeBucket* covering = find_bucket(p.head_dim_qk, p.head_dim_v);
  if (covering == nullptr)  // only plan_for_row reaches here without supports()
    throw Unsupported(
        "fsdpa: no compiled decode bucket covers head_dim_qk=" + std::to_string(p.head_dim_qk) +
        ", head_dim_v=" + std::to_string(p.head_dim_v) + " (compiled: " + compiled_bucket_list() +
        ")");
  const DecodeBucket& bucket = *covering;
  const DecodeDevice device = decode_device(p);
  const DecodeBlockShape tile = decode_block_shape(elem_bytes(p.dtype), bucket.head_dim_qk,
                                                   bucket.head_dim_v, device.shared_class);
  // The bucket's instance for the dtype and the device's tiling (bucket_fns
  // raises when that is not compiled): the plan carries its launch.
  const DecodeBucketFns fns =
      bucket_fns(p.dtype, bucket.head_dim_qk, bucket.head_dim_v, device.shared_class);
  plan.instance = reinterpret_cast<void (*)()>(fns.launch);
  // Resident blocks per SM from the occupancy calculator where the device
  // is the current one, else an H100/H200-like guess.
  int blocks_per_sm = kAssumedBlocksPerSm;
  if (device.current) {
    const int64_t kv_group_size = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 0;
    blocks_per_sm = std::max(1, fns.blocks_per_sm(int(kv_group_size * p.len_q), p.v_aliases_k));
  }
  // The tensor-core kernel (f16, bf16) merges in clusters on sm_90 (where
  // its binary is an sm_80 one, the launch takes the combine kernel).
  const bool cluster_merge = p.dtype != DType::F32 && device.compute_capability >= 90;
  configure_decode_plan(
      p, plan,
      DecodeGrid{
          bucket.head_dim_qk, bucket.head_dim_v, tile.rows, tile.keys, blocks_per_sm,
          decode_split_keys_multiple(p), cluster_merge, device.mma_binary >= 90,
          p.dtype == DType::F32 || decode_mma_split_list(bucket.head_dim_qk, bucket.head_dim_v)});
  plan.loads = copy_16_loads(p.row_alignment);
  const bool page_groups = p.page_size > 0 && p.dtype != DType::F32 &&
                           decode_mma_page_groups(p.page_size, p.row_alignment);
  if (p.page_size > 0)
    plan.loads += page_groups
                      ? "; one block-table lookup per 16 keys (a window's first block: per key)"
                      : "; one block-table lookup per key";
  if (packs_narrow_rows(p, p.row_alignment))
    plan.loads +=
        "; 16-byte cp.async of each stage's span where k's and v's rows are contiguous from "
        "16-byte aligned bases";
  if (page_groups && decode_page_box_binary(p) &&
      decode_mma_page_boxes(bucket.head_dim_qk, bucket.head_dim_v, device.shared_class))
    plan.loads =
        "TMA boxes of 16 rows of a page where k's and v's bases and strides are 16-byte "
        "aligned, else " +
        plan.loads;
}

DecodeParams make_decode_params(const Plan& plan, const Tensors& t, void* workspace,
                                int rows_per_block, int split_keys_multiple) {
  const Problem& p = plan.problem;
  const int64_t rows_total = p.batch * p.heads_q * p.len_q;
  DecodeParams d;
  static_cast<AttentionParams&>(d) = make_attention_params(plan, t);
  // Packed spans (DecodeParams::packed_kv): contiguous rows from 16-byte
  // aligned bases.
  auto packed_rows = [](const TensorView& view, int64_t head_dim) {
    return (view.sizes[2] <= 1 || view.strides[2] == head_dim) &&
           reinterpret_cast<uintptr_t>(view.data) % 16 == 0;
  };
  d.packed_kv = packs_narrow_rows(p, d.copy_bytes) && packed_rows(t.k, p.head_dim_qk) &&
                packed_rows(t.v, p.head_dim_v);
  d.rows_per_kv_head = d.kv_group_size * d.len_q;
  d.row_chunks = (d.rows_per_kv_head + rows_per_block - 1) / rows_per_block;
  const auto [key_begin, key_end] = key_hull(p, plan.options);
  const int multiple = split_keys_multiple;
  d.key_begin = int(key_begin) / multiple * multiple;
  d.key_end = int(key_end);
  d.num_splits = int(plan.num_kv_splits);
  const int keys_per_split = (d.key_end - d.key_begin + d.num_splits - 1) / d.num_splits;
  d.keys_per_split = (keys_per_split + multiple - 1) / multiple * multiple;
  d.split_keys_multiple = multiple;
  d.split_slots = int(plan.kv_split_slots);
  d.dv_ws = d.head_dim_v;
  if (d.num_splits > 1 && workspace != nullptr) {  // none where the splits merge in a cluster
    // The (max, sum) pairs first: float2 accesses stay 8-byte aligned (run()
    // requires a 16-byte aligned workspace) whatever rows x splits x Dv is;
    // the combine checks the outputs' alignment before its float4 path.
    d.partial_max_sum = static_cast<float*>(workspace);
    d.partial_out = d.partial_max_sum + 2 * int64_t(rows_total) * d.num_splits;
  }
  return d;
}

void decode_launch(const Plan& plan, const Tensors& t, void* workspace, void* stream) {
  const Problem& p = plan.problem;
  if (p.batch * p.heads_q * p.len_q == 0 || p.head_dim_v == 0) return;
  const auto launch = reinterpret_cast<decltype(DecodeBucketFns::launch)>(plan.instance);
  if (launch == nullptr)
    throw Error("fsdpa: internal: a decode plan without its instance (" + plan.kernel + ")");
  // The plan's packed rows per block (decode_block_shape of its tiling).
  launch(make_decode_params(plan, t, workspace, int(plan.tile_q), decode_split_keys_multiple(p)),
         static_cast<cudaStream_t>(stream));
}

}  // namespace fsdpa::detail::cuda
