// clusterize-express/rate-limit: a store for express-rate-limit whose counts the cluster's primary
// holds (Redis with bus.redis: the whole fleet). Structurally an express-rate-limit Store (v7, v8).

export interface ClusterStoreOptions {
  /**
   * Namespace of this limiter's keys, shared by every worker (and host). Default `rl:<n>:`, n
   * counting the stores built without a prefix in this process (the same order in every worker).
   */
  prefix?: string
  /** Bound on one call to the primary (ms, 1..60000); past it the call fails and passOnStoreError decides. Default 1000. */
  timeoutMs?: number
}

export interface ClusterStoreHit {
  totalHits: number
  resetTime: Date | undefined
}

export declare class ClusterStore {
  constructor(options?: ClusterStoreOptions)
  readonly prefix: string
  /** false: the counts are shared with every worker's store. */
  readonly localKeys: boolean
  init(options: { windowMs: number }): void
  get(key: string): Promise<ClusterStoreHit | undefined>
  increment(key: string): Promise<ClusterStoreHit>
  decrement(key: string): Promise<void>
  resetKey(key: string): Promise<void>
  resetAll(): Promise<void>
  shutdown(): Promise<void>
}
