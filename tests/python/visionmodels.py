"""torchvision's image models, rewritten so the tests need no torchvision.

The project's torch (2.13, CPU) has no torchvision build to go with it, and
the tests must behave the same wherever they run, so they build their
networks from here (the benchmarks too, when torchvision is missing). Each
network is torchvision's (0.29) in three ways that matter to the tests:

* the same submodules under the same names: state_dict() keys and shapes
  are torchvision's, and a torchvision state_dict loads with strict=True;
* the same forward computation: the same ATen calls in the same order,
  in place where torchvision's are (the captured graphs are the same);
* the same initialization, drawing from torch's generator in the same
  order: after torch.manual_seed(s), resnet18() has torchvision's weights.

tests/python/check_visionmodels.py checks all three against torchvision.
Only the models the tests and benchmarks build are here: the ResNet family
(resnet18/34/50), MobileNetV2, MobileNetV3 (large, small), EfficientNet-B0,
DenseNet (densenet121), VisionTransformer (vit_b_16) and the LR-ASPP
segmentation network (segmentation.lraspp_mobilenet_v3_large). There are no
pretrained weights: builders take weights=None only.
"""

import math
import types
from collections import OrderedDict
from functools import partial

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

__all__ = [
    "ResNet", "BasicBlock", "Bottleneck", "resnet18", "resnet34", "resnet50",
    "MobileNetV2", "mobilenet_v2", "MobileNetV3", "mobilenet_v3_large", "mobilenet_v3_small",
    "EfficientNet", "efficientnet_b0", "DenseNet", "densenet121",
    "VisionTransformer", "vit_b_16", "LRASPP", "segmentation",
]


# ---- shared pieces ----

def _no_weights(**weights):
    for name, value in weights.items():
        if value is not None:
            raise ValueError(f"visionmodels has no pretrained weights: {name} must be None, "
                             f"not {value!r}")


def _divisible(v, divisor=8, min_value=None):
    """v rounded to the nearest multiple of divisor (never below min_value,
    by default divisor), a step higher when rounding lost more than a tenth
    of v: the channel rule of the MobileNet and EfficientNet papers."""
    r = max(divisor if min_value is None else min_value, int(v + divisor / 2) // divisor * divisor)
    return r + divisor if r < 0.9 * v else r


def _init_convs_and_norms(model, fan):
    """He-normal convolution weights (fan "fan_in" or "fan_out", ReLU gain)
    with zero biases, and norms at weight 1, bias 0, in modules() order (the
    order of the generator's draws)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode=fan, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def _linears(model):
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


class Conv2dNormActivation(nn.Sequential):
    """Children 0, 1, 2: a convolution (with a bias only when there is no
    norm) padded to keep the size at stride 1, the norm, the activation (in
    place). A None norm_layer or activation_layer leaves that child out."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, groups=1,
                 norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU, dilation=1):
        parts = [nn.Conv2d(in_channels, out_channels, kernel_size, stride,
                           (kernel_size - 1) // 2 * dilation, dilation=dilation, groups=groups,
                           bias=norm_layer is None)]
        if norm_layer is not None:
            parts.append(norm_layer(out_channels))
        if activation_layer is not None:
            parts.append(activation_layer(inplace=True))
        super().__init__(*parts)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """Channel gates from the global average: x * gate(fc2(act(fc1(avg(x)))))."""

    def __init__(self, input_channels, squeeze_channels, activation=nn.ReLU,
                 scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x):
        gate = self.activation(self.fc1(self.avgpool(x)))
        return self.scale_activation(self.fc2(gate)) * x


class StochasticDepth(nn.Module):
    """In training, zeroes a whole residual branch with probability p, per
    sample ("row") or for the batch ("batch"), and scales the kept by 1/(1-p)."""

    def __init__(self, p, mode):
        super().__init__()
        if not 0.0 <= p <= 1.0 or mode not in ("row", "batch"):
            raise ValueError(f"StochasticDepth: p in [0, 1] and mode row or batch, "
                             f"got {p}, {mode!r}")
        self.p, self.mode = p, mode

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        shape = [1] * x.dim()
        if self.mode == "row":
            shape[0] = x.shape[0]
        mask = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(keep)
        if keep > 0.0:
            mask.div_(keep)
        return x * mask


