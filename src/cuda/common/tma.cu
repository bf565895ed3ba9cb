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

TileMap make_swizzle128_map(const void* base, int64_t batch, int64_t heads, int64_t rows,
                            int64_t cols, const int64_t (&strides)[3], int box_rows,
                            int box_heads) {
  constexpr int64_t kElement = 2;
  const bool batch_broadcast = batch > 1 && strides[0] == 0;
  const bool head_broadcast = heads > 1 && strides[1] == 0;
  if (batch_broadcast) batch = 1;
  if (head_broadcast) heads = 1;
  // A dimension of extent 1 may have any stride; the encoder still checks it.
  auto stride_bytes = [](int64_t extent, int64_t stride) {
    return static_cast<cuuint64_t>(extent > 1 ? stride * kElement : 16);
  };
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(std::max<int64_t>(cols, 1)),
                              static_cast<cuuint64_t>(std::max<int64_t>(rows, 1)),
                              static_cast<cuuint64_t>(std::max<int64_t>(heads, 1)),
                              static_cast<cuuint64_t>(std::max<int64_t>(batch, 1))};
  const cuuint64_t byte_strides[3] = {stride_bytes(rows, strides[2]),
                                      stride_bytes(heads, strides[1]),
                                      stride_bytes(batch, strides[0])};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows),
                             static_cast<cuuint32_t>(box_heads), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  TileMap tile{{}, head_broadcast ? 0 : 1, batch_broadcast ? 0 : 1};
  const CUresult status = encoder()(
      &tile.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, byte_strides,
      box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw DeviceError("fsdpa: cuTensorMapEncodeTiled refused a map (CUresult " +
                      std::to_string(static_cast<int>(status)) + ") for " + std::to_string(batch) +
                      "x" + std::to_string(heads) + "x" + std::to_string(rows) + "x" +
                      std::to_string(cols) + " with strides " + std::to_string(strides[0]) + "," +
                      std::to_string(strides[1]) + "," + std::to_string(strides[2]));
  return tile;
}

}  // namespace fsdpa::detail::cuda
