// Runs an ONNX model once under ONNX Runtime (CPU) on inputs read from raw
// files, and writes each output to a raw file:
//
//   node ort_run.js MODEL.onnx OUT_DIR FILE:DTYPE:SHAPE...
//
// DTYPE is float32 or int64, SHAPE like 1x3x224x224; files hold the values
// little-endian, as at::Tensor::contiguous() holds them. Each output is
// written to OUT_DIR/NAME.bin and printed as a line "NAME DTYPE D0xD1x...".
// onnxruntime-node is found through NODE_PATH (tools/setup.sh installs it).
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

(async () => {
  const [model, outDir, ...specs] = process.argv.slice(2);
  if (!model || !outDir) {
    throw new Error('usage: node ort_run.js MODEL.onnx OUT_DIR FILE:DTYPE:SHAPE...');
  }
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: 2, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  if (specs.length !== session.inputNames.length) {
    throw new Error(`the model takes ${session.inputNames.length} inputs, ${specs.length} given`);
  }
  const feeds = {};
  specs.forEach((spec, i) => {
    const [file, dtype, shape] = spec.split(':');
    const dims = shape === '' ? [] : shape.split('x').map(Number);
    const n = dims.reduce((a, b) => a * b, 1);
    const buf = fs.readFileSync(file);
    const data = dtype === 'int64'
      ? new BigInt64Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + 8 * n))
      : new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + 4 * n));
    feeds[session.inputNames[i]] = new ort.Tensor(dtype, data, dims);
  });
  const results = await session.run(feeds);
  for (const name of session.outputNames) {
    const t = results[name];
    fs.writeFileSync(path.join(outDir, name + '.bin'),
                     Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    console.log(`${name} ${t.type} ${t.dims.join('x')}`);
  }
})().catch((e) => { console.error(String(e)); process.exit(1); });
