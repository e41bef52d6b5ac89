// The ONNX Runtime side of tools/benchmark_inference (tools/ort_timer.h):
// loads a model and its inputs once, then runs it on request, so that the
// benchmark interleaves ONNX Runtime's runs with its own, round by round.
//
//   node tools/ort_timer.js MODEL.onnx THREADS FILE:DTYPE:SHAPE...
//
// (inputs as testdata/ort_inputs.js reads them). Prints "ready",
// then answers each line read from stdin:
//   run N      runs the model N times; prints "ms T1 ... TN" (each run's ms)
//   save FILE  writes the first output to FILE, raw; prints "saved DIMS"
// and exits at the end of its input. onnxruntime-node is found through
// NODE_PATH (tools/setup.sh installs it).
const fs = require('fs');
const path = require('path');
const readline = require('readline');
const ort = require('onnxruntime-node');
const readInputs = require(path.join(__dirname, '..', 'testdata', 'ort_inputs.js'));

(async () => {
  const [model, threads, ...specs] = process.argv.slice(2);
  if (!model || !threads) {
    throw new Error('usage: node ort_timer.js MODEL.onnx THREADS FILE:DTYPE:SHAPE...');
  }
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1,
    executionMode: 'sequential', graphOptimizationLevel: 'all',
  });
  const feeds = readInputs(ort, session, specs);
  let last = await session.run(feeds);
  console.log('ready');
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const [command, arg] = line.trim().split(/\s+/);
    if (command === 'run') {
      const times = [];
      for (let i = 0; i < Number(arg); i++) {
        const start = process.hrtime.bigint();
        last = await session.run(feeds);
        times.push(Number(process.hrtime.bigint() - start) / 1e6);
      }
      console.log('ms ' + times.join(' '));
    } else if (command === 'save') {
      const t = last[session.outputNames[0]];
      fs.writeFileSync(arg, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      console.log('saved ' + t.dims.join('x'));
    } else {
      throw new Error(`unknown command '${line}': run N or save FILE`);
    }
  }
})().catch((e) => { console.error(String(e)); process.exit(1); });
