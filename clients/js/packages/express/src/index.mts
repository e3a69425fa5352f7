// The ES module entry: the CommonJS build, re-exported. `import` and `require` share one copy of
// the package (one class per export, one injection token), and one set of types.
export * from './index.js';
