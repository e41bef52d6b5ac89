// A model's inputs for ONNX Runtime, read from raw files given as
// FILE:DTYPE:SHAPE (DTYPE float32, int64 or bool, SHAPE like 1x3x224x224; the
// values little-endian, as at::Tensor::contiguous() holds them): what
// testdata/ort_run.js and tools/ort_timer.js feed a session.
const fs = require('fs');

module.exports = function readInputs(ort, session, specs) {
  if (specs.length !== session.inputNames.length) {
    throw new Error(`the model takes ${session.inputNames.length} inputs, ${specs.length} given`);
  }
  const feeds = {};
  specs.forEach((spec, i) => {
    const [file, dtype, shape] = spec.split(':');
    const dims = shape === '' ? [] : shape.split('x').map(Number);
    const n = dims.reduce((a, b) => a * b, 1);
    const buf = fs.readFileSync(file);
    const bytes = (size) => buf.buffer.slice(buf.byteOffset, buf.byteOffset + size * n);
    let data;
    if (dtype === 'int64') {
      data = new BigInt64Array(bytes(8));
    } else if (dtype === 'bool') {
      data = new Uint8Array(bytes(1));
    } else if (dtype === 'float32') {
      data = new Float32Array(bytes(4));
    } else {
      throw new Error(`input ${i}: dtype ${dtype} (float32, int64 or bool)`);
    }
    feeds[session.inputNames[i]] = new ort.Tensor(dtype, data, dims);
  });
  return feeds;
};