# ---- ResNet ----

def _conv3x3(cin, cout, stride=1, groups=1, dilation=1):
    return nn.Conv2d(cin, cout, 3, stride, padding=dilation, dilation=dilation, groups=groups,
                     bias=False)


def _conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions and a shortcut (resnet18, resnet34)."""
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64,
                 dilation=1, norm_layer=None):
        super().__init__()
        norm = norm_layer or nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock takes groups=1 and base_width=64 only")
        if dilation > 1:
            raise NotImplementedError("BasicBlock has no dilated form")
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = norm(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = norm(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y += x if self.downsample is None else self.downsample(x)
        return self.relu(y)


class Bottleneck(nn.Module):
    """1x1 down, 3x3 (carrying the stride), 1x1 up by 4, and a shortcut
    (resnet50 and deeper)."""
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64,
                 dilation=1, norm_layer=None):
        super().__init__()
        norm = norm_layer or nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = _conv1x1(inplanes, width)
        self.bn1 = norm(width)
        self.conv2 = _conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm(width)
        self.conv3 = _conv1x1(width, planes * self.expansion)
        self.bn3 = norm(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        y += x if self.downsample is None else self.downsample(x)
        return self.relu(y)


class ResNet(nn.Module):
    """A 7x7 stem and max pool, four stages (layer1..layer4) of blocks at 64,
    128, 256, 512 planes, global average pool, fc."""

    def __init__(self, block, layers, num_classes=1000, zero_init_residual=False, groups=1,
                 width_per_group=64, replace_stride_with_dilation=None, norm_layer=None):
        super().__init__()
        self._norm_layer = norm_layer or nn.BatchNorm2d
        dilate = replace_stride_with_dilation or [False, False, False]
        if len(dilate) != 3:
            raise ValueError(f"replace_stride_with_dilation: 3 booleans or None, got {dilate}")
        self.inplanes, self.dilation = 64, 1
        self.groups, self.base_width = groups, width_per_group
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = self._norm_layer(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2, dilate[0])
        self.layer3 = self._make_layer(block, 256, layers[2], 2, dilate[1])
        self.layer4 = self._make_layer(block, 512, layers[3], 2, dilate[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        _init_convs_and_norms(self, "fan_out")  # fc keeps nn.Linear's own
        if zero_init_residual:  # each residual branch starts as zero
            for m in self.modules():
                if isinstance(m, (BasicBlock, Bottleneck)):
                    nn.init.zeros_((m.bn3 if isinstance(m, Bottleneck) else m.bn2).weight)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        """A stage: the first block changes resolution and width (the
        shortcut through a strided 1x1 convolution when they change); with
        dilate, the stride becomes dilation of the following blocks."""
        first_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        out = planes * block.expansion
        shortcut = None
        if stride != 1 or self.inplanes != out:
            shortcut = nn.Sequential(_conv1x1(self.inplanes, out, stride), self._norm_layer(out))
        stage = [block(self.inplanes, planes, stride, shortcut, self.groups, self.base_width,
                       first_dilation, self._norm_layer)]
        self.inplanes = out
        stage += [block(out, planes, groups=self.groups, base_width=self.base_width,
                        dilation=self.dilation, norm_layer=self._norm_layer)
                  for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(*, weights=None, progress=True, **kwargs):
    _no_weights(weights=weights)
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


def resnet34(*, weights=None, progress=True, **kwargs):
    _no_weights(weights=weights)
    return ResNet(BasicBlock, [3, 4, 6, 3], **kwargs)


def resnet50(*, weights=None, progress=True, **kwargs):
    _no_weights(weights=weights)
    return ResNet(Bottleneck, [3, 4, 6, 3], **kwargs)


# ---- MobileNetV2 ----

class InvertedResidual(nn.Module):
    """MobileNetV2's block (in .conv): 1x1 expansion (none at ratio 1), 3x3
    depthwise, linear 1x1 projection; x + block(x) where the shapes agree."""

    def __init__(self, inp, oup, stride, expand_ratio, norm_layer=None):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"InvertedResidual: stride 1 or 2, got {stride}")
        norm = norm_layer or nn.BatchNorm2d
        hidden = int(round(inp * expand_ratio))
        cna = partial(Conv2dNormActivation, norm_layer=norm, activation_layer=nn.ReLU6)
        layers = [cna(inp, hidden, 1)] if expand_ratio != 1 else []
        layers += [cna(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), norm(oup)]
        self.stride = stride
        self.use_res_connect = stride == 1 and inp == oup
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup
        self._is_cn = stride > 1

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


# expansion t, channels c, blocks n, stride of the first s
_MOBILENET_V2_STAGES = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2],
                        [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.0, inverted_residual_setting=None,
                 round_nearest=8, block=None, norm_layer=None, dropout=0.2):
        super().__init__()
        block = block or InvertedResidual
        norm = norm_layer or nn.BatchNorm2d
        stages = inverted_residual_setting or _MOBILENET_V2_STAGES
        if len(stages[0]) != 4:
            raise ValueError(f"inverted_residual_setting: rows of [t, c, n, s], got {stages}")
        cin = _divisible(32 * width_mult, round_nearest)
        self.last_channel = _divisible(1280 * max(1.0, width_mult), round_nearest)
        layers = [Conv2dNormActivation(3, cin, stride=2, norm_layer=norm,
                                       activation_layer=nn.ReLU6)]
        for t, c, n, s in stages:
            cout = _divisible(c * width_mult, round_nearest)
            for i in range(n):
                layers.append(block(cin, cout, s if i == 0 else 1, expand_ratio=t, norm_layer=norm))
                cin = cout
        layers.append(Conv2dNormActivation(cin, self.last_channel, 1, norm_layer=norm,
                                           activation_layer=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout),
                                        nn.Linear(self.last_channel, num_classes))
        _init_convs_and_norms(self, "fan_out")
        for fc in _linears(self):
            nn.init.normal_(fc.weight, 0, 0.01)
            nn.init.zeros_(fc.bias)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(*, weights=None, progress=True, **kwargs):
    _no_weights(weights=weights)
    return MobileNetV2(**kwargs)


# ---- MobileNetV3 ----

class InvertedResidualConfig:
    """One MobileNetV3 block; channel counts scaled by width_mult."""

    def __init__(self, input_channels, kernel, expanded_channels, out_channels, use_se,
                 activation, stride, dilation, width_mult):
        self.input_channels = self.adjust_channels(input_channels, width_mult)
        self.expanded_channels = self.adjust_channels(expanded_channels, width_mult)
        self.out_channels = self.adjust_channels(out_channels, width_mult)
        self.kernel, self.use_se, self.use_hs = kernel, use_se, activation == "HS"
        self.stride, self.dilation = stride, dilation

    @staticmethod
    def adjust_channels(channels, width_mult):
        return _divisible(channels * width_mult, 8)


class InvertedResidualV3(nn.Module):
    """MobileNetV3's block (in .block): 1x1 expansion where it widens,
    depthwise kxk, squeeze-excitation (hard-sigmoid gates) if use_se, linear
    1x1 projection; the branch added to x in place where the shapes agree.
    A dilated block keeps its resolution (stride 1) but is still a stage
    boundary (_is_cn) for the segmentation head."""

    def __init__(self, cnf, norm_layer):
        super().__init__()
        if cnf.stride not in (1, 2):
            raise ValueError(f"InvertedResidualV3: stride 1 or 2, got {cnf.stride}")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer,
                      activation_layer=nn.Hardswish if cnf.use_hs else nn.ReLU)
        wide = cnf.expanded_channels
        layers = [cna(cnf.input_channels, wide, 1)] if wide != cnf.input_channels else []
        layers.append(cna(wide, wide, cnf.kernel, stride=1 if cnf.dilation > 1 else cnf.stride,
                          groups=wide, dilation=cnf.dilation))
        if cnf.use_se:
            layers.append(SqueezeExcitation(wide, _divisible(wide // 4, 8),
                                            scale_activation=nn.Hardsigmoid))
        layers.append(Conv2dNormActivation(wide, cnf.out_channels, 1, norm_layer=norm_layer,
                                           activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels
        self._is_cn = cnf.stride > 1

    def forward(self, x):
        y = self.block(x)
        if self.use_res_connect:
            y += x
        return y


class MobileNetV3(nn.Module):
    def __init__(self, inverted_residual_setting, last_channel, num_classes=1000, block=None,
                 norm_layer=None, dropout=0.2):
        super().__init__()
        if not inverted_residual_setting:
            raise ValueError("MobileNetV3: inverted_residual_setting is empty")
        block = block or InvertedResidualV3
        norm = norm_layer or partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        first = inverted_residual_setting[0].input_channels
        last_in = inverted_residual_setting[-1].out_channels
        layers = [Conv2dNormActivation(3, first, 3, 2, norm_layer=norm,
                                       activation_layer=nn.Hardswish)]
        layers += [block(cnf, norm) for cnf in inverted_residual_setting]
        layers.append(Conv2dNormActivation(last_in, 6 * last_in, 1, norm_layer=norm,
                                           activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(6 * last_in, last_channel), nn.Hardswish(inplace=True),
            nn.Dropout(p=dropout, inplace=True), nn.Linear(last_channel, num_classes))
        _init_convs_and_norms(self, "fan_out")
        for fc in _linears(self):
            nn.init.normal_(fc.weight, 0, 0.01)
            nn.init.zeros_(fc.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _mobilenet_v3_setting(arch, width_mult=1.0, reduced_tail=False, dilated=False):
    """The blocks of arch and its last_channel. reduced_tail halves the
    channels of the last stage, dilated gives it dilation 2 instead of
    stride 2 (the segmentation backbone)."""
    r = 2 if reduced_tail else 1
    d = 2 if dilated else 1
    cfg = partial(InvertedResidualConfig, width_mult=width_mult)
    # input, kernel, expanded, output, squeeze-excitation, activation, stride, dilation
    if arch == "mobilenet_v3_large":
        rows = [(16, 3, 16, 16, False, "RE", 1, 1), (16, 3, 64, 24, False, "RE", 2, 1),
                (24, 3, 72, 24, False, "RE", 1, 1), (24, 5, 72, 40, True, "RE", 2, 1),
                (40, 5, 120, 40, True, "RE", 1, 1), (40, 5, 120, 40, True, "RE", 1, 1),
                (40, 3, 240, 80, False, "HS", 2, 1), (80, 3, 200, 80, False, "HS", 1, 1),
                (80, 3, 184, 80, False, "HS", 1, 1), (80, 3, 184, 80, False, "HS", 1, 1),
                (80, 3, 480, 112, True, "HS", 1, 1), (112, 3, 672, 112, True, "HS", 1, 1),
                (112, 5, 672, 160 // r, True, "HS", 2, d),
                (160 // r, 5, 960 // r, 160 // r, True, "HS", 1, d),
                (160 // r, 5, 960 // r, 160 // r, True, "HS", 1, d)]
        last = 1280 // r
    elif arch == "mobilenet_v3_small":
        rows = [(16, 3, 16, 16, True, "RE", 2, 1), (16, 3, 72, 24, False, "RE", 2, 1),
                (24, 3, 88, 24, False, "RE", 1, 1), (24, 5, 96, 40, True, "HS", 2, 1),
                (40, 5, 240, 40, True, "HS", 1, 1), (40, 5, 240, 40, True, "HS", 1, 1),
                (40, 5, 120, 48, True, "HS", 1, 1), (48, 5, 144, 48, True, "HS", 1, 1),
                (48, 5, 288, 96 // r, True, "HS", 2, d),
                (96 // r, 5, 576 // r, 96 // r, True, "HS", 1, d),
                (96 // r, 5, 576 // r, 96 // r, True, "HS", 1, d)]
        last = 1024 // r
    else:
        raise ValueError(f"no MobileNetV3 called {arch!r}")
    return [cfg(*row) for row in rows], InvertedResidualConfig.adjust_channels(last, width_mult)


def _mobilenet_v3(arch, weights, kwargs):
    _no_weights(weights=weights)
    shape = {k: kwargs.pop(k) for k in ("width_mult", "reduced_tail", "dilated") if k in kwargs}
    return MobileNetV3(*_mobilenet_v3_setting(arch, **shape), **kwargs)


def mobilenet_v3_large(*, weights=None, progress=True, **kwargs):
    return _mobilenet_v3("mobilenet_v3_large", weights, kwargs)


def mobilenet_v3_small(*, weights=None, progress=True, **kwargs):
    return _mobilenet_v3("mobilenet_v3_small", weights, kwargs)


# ---- EfficientNet (B0) ----

class MBConvConfig:
    """One EfficientNet stage: num_layers MBConv blocks, the first with
    stride and input_channels; channels scaled by width_mult, the block
    count by depth_mult (rounded up)."""

    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, num_layers,
                 width_mult=1.0, depth_mult=1.0):
        self.expand_ratio, self.kernel, self.stride = expand_ratio, kernel, stride
        self.input_channels = _divisible(input_channels * width_mult, 8)
        self.out_channels = _divisible(out_channels * width_mult, 8)
        self.num_layers = int(math.ceil(num_layers * depth_mult))


class MBConv(nn.Module):
    """EfficientNet's block (in .block): 1x1 expansion where it widens,
    depthwise kxk, squeeze-excitation (to a quarter of the input channels),
    linear 1x1 projection, all with SiLU; where the shapes agree, the branch
    goes through stochastic depth and x is added in place."""

    def __init__(self, cnf, stochastic_depth_prob, norm_layer):
        super().__init__()
        if cnf.stride not in (1, 2):
            raise ValueError(f"MBConv: stride 1 or 2, got {cnf.stride}")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        cna = partial(Conv2dNormActivation, norm_layer=norm_layer, activation_layer=nn.SiLU)
        wide = _divisible(cnf.input_channels * cnf.expand_ratio, 8)
        layers = [cna(cnf.input_channels, wide, 1)] if wide != cnf.input_channels else []
        layers += [cna(wide, wide, cnf.kernel, cnf.stride, groups=wide),
                   SqueezeExcitation(wide, max(1, cnf.input_channels // 4),
                                     activation=partial(nn.SiLU, inplace=True)),
                   Conv2dNormActivation(wide, cnf.out_channels, 1, norm_layer=norm_layer,
                                        activation_layer=None)]
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = cnf.out_channels

    def forward(self, x):
        y = self.block(x)
        if self.use_res_connect:
            y = self.stochastic_depth(y)
            y += x
        return y


class EfficientNet(nn.Module):
    """A 3x3 stem, one nn.Sequential of blocks per stage (stochastic depth
    rising linearly from 0 over all blocks), a 1x1 head convolution (4x the
    last stage's channels unless last_channel), average pool, classifier."""

    def __init__(self, inverted_residual_setting, dropout, stochastic_depth_prob=0.2,
                 num_classes=1000, norm_layer=None, last_channel=None):
        super().__init__()
        if not inverted_residual_setting:
            raise ValueError("EfficientNet: inverted_residual_setting is empty")
        norm = norm_layer or nn.BatchNorm2d
        layers = [Conv2dNormActivation(3, inverted_residual_setting[0].input_channels, 3, 2,
                                       norm_layer=norm, activation_layer=nn.SiLU)]
        total = sum(cnf.num_layers for cnf in inverted_residual_setting)
        done = 0
        for cnf in inverted_residual_setting:
            stage = []
            for i in range(cnf.num_layers):
                block_cnf = cnf
                if i:  # later blocks of a stage: stride 1, in = out
                    block_cnf = MBConvConfig(cnf.expand_ratio, cnf.kernel, 1, cnf.out_channels,
                                             cnf.out_channels, 1)
                stage.append(MBConv(block_cnf, stochastic_depth_prob * float(done) / total, norm))
                done += 1
            layers.append(nn.Sequential(*stage))
        last_in = inverted_residual_setting[-1].out_channels
        last_out = last_channel if last_channel is not None else 4 * last_in
        layers.append(Conv2dNormActivation(last_in, last_out, 1, norm_layer=norm,
                                           activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True),
                                        nn.Linear(last_out, num_classes))
        _init_convs_and_norms(self, "fan_out")
        for fc in _linears(self):
            bound = 1.0 / math.sqrt(fc.out_features)
            nn.init.uniform_(fc.weight, -bound, bound)
            nn.init.zeros_(fc.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def efficientnet_b0(*, weights=None, progress=True, **kwargs):
    _no_weights(weights=weights)
    # expansion, kernel, stride, input channels, output channels, blocks
    stages = [MBConvConfig(*row) for row in [
        (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
        (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]]
    return EfficientNet(stages, kwargs.pop("dropout", 0.2), **kwargs)


# ---- DenseNet ----

class _DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (to bn_size * growth_rate) over the concatenation of
    all earlier outputs, then BN-ReLU-3x3 conv to growth_rate channels."""

    def __init__(self, num_input_features, growth_rate, bn_size, drop_rate, memory_efficient=False):
        super().__init__()
        mid = bn_size * growth_rate
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, mid, 1, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(mid)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(mid, growth_rate, 3, 1, 1, bias=False)
        self.drop_rate = float(drop_rate)
        self.memory_efficient = memory_efficient

    def _bottleneck(self, *inputs):
        return self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))

    def forward(self, inputs):
        if isinstance(inputs, torch.Tensor):
            inputs = [inputs]
        if self.memory_efficient and any(t.requires_grad for t in inputs):
            # recomputed in backward instead of keeping the concatenation
            y = torch.utils.checkpoint.checkpoint(self._bottleneck, *inputs, use_reentrant=False)
        else:
            y = self._bottleneck(*inputs)
        y = self.conv2(self.relu2(self.norm2(y)))
        if self.drop_rate > 0:
            y = F.dropout(y, p=self.drop_rate, training=self.training)
        return y


class _DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers, num_input_features, bn_size, growth_rate, drop_rate,
                 memory_efficient=False):
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"denselayer{i + 1}", _DenseLayer(
                num_input_features + i * growth_rate, growth_rate, bn_size, drop_rate,
                memory_efficient))

    def forward(self, x):
        outputs = [x]
        for layer in self.values():
            outputs.append(layer(outputs))
        return torch.cat(outputs, 1)


class _Transition(nn.Sequential):
    """BN-ReLU-1x1 conv then 2x2 average pool, between dense blocks."""

    def __init__(self, num_input_features, num_output_features):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, 1, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)


class DenseNet(nn.Module):
    """DenseNet-BC: a 7x7 stem and max pool, dense blocks of block_config[i]
    layers each adding growth_rate channels, transitions halving the
    channels between them, a last BN (features.norm5), ReLU, average pool,
    classifier."""

    def __init__(self, growth_rate=32, block_config=(6, 12, 24, 16), num_init_features=64,
                 bn_size=4, drop_rate=0, num_classes=1000, memory_efficient=False):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, num_init_features, 7, 2, 3, bias=False)),
            ("norm0", nn.BatchNorm2d(num_init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(3, 2, 1))]))
        channels = num_init_features
        for i, n in enumerate(block_config, 1):
            self.features.add_module(f"denseblock{i}", _DenseBlock(
                n, channels, bn_size, growth_rate, drop_rate, memory_efficient))
            channels += n * growth_rate
            if i < len(block_config):
                self.features.add_module(f"transition{i}", _Transition(channels, channels // 2))
                channels //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(channels))
        self.classifier = nn.Linear(channels, num_classes)
        _init_convs_and_norms(self, "fan_in")
        for fc in _linears(self):  # the weight keeps nn.Linear's own
            nn.init.zeros_(fc.bias)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(F.relu(self.features(x), inplace=True), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def densenet121(*, weights=None, progress=True, **kwargs):
    _no_weights(weights=weights)
    return DenseNet(32, (6, 12, 24, 16), 64, **kwargs)


# ---- Vision Transformer ----

class MLPBlock(nn.Sequential):
    """Linear-GELU-Dropout-Linear-Dropout (children 0 to 4); Xavier-uniform
    weights, near-zero normal biases."""

    def __init__(self, in_dim, mlp_dim, dropout):
        super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
                         nn.Linear(mlp_dim, in_dim), nn.Dropout(dropout))
        for fc in (self[0], self[3]):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.normal_(fc.bias, std=1e-6)


class EncoderBlock(nn.Module):
    """Pre-norm transformer layer: x + attention(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads,
                                                    dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, x):
        if x.dim() != 3:
            raise ValueError(f"EncoderBlock: expected (batch, sequence, hidden), "
                             f"got {tuple(x.shape)}")
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        y = self.dropout(y) + x
        return y + self.mlp(self.ln_2(y))


class Encoder(nn.Module):
    """Learned position embedding (normal, std 0.02), dropout, the layers
    (encoder_layer_0, ...), a final layer norm."""

    def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout,
                 attention_dropout, norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout,
                                                attention_dropout, norm_layer))
            for i in range(num_layers)))
        self.ln = norm_layer(hidden_dim)

    def forward(self, x):
        if x.dim() != 3:
            raise ValueError(f"Encoder: expected (batch, sequence, hidden), "
                             f"got {tuple(x.shape)}")
        x = x + self.pos_embedding
        return self.ln(self.layers(self.dropout(x)))


