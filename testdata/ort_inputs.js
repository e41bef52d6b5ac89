// A model's inputs for ONNX Runtime, read from raw files given as
// FILE:DTYPE:SHAPE (DTYPE float32 or int64, SHAPE like 1x3x224x224; the
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
    const data = dtype === 'int64'
      ? new BigInt64Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + 8 * n))
      : new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + 4 * n));
    feeds[session.inputNames[i]] = new ort.Tensor(dtype, data, dims);
  });
  return feeds;
};
