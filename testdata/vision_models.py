"""ResNet-18/-50, MobileNetV2 and MobileNetV3-Small as torchvision 0.14
defines them (the same modules, parameter names, order of operations and
in-place additions), for Python references where torchvision does not
import: PyPI's torchvision is built for another torch than the CPU wheel
torch==2.13.0 that tools/setup.sh installs.

The benchmarks' references build a model here and load its weights from the
TorchScript file Debian's Python 1.13 wrote with torchvision's definition
(testdata/torchscript_models.py), so that both sides of a comparison run
the very same network:

    model = vision_models.build("resnet18", "/tmp/dir/resnet18_traced.pt")

`python3 testdata/vision_models.py FILE_DIR` checks each definition against
its file: same parameter names and shapes (load_state_dict(strict=True)) and
the same output on one image, within 1e-4.
"""
import functools
import os
import sys

import torch
from torch import nn


def _make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    def __init__(self, inp, out, kernel_size=3, stride=1, groups=1,
                 norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU):
        layers = [nn.Conv2d(inp, out, kernel_size, stride,
                            (kernel_size - 1) // 2, groups=groups, bias=False),
                  norm_layer(out)]
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)


# ResNet.

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0], 1)
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride,
                          bias=False),
                nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18():
    return ResNet(BasicBlock, [2, 2, 2, 2])


def resnet50():
    return ResNet(Bottleneck, [3, 4, 6, 3])


# MobileNetV2.

class InvertedResidualV2(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden, 1,
                                               activation_layer=nn.ReLU6))
        layers += [Conv2dNormActivation(hidden, hidden, 3, stride, hidden,
                                        activation_layer=nn.ReLU6),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
                   nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        channels = 32
        features = [Conv2dNormActivation(3, channels, stride=2,
                                         activation_layer=nn.ReLU6)]
        for t, c, n, s in [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2],
                           [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                           [6, 320, 1, 1]]:
            out = _make_divisible(c)
            for i in range(n):
                features.append(InvertedResidualV2(channels, out,
                                                   s if i == 0 else 1, t))
                channels = out
        features.append(Conv2dNormActivation(channels, 1280, 1,
                                             activation_layer=nn.ReLU6))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2),
                                        nn.Linear(1280, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2():
    return MobileNetV2()


# MobileNetV3-Small.

class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeeze):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


class InvertedResidualV3(nn.Module):
    def __init__(self, inp, kernel, expanded, out, use_se, use_hs, stride,
                 norm_layer):
        super().__init__()
        self.use_res_connect = stride == 1 and inp == out
        act = nn.Hardswish if use_hs else nn.ReLU
        layers = []
        if expanded != inp:
            layers.append(Conv2dNormActivation(inp, expanded, 1,
                                               norm_layer=norm_layer,
                                               activation_layer=act))
        layers.append(Conv2dNormActivation(expanded, expanded, kernel, stride,
                                           expanded, norm_layer=norm_layer,
                                           activation_layer=act))
        if use_se:
            layers.append(SqueezeExcitation(expanded,
                                            _make_divisible(expanded // 4)))
        layers.append(Conv2dNormActivation(expanded, out, 1,
                                           norm_layer=norm_layer,
                                           activation_layer=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class MobileNetV3(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        norm = functools.partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers = [Conv2dNormActivation(3, 16, stride=2, norm_layer=norm,
                                       activation_layer=nn.Hardswish)]
        # input, kernel, expanded, output, squeeze-excitation, hardswish, stride
        for cfg in [(16, 3, 16, 16, True, False, 2),
                    (16, 3, 72, 24, False, False, 2),
                    (24, 3, 88, 24, False, False, 1),
                    (24, 5, 96, 40, True, True, 2),
                    (40, 5, 240, 40, True, True, 1),
                    (40, 5, 240, 40, True, True, 1),
                    (40, 5, 120, 48, True, True, 1),
                    (48, 5, 144, 48, True, True, 1),
                    (48, 5, 288, 96, True, True, 2),
                    (96, 5, 576, 96, True, True, 1),
                    (96, 5, 576, 96, True, True, 1)]:
            layers.append(InvertedResidualV3(*cfg, norm_layer=norm))
        layers.append(Conv2dNormActivation(96, 576, 1, norm_layer=norm,
                                           activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(576, 1024), nn.Hardswish(inplace=True),
            nn.Dropout(p=0.2, inplace=True), nn.Linear(1024, num_classes))

    def forward(self, x):
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


def mobilenet_v3_small():
    return MobileNetV3()


MODELS = {"resnet18": resnet18, "resnet50": resnet50,
          "mobilenet_v2": mobilenet_v2,
          "mobilenet_v3_small": mobilenet_v3_small}


def build(name, weights=None):
    """The model `name` in eval mode; with `weights`, a TorchScript file of
    torchvision's model, its parameters and buffers loaded (strictly)."""
    if name not in MODELS:
        raise KeyError(f"vision_models has no '{name}' "
                       f"(it has {', '.join(sorted(MODELS))})")
    model = MODELS[name]()
    if weights is not None:
        model.load_state_dict(torch.jit.load(weights).state_dict(),
                              strict=True)
    return model.eval()


def main():
    directory = sys.argv[1]
    failed = 0
    torch.manual_seed(0)
    x = torch.randn(1, 3, 224, 224)
    for name in MODELS:
        path = os.path.join(directory, name + "_traced.pt")
        with torch.no_grad():
            want = torch.jit.load(path).eval()(x)
            got = build(name, path)(x)
        diff = (want - got).abs().max().item()
        print(f"{name} max_abs_diff {diff:.3g}")
        failed += diff > 1e-4
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
