// ESM entry: the same objects as the CommonJS entry.
import cjs from './index.js'

export const clusterize = cjs.clusterize
export const onDrain = cjs.onDrain
export const ClusterizeOptionError = cjs.ClusterizeOptionError
export const ClusterizeTimeoutError = cjs.ClusterizeTimeoutError
export const offload = cjs.offload
export const session = cjs.session
export const bus = cjs.bus
export const ClusterizeBusError = cjs.ClusterizeBusError
export default cjs
