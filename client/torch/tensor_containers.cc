// The reference's helpers that move nested tensor containers between devices
// (blockswap/torch.h: ToDevice, ToCpu, CpuOffloadingWrapper).
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <utility>
#include <vector>

#include "blockswap/torch.h"

namespace blockswap::torch {

using at::Tensor;
using Tensors = std::vector<at::Tensor>;

c10::IValue ToDevice(const c10::IValue& value, const c10::Device& device, bool non_blocking) {
  if (value.isTensor()) return value.toTensor().to(device, non_blocking);
  if (value.isTensorList()) {
    c10::List<Tensor> moved;
    for (const Tensor& t : value.toTensorList()) moved.push_back(t.to(device, non_blocking));
    return moved;
  }
  if (value.isList()) {
    c10::impl::GenericList moved(value.toList().elementType());
    for (const c10::IValue& element : value.toList()) {
      moved.push_back(ToDevice(element, device, non_blocking));
    }
    return moved;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> moved;
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      moved.push_back(ToDevice(element, device, non_blocking));
    }
    return c10::ivalue::Tuple::create(std::move(moved));
  }
  if (value.isGenericDict()) {
    const c10::impl::GenericDict dict = value.toGenericDict();
    c10::impl::GenericDict moved(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) {
      moved.insert(entry.key(), ToDevice(entry.value(), device, non_blocking));
    }
    return moved;
  }
  return value;
}

c10::IValue ToCpu(const c10::IValue& value) { return ToDevice(value, c10::Device(c10::kCPU)); }

BlockFnList CpuOffloadingWrapper(BlockFnList fn, const c10::Device& device) {
  return [fn = std::move(fn), device](const Tensors& inputs) {
    Tensors on_device, on_cpu;
    for (const Tensor& input : inputs) on_device.push_back(input.to(device));
    for (const Tensor& output : fn(on_device)) on_cpu.push_back(output.cpu());
    return on_cpu;
  };
}

}  // namespace blockswap::torch
