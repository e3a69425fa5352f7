/**
 * The install-and-load matrix. The `@floodgate/*` packages are packed (`npm pack`) and their types
 * checked in every resolution mode (`attw`); then each template under `compat/templates/` is
 * copied to a temporary directory, installed from its committed lockfile with the tarballs added
 * by a plain `npm install <tarballs>` (a peer range that does not fit is an error there, as it is
 * for users), and runs its own tests against the real `floodgate` binary.
 *
 * A template is a folder with a `package.json` whose `floodgateCompat` field names the packages it
 * takes and the npm script that tests it, e.g. `{"packages": ["@floodgate/nestjs", …], "script":
 * "test:e2e"}`; adding one touches that folder only. All installs share npm's one cache.
 *
 * Usage, from `clients/js` after `npm run build`: `FLOODGATE_BIN=… npm run compat [-- NAME…]`.
 */
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { floodgateBinary } from '@floodgate/testkit';

/** `clients/js`: two levels above this file (`compat/dist/run.js`). */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TEMPLATES = join(ROOT, 'compat', 'templates');
/** The packages a template may take, by name, and the folder each is packed from. */
const PACKAGES: Record<string, string> = {
  '@floodgate/client': 'packages/client',
  '@floodgate/express': 'packages/express',
  '@floodgate/nestjs': 'packages/nestjs',
  '@floodgate/testkit': 'packages/testkit',
};
/** The published packages, whose types `attw` checks (the testkit is private). */
const PUBLISHED = ['@floodgate/client', '@floodgate/express', '@floodgate/nestjs'];
/** Files a package's tarball must hold beside its build: what its README tells users to read. */
const SHIPPED: Record<string, string[]> = {
  '@floodgate/nestjs': ['examples/throttler.yaml', 'README.md'],
};

interface Template {
  name: string;
  dir: string;
  packages: string[];
  script: string;
}

class Failed extends Error {}

function templates(only: string[]): Template[] {
  const found = readdirSync(TEMPLATES, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry): Template => {
      const dir = join(TEMPLATES, entry.name);
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        floodgateCompat?: { packages?: string[]; script?: string };
      };
      const { packages, script } = manifest.floodgateCompat ?? {};
      if (!Array.isArray(packages) || typeof script !== 'string') {
        throw new Failed(`${dir}/package.json: floodgateCompat needs packages (names) and script (an npm script)`);
      }
      for (const name of packages) {
        if (!(name in PACKAGES)) throw new Failed(`${dir}/package.json: floodgateCompat names an unknown package ${name}`);
      }
      if (!existsSync(join(dir, 'package-lock.json'))) throw new Failed(`${dir} has no package-lock.json`);
      return { name: entry.name, dir, packages, script };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
  for (const name of only) {
    if (!found.some((t) => t.name === name)) throw new Failed(`no template named ${name} in ${TEMPLATES}`);
  }
  return only.length === 0 ? found : found.filter((t) => only.includes(t.name));
}

/** Runs a command; its output is shown only when it fails (`quiet`) or always. */
function run(what: string, command: string, args: string[], options: SpawnSyncOptions & { quiet?: boolean }): number {
  const started = performance.now();
  const result = spawnSync(command, args, {
    ...options,
    encoding: 'utf8',
    stdio: options.quiet === true ? 'pipe' : 'inherit',
  });
  const seconds = (performance.now() - started) / 1000;
  if (result.error !== undefined || result.status !== 0) {
    if (options.quiet === true) process.stderr.write(`${result.stdout ?? ''}${result.stderr ?? ''}`);
    throw new Failed(`${what} failed (${result.error?.message ?? `exit ${result.status}`}): ${command} ${args.join(' ')}`);
  }
  return seconds;
}

function npm(args: string[], cwd: string, what: string, quiet: boolean, env: NodeJS.ProcessEnv = process.env): number {
  return run(what, 'npm', args, { cwd, env, quiet });
}