class VisionTransformer(nn.Module):
    """ViT: non-overlapping patch_size patches projected to hidden_dim (a
    strided convolution), a class token in front, the encoder, and the
    heads on the class token's output (heads.head; with representation_size,
    heads.pre_logits and tanh before it)."""

    def __init__(self, image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim,
                 dropout=0.0, attention_dropout=0.0, num_classes=1000, representation_size=None,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"VisionTransformer: image_size {image_size} is not a multiple "
                             f"of patch_size {patch_size}")
        self.image_size, self.patch_size = image_size, patch_size
        self.hidden_dim, self.mlp_dim = hidden_dim, mlp_dim
        self.dropout, self.attention_dropout = dropout, attention_dropout
        self.num_classes, self.representation_size = num_classes, representation_size
        self.norm_layer = norm_layer
        self.conv_proj = nn.Conv2d(3, hidden_dim, patch_size, patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.seq_length = (image_size // patch_size) ** 2 + 1
        self.encoder = Encoder(self.seq_length, num_layers, num_heads, hidden_dim, mlp_dim,
                               dropout, attention_dropout, norm_layer)
        if representation_size is None:
            heads = [("head", nn.Linear(hidden_dim, num_classes))]
        else:
            heads = [("pre_logits", nn.Linear(hidden_dim, representation_size)),
                     ("act", nn.Tanh()), ("head", nn.Linear(representation_size, num_classes))]
        self.heads = nn.Sequential(OrderedDict(heads))
        # truncated normal at the fan-in's scale for the projections, a zero head
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / (3 * patch_size**2)))
        nn.init.zeros_(self.conv_proj.bias)
        if representation_size is not None:
            nn.init.trunc_normal_(self.heads.pre_logits.weight, std=math.sqrt(1 / hidden_dim))
            nn.init.zeros_(self.heads.pre_logits.bias)
        nn.init.zeros_(self.heads.head.weight)
        nn.init.zeros_(self.heads.head.bias)

    def forward(self, x):
        n, _, h, w = x.shape
        if h != self.image_size or w != self.image_size:
            raise ValueError(f"VisionTransformer: expected {self.image_size}x{self.image_size} "
                             f"images, got {h}x{w}")
        p = self.patch_size
        x = self.conv_proj(x).reshape(n, self.hidden_dim, (h // p) * (w // p)).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def vit_b_16(*, weights=None, progress=True, **kwargs):
    _no_weights(weights=weights)
    return VisionTransformer(kwargs.pop("image_size", 224), 16, 12, 12, 768, 3072, **kwargs)


# ---- LR-ASPP segmentation ----

class IntermediateLayerGetter(nn.ModuleDict):
    """The children of model up to the last one named in return_layers;
    forward runs them in order and returns {return_layers[name]: output}
    for those named."""

    def __init__(self, model, return_layers):
        names = [name for name, _ in model.named_children()]
        if not set(return_layers) <= set(names):
            raise ValueError(f"return_layers {sorted(return_layers)} are not all children "
                             "of the model")
        last = max(names.index(str(k)) for k in return_layers)
        super().__init__(OrderedDict(list(model.named_children())[:last + 1]))
        self.return_layers = return_layers

    def forward(self, x):
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


class LRASPPHead(nn.Module):
    """Class scores: low_classifier(low) plus high_classifier of the high
    features (cbr) gated by their global average (scale), upsampled to
    low's size."""

    def __init__(self, low_channels, high_channels, num_classes, inter_channels):
        super().__init__()
        self.cbr = nn.Sequential(nn.Conv2d(high_channels, inter_channels, 1, bias=False),
                                 nn.BatchNorm2d(inter_channels), nn.ReLU(inplace=True))
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1),
                                   nn.Conv2d(high_channels, inter_channels, 1, bias=False),
                                   nn.Sigmoid())
        self.low_classifier = nn.Conv2d(low_channels, num_classes, 1)
        self.high_classifier = nn.Conv2d(inter_channels, num_classes, 1)

    def forward(self, features):
        low, high = features["low"], features["high"]
        x = self.cbr(high) * self.scale(high)
        x = F.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
        return self.low_classifier(low) + self.high_classifier(x)


