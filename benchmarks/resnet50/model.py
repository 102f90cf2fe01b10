"""ResNet-50 (He et al. 2016, "v1.5": the stride of a downsampling block is on its 3x3 conv) in torch.nn only,
with torchvision's layer names and shapes: at blocks (3, 4, 6, 3), base_width 64 and 1000 classes it has the
25,557,032 parameters of torchvision.models.resnet50, and its state_dict loads into that model and back.

Also the FLOP count used for MFU: conv_linear_macs() walks every Conv2d and Linear with forward hooks on a
forward pass of one image and multiplies out the output sizes."""
import torch
import torch.nn as nn

EXPANSION = 4


class Bottleneck(nn.Module):
    """1x1 conv (width) - BN - ReLU - 3x3 conv (width, stride) - BN - ReLU - 1x1 conv (4 x width) - BN, plus the
    identity, or a strided 1x1 conv + BN (``downsample``) where the shape changes; ReLU after the sum."""

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        out = planes * EXPANSION
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet(nn.Module):
    """Stem (7x7 conv stride 2, BN, ReLU, 3x3 max-pool stride 2), four stages of bottleneck blocks with
    base_width x (1, 2, 4, 8) inner channels (x4 out), the 2nd to 4th starting at stride 2, global average
    pooling, a linear head. zero_init_residual zeroes the last BN gamma of every block (each starts as the
    identity; Goyal et al. 2017)."""

    def __init__(self, blocks=(3, 4, 6, 3), num_classes=1000, base_width=64, in_channels=3, zero_init_residual=True):
        super().__init__()
        blocks = tuple(int(b) for b in blocks)
        if len(blocks) != 4 or min(blocks) < 1 or base_width < 1 or num_classes < 1:
            raise ValueError(f"blocks={blocks} (4 stages of >= 1), base_width={base_width}, "
                             f"num_classes={num_classes} must be positive")
        self.blocks, self.base_width, self.num_classes = blocks, base_width, num_classes
        self.conv1 = nn.Conv2d(in_channels, base_width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(base_width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = base_width
        for i, n in enumerate(blocks):
            planes = base_width * 2 ** i
            layer = []
            for j in range(n):
                layer.append(Bottleneck(inplanes, planes, stride=2 if (i > 0 and j == 0) else 1))
                inplanes = planes * EXPANSION
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.zeros_(m.bn3.weight)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


def resnet(blocks=(3, 4, 6, 3), num_classes=1000, base_width=64, device=None, **kwargs):
    """A ResNet built directly on ``device`` (``"meta"``: shapes only, no memory)."""
    with torch.device(device or "cpu"):
        return ResNet(blocks, num_classes, base_width, **kwargs)


def conv_linear_macs(model, image_size, in_channels=3, meta=False):
    """Multiply-accumulates of one forward pass of ONE image through every nn.Conv2d and nn.Linear of ``model``
    (BN, ReLU, pooling and the residual adds are not counted), and the per-layer list
    [(name, kind, output shape without the batch, MACs)].

    A Conv2d output element costs (in_channels / groups) x kh x kw MACs, a Linear output element in_features
    MACs. The output shapes come from forward hooks during one forward pass of a zero image: on the model's
    own device in eval mode without autograd (the BN running statistics are not touched; the training mode is
    restored), or with ``meta=True`` on a meta-device copy (nothing allocated or computed; torch's first meta
    pass costs about 2 s of set-up on a CPU)."""
    import copy

    net = copy.deepcopy(model).to("meta") if meta else model
    device = torch.device("meta") if meta else next(model.parameters()).device
    layers = []

    def hook(name, module):
        def fn(_mod, _inp, out):
            per_image = out.numel() // out.shape[0]
            if isinstance(module, nn.Conv2d):
                kh, kw = module.kernel_size
                macs = per_image * (module.in_channels // module.groups) * kh * kw
                kind = f"conv{kh}x{kw}/{module.stride[0]}"
            else:
                macs = per_image * module.in_features
                kind = "linear"
            layers.append((name, kind, tuple(out.shape[1:]), macs))
        return fn

    handles = [m.register_forward_hook(hook(n, m)) for n, m in net.named_modules()
               if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            net(torch.zeros(1, in_channels, image_size, image_size, device=device))
    finally:
        for h in handles:
            h.remove()
        net.train(was_training)
    return sum(m for *_, m in layers), layers
