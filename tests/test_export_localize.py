"""Layer-by-layer localisation: scope mapping on hand-built graphs, and the first diverging submodule on small
PyTorch models whose export computes differently (bilinear upsampling at opset 10, where ONNX's Resize has no
half-pixel coordinates)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from quantkit.export import ExportMismatchError, TorchExportConfig, export_torch
from quantkit.export.localize import array_diff, node_scopes, scope_boundaries

NAMES = {"mid", "mid.inner", "mid.inner.seq", "mid.inner.seq.0", "mid.inner.seq.1", "mid.inner.seq.1.0", "mid.layers", "mid.layers.0",
         "mid.layers.0.seq", "mid.layers.0.seq.1", "mid.layers.0.seq.1.0", "head"}


def _graph(names: list[str]) -> onnx.ModelProto:
    """A chain of Relu nodes named ``names`` (``t0 -> t1 -> ...``) plus a graph output."""
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=n) for i, n in enumerate(names)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info(f"t{len(names)}", TensorProto.FLOAT, [1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_node_scopes_resolve_torchscript_names_against_named_modules():
    # the exporter's component for a module is relative to the nearest enclosing non-container module
    m = _graph(["/mid/inner/seq/seq.0/Conv", "/mid/inner/seq/seq.1/seq.1.0/Relu", "/mid/inner/Mul", "/mid/layers/layers.0/seq/seq.1/seq.1.0/Relu",
                "/head/Conv", "/ReduceMean", "Identity_3", "/mid/unknown/Relu"])
    assert node_scopes(m, NAMES) == ["mid.inner.seq.0", "mid.inner.seq.1.0", "mid.inner", "mid.layers.0.seq.1.0", "head", "", "", "mid"]


def test_scope_boundaries_are_tensors_leaving_the_scope():
    m = _graph(["/mid/inner/seq/seq.0/Conv", "/mid/inner/seq/seq.1/seq.1.0/Relu", "/mid/inner/Mul", "/head/Conv"])
    scopes = node_scopes(m, NAMES)
    assert scope_boundaries(m, scopes, "mid.inner.seq") == ["t2"]
    assert scope_boundaries(m, scopes, "mid.inner") == ["t3"] and scope_boundaries(m, scopes, "mid") == ["t3"]
    assert scope_boundaries(m, scopes, "head") == ["t4"]  # a graph output
    assert scope_boundaries(m, scopes, "mid.layers") == []


def test_array_diff_rule():
    b = np.array([1.0, 100.0, np.nan, np.inf])
    assert array_diff(b.copy(), b, 0.0, 0.0) == (0.0, 0.0, True)
    d = array_diff(b + [0, 0.05, 0, 0], b, 1e-4, 1e-3)  # 0.05 <= 1e-4 + 1e-3 * 100
    assert d[2] and d[0] == pytest.approx(0.05)
    assert not array_diff(b + [0.01, 0, 0, 0], b, 1e-4, 1e-3)[2]
    assert array_diff(np.array([1.0, 2.0, 0.0, np.inf]), b, 1, 1) == (float("inf"), float("inf"), False)  # NaN on one side only
    assert array_diff(np.ones((2, 3)), np.ones(6), 0, 0)[2] and not array_diff(np.ones(5), np.ones(6), 0, 0)[2]


nn = torch.nn



class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.act = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Hardswish()

    def forward(self, x):
        return self.act(self.bn(self.conv(x))) + x


class Neck(nn.Module):
    def __init__(self):
        super().__init__()
        self.lateral = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return nn.functional.interpolate(self.lateral(x), scale_factor=2, mode="bilinear", align_corners=False)


class Net(nn.Module):
    """stem -> 2 residual blocks -> x2 bilinear upsampling -> head. ``up`` says where the upsampling is: an
    ``nn.Upsample`` submodule ("module"), an ``F.interpolate`` call in this forward ("forward"), or in the
    forward of a ``Neck`` submodule ("neck")."""

    def __init__(self, up: str):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, 2, 1), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
        self.blocks = nn.ModuleList([Block(), Block()])
        self.up = {"module": nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), "neck": Neck()}.get(up)
        self.head = nn.Conv2d(4, 2, 1)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        x = self.up(x) if self.up is not None else nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return self.head(x)


def _net(up: str = "module") -> Net:
    torch.manual_seed(0)
    return Net(up).eval()


CFG = {"input_size": [32, 32], "output_names": ["y"]}


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_upsampling_agrees_from_opset_11(tmp_path, opset):
    r = export_torch(_net(), TorchExportConfig.from_dict({**CFG, "opset": opset}), tmp_path / "exp")
    assert r.passed and r.outputs[0].max_abs_diff < 1e-4


def test_upsampling_submodule_at_opset_10_is_named(tmp_path):
    with pytest.raises(ExportMismatchError) as e:
        export_torch(_net(), TorchExportConfig.from_dict({**CFG, "opset": 10}), tmp_path / "exp")
    loc, msg = e.value.localization, str(e.value)
    names = [layer.module for layer in loc.layers]
    div = loc.divergence
    first = names.index("up")
    # BatchNorm stays a node of its own in the localisation graph, so stem.0 (a Conv) is compared before BN, and agrees
    assert names[:first] == ["stem.0", "stem.1", "stem.2", "stem", "blocks.0.conv", "blocks.0.bn", "blocks.0.act", "blocks.0",
                             "blocks.1.conv", "blocks.1.bn", "blocks.1.act", "blocks.1"]
    assert all(layer.within_tolerance for layer in loc.layers[:first]) and loc.reproduced
    assert (div.module, div.kind, div.where) == ("up", "Upsample", "output") and div.diff.max_abs_diff > 1e-2
    assert not loc.layers[names.index("head")].within_tolerance  # the difference propagates
    assert "first diverging submodule up (Upsample)" in msg and "'/up/Resize_output_0'" in msg and "\n" not in msg
    assert not (tmp_path / "exp").exists()


def test_difference_in_a_modules_own_forward_names_that_module(tmp_path):
    with pytest.raises(ExportMismatchError) as e:
        export_torch(_net("forward"), TorchExportConfig.from_dict({**CFG, "opset": 10}), tmp_path / "exp")
    loc = e.value.localization
    # every submodule before the functional interpolate agrees; head's output is the first to differ, but its
    # input already does: the model's own forward, between blocks.1 and head, is to blame
    assert all(layer.within_tolerance for layer in loc.layers if layer.module != "head")
    div = loc.divergence
    assert (div.module, div.kind, div.where, div.before) == ("", "Net", "before", "head") and div.diff.tensor == "/Resize_output_0"
    assert "first diverging the model's own forward (Net), before it calls head" in str(e.value)


def test_localize_off_still_refuses(tmp_path):
    with pytest.raises(ExportMismatchError) as e:
        export_torch(_net(), TorchExportConfig.from_dict({**CFG, "opset": 10, "localize": False}), tmp_path / "exp")
    assert e.value.localization is None and "set export.localize: true" in str(e.value)


def test_difference_in_a_submodules_own_forward_code_names_it(tmp_path):
    with pytest.raises(ExportMismatchError) as e:
        export_torch(_net("neck"), TorchExportConfig.from_dict({**CFG, "opset": 10}), tmp_path / "exp")
    div = e.value.localization.divergence
    assert (div.module, div.kind, div.where) == ("up", "Neck", "own")
    assert "first diverging submodule up (Neck) in its own forward code (its submodules agree)" in str(e.value)
