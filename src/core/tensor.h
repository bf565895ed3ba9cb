// Element access on TensorView, shared by the CPU paths and the tests.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail {

inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0,
                         int64_t i3 = 0) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

// Element `offset` of a buffer of T, through memcpy: callers' pointers need
// only byte alignment, and a misaligned T* access would be undefined.
template <typename T>
inline T read_element(const void* data, int64_t offset) {
  T x;
  std::memcpy(&x, static_cast<const char*>(data) + offset * static_cast<int64_t>(sizeof(T)),
              sizeof(T));
  return x;
}
template <typename T>
inline void write_element(void* data, int64_t offset, T x) {
  std::memcpy(static_cast<char*>(data) + offset * static_cast<int64_t>(sizeof(T)), &x, sizeof(T));
}

// Reads element `offset` (in elements) of a buffer of `dtype` as float.
inline float load_as_float(const void* data, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::F32:
      return read_element<float>(data, offset);
    case DType::F16:
      return f16_to_float(read_element<uint16_t>(data, offset));
    case DType::BF16:
      return bf16_to_float(read_element<uint16_t>(data, offset));
    case DType::Bool:
      // As bytes: any nonzero byte means true (a bool object holding 2 would be
      // undefined behaviour).
      return static_cast<const uint8_t*>(data)[offset] != 0 ? 1.0f : 0.0f;
    case DType::I32:  // indices (block table, lengths): read_element<int32_t>
      break;
  }
  throw Error("fsdpa: internal: load_as_float of unknown dtype");
}

inline void store_from_float(void* data, DType dtype, int64_t offset, float value) {
  switch (dtype) {
    case DType::F32:
      write_element<float>(data, offset, value);
      return;
    case DType::F16:
      write_element<uint16_t>(data, offset, float_to_f16(value));
      return;
    case DType::BF16:
      write_element<uint16_t>(data, offset, float_to_bf16(value));
      return;
    case DType::Bool:
    case DType::I32:
      break;
  }
  throw Error("fsdpa: internal: store_from_float to unsupported dtype");
}

// The number of elements: 0 when any size is 0, whatever the others (an
// empty dim may sit beside sizes whose product would overflow), else their
// product, saturated at INT64_MAX (validated views stay below 2^52).
inline int64_t element_count(const TensorView& t) {
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d)
    if (__builtin_mul_overflow(n, t.sizes[d], &n)) return INT64_MAX;
  return n;
}

// The four dims of a rank-4 view, with the strides of size-1 dims set to 0,
// so broadcasting and indexing need no special case.
inline TensorView broadcast_strides(TensorView t) {
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 1) t.strides[d] = 0;
  return t;
}

}  // namespace fsdpa::detail
