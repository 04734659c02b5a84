"""Like sd-scripts' networks/lora_flux.py: LoRA modules outside the model that
patch each target Linear's forward (the Linear keeps its frozen weight)."""
import torch
import torch.nn as nn


class LoRAModule(nn.Module):
    def __init__(self, org_module, rank=4, alpha=4.0):
        super().__init__()
        self.lora_down = nn.Linear(org_module.in_features, rank, bias=False)
        self.lora_up = nn.Linear(rank, org_module.out_features, bias=False)
        nn.init.normal_(self.lora_up.weight, std=0.1)  # kohya starts at zero: make it count
        self.scale = alpha / rank
        self.org_module = org_module

    def apply_to(self):
        self.org_forward = self.org_module.forward
        self.org_module.forward = self.forward
        del self.org_module

    def forward(self, x):
        return self.org_forward(x) + self.lora_up(self.lora_down(x)) * self.scale


class LoRANetwork(nn.Module):
    TARGETS = ("qkv", "proj", "linear1", "linear2")

    def __init__(self, model, seed=2):
        super().__init__()
        torch.manual_seed(seed)
        self.loras = nn.ModuleDict()
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear) and "blocks." in name and \
                    any(name.endswith(t) for t in self.TARGETS):
                self.loras[name.replace(".", "_")] = LoRAModule(module)

    def apply_to(self):
        for lora in self.loras.values():
            lora.apply_to()
