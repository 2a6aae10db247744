// The ESM entry (lib/index.mjs): the same names as the CommonJS entry, and its
// module.exports as the default export. Declared apart from index.d.ts because
// TypeScript reads a .d.ts in this package as CommonJS: one file for both would
// type `import x from 'clusterize-express'` as the wrong module kind.
import * as clusterizeExpress from './index.js'

export * from './index.js'
export default clusterizeExpress