/** Packs the packages into `into`; the tarball of each, by name. */
function pack(into: string): Record<string, string> {
  for (const [name, folder] of Object.entries(PACKAGES)) {
    if (!existsSync(join(ROOT, folder, 'dist', 'index.js'))) {
      throw new Failed(`${name} is not built (${folder}/dist): run \`npm run build\` in clients/js first`);
    }
  }
  mkdirSync(into, { recursive: true });
  const workspaces = Object.values(PACKAGES).flatMap((folder) => ['-w', folder]);
  const result = spawnSync('npm', ['pack', '--json', '--pack-destination', into, ...workspaces], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  if (result.status !== 0) {
    process.stderr.write(result.stderr);
    throw new Failed('npm pack failed');
  }
  const packed = JSON.parse(result.stdout) as { name: string; filename: string; files: { path: string }[] }[];
  for (const { name, files } of packed) {
    for (const path of SHIPPED[name] ?? []) {
      if (!files.some((f) => f.path === path)) throw new Failed(`the tarball of ${name} lacks ${path}`);
    }
  }
  return Object.fromEntries(packed.map((p) => [p.name, join(into, basename(p.filename))]));
}

/** The installed `@floodgate/*` packages came from the tarballs, not from a registry. */
function fromTarballs(app: string, names: string[]): void {
  const lock = JSON.parse(readFileSync(join(app, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { resolved?: string; version?: string }>;
  };
  for (const name of names) {
    const resolved = lock.packages[`node_modules/${name}`]?.resolved ?? '';
    if (!resolved.startsWith('file:')) {
      throw new Failed(`${app}: ${name} was installed from ${resolved || 'nowhere'}, not from its tarball`);
    }
  }
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (/node_modules\/@floodgate\/[^/]+$/.test(path) && !(entry.resolved ?? '').startsWith('file:')) {
      throw new Failed(`${app}: ${path} was installed from ${entry.resolved ?? 'nowhere'}, not from a tarball`);
    }
  }
}

function main(): void {
  const only = process.argv.slice(2);
  const legacy = spawnSync('npm', ['config', 'get', 'legacy-peer-deps'], { encoding: 'utf8' }).stdout.trim();
  if (legacy !== 'false') throw new Failed(`npm's legacy-peer-deps is ${legacy}: the installs must check peer ranges`);
  const binary = floodgateBinary();
  const env = { ...process.env, FLOODGATE_BIN: binary };
  const list = templates(only);
  const work = mkdtempSync(join(tmpdir(), 'floodgate-compat-'));
  const started = performance.now();
  const rows: string[] = [];
  try {
    const packStarted = performance.now();
    const tarballs = pack(join(work, 'packs'));
    const attw = join(ROOT, 'node_modules', '.bin', 'attw');
    if (!existsSync(attw)) throw new Failed(`${attw} is missing: run \`npm ci\` in clients/js`);
    for (const name of PUBLISHED) {
      run(`attw ${name}`, attw, [tarballs[name]!, '--format', 'ascii'], { quiet: true });
    }
    rows.push(`pack and attw: ${((performance.now() - packStarted) / 1000).toFixed(1)} s`);

    for (const template of list) {
      console.log(`==> compat: ${template.name}`);
      const app = join(work, template.name);
      const copying = performance.now();
      cpSync(template.dir, app, {
        recursive: true,
        filter: (source) => !['node_modules', 'dist'].includes(basename(source)),
      });
      const files = template.packages.map((name) => tarballs[name]!);
      const install = npm(
        ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', ...files],
        app,
        `${template.name}: npm install of the tarballs`,
        true,
      );
      fromTarballs(app, template.packages);
      const test = npm(['run', template.script], app, `${template.name}: npm run ${template.script}`, false, env);
      rows.push(`${template.name}: install ${install.toFixed(1)} s, tests ${test.toFixed(1)} s, all ${((performance.now() - copying) / 1000).toFixed(1)} s`);
    }
  } catch (error) {
    console.error(`compat: ${error instanceof Error ? error.message : String(error)}`);
    console.error(`compat: the apps are left in ${work}`);
    process.exitCode = 1;
    return;
  }
  const passed = (performance.now() - started) / 1000;
  const removing = performance.now();
  rmSync(work, { recursive: true, force: true });
  rows.push(`removing the apps: ${((performance.now() - removing) / 1000).toFixed(1)} s`);
  console.log(`==> compat: passed in ${passed.toFixed(1)} s`);
  for (const row of rows) console.log(`    ${row}`);
}

try {
  main();
} catch (error) {
  if (!(error instanceof Failed)) throw error;
  console.error(`compat: ${error.message}`);
  process.exitCode = 1;
}
