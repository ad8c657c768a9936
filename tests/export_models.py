"""Real architectures for the export tests, built from ``torch.nn`` with seeded random weights (holds no tests).

PyPI's ``torchvision==0.28.0`` is a CUDA build that does not import beside the CPU ``torch==2.13.0`` this project
installs (``operator torchvision::nms does not exist``: its ``_C.so`` links ``libtorch_cuda.so``), so the
architectures are written here following torchvision 0.28's ``models/mobilenetv3.py`` and
``models/detection/ssdlite.py``:

* :func:`mobilenet_v3_small`: MobileNetV3-Small (Howard et al. 2019, table 2): inverted residual blocks with
  squeeze-excitation (hard-sigmoid gate) and hardswish, the ``[576 -> 1024 -> classes]`` classifier;
* :func:`ssdlite`: an SSDlite detector (Sandler et al. 2018, section 6.2) on that backbone: two feature maps
  from the backbone plus an extra block, depthwise-separable heads, default boxes, and post-processing in the
  graph (box decoding with variances 0.1/0.2 as in SSD, softmax scores; no NMS). ``fpn=True`` adds a top-down
  neck with bilinear upsampling; ``align=True`` adds a feature-alignment module that samples with
  ``grid_sample`` (ONNX GridSample exists from opset 16).

Every factory is a ``quantkit export`` MODULE: ``tests/export_models.py:mobilenet_v3_small``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# torchvision's mobilenet_v3_small table: (in, kernel, expanded, out, use_se, activation, stride)
SMALL = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
         (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
         (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
         (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]


def _div8(v: float) -> int:
    """torchvision's ``_make_divisible(v, 8)``: round to a multiple of 8, never below 90% of ``v``."""
    new = max(8, int(v + 4) // 8 * 8)
    return new + 8 if new < 0.9 * v else new


class ConvBNAct(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = nn.Hardswish) -> None:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        squeeze = _div8(c // 4)
        self.fc1, self.relu, self.fc2, self.gate = nn.Conv2d(c, squeeze, 1), nn.ReLU(), nn.Conv2d(squeeze, c, 1), nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, k: int, cexp: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        a = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if cexp != cin:
            layers.append(ConvBNAct(cin, cexp, 1, act=a))
        layers.append(ConvBNAct(cexp, cexp, k, stride, groups=cexp, act=a))
        if se:
            layers.append(SqueezeExcitation(cexp))
        layers.append(ConvBNAct(cexp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return y + x if self.use_res else y


def _features(width: float) -> nn.Sequential:
    first = _div8(16 * width)
    layers: list[nn.Module] = [ConvBNAct(3, first, 3, 2)]
    for cin, k, cexp, cout, se, act, stride in SMALL:
        layers.append(InvertedResidual(_div8(cin * width), k, _div8(cexp * width), _div8(cout * width), se, act, stride))
    last_in = _div8(96 * width)
    layers.append(ConvBNAct(last_in, 6 * last_in, 1))
    return nn.Sequential(*layers)


def _init(model: nn.Module) -> nn.Module:
    """torchvision's initialisation, plus non-trivial BatchNorm statistics so Conv+BN folding is exercised."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.normal_(m.bias, 0, 0.1)
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    return model.eval()


class MobileNetV3(nn.Module):
    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        self.features = _features(width)
        last = 6 * _div8(96 * width)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(last, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3_small(num_classes: int = 1000, width: float = 1.0) -> MobileNetV3:
    """MobileNetV3-Small with torchvision's initialisation (seeded by the caller)."""
    return _init(MobileNetV3(num_classes, width))


class SSDLiteHead(nn.Module):
    """Depthwise 3x3 + BN + ReLU6, then a 1x1 conv to ``anchors * per_anchor`` channels, as ``[B, N, per_anchor]``."""

    def __init__(self, cin: int, anchors: int, per_anchor: int) -> None:
        super().__init__()
        self.dw = ConvBNAct(cin, cin, 3, groups=cin, act=nn.ReLU6)
        self.pw = nn.Conv2d(cin, anchors * per_anchor, 1)
        self.per_anchor = per_anchor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pw(self.dw(x))
        b, _, h, w = y.shape
        return y.view(b, -1, self.per_anchor, h, w).permute(0, 3, 4, 1, 2).reshape(b, -1, self.per_anchor)


class TopDown(nn.Module):
    """FPN-style neck: the coarse map, 1x1-projected and upsampled x2 (bilinear, ``align_corners=False``), added to the fine map."""

    def __init__(self, c_fine: int, c_coarse: int) -> None:
        super().__init__()
        self.lateral = nn.Conv2d(c_coarse, c_fine, 1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, fine: torch.Tensor, coarse: torch.Tensor) -> torch.Tensor:
        return fine + self.up(self.lateral(coarse))


class FeatureAlign(nn.Module):
    """Resamples a feature map at learned per-pixel offsets (``grid_sample``, as deformable-alignment necks do)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.offset = nn.Conv2d(c, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        ys = torch.linspace(-1, 1, h).view(1, h, 1).expand(b, h, w)
        xs = torch.linspace(-1, 1, w).view(1, 1, w).expand(b, h, w)
        grid = torch.stack([xs, ys], -1) + 0.1 * torch.tanh(self.offset(x)).permute(0, 2, 3, 1)
        return F.grid_sample(x, grid, align_corners=False)


class SSDLite(nn.Module):
    """SSDlite on MobileNetV3-Small features: maps at strides 16 and 32 and an extra stride-64 block.

    Outputs ``boxes [B, N, 4]`` (x1, y1, x2, y2 in input pixels, clamped to the image) and ``scores [B, N, C+1]``
    (softmax; class 0 is background), N = sum over maps of h*w*anchors.
    """

    def __init__(self, num_classes: int, size: tuple[int, int], width: float, fpn: bool, align: bool) -> None:
        super().__init__()
        feats = _features(width)
        self.stage1, self.stage2 = feats[:9], feats[9:]  # stride 16 (after block 8), stride 32 (last conv)
        c1, c2 = _div8(48 * width), 6 * _div8(96 * width)
        self.extra = ConvBNAct(c2, 128, 3, 2, act=nn.ReLU6)
        self.neck = TopDown(c1, c2) if fpn else None
        self.align = FeatureAlign(c1) if align else None
        chans, self.anchors = (c1, c2, 128), 3
        self.cls_heads = nn.ModuleList(SSDLiteHead(c, self.anchors, num_classes + 1) for c in chans)
        self.reg_heads = nn.ModuleList(SSDLiteHead(c, self.anchors, 4) for c in chans)
        h, w = size
        self.register_buffer("priors", self._priors([(h // s, w // s) for s in (16, 32, 64)]), persistent=False)
        self.register_buffer("image_size", torch.tensor([w, h, w, h], dtype=torch.float32), persistent=False)

    def _priors(self, grids: list[tuple[int, int]]) -> torch.Tensor:
        """Default boxes ``[N, 4]`` (cx, cy, w, h; relative): scales 0.2..0.95 over levels, aspect ratios 1, 2, 1/2."""
        out = []
        for k, (gh, gw) in enumerate(grids):
            scale = 0.2 + (0.95 - 0.2) * k / (len(grids) - 1)
            cy, cx = torch.meshgrid((torch.arange(gh) + 0.5) / gh, (torch.arange(gw) + 0.5) / gw, indexing="ij")
            wh = torch.tensor([[scale, scale], [scale * 2**0.5, scale / 2**0.5], [scale / 2**0.5, scale * 2**0.5]])
            centers = torch.stack([cx, cy], -1).reshape(-1, 1, 2).expand(-1, self.anchors, 2)
            out.append(torch.cat([centers, wh.expand(centers.shape[0], -1, -1)], -1).reshape(-1, 4))
        return torch.cat(out)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.stage1(x)
        f2 = self.stage2(f1)
        if self.neck is not None:
            f1 = self.neck(f1, f2)
        if self.align is not None:
            f1 = self.align(f1)
        maps = [f1, f2, self.extra(f2)]
        logits = torch.cat([h(m) for h, m in zip(self.cls_heads, maps)], 1)
        deltas = torch.cat([h(m) for h, m in zip(self.reg_heads, maps)], 1)
        p = self.priors
        centers = p[:, :2] + deltas[..., :2] * 0.1 * p[:, 2:]
        sizes = p[:, 2:] * torch.exp(deltas[..., 2:] * 0.2)
        boxes = torch.cat([centers - sizes / 2, centers + sizes / 2], -1) * self.image_size
        boxes = torch.minimum(boxes.clamp(min=0), self.image_size)
        return boxes, logits.softmax(-1)


def ssdlite(num_classes: int = 3, size: list[int] | tuple[int, int] = (128, 128), width: float = 0.5, fpn: bool = False, align: bool = False) -> SSDLite:
    """SSDlite detector for a ``size = (height, width)`` input (multiples of 64)."""
    return _init(SSDLite(num_classes, (int(size[0]), int(size[1])), width, fpn, align))
