'use strict';
// A Node.js program whose main thread waits in a futex: waitForWorker blocks it with
// Atomics.wait on a SharedArrayBuffer for 50 ms at a time (a worker thread notifies it now and
// then); with SPIN_MS, busyWork then computes in JavaScript that long after each wait. Run it as
// offcpu's tests do, so that a recording names its JavaScript frames:
//   node --perf-basic-prof --interpreted-frames-native-stack node_wait.js [SECONDS [SPIN_MS]]
const { Worker, isMainThread, workerData } = require('worker_threads');

function busyWork(ms) {
  const until = Date.now() + ms;
  let sum = 0;
  while (Date.now() < until) {
    for (let i = 0; i < 10000; i++) sum += Math.sqrt(i + sum % 7);
  }
  return sum;
}

if (isMainThread) {
  const shared = new Int32Array(new SharedArrayBuffer(4));
  new Worker(__filename, { workerData: shared }).unref();
  function waitForWorker() {
    return Atomics.wait(shared, 0, 0, 50); // 'timed-out' after 50 ms, unless notified
  }
  const end = Date.now() + Number(process.argv[2] || 60) * 1000;
  const spinMs = Number(process.argv[3] || 0);
  while (Date.now() < end) {
    waitForWorker();
    if (spinMs) busyWork(spinMs);
  }
} else {
  setInterval(() => Atomics.notify(workerData, 0), 200);
}
