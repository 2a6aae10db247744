// ESM entry: the very same values as the CommonJS entry. Its offload, session
// and bus are stand-ins that load on first use (lib/lazy.js), so binding them
// here loads no more modules than require() does; test/esm-lazy.test.js counts them.
import cjs from './index.js'

export const {
  clusterize,
  isPrimary,
  onDrain,
  offload,
  session,
  bus,
  singleton,
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
