"""A tiny diffusers FluxTransformer2DModel (random init, CPU, nothing
downloaded) with a peft LoRA on its attention, and its inputs."""
import torch
import torch.nn.functional as F
from diffusers import FluxTransformer2DModel

DOUBLE, SINGLE = 3, 4
IMAGE_TOKENS, TEXT_TOKENS = 8, 4


def tiny_flux(seed=0, lora=True):
    torch.manual_seed(seed)
    model = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=DOUBLE,
                                   num_single_layers=SINGLE, attention_head_dim=8,
                                   num_attention_heads=2, joint_attention_dim=16,
                                   pooled_projection_dim=8, guidance_embeds=False,
                                   axes_dims_rope=(2, 2, 4))
    model.requires_grad_(False)
    if lora:
        from peft import LoraConfig  # only here: it imports transformers, seconds per process
        model.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=[
            "to_q", "to_k", "to_v", "to_out.0", "proj_mlp", "proj_out"]))
        with torch.no_grad():  # peft starts lora_B at zero: make every gradient count
            for _, p in lora_parameters(model):
                p.normal_(0, 0.1)
        model.enable_gradient_checkpointing()
    return model


def lora_parameters(model):
    return [(n, p) for n, p in model.named_parameters() if "lora_" in n]


def inputs(seed=1, batch=2):
    g = torch.Generator().manual_seed(seed)
    return dict(hidden_states=torch.randn(batch, IMAGE_TOKENS, 4, generator=g),
                encoder_hidden_states=torch.randn(batch, TEXT_TOKENS, 16, generator=g),
                pooled_projections=torch.randn(batch, 8, generator=g),
                timestep=torch.rand(batch, generator=g),
                img_ids=torch.randn(IMAGE_TOKENS, 3, generator=g),
                txt_ids=torch.zeros(TEXT_TOKENS, 3))


def train_steps(model, steps, lr=0.05):
    """SGD on the LoRA parameters through the model's own forward; the losses
    and each step's gradients."""
    losses, grads = [], []
    for step in range(steps):
        x = inputs(seed=10 + step)
        target = torch.randn(2, IMAGE_TOKENS, 4, generator=torch.Generator().manual_seed(step))
        loss = F.mse_loss(model(**x).sample, target)
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append({n: p.grad.detach().clone() for n, p in lora_parameters(model)})
        with torch.no_grad():
            for _, p in lora_parameters(model):
                p -= lr * p.grad
                p.grad = None
    return losses, grads


def tiny_sd3(seed=0):
    """A tiny diffusers SD3Transformer2DModel (one block list, `transformer_blocks`)."""
    from diffusers import SD3Transformer2DModel
    torch.manual_seed(seed)
    model = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=3,
                                  attention_head_dim=8, num_attention_heads=2,
                                  joint_attention_dim=16, caption_projection_dim=16,
                                  pooled_projection_dim=8, out_channels=4, pos_embed_max_size=16)
    return model.requires_grad_(False)


def sd3_inputs(seed=1, batch=2):
    g = torch.Generator().manual_seed(seed)
    return dict(hidden_states=torch.randn(batch, 4, 8, 8, generator=g),
                encoder_hidden_states=torch.randn(batch, TEXT_TOKENS, 16, generator=g),
                pooled_projections=torch.randn(batch, 8, generator=g),
                timestep=torch.rand(batch, generator=g))
