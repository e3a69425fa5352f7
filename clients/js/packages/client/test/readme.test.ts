import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { startFloodgate } from '@floodgate/testkit';

// build/test/readme.test.js → clients/js
const ROOT = resolve(__dirname, '../../../..');
const READMES = [
  'packages/client/README.md',
  'packages/express/README.md',
  'packages/nestjs/README.md',
  '../../docs/clients.md',
  '../../README.md',
];
const OUT = join(ROOT, 'packages/client/build/readme');

function snippets(readme: string): string[] {
  const text = readFileSync(join(ROOT, readme), 'utf8');
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

describe('README snippets', () => {
  it('every TypeScript snippet of the package READMEs compiles against the packages', () => {
    rmSync(OUT, { recursive: true, force: true });
    mkdirSync(OUT, { recursive: true });
    const files: string[] = [];
    for (const readme of READMES) {
      const blocks = snippets(readme);
      assert.ok(blocks.length > 0, `${readme} has snippets`);
      blocks.forEach((code, i) => {
        const file = `${readme.replace(/^(\.\.\/)+/, '').replace(/[/.]/g, '-')}-${i}.ts`;
        writeFileSync(join(OUT, file), code);
        files.push(file);
      });
    }
    // The snippets are ES modules (some await at the top level), as in an app with "type": "module".
    writeFileSync(join(OUT, 'package.json'), JSON.stringify({ type: 'module' }));
    writeFileSync(
      join(OUT, 'tsconfig.json'),
      JSON.stringify({
        extends: '../../../../tsconfig.base.json',
        compilerOptions: { rootDir: '.', outDir: 'js', declaration: false, sourceMap: false },
        include: files,
      }),
    );
    const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
    try {
      execFileSync(process.execPath, [tsc, '-p', join(OUT, 'tsconfig.json')], { encoding: 'utf8' });
    } catch (error) {
      assert.fail(`a README snippet does not compile:\n${(error as { stdout?: string }).stdout ?? error}`);
    }
  });

  it('the client README\'s first snippet runs against a real server', async () => {
    const server = await startFloodgate('store: { kind: memory }\nrules:\n  - name: per-user\n    key: [user]\n    algorithm: fixed_window\n    limit: 5\n    window: 60s\n');
    try {
      const compiled = readFileSync(join(OUT, 'js/packages-client-README-md-0.js'), 'utf8').replace('http://127.0.0.1:8080', server.url)
        // A test machine running builds beside the tests can be slower than the snippet's 50 ms.
        .replace('deadline: 50', 'deadline: 2000');
      const runnable = join(OUT, 'js/packages-client-README-md-0.run.js');
      writeFileSync(runnable, compiled);
      const output = execFileSync(process.execPath, [runnable], { encoding: 'utf8', cwd: OUT });
      assert.match(output, /calls: 2/);
      assert.match(output, /failedOpen: 0/);
    } finally {
      await server.stop();
    }
  });
});

describe('CommonJS and ESM', () => {
  it('require() and import give the packages, one copy of each: the same classes either way', () => {
    const code = `
      const packages = ['@floodgate/client', '@floodgate/nestjs', '@floodgate/express'];
      Promise.all(packages.map((name) => import(name))).then((imported) => {
        const required = packages.map((name) => require(name));
        const same = [
          required[0].FloodgateClient === imported[0].FloodgateClient,
          required[0].FloodgateProblemError === imported[0].FloodgateProblemError,
          required[1].FloodgateModule === imported[1].FloodgateModule,
          required[1].FLOODGATE_OPTIONS === imported[1].FLOODGATE_OPTIONS,
          required[1].FloodgateClient === imported[0].FloodgateClient,
          required[2].floodgate === imported[2].floodgate,
        ];
        console.log(same.join());
      });`;
    const run = spawnSync(process.execPath, ['-e', code], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout.trim(), 'true,true,true,true,true,true');
    assert.equal(run.stderr, '', 'no warning');
  });
});
