#include "client/torch/streamed_tensors.h"

#include <torch/nn/modules/linear.h>

namespace blockswap::torch {
namespace {

using at::Tensor;

// The safetensors name of `type` (the client library's table,
// bs_dtype_of_torch, keyed by the name Python gives the dtype).
std::string DtypeName(at::ScalarType type) {
  const std::string torch_name(c10::getDtypeNames(type).first);
  const char* name = bs_dtype_of_torch(torch_name.c_str());
  TORCH_CHECK(name != nullptr, "blockswap::torch cannot stream a tensor of dtype ", type, ": ",
              bs_last_error());
  return name;
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string FullName(const StreamedTensor& entry) {
  return entry.path.empty() ? entry.name : entry.path + "." + entry.name;
}

// The module's own handle of the tensor (same TensorImpl), so that set_data
// repoints what the module computes with.
Tensor FindTensor(const bs_offloader* offloader, const StreamedTensor& entry, uint32_t block) {
  TORCH_CHECK(entry.module != nullptr, "the selector returned no module for '", FullName(entry),
              "' in block ", block);
  if (const Tensor* p = entry.module->named_parameters(false).find(entry.name)) return *p;
  if (const Tensor* b = entry.module->named_buffers(false).find(entry.name)) return *b;
  const std::string owner =
      (entry.path.empty() ? "(the block itself)" : entry.path) + " (" + entry.module->name() + ")";
  Refuse(bs_offloader_refuse_selection(offloader, block, owner.c_str(), entry.name.c_str()));
  return {};
}

}  // namespace

std::vector<StreamedTensor> LinearWeights(const ModulePtr& block) {
  std::vector<StreamedTensor> picked;
  for (const auto& item : block->named_modules("", /*include_self=*/true)) {
    const ModulePtr& module = item.value();
    const bool linear = dynamic_cast<::torch::nn::LinearImpl*>(module.get()) != nullptr ||
                        EndsWith(module->name(), "Linear") ||
                        EndsWith(module->name(), "LinearImpl");
    if (!linear) continue;
    const Tensor* weight = module->named_parameters(false).find("weight");
    if (weight == nullptr || !weight->defined()) continue;
    picked.push_back(StreamedTensor{item.key(), module, "weight"});
  }
  return picked;
}

void ReleaseToMeta(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), "ReleaseToMeta: the tensor is undefined");
  if (!tensor.is_meta())
    Rebind(tensor, at::empty(tensor.sizes(), tensor.options().device(at::kMeta)));
}

Tensor Streamed::At(void* base, const c10::Device& device) const {
  return at::from_blob(static_cast<char*>(base) + offset, sizes,
                       at::TensorOptions().dtype(dtype).device(device));
}

std::vector<Streamed> SelectStreamed(const bs_offloader* offloader, const Selector& select,
                                     const ModulePtr& block, uint32_t index) {
  std::vector<Streamed> streamed;
  for (const StreamedTensor& entry : select(block)) {
    Tensor tensor = FindTensor(offloader, entry, index);
    TORCH_CHECK(tensor.defined(), "block ", index, " tensor '", FullName(entry), "' is undefined");
    const std::vector<int64_t> sizes = tensor.sizes().vec();
    streamed.push_back(Streamed{tensor, FullName(entry), DtypeName(tensor.scalar_type()), sizes,
                                std::vector<uint64_t>(sizes.begin(), sizes.end()),
                                tensor.scalar_type()});
  }
  return streamed;
}

std::vector<bs_offloader_tensor> Describe(const std::vector<Streamed>& tensors, bool with_data,
                                          std::vector<at::Tensor>& host_copies) {
  std::vector<bs_offloader_tensor> descs;
  for (const Streamed& t : tensors) {
    const void* data = nullptr;
    if (with_data && !t.tensor.is_meta()) {
      host_copies.push_back(t.tensor.detach().to(at::kCPU).contiguous());
      data = host_copies.back().data_ptr();
    }
    descs.push_back(bs_offloader_tensor{
        t.name.c_str(), t.dtype_name.c_str(), t.shape.data(), static_cast<uint32_t>(t.shape.size()),
        data, t.tensor.requires_grad() ? 1 : 0, t.tensor.is_meta() ? 1 : 0});
  }
  return descs;
}

void Rebind(const Tensor& tensor, const Tensor& data) {
  if (tensor.is_meta() == data.is_meta()) {
    tensor.set_data(data);
    return;
  }
  TORCH_CHECK(!tensor.requires_grad(),
              "a tensor that requires grad cannot change between meta and real data");
  tensor.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

}  // namespace blockswap::torch
