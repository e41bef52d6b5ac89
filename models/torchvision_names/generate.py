"""Regenerates the torchvision golden files used by //models:zoo_test.

For each of resnet18, resnet50 and mobilenet_v2 it writes
  <model>.txt         the state_dict keys, one per line, in state_dict order;
  <model>_logits.txt  the logits of the model for a fixed input after
                      filling every state_dict entry by the rule below.

Fill rule (zoo_test.cc applies the same rule to the C++ models): for the i-th
state_dict entry (0-based) of floating point type, seed the global generator
with i, then
  running_var, and 1-D weights (BatchNorm scales): rand(shape) + 0.5;
  other 1-D entries (biases, running_mean):        randn(shape) * 0.1;
  entries of 2 or more dims:                       randn(shape) / sqrt(fan_in),
where fan_in = numel / shape[0]. Integer entries (num_batches_tracked) are
left as they are. The input is randn(1, 3, 224, 224) after manual_seed(1234).

Run from the repository root with Debian's interpreter, which has torch:
  /usr/bin/python3 models/torchvision_names/generate.py
"""

import math
import os

import torch
import torchvision

MODELS = ("resnet18", "resnet50", "mobilenet_v2")
INPUT_SEED = 1234


def fill(model):
    with torch.no_grad():
        for i, (name, t) in enumerate(model.state_dict().items()):
            if not t.is_floating_point():
                continue
            torch.manual_seed(i)
            if name.endswith("running_var") or (
                t.dim() == 1 and name.endswith("weight")
            ):
                t.copy_(torch.rand(t.shape) + 0.5)
            elif t.dim() == 1:
                t.copy_(torch.randn(t.shape) * 0.1)
            else:
                fan_in = t.numel() // t.shape[0]
                t.copy_(torch.randn(t.shape) / math.sqrt(fan_in))


def main():
    out_dir = os.path.dirname(os.path.abspath(__file__))
    for name in MODELS:
        model = getattr(torchvision.models, name)().eval()
        with open(os.path.join(out_dir, name + ".txt"), "w") as f:
            for key in model.state_dict():
                f.write(key + "\n")
        fill(model)
        torch.manual_seed(INPUT_SEED)
        x = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            logits = model(x).flatten()
        with open(os.path.join(out_dir, name + "_logits.txt"), "w") as f:
            for v in logits.tolist():
                f.write("%.9g\n" % v)


if __name__ == "__main__":
    main()
