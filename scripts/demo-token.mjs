// Prints a bearer token for the demo issuer of examples/proxy/approvals.toml
// (examples/proxy/demo-issuer: a key pair anyone can read, for the demo only), so a person can try
// the approval page without an identity provider:
//
//   node scripts/demo-token.mjs alice            # the caller: give it to the MCP client
//   node scripts/demo-token.mjs bob              # the approver: paste it into the page's sign-in
//   node scripts/demo-token.mjs bob 3600 http://127.0.0.1:4000/mcp   # lifetime (s), audience
//
// An EdDSA JWT (iss https://demo-issuer.invalid, sub NAME, aud the proxy's /mcp, valid for the
// lifetime, 8 hours by default), signed with Node's own crypto: no dependency.
import { createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const [name, lifetime = '28800', audience = 'http://127.0.0.1:3000/mcp'] = process.argv.slice(2);
if (!name) {
  console.error('usage: node scripts/demo-token.mjs NAME [LIFETIME_SECS] [AUDIENCE]');
  process.exit(2);
}
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const key = createPrivateKey({
  key: readFileSync(join(root, 'examples/proxy/demo-issuer/key.der')),
  format: 'der',
  type: 'pkcs8',
});
const part = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
const now = Math.floor(Date.now() / 1000);
const input = `${part({ alg: 'EdDSA', typ: 'JWT', kid: 'demo' })}.${part({
  iss: 'https://demo-issuer.invalid',
  sub: name,
  aud: audience,
  iat: now,
  exp: now + Number(lifetime),
})}`;
console.log(`${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`);
