// ESM entry: the same objects as the CommonJS entry.
import cjs from './index.js'

export const {
  clusterize,
  onDrain,
  offload,
  session,
  bus,
  ClusterizeError,
  ClusterizeOptionError,
  ClusterizeTimeoutError,
  ClusterizeAppError,
  ClusterizeBusError,
  OffloadError,
  QueueFullError,
  TaskTimeoutError,
  TaskAbortedError,
  TaskError,
  ThreadExitError,
  ThreadStartupError,
  PoolClosedError,
  CloneError,
  OuterVariableError,
  InvalidTaskError,
  OffloadOptionError,
  SessionHttpError,
  SessionStoreUnavailableError,
  SessionTooLargeError,
  CliUsageError,
  CliRuntimeError
} = cjs
export default cjs
