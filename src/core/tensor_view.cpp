#include <string>

#include "core/validate.h"
#include "fsdpa/fsdpa.h"

namespace fsdpa {

namespace {

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> sizes, Device device) {
  if (sizes.size() == 0 || sizes.size() > static_cast<size_t>(kMaxRank))
    detail::throw_invalid("view: rank must be 1.." + std::to_string(kMaxRank) + ", got " +
                          std::to_string(sizes.size()));
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(sizes.size());
  int d = 0;
  for (int64_t size : sizes) t.sizes[d++] = size;
  return t;
}

}  // namespace

TensorView contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                           Device device) {
  TensorView t = make_view(data, dtype, sizes, device);
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.sizes[d] > 0 ? t.sizes[d] : 1;
  }
  return t;
}

TensorView strided_view(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                        std::initializer_list<int64_t> strides, Device device) {
  TensorView t = make_view(data, dtype, sizes, device);
  if (strides.size() != sizes.size())
    detail::throw_invalid("view: " + std::to_string(sizes.size()) + " sizes but " +
                          std::to_string(strides.size()) + " strides");
  int d = 0;
  for (int64_t stride : strides) t.strides[d++] = stride;
  return t;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::F32:
      return "f32";
    case DType::Bool:
      return "bool";
    case DType::I32:
      return "i32";
  }
  return "unknown-dtype";
}

const char* to_string(DeviceType type) {
  switch (type) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::CUDA:
      return "cuda";
  }
  return "unknown-device";
}

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::Bool:
      return 1;
  }
  detail::throw_invalid("dtype: unknown value " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace fsdpa
