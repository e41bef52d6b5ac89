"""ONNX Runtime's own dynamic int8 quantization of float ONNX files, as its
users quantize a transformer (onnxruntime.quantization.quantize_dynamic:
int8 weights per tensor, activations quantized per call; ONNX Runtime fuses
each into DynamicQuantizeMatMul). For tools/benchmark_quantization.cc's
section 6, run with the virtual environment's Python (tools/setup.sh
installs onnxruntime 1.30.0, the version of the onnxruntime-node library
that times it).

    python tools/ort_quantize_dynamic.py DIR NAME...

reads DIR/NAME.onnx and writes DIR/NAME_int8.onnx, printing `NAME ok`; a
line `error REASON` if onnxruntime does not import."""
import os
import sys

try:
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic
except ImportError as e:
    print("error onnxruntime's Python package is not installed "
          "(tools/setup.sh): %s" % e)
    sys.exit(0)


def main():
    out_dir = sys.argv[1]
    print("onnxruntime_version", onnxruntime.__version__)
    for name in sys.argv[2:]:
        quantize_dynamic(os.path.join(out_dir, name + ".onnx"),
                         os.path.join(out_dir, name + "_int8.onnx"),
                         weight_type=QuantType.QInt8)
        print(name, "ok")


if __name__ == "__main__":
    main()
