"""torch.ao's fake quantizers on the inputs qat_test gives, for the test to
compare fx_quant::fake_quantize with.

usage: fake_quantize_reference.py IN OUT

IN (torch::pickle_save of a list of tensors): the input steps x_0 .. x_{n-1}
and one upstream gradient per step. OUT (torch.save of a list): for each
configuration below, for FusedMovingAvgObsFakeQuantize and then for
FakeQuantize, each step's output, input gradient, scale and zero point.
"""
import sys

import torch
from torch.ao.quantization import fake_quantize as fq
from torch.ao.quantization import observer as ob

# (the configuration's name, the observer, its keyword arguments)
CONFIGS = [
    ("activation", ob.MovingAverageMinMaxObserver,
     dict(quant_min=0, quant_max=255, dtype=torch.quint8,
          qscheme=torch.per_tensor_affine)),
    ("weight_per_tensor", ob.MovingAverageMinMaxObserver,
     dict(quant_min=-128, quant_max=127, dtype=torch.qint8,
          qscheme=torch.per_tensor_symmetric)),
    ("weight_per_channel", ob.MovingAveragePerChannelMinMaxObserver,
     dict(quant_min=-128, quant_max=127, dtype=torch.qint8,
          qscheme=torch.per_channel_symmetric, ch_axis=0)),
]


def main():
    with open(sys.argv[1], "rb") as f:
        tensors = torch.load(f)
    steps = len(tensors) // 2
    xs, grads = tensors[:steps], tensors[steps:]
    out = []
    for _, observer, kwargs in CONFIGS:
        for cls in (fq.FusedMovingAvgObsFakeQuantize, fq.FakeQuantize):
            quantizer = cls(observer=observer, **kwargs)
            for x, g in zip(xs, grads):
                x = x.clone().requires_grad_(True)
                y = quantizer(x)
                y.backward(g)
                out += [y.detach(), x.grad, quantizer.scale.clone(),
                        quantizer.zero_point.clone()]
    torch.save(out, sys.argv[2])


if __name__ == "__main__":
    main()
