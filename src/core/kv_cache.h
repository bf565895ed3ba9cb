// Where a key lives: docs/design.md's paged and ragged KV caches as one rule
// for every path. A sequence's key count and the element offset of key j of
// sequence b and kv head h, in dense k/v ([B, Hkv, Lk, D]) or in page pools
// ([num_pages, page_size, Hkv, D] with a block table). Plain data and
// functions that compile for the host and the device, so the CPU paths and
// the CUDA kernels read one definition.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/key_range.h"  // FSDPA_HOST_DEVICE
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail {

struct KvIndex {
  int64_t len_k = 0;  // the key capacity: dense Lk, or max_pages * page_size
  // Paged: block_table[b * block_table_strides[0] + page * block_table_strides[1]]
  // is the pool page holding keys [page * page_size, (page + 1) * page_size)
  // of sequence b. Null: dense.
  const int32_t* block_table = nullptr;
  int64_t block_table_strides[2] = {};
  int64_t page_size = 0;
  int64_t num_pages = 0;
  // Keys of sequence b: seq_lens_k[b * seq_lens_stride]. Null: len_k each.
  const int32_t* seq_lens_k = nullptr;
  int64_t seq_lens_stride = 0;
};

// Where a device read of an index may happen. AfterWait: after the kernel's
// wait for the kernel before it (griddepcontrol.wait), a plain load.
// BeforeWait: before it, a load that bypasses L1 (ld.global.cg), so that no
// line it brings stays in L1 past the wait (L1 is not coherent with the
// writes of the kernel before); only for reads whose value may be stale
// (a prefetch's addresses) or that the order of the kernels makes final (the
// combine's lengths: decode_combine.cu).
enum class IndexRead { AfterWait, BeforeWait };

// One int32 of caller memory: through memcpy on the host (the pointer may be
// misaligned), a load on the device (int32 tensors are 4-byte aligned there:
// the kernels' launch checks it).
template <IndexRead kRead = IndexRead::AfterWait>
FSDPA_HOST_DEVICE int32_t load_index(const int32_t* data, int64_t offset) {
#if defined(__CUDA_ARCH__)
  if constexpr (kRead == IndexRead::BeforeWait) return __ldcg(data + offset);
  return data[offset];
#else
  int32_t x;
  std::memcpy(&x, reinterpret_cast<const char*>(data) + offset * 4, 4);
  return x;
#endif
}

// Sequence b's key count, clamped into [0, len_k] (describe() rejects a
// host-visible length outside it; a device-resident one is clamped so that
// no key past the capacity is read).
template <IndexRead kRead = IndexRead::AfterWait>
FSDPA_HOST_DEVICE int64_t sequence_len_k(const KvIndex& kv, int64_t b) {
  if (kv.seq_lens_k == nullptr) return kv.len_k;
  const int64_t len = load_index<kRead>(kv.seq_lens_k, b * kv.seq_lens_stride);
  return len < 0 ? 0 : (len > kv.len_k ? kv.len_k : len);
}

// Key j's page-table column and row within its page. On the device in 32
// bits (the decode kernels take keys and page sizes below 2^31: their
// supports() checks it); a 64-bit division there cost the 320 bucket's
// paged kernel a spill.
struct PageSlot {
  int64_t column, row;
};
FSDPA_HOST_DEVICE PageSlot page_slot(const KvIndex& kv, int64_t j) {
#if defined(__CUDA_ARCH__)
  const uint32_t key = static_cast<uint32_t>(j), size = static_cast<uint32_t>(kv.page_size);
  const uint32_t column = key / size;
  return {column, key - column * size};
#else
  return {j / kv.page_size, j % kv.page_size};
#endif
}

// The pool page in column `column` of sequence b's row of the block table,
// clamped into [0, num_pages) like the lengths.
template <IndexRead kRead = IndexRead::AfterWait>
FSDPA_HOST_DEVICE int64_t page_of(const KvIndex& kv, int64_t b, int64_t column) {
  const int64_t page = load_index<kRead>(
      kv.block_table, b * kv.block_table_strides[0] + column * kv.block_table_strides[1]);
  return page < 0 ? 0 : (page >= kv.num_pages ? kv.num_pages - 1 : page);
}

// A k or v view's element strides by role: `outer` steps the batch (dense
// [B, Hkv, Lk, D]) or the page (paged [pages, page_size, Hkv, D]), `row` a
// key within it, `head` a kv head.
struct KvStrides {
  int64_t outer = 0, head = 0, row = 0, col = 0;
};

// Element offset of row `row` (column 0) of kv head h in `outer` (a
// sequence of a dense cache, a page of a paged one).
FSDPA_HOST_DEVICE int64_t row_offset(const KvStrides& s, int64_t outer, int64_t h, int64_t row) {
  return outer * s.outer + h * s.head + row * s.row;
}

// Element offset of key j's row (column 0) of sequence b and kv head h.
template <IndexRead kRead = IndexRead::AfterWait>
FSDPA_HOST_DEVICE int64_t key_row_offset(const KvIndex& kv, const KvStrides& s, int64_t b,
                                         int64_t h, int64_t j) {
  if (kv.block_table == nullptr) return row_offset(s, b, h, j);
  const PageSlot slot = page_slot(kv, j);
  return row_offset(s, page_of<kRead>(kv, b, slot.column), h, slot.row);
}

// The roles of a validated call's k or v strides (paged: a block table given).
inline KvStrides kv_strides(const TensorView& t, bool paged) {
  return paged ? KvStrides{t.strides[0], t.strides[2], t.strides[1], t.strides[3]}
               : KvStrides{t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

// The index of a validated call (describe() made `p` from `t`).
inline KvIndex make_kv_index(const Tensors& t, const Problem& p) {
  KvIndex kv;
  // A pool without pages holds no key: every sequence is then empty.
  kv.len_k = p.page_size > 0 && p.num_pages == 0 ? 0 : p.len_k;
  if (t.block_table) {
    kv.block_table = static_cast<const int32_t*>(t.block_table->data);
    kv.block_table_strides[0] = t.block_table->strides[0];
    kv.block_table_strides[1] = t.block_table->strides[1];
    kv.page_size = p.page_size;
    kv.num_pages = p.num_pages;
  }
  if (t.seq_lens_k) {
    kv.seq_lens_k = static_cast<const int32_t*>(t.seq_lens_k->data);
    kv.seq_lens_stride = t.seq_lens_k->strides[0];
  }
  return kv;
}

}  // namespace fsdpa::detail
