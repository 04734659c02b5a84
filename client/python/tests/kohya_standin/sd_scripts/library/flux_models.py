"""Laid out like sd-scripts' library/flux_models.py: double and single block
lists, each with its own ModelOffloader in the older signature, double blocks
called with keyword activations, checkpointing inside the blocks."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from library import custom_offloading_utils

DIM, HEADS = 32, 2


def attention(q, k, v, pe):
    b, t, _ = q.shape
    q, k, v = ((x + pe[:t] if x is not v else x).view(b, t, HEADS, -1).transpose(1, 2)
               for x in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1)


class DoubleStreamBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.img_mod, self.txt_mod = nn.Linear(DIM, 2 * DIM), nn.Linear(DIM, 2 * DIM)
        self.img_qkv, self.txt_qkv = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, 3 * DIM)
        self.img_proj, self.txt_proj = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
        self.img_mlp, self.txt_mlp = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
        self.gradient_checkpointing = False

    def _forward(self, img, txt, vec, pe):
        img_shift, img_scale = self.img_mod(F.silu(vec))[:, None].chunk(2, -1)
        txt_shift, txt_scale = self.txt_mod(F.silu(vec))[:, None].chunk(2, -1)
        img_qkv = self.img_qkv(F.layer_norm(img, (DIM,)) * (1 + img_scale) + img_shift)
        txt_qkv = self.txt_qkv(F.layer_norm(txt, (DIM,)) * (1 + txt_scale) + txt_shift)
        q, k, v = torch.cat((txt_qkv, img_qkv), 1).chunk(3, -1)
        attn = attention(q, k, v, pe)
        txt_attn, img_attn = attn[:, :txt.shape[1]], attn[:, txt.shape[1]:]
        img = img + self.img_proj(img_attn)
        txt = txt + self.txt_proj(txt_attn)
        return img + self.img_mlp(F.gelu(img)), txt + self.txt_mlp(F.gelu(txt))

    def forward(self, img, txt, vec, pe, txt_attention_mask=None):
        if self.training and self.gradient_checkpointing:
            return checkpoint(self._forward, img, txt, vec, pe, use_reentrant=False)
        return self._forward(img, txt, vec, pe)


class SingleStreamBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.modulation = nn.Linear(DIM, 2 * DIM)
        self.linear1 = nn.Linear(DIM, 4 * DIM)
        self.linear2 = nn.Linear(2 * DIM, DIM)
        self.gradient_checkpointing = False

    def _forward(self, x, vec, pe):
        shift, scale = self.modulation(F.silu(vec))[:, None].chunk(2, -1)
        q, k, v, mlp = self.linear1(F.layer_norm(x, (DIM,)) * (1 + scale) + shift).chunk(4, -1)
        return x + self.linear2(torch.cat((attention(q, k, v, pe), F.gelu(mlp)), -1))

    def forward(self, x, vec, pe, txt_attention_mask=None):
        if self.training and self.gradient_checkpointing:
            return checkpoint(self._forward, x, vec, pe, use_reentrant=False)
        return self._forward(x, vec, pe)


class Flux(nn.Module):
    def __init__(self, double=6, single=8, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.img_in, self.txt_in = nn.Linear(4, DIM), nn.Linear(16, DIM)
        self.time_in = nn.Linear(1, DIM)
        self.pe = nn.Parameter(torch.randn(64, DIM) * 0.1)
        self.double_blocks = nn.ModuleList(DoubleStreamBlock() for _ in range(double))
        self.single_blocks = nn.ModuleList(SingleStreamBlock() for _ in range(single))
        self.final_layer = nn.Linear(DIM, 4)
        self.num_double_blocks, self.num_single_blocks = double, single
        self.blocks_to_swap = None
        self.offloader_double = self.offloader_single = None

    def enable_gradient_checkpointing(self):
        for block in [*self.double_blocks, *self.single_blocks]:
            block.gradient_checkpointing = True

    def enable_block_swap(self, num_blocks, device):
        # sd-scripts' split of --blocks_to_swap between the two lists.
        self.blocks_to_swap = num_blocks
        double_blocks_to_swap = num_blocks // 2
        single_blocks_to_swap = (num_blocks - double_blocks_to_swap) * 2
        self.offloader_double = custom_offloading_utils.ModelOffloader(
            self.double_blocks, self.num_double_blocks, double_blocks_to_swap, device)
        self.offloader_single = custom_offloading_utils.ModelOffloader(
            self.single_blocks, self.num_single_blocks, single_blocks_to_swap, device)

    def move_to_device_except_swap_blocks(self, device):
        # Blocks to swap stay where they are: the offloaders place them.
        if self.blocks_to_swap:
            saved = self.double_blocks, self.single_blocks
            self.double_blocks = self.single_blocks = None
        self.to(device)
        if self.blocks_to_swap:
            self.double_blocks, self.single_blocks = saved

    def prepare_block_swap_before_forward(self):
        if not self.blocks_to_swap:
            return
        self.offloader_double.prepare_block_devices_before_forward(self.double_blocks)
        self.offloader_single.prepare_block_devices_before_forward(self.single_blocks)

    def switch_block_swap_for_inference(self):
        if self.blocks_to_swap:
            self.offloader_double.set_forward_only(True)
            self.offloader_single.set_forward_only(True)
            self.prepare_block_swap_before_forward()

    def switch_block_swap_for_training(self):
        if self.blocks_to_swap:
            self.offloader_double.set_forward_only(False)
            self.offloader_single.set_forward_only(False)
            self.prepare_block_swap_before_forward()

    def forward(self, img, txt, timesteps):
        img, txt = self.img_in(img), self.txt_in(txt)
        vec = self.time_in(timesteps[:, None])
        pe = self.pe
        for block_idx, block in enumerate(self.double_blocks):
            if self.blocks_to_swap:
                self.offloader_double.wait_for_block(block_idx)
            img, txt = block(img=img, txt=txt, vec=vec, pe=pe)
            if self.blocks_to_swap:
                self.offloader_double.submit_move_blocks(self.double_blocks, block_idx)
        img = torch.cat((txt, img), 1)
        for block_idx, block in enumerate(self.single_blocks):
            if self.blocks_to_swap:
                self.offloader_single.wait_for_block(block_idx)
            img = block(img, vec=vec, pe=pe)
            if self.blocks_to_swap:
                self.offloader_single.submit_move_blocks(self.single_blocks, block_idx)
        return self.final_layer(img[:, txt.shape[1]:])
