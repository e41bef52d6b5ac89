"""The public corpus: torchvision 0.14's models as TorchScript files, for
fx/torchscript/torchvision_corpus_test.cc (run with Debian's /usr/bin/python3,
torch 1.13, torchvision 0.14). Random weights from a fixed seed, nothing
downloaded.

    python3 testdata/torchvision_corpus.py list [all]
        one line per entry: NAME INPUT_SPEC (the fx CLI's --input format);
        by default the entries the test runs in CI (CI_MODELS: each family's
        smallest member), with `all` every entry
    python3 testdata/torchvision_corpus.py write OUT_DIR NAME...
        writes OUT_DIR/NAME.pt (torch.jit.trace or torch.jit.script of the
        model, as NAME ends in _traced or _scripted), prints each path

Every classification, segmentation and video model torchvision 0.14 lists,
traced and (where torchvision supports it) scripted, except the five largest
(SKIPPED: the same code as a smaller sibling at 200-645 M parameters), and
two detection models, whose box selection depends on data. Inputs are as
small as each model allows (ViT and MaxViT fix their image size).
"""
import os
import sys
import warnings

import torch
import torchvision
from torchvision import models

# Same code as a smaller sibling of the same family, at 200 to 645 M
# parameters: too large for a test run.
SKIPPED = {"convnext_large", "regnet_y_128gf", "vit_h_14", "vit_l_16",
           "vit_l_32"}

# Models torch.jit.script cannot compile in torchvision 0.14.
NOT_SCRIPTABLE = set()

# Each family's smallest member (every architecture and block kind), the
# part of the corpus CI runs. Their larger siblings run the same code at
# other widths and depths, and S3D and MViT need 16x224x224 clips; `list
# all` and FX_CORPUS=all run them too.
CI_MODELS = {
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0",
    "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_small", "regnet_x_400mf",
    "regnet_y_400mf", "resnet18", "resnext50_32x4d", "shufflenet_v2_x0_5",
    "squeezenet1_1", "swin_t", "swin_v2_t", "vit_b_16", "wide_resnet50_2",
    "deeplabv3_mobilenet_v3_large", "fcn_resnet50",
    "lraspp_mobilenet_v3_large", "r3d_18", "mc3_18", "r2plus1d_18",
    "fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large",
}

DETECTION = ["fasterrcnn_mobilenet_v3_large_320_fpn",
             "ssdlite320_mobilenet_v3_large"]


def _input_spec(name, family):
    if family == "video":
        # MViT fixes its clip size; S3D's last pooling needs 16x224x224.
        if name.startswith("mvit") or name == "s3d":
            return "1x3x16x224x224"
        return "1x3x4x32x32"
    if name.startswith("vit_") or name == "maxvit_t":
        return "1x3x224x224"
    if name == "inception_v3":
        return "1x3x80x80"
    if family == "detection":
        return "3x96x96"
    return "1x3x64x64"


def _entries():
    out = {}
    for family, module in [("classification", models),
                           ("segmentation", models.segmentation),
                           ("video", models.video)]:
        for name in models.list_models(module=module):
            if name in SKIPPED:
                continue
            spec = _input_spec(name, family)
            out[f"{name}_traced"] = (name, family, "trace", spec)
            if name not in NOT_SCRIPTABLE:
                out[f"{name}_scripted"] = (name, family, "script", spec)
    for name in DETECTION:
        out[f"{name}_scripted"] = (name, "detection", "script",
                                   _input_spec(name, "detection"))
    return out


ENTRIES = _entries()


def _calibrated(model):
    # Non-trivial batch norm statistics.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _detector(model):
    # Batch norm statistics from the backbone's own activations on random
    # images: random statistics wash the image out of a detector's features,
    # so that every image gives the same boxes. And Faster R-CNN's class
    # scores scaled so that images keep different numbers of boxes above
    # its score threshold (2 to 34 on torch.rand images, at 96x96).
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # the average over all batches
    model.train()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(4):
            images = [torch.rand(3, 96, 96, generator=generator)
                      for _ in range(2)]
            batch, _ = model.transform(images)
            model.backbone(batch.tensors)
        if hasattr(model, "roi_heads"):
            model.roi_heads.box_predictor.cls_score.weight.mul_(5)
    return model.eval()


_built = {}


def _model(model_name, family):
    # One construction for a model's traced and scripted files.
    if model_name not in _built:
        _built.clear()
        torch.manual_seed(0)
        kwargs = {"weights": None}
        if family in ("segmentation", "detection"):
            kwargs["weights_backbone"] = None
        model = models.get_model(model_name, **kwargs)
        _built[model_name] = (_detector(model) if family == "detection"
                              else _calibrated(model))
    return _built[model_name]


def write(name, out_dir):
    model_name, family, how, spec = ENTRIES[name]
    model = _model(model_name, family)
    if how == "script":
        script = torch.jit.script(model)
    else:
        x = torch.randn(*[int(s) for s in spec.split("x")])
        # strict=False: segmentation models return dicts.
        script = torch.jit.trace(model, x, check_trace=False,
                                 strict=family != "segmentation")
    path = os.path.join(out_dir, name + ".pt")
    script.save(path)
    print(path, flush=True)


def main():
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if sys.argv[1:2] == ["list"]:
        every = sys.argv[2:3] == ["all"]
        for name in sorted(ENTRIES):
            if every or ENTRIES[name][0] in CI_MODELS:
                print(name, ENTRIES[name][3])
        return
    if sys.argv[1:2] != ["write"] or len(sys.argv) < 3:
        sys.exit(__doc__)
    out_dir = sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    failed = False
    for name in sys.argv[3:]:
        try:
            write(name, out_dir)
        except Exception as e:  # the others are still written
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
