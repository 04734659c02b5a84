"""A small pre-norm transformer with a frozen base and LoRA adapters, whose
forward loop drives an offloader the way the reference trainers do."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update (not itself a *Linear
    with a weight, so the default selector streams only `base.weight`)."""

    def __init__(self, base, rank=4):
        super().__init__()
        self.base = base
        self.lora_down = nn.Parameter(torch.randn(rank, base.in_features) * 0.1)
        self.lora_up = nn.Parameter(torch.randn(base.out_features, rank) * 0.1)

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.lora_down), self.lora_up)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2))
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class FP8ScaledLinear(nn.Module):
    """A frozen float8_e4m3fn weight and its float32 scale buffer (one per
    output row, or one for the tensor), dequantized in forward as
    musubi-tuner's and sd-scripts' fp8 optimization do:
    `weight.to(scale.dtype) * scale_weight`."""

    def __init__(self, linear, per_row=True):
        super().__init__()
        weight = linear.weight.detach()
        amax = weight.abs().amax(dim=1, keepdim=True) if per_row else weight.abs().amax()
        scale = (amax / 448.0).reshape(-1, 1) if per_row else (amax / 448.0).reshape(1)
        self.weight = nn.Parameter((weight / scale).to(torch.float8_e4m3fn), requires_grad=False)
        self.register_buffer("scale_weight", scale)
        self.bias = nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def dequantized(self):
        return self.weight.to(self.scale_weight.dtype) * self.scale_weight

    def forward(self, x):
        return F.linear(x, self.dequantized(), self.bias)


def to_fp8(model, per_row=True):
    """`model` (a TinyTransformer) with every Linear of its blocks, LoRA bases
    included, made an FP8ScaledLinear (e4m3fn's largest value, 448, at each
    scale's largest weight)."""
    for block in model.blocks:
        for name in ("qkv", "proj", "fc1", "fc2"):
            holder = getattr(block, name)
            holder, name = (holder, "base") if isinstance(holder, LoRALinear) else (block, name)
            setattr(holder, name, FP8ScaledLinear(getattr(holder, name), per_row))
    return model


def fp8_weights_and_scales(block):
    """A selector: each fp8 Linear's weight and its scale."""
    return [(m, attr) for m in block.modules() if isinstance(m, FP8ScaledLinear)
            for attr in ("weight", "scale_weight")]


class ReentrantCheckpoint(torch.autograd.Function):
    """Gradient checkpointing in the reentrant style of the reference trainers'
    own checkpointers: forward without a graph, recompute in backward. (Also
    cheaper to start than torch.utils.checkpoint, which imports torch._dynamo:
    seconds per child process on a loaded machine.)"""

    @staticmethod
    def forward(ctx, block, x):
        ctx.block = block
        ctx.save_for_backward(x)
        with torch.no_grad():
            return block(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            out = ctx.block(x)
        torch.autograd.backward(out, grad)
        return None, x.grad


class TinyTransformer(nn.Module):
    def __init__(self, num_blocks=6, dim=32, heads=4, seed=0, lora=True, reentrant=False):
        super().__init__()
        torch.manual_seed(seed)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(num_blocks))
        self.head = nn.Linear(dim, dim)
        self.requires_grad_(False)
        if lora:
            for block in self.blocks:
                for name in ("qkv", "fc2"):
                    setattr(block, name, LoRALinear(getattr(block, name)))
        self.offloader = None
        self.gradient_checkpointing = lora
        self.reentrant = reentrant

    def forward(self, x):
        if self.reentrant and torch.is_grad_enabled() and not x.requires_grad:
            # A reentrant checkpoint's output needs an input that requires grad.
            x = x.detach().requires_grad_(True)
        for i, block in enumerate(self.blocks):
            if self.offloader is not None:
                self.offloader.wait_for_block(i)
            if self.gradient_checkpointing and torch.is_grad_enabled():
                x = ReentrantCheckpoint.apply(block, x) if self.reentrant else \
                    checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
            if self.offloader is not None:
                self.offloader.submit_move_blocks_forward(self.blocks, i)
        return self.head(x)

    def lora_parameters(self):
        return [(n, p) for n, p in self.named_parameters() if "lora_" in n]

    def fine_tune(self):
        """Makes every parameter trainable (a full fine-tune, no checkpointing)."""
        self.requires_grad_(True)
        self.gradient_checkpointing = False
        return self

    def all_parameters(self):
        return list(self.named_parameters())


def batches(steps, seed=1, batch=2, tokens=8, dim=32):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, tokens, dim, generator=generator),
             torch.randn(batch, tokens, dim, generator=generator)) for _ in range(steps)]


def train(model, data, lr=0.05, wrapper=None, parameters=None):
    """Runs SGD steps (through `wrapper`, e.g. DDP, when given) on
    `parameters()` (default: the LoRA parameters); returns the losses and each
    step's gradients."""
    parameters = parameters or model.lora_parameters
    losses, grads = [], []
    for x, target in data:
        if model.offloader is not None:
            model.offloader.prepare_block_devices_before_forward(model.blocks)
        loss = F.mse_loss((wrapper or model)(x), target)
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append({n: p.grad.detach().clone() for n, p in parameters()})
        with torch.no_grad():  # plain SGD (torch.optim would import torch._dynamo)
            for _, p in parameters():
                p -= lr * p.grad
                p.grad = None
    return losses, grads