class LRASPP(nn.Module):
    """Lite R-ASPP: backbone features {"low", "high"} to class scores at the
    input's size, returned as {"out": scores}."""

    def __init__(self, backbone, low_channels, high_channels, num_classes, inter_channels=128):
        super().__init__()
        self.backbone = backbone
        self.classifier = LRASPPHead(low_channels, high_channels, num_classes, inter_channels)

    def forward(self, x):
        y = self.classifier(self.backbone(x))
        y = F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return OrderedDict([("out", y)])


def lraspp_mobilenet_v3_large(*, weights=None, progress=True, num_classes=None,
                              weights_backbone=None, **kwargs):
    """LR-ASPP on a dilated mobilenet_v3_large: "low" after the second
    stride-2 stage (output stride 8), "high" after the last layer.
    (torchvision's default weights_backbone is ImageNet's; here None.)"""
    _no_weights(weights=weights, weights_backbone=weights_backbone)
    if kwargs.pop("aux_loss", False):
        raise NotImplementedError("lraspp_mobilenet_v3_large has no auxiliary loss")
    features = mobilenet_v3_large(dilated=True).features
    stages = [0] + [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)]
    stages.append(len(features) - 1)
    low, high = stages[-4], stages[-1]
    backbone = IntermediateLayerGetter(features, {str(low): "low", str(high): "high"})
    return LRASPP(backbone, features[low].out_channels, features[high].out_channels,
                  21 if num_classes is None else num_classes, **kwargs)


# torchvision.models.segmentation's names
segmentation = types.SimpleNamespace(LRASPP=LRASPP,
                                     lraspp_mobilenet_v3_large=lraspp_mobilenet_v3_large)
