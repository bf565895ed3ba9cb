#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "cuda/common/tma.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa::detail::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  });
  if (encode == nullptr)
    throw DeviceError("fsdpa: the CUDA driver offers no cuTensorMapEncodeTiled (sm_90 TMA)");
  return encode;
}

}  // namespace

namespace {

// The map of `rank` dimensions (dims[0] columns of 16-bit elements, stride
// 1), boxes of `box`, 128-byte swizzled, zeros past the extents; `what`
// names the tensor in the encoder's refusal.
CUtensorMap encode_swizzle128(const void* base, cuuint32_t rank, const cuuint64_t* dims,
                              const cuuint64_t* byte_strides, const cuuint32_t* box,
                              const std::string& what) {
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult status = encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, byte_strides,
      box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw DeviceError("fsdpa: cuTensorMapEncodeTiled refused a map (CUresult " +
                      std::to_string(static_cast<int>(status)) + ") for " + what);
  return map;
}

// The [batch, heads, rows] dimensions of a 16-bit tensor with element
// strides `strides` (batch, head, row): a broadcast one (stride 0) is mapped
// with extent 1 (TileMap's steps), and a dimension of extent 1 takes any
// stride the encoder accepts.
struct OuterDims {
  cuuint64_t rows, heads, batch;
  cuuint64_t row_stride, head_stride, batch_stride;  // bytes
  int head_step, batch_step;
};
OuterDims outer_dims(int64_t batch, int64_t heads, int64_t rows, const int64_t (&strides)[3]) {
  constexpr int64_t kElement = 2;
  const bool batch_broadcast = batch > 1 && strides[0] == 0;
  const bool head_broadcast = heads > 1 && strides[1] == 0;
  if (batch_broadcast) batch = 1;
  if (head_broadcast) heads = 1;
  auto extent = [](int64_t n) { return static_cast<cuuint64_t>(std::max<int64_t>(n, 1)); };
  auto stride_bytes = [](int64_t n, int64_t stride) {
    return static_cast<cuuint64_t>(n > 1 ? stride * kElement : 16);
  };
  return {extent(rows),
          extent(heads),
          extent(batch),
          stride_bytes(rows, strides[2]),
          stride_bytes(heads, strides[1]),
          stride_bytes(batch, strides[0]),
          head_broadcast ? 0 : 1,
          batch_broadcast ? 0 : 1};
}

std::string shape_text(int64_t batch, int64_t heads, int64_t rows, int64_t cols,
                       const int64_t (&strides)[3]) {
  return std::to_string(batch) + "x" + std::to_string(heads) + "x" + std::to_string(rows) + "x" +
         std::to_string(cols) + " with strides " + std::to_string(strides[0]) + "," +
         std::to_string(strides[1]) + "," + std::to_string(strides[2]);
}

}  // namespace

TileMap make_swizzle128_map(const void* base, int64_t batch, int64_t heads, int64_t rows,
                            int64_t cols, const int64_t (&strides)[3], int box_rows,
                            int box_heads) {
  const OuterDims o = outer_dims(batch, heads, rows, strides);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(std::max<int64_t>(cols, 1)), o.rows, o.heads,
                              o.batch};
  const cuuint64_t byte_strides[3] = {o.row_stride, o.head_stride, o.batch_stride};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows),
                             static_cast<cuuint32_t>(box_heads), 1};
  return {encode_swizzle128(base, 4, dims, byte_strides, box,
                            shape_text(batch, heads, rows, cols, strides)),
          o.head_step, o.batch_step};
}

TileMap make_swizzle128_panel_map(const void* base, int64_t batch, int64_t heads, int64_t rows,
                                  int64_t cols, const int64_t (&strides)[3], int box_rows,
                                  int box_panels) {
  if (cols < 64 || cols % 64 != 0)
    throw Error("fsdpa: internal: a panel map needs whole 64-column panels, not " +
                std::to_string(cols) + " columns");
  const OuterDims o = outer_dims(batch, heads, rows, strides);
  const cuuint64_t dims[5] = {64, o.rows, static_cast<cuuint64_t>(cols / 64), o.heads, o.batch};
  const cuuint64_t byte_strides[4] = {o.row_stride, 128, o.head_stride, o.batch_stride};
  const cuuint32_t box[5] = {64, static_cast<cuuint32_t>(box_rows),
                             static_cast<cuuint32_t>(box_panels), 1, 1};
  return {encode_swizzle128(base, 5, dims, byte_strides, box,
                            shape_text(batch, heads, rows, cols, strides) + " in panels"),
          o.head_step, o.batch_step};
}

}  // namespace fsdpa::detail::cuda
