// E2B's own JavaScript SDK (`e2b` from npm, pinned in run.sh) driving
// `agent-reach serve --listen envd=ADDR` in its local mode
// (`Sandbox.create({ debug: true, sandboxUrl })`): a command's output and
// exit code, a failing one's CommandExitError, files written and read, a
// background command killed with its child, a directory watched; and the
// binary Connect codec, which this SDK does not send (it speaks JSON:
// `useBinaryFormat: false`), spoken raw to the same server.
//
// Usage: node sdk_test.mjs E2B_DIST URL ROOT [TOKEN] (E2B_DIST: the SDK's
// dist/index.mjs). Without TOKEN the server has none; with it, the sandbox
// is made as `Sandbox.create` makes it once it has the envd access token.
// Prints `ok NAME` per check; exits 1 at the first failure.

import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [dist, URL_, ROOT, TOKEN = ''] = process.argv.slice(2)
const { Sandbox, CommandExitError, FilesystemEventType } = await import(
  pathToFileURL(dist).href
)

function check(name, condition, detail = '') {
  if (!condition) {
    console.log(`FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`)
    process.exit(1)
  }
  console.log(`ok ${name}`)
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function alive(pid) {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[0] !== 'Z'
  } catch {
    return false
  }
}

async function goneWithin(pid, ms) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (!alive(pid)) return true
    await sleep(50)
  }
  return false
}

const sbx = TOKEN
  ? new Sandbox({
      sandboxId: 'debug_sandbox_id',
      envdVersion: '99.99.99',
      envdAccessToken: TOKEN,
      debug: true,
      sandboxUrl: URL_,
    })
  : await Sandbox.create({ debug: true, sandboxUrl: URL_ })

// Commands.
const r = await sbx.commands.run('echo hello; echo oops >&2')
check('run returns stdout', r.stdout === 'hello\n', r.stdout)
check('run returns stderr', r.stderr === 'oops\n', r.stderr)
check('run returns exit code 0', r.exitCode === 0, String(r.exitCode))
try {
  await sbx.commands.run('echo before; exit 7')
  check('a nonzero exit throws CommandExitError', false, 'no error')
} catch (e) {
  check('a nonzero exit throws CommandExitError', e instanceof CommandExitError && e.exitCode === 7, String(e))
}
const seen = []
await sbx.commands.run('for i in 1 2 3; do echo line$i; done', { onStdout: (s) => seen.push(s) })
check('onStdout streams the output', seen.join('') === 'line1\nline2\nline3\n', seen)

// Files.
const path = join(ROOT, 'js', 'hello.txt')
const info = await sbx.files.write(path, 'hello from js')
check('write answers the path', info.path === path, info.path)
check('read returns what was written', (await sbx.files.read(path)) === 'hello from js')
const bytes = new Uint8Array(256 * 1024).map((_, i) => i % 256)
await sbx.files.write(join(ROOT, 'js', 'blob.bin'), bytes.buffer)
const back = await sbx.files.read(join(ROOT, 'js', 'blob.bin'), { format: 'bytes' })
check('binary content is intact', Buffer.compare(Buffer.from(back), Buffer.from(bytes)) === 0)
check('exists of a written file', (await sbx.files.exists(path)) === true)

// A background command and its child, killed with the tree.
const childFile = join(ROOT, 'js', 'child.pid')
const h = await sbx.commands.run(`sleep 300 & echo $! > ${childFile}; wait`, {
  background: true,
  timeoutMs: 0,
})
const started = Date.now()
while (!existsSync(childFile) || !readFileSync(childFile, 'utf8').trim()) {
  check('the background command starts', Date.now() - started < 5000)
  await sleep(50)
}
const child = Number(readFileSync(childFile, 'utf8'))
const listed = (await sbx.commands.list()).map((p) => p.pid)
check('list shows the background command', listed.includes(h.pid), listed)
check('kill answers true', (await sbx.commands.kill(h.pid)) === true)
check('the killed command is gone', await goneWithin(h.pid, 5000), String(h.pid))
check('its child is gone too', await goneWithin(child, 5000), String(child))

// A directory watched (the WatchDir stream), recursive.
await sbx.files.makeDir(join(ROOT, 'js', 'watched', 'sub'))
const events = []
const watch = await sbx.files.watchDir(join(ROOT, 'js', 'watched'), (e) => events.push(e), {
  recursive: true,
})
await sbx.files.write(join(ROOT, 'js', 'watched', 'sub', 'new.txt'), 'x')
const until = Date.now() + 5000
const made = () => events.some((e) => e.name === 'sub/new.txt' && e.type === FilesystemEventType.CREATE)
while (!made() && Date.now() < until) await sleep(50)
await watch.stop()
check('watchDir sees a nested file made, named relative to the directory', made(), events)

// The binary codec, raw: a unary `application/proto` Stat (field 1: path).
const statPath = Buffer.from(path)
const headers = { 'content-type': 'application/proto' }
if (TOKEN) headers['x-access-token'] = TOKEN
const varint = (n) => {
  const out = []
  for (; n >= 0x80; n >>>= 7) out.push((n & 0x7f) | 0x80)
  out.push(n)
  return Buffer.from(out)
}
const res = await fetch(`${URL_}/filesystem.Filesystem/Stat`, {
  method: 'POST',
  headers,
  body: Buffer.concat([Buffer.from([0x0a]), varint(statPath.length), statPath]),
})
const body = Buffer.from(await res.arrayBuffer())
check('a binary unary call is answered in binary', res.status === 200 && res.headers.get('content-type') === 'application/proto', `${res.status} ${res.headers.get('content-type')}`)
check('the binary answer names the entry', body.includes(statPath), body.toString('latin1'))

console.log('all ok')
