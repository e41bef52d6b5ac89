// Runs an ONNX model once under ONNX Runtime (CPU) on inputs read from raw
// files, and writes each output to a raw file:
//
//   node ort_run.js MODEL.onnx OUT_DIR FILE:DTYPE:SHAPE...
//
// (inputs as testdata/ort_inputs.js reads them). Each output is
// written to OUT_DIR/NAME.bin and printed as a line "NAME DTYPE D0xD1x..."
// ("scalar" for a 0-dimensional one).
// onnxruntime-node is found through NODE_PATH (tools/setup.sh installs it).
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');
const readInputs = require('./ort_inputs.js');

(async () => {
  const [model, outDir, ...specs] = process.argv.slice(2);
  if (!model || !outDir) {
    throw new Error('usage: node ort_run.js MODEL.onnx OUT_DIR FILE:DTYPE:SHAPE...');
  }
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: 2, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = readInputs(ort, session, specs);
  const results = await session.run(feeds);
  for (const name of session.outputNames) {
    const t = results[name];
    fs.writeFileSync(path.join(outDir, name + '.bin'),
                     Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    console.log(`${name} ${t.type} ${t.dims.length ? t.dims.join('x') : 'scalar'}`);
  }
})().catch((e) => { console.error(String(e)); process.exit(1); });
