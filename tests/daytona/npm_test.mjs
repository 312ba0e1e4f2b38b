// Daytona's npm SDK (`@daytonaio/sdk`, pinned in run.sh) driving
// `agent-reach serve --listen daytona=ADDR`: `Daytona.get`,
// `process.executeCommand` (output, exit code, cwd, env, the timeout), the
// files with a 20 MB round trip (the SDK uploads with chunked transfer
// encoding), and a wrong API key raised as its authentication error.
//
// Usage: node npm_test.mjs API_URL ROOT TOKEN (run from the directory
// holding node_modules). Prints `ok NAME` per check; exits 1 at the first
// failure.
import { createRequire } from 'node:module'
import fs from 'node:fs'
import path from 'node:path'

const [apiUrl, rootArg, token] = process.argv.slice(2)
const root = fs.realpathSync(rootArg)
const require = createRequire(path.join(process.cwd(), 'package.json'))
const { Daytona } = require('@daytonaio/sdk')

function check(name, condition, detail = '') {
  if (!condition) {
    console.log(`FAIL ${name}: ${detail}`)
    process.exit(1)
  }
  console.log(`ok ${name}`)
}

const daytona = new Daytona({ apiKey: token, apiUrl })
const sandbox = await daytona.get('agent-reach')
check('npm get: the sandbox is started', sandbox.state === 'started', sandbox.state)

let r = await sandbox.process.executeCommand('echo out; echo err >&2; exit 4')
check('npm executeCommand: output and exit code', r.exitCode === 4 && r.result === 'out\nerr\n', JSON.stringify(r))
fs.mkdirSync(path.join(root, 'npm-sub'), { recursive: true })
r = await sandbox.process.executeCommand('pwd; echo $GREETING', 'npm-sub', { GREETING: 'hi' }, 30)
check('npm executeCommand: cwd and env', r.result === `${root}/npm-sub\nhi\n`, JSON.stringify(r.result))
try {
  await sandbox.process.executeCommand('sleep 60', undefined, undefined, 1)
  check('npm executeCommand: the timeout raises', false, 'no error')
} catch (e) {
  check('npm executeCommand: the timeout raises DaytonaTimeoutError', e.constructor.name === 'DaytonaTimeoutError', `${e.constructor.name}: ${e.message}`)
}

const big = Buffer.alloc(20 * 1024 * 1024)
for (let i = 0; i < big.length; i += 4096) big[i] = i % 251
await sandbox.fs.uploadFile(big, 'npm/big.bin')
const back = await sandbox.fs.downloadFile('npm/big.bin')
check('npm files: a 20 MB round trip', Buffer.compare(back, big) === 0, `${back.length} bytes back`)
await sandbox.fs.uploadFile(Buffer.from('hello npm\n'), 'npm/a.txt')
check('npm files: download', (await sandbox.fs.downloadFile('npm/a.txt')).toString() === 'hello npm\n')
const names = (await sandbox.fs.listFiles('npm')).map((f) => f.name)
check('npm files: list', JSON.stringify(names) === '["a.txt","big.bin"]', JSON.stringify(names))
await sandbox.fs.deleteFile('npm', true)
check('npm files: delete', !fs.existsSync(path.join(root, 'npm')))

try {
  await new Daytona({ apiKey: 'wrong-key', apiUrl }).get('agent-reach')
  check('npm auth: a wrong API key is refused', false, 'no error')
} catch (e) {
  check('npm auth: a wrong API key raises DaytonaAuthenticationError', e.constructor.name === 'DaytonaAuthenticationError', `${e.constructor.name}: ${e.message}`)
}
console.log('all daytona npm SDK checks passed')
