'use strict';
// A tool-using agent in Node.js, instrumented with the official OpenTelemetry JS SDK only
// (@opentelemetry/sdk-node), configured from the environment as a user's agent is:
// OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf, http/json),
// OTEL_SERVICE_NAME. The SDK's default resource detectors (env, process, host) describe it.
//
//     node agent.js WORKDIR [--no-propagate] [--wait]
//
// It reports one agent run (an `invoke_agent` span) with one tool call inside it (an
// `execute_tool run_command` span, shaped as the GenAI semantic conventions show it). The tool
// call (with two attributes whose numbers JavaScript holds as doubles: a 64-bit hash and a
// NaN) writes WORKDIR/notes.txt itself, then runs `cp notes.txt notes.bak` in WORKDIR with
// child_process.execFile (no shell). Unless --no-propagate, the child's environment carries
// the tool call's context as TRACEPARENT (the OpenTelemetry environment-variable carrier: the
// propagator's keys upper-cased), as a user following that specification writes it. Then the
// SDK is shut down, which flushes every span, and the agent prints "done".
//
// With --wait (for a standing collector, which follows a process from its first span): before
// the run it reports a `create_agent` span, flushes it, prints "reported" and waits for one
// line on standard input (the go-ahead, once the collector follows it).

const fs = require('node:fs');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const api = require('@opentelemetry/api');
const { NodeSDK } = require('@opentelemetry/sdk-node');

const AGENT_NAME = 'js-agent';
const CALL_ID = 'call_js_1';

const envSetter = {
  set(carrier, key, value) {
    carrier[key.toUpperCase()] = value;
  },
};

async function runCommand(workdir, propagate) {
  const argv = ['cp', 'notes.txt', 'notes.bak'];
  const attributes = {
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': 'run_command',
    'gen_ai.tool.type': 'function',
    'gen_ai.tool.call.id': CALL_ID,
    'gen_ai.tool.description': 'Run a command (no shell) and return its output.',
    'gen_ai.tool.call.arguments': JSON.stringify({ command: argv.join(' ') }),
    // Numbers JavaScript holds as doubles, as an agent's attributes may: a 64-bit hash (beyond
    // int64; the JSON exporter writes it as an intValue) and a ratio with nothing to divide
    // (NaN; the JSON exporter writes null).
    'js_agent.notes.fnv1a64': 0xcbf29ce484222325,
    'js_agent.notes.ratio': 0 / 0,
  };
  const tracer = api.trace.getTracer('otel-bridge-js-agent', '0.1.0');
  return tracer.startActiveSpan(
    'execute_tool run_command',
    { kind: api.SpanKind.INTERNAL, attributes },
    async (span) => {
      try {
        fs.writeFileSync(path.join(workdir, 'notes.txt'), 'written by the JS agent\n');
        const env = { ...process.env };
        if (propagate) {
          api.propagation.inject(api.context.active(), env, envSetter);
        }
        const { stdout } = await promisify(execFile)(argv[0], argv.slice(1), { cwd: workdir, env });
        span.setAttribute('gen_ai.tool.call.result', JSON.stringify({ exit_code: 0, stdout }));
        return stdout;
      } catch (err) {
        span.recordException(err);
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: String(err) });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

function oneLine() {
  return new Promise((resolve) => {
    let seen = '';
    const onData = (chunk) => {
      seen += chunk;
      if (seen.includes('\n')) {
        process.stdin.off('data', onData);
        process.stdin.pause();
        resolve();
      }
    };
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', onData);
    process.stdin.once('end', resolve);
  });
}

async function report(tracer, attributes) {
  const span = tracer.startSpan(`create_agent ${AGENT_NAME}`, {
    kind: api.SpanKind.INTERNAL,
    attributes: { ...attributes, 'gen_ai.operation.name': 'create_agent' },
  });
  span.end();
  await api.trace.getTracerProvider().getDelegate().forceFlush();
  console.log('reported');
  await oneLine();
}

async function main() {
  const workdir = process.argv[2];
  if (!workdir) {
    throw new Error('usage: node agent.js WORKDIR [--no-propagate] [--wait]');
  }
  const propagate = !process.argv.includes('--no-propagate');
  const sdk = new NodeSDK();
  sdk.start();
  const tracer = api.trace.getTracer('otel-bridge-js-agent', '0.1.0');
  const attributes = {
    'gen_ai.operation.name': 'invoke_agent',
    'gen_ai.agent.name': AGENT_NAME,
    'gen_ai.agent.id': 'js-agent-1',
    'gen_ai.provider.name': 'openai',
  };
  try {
    if (process.argv.includes('--wait')) {
      await report(tracer, attributes);
    }
    await tracer.startActiveSpan(
      `invoke_agent ${AGENT_NAME}`,
      { kind: api.SpanKind.INTERNAL, attributes },
      async (span) => {
        try {
          await runCommand(workdir, propagate);
        } finally {
          span.end();
        }
      },
    );
  } finally {
    await sdk.shutdown();
  }
  console.log('done');
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
