"""benchmarks/resnet50/model.py: the parameter count of the full model against torchvision's resnet50, and the
analytic FLOP count (forward hooks on every Conv2d / Linear) against a hand computation."""
import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

MODEL_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "resnet50" / "model.py"


@pytest.fixture(scope="module")
def model_mod():
    spec = importlib.util.spec_from_file_location("resnet50_model", MODEL_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_full_model_has_torchvision_resnet50_params(model_mod):
    m = model_mod.resnet(device="meta")  # shapes only
    assert m.num_params() == 25_557_032  # torchvision.models.resnet50(), 1000 classes
    names = {n for n, _ in m.named_parameters()}
    assert {"conv1.weight", "bn1.weight", "layer1.0.downsample.0.weight", "layer4.2.conv3.weight",
            "fc.weight", "fc.bias"} <= names
    assert model_mod.resnet(num_classes=10, device="meta").num_params() == 25_557_032 - 990 * 2048 - 990


def test_full_model_flops_at_224(model_mod):
    macs, layers = model_mod.conv_linear_macs(model_mod.resnet(device="meta"), 224, meta=True)
    assert len(layers) == 53 + 1  # 53 convolutions (1 stem + 16 x 3 + 4 downsample) and the head
    assert macs == 4_089_184_256  # ~4.1 GMACs, ~8.2 GFLOP forward per image
    assert layers[0][:3] == ("conv1", "conv7x7/2", (64, 112, 112))
    assert layers[-1][:3] == ("fc", "linear", (1000,))


def hand_macs(width, classes, size):
    """One bottleneck block per stage, base width `width`, square `size` images; written out layer by layer."""
    s = size // 2                       # stem conv 7x7 stride 2 (pad 3)
    total = s * s * width * 3 * 7 * 7
    s //= 2                             # max-pool 3x3 stride 2
    c_in = width
    for i in range(4):
        planes = width * 2 ** i
        s_out = s if i == 0 else s // 2
        total += s * s * planes * c_in              # conv1 1x1 at the input resolution
        total += s_out * s_out * planes * planes * 9  # conv2 3x3, the block's stride
        total += s_out * s_out * 4 * planes * planes  # conv3 1x1
        total += s_out * s_out * 4 * planes * c_in    # downsample 1x1 (every first block changes the width)
        c_in, s = 4 * planes, s_out
    return total + c_in * classes                    # fc


def test_small_config_flops_by_hand(model_mod):
    model = model_mod.resnet((1, 1, 1, 1), num_classes=10, base_width=16)
    macs, layers = model_mod.conv_linear_macs(model, 64)
    assert macs == hand_macs(16, 10, 64) == 9_294_848
    assert len(layers) == 1 + 4 * 4 + 1
    # on the model itself: BN statistics untouched, training mode kept
    assert model.training and all(float(m.num_batches_tracked) == 0 for m in model.modules()
                                  if isinstance(m, torch.nn.BatchNorm2d))
    assert model_mod.conv_linear_macs(model, 64, meta=True)[0] == macs
    assert model_mod.conv_linear_macs(model_mod.resnet((1, 1, 1, 1), 7, 8), 96)[0] == hand_macs(8, 7, 96)


def test_macs_agree_with_torch_flop_counter(model_mod):
    """An independent count: torch.utils.flop_counter (2 FLOPs per MAC of conv and matmul)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = model_mod.resnet((1, 2, 1, 1), num_classes=5, base_width=8).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, 64, 64))
    assert counter.get_total_flops() == 2 * model_mod.conv_linear_macs(model, 64)[0]
