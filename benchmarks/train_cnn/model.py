"""A small ResNet-style CNN for 32x32 images (torch.nn only): a 3x3 stem, three stages of basic residual
blocks (the 2nd and 3rd halve the resolution and double the width), global average pooling, a linear head."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_norm(kind, channels):
    """BatchNorm2d ("batch"), GroupNorm with up to 8 groups ("group") or nothing ("none")."""
    if kind == "none":
        return nn.Identity()
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(next(g for g in (8, 4, 2, 1) if channels % g == 0), channels)
    raise ValueError(f"norm must be 'batch', 'group' or 'none', got {kind!r}")


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus the identity (or a strided 1x1 conv + BN when the shape changes)."""

    def __init__(self, c_in, c_out, stride=1, norm="batch"):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = make_norm(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = make_norm(norm, c_out)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                          make_norm(norm, c_out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, num_classes=10, width=16, blocks_per_stage=1, in_channels=3, norm="batch"):
        super().__init__()
        if width < 1 or blocks_per_stage < 1:
            raise ValueError(f"width={width} and blocks_per_stage={blocks_per_stage} must be >= 1")
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1, bias=False), make_norm(norm, width),
                                  nn.ReLU(inplace=True))
        layers, c_in = [], width
        for stage, c_out in enumerate((width, 2 * width, 4 * width)):
            for i in range(blocks_per_stage):
                layers.append(BasicBlock(c_in, c_out, stride=2 if (stage > 0 and i == 0) else 1, norm=norm))
                c_in = c_out
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():  # zero-init the end of each residual branch: every block starts as identity
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight if norm != "none" else m.conv2.weight)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def num_params(self):
        return sum(p.numel() for p in self.parameters())
