"""PyTorch modules the importer is checked on: an MLP, a CNN, a transformer encoder block
(nn.MultiheadAttention and scaled_dot_product_attention) and a GPT-style block."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.GELU(),
                                    nn.Linear(16, 4))

    def forward(self, x):
        return self.layers(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 1)
        return self.fc(torch.flatten(x, 1))


class EncoderBlock(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.heads = heads
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.mha(h, h, h, need_weights=False)[0]
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln2(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.ff(x)
        return self.head(x.mean(dim=1))


class GPTBlock(nn.Module):
    def __init__(self, vocab=20, d=16, heads=2, t=8):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(t, t, dtype=torch.bool)))

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        x = x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        y2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + y2.transpose(1, 2).reshape(b, t, -1)
        return self.lm_head(self.lnf(x))


class TrainCNN(nn.Module):
    """A CNN trained in train mode: batch norms update their running statistics, dropout
    drops. The convolutions before a batch norm have no bias (the norm removes it, so its
    gradient is rounding noise, which Adam would amplify into diverging steps)."""

    def __init__(self, p=0.0):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(6, 8, 3, bias=False), nn.BatchNorm2d(8),
                                      nn.ReLU())
        self.drop = nn.Dropout(p)
        self.fc = nn.Linear(8 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(self.drop(torch.flatten(self.features(x), 1)))
