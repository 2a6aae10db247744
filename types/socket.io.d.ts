// clusterize-express/socket.io: a socket.io adapter carried by the clusterize bus.

export interface ClusterizeAdapterOptions {
  /** ms between two heartbeats of each server (socket.io-adapter). Default 5000. */
  heartbeatInterval?: number
  /** ms without a heartbeat before a server is considered gone. Default 10000. */
  heartbeatTimeout?: number
  /**
   * Write the packets engine.io queued while a write was in flight with one TCP write per WebSocket
   * client (frames unchanged; a lone packet is written at once). Default true.
   */
  coalesceWrites?: boolean
  /**
   * Outside clusterize (a plain `node app.js`, a test), throw ERR_CLUSTERIZE_BUS_NOT_STARTED from
   * `new Server()` instead of using socket.io's in-memory adapter. Default false.
   */
  strict?: boolean
  /**
   * Bounds of socket.io's connectionStateRecovery state, kept in the primary, or in Redis with
   * `bus.redis` (used only when the Server has `connectionStateRecovery`). Packets are also dropped
   * after maxDisconnectionDuration.
   * @deprecated set them with clusterize()'s `recovery` option, validated at startup; given here,
   * they still reach the primary when the adapter starts.
   */
  recovery?: ClusterizeRecoveryOptions
}

export interface ClusterizeRecoveryOptions {
  /** Packets kept per namespace for replay (with bus.redis: the stream's MAXLEN ~). Default 10000. */
  maxPackets?: number
  /** Disconnected sessions kept per namespace (oldest dropped first). Default 100000. */
  maxSessions?: number
  /**
   * ms a restore waits for a worker that still serves (on this host) to persist a socket it holds, and,
   * with bus.redis, for this host to have read an offset given by another host. A draining worker
   * (reload, shutdown) is waited for until it persists the socket or exits. Default 5000.
   */
  liveWaitMs?: number
}

/**
 * For io.adapter(): io.emit, rooms, fetchSockets, serverSideEmit... reach every worker (and host with bus.redis).
 * With the Server's `connectionStateRecovery`, a client cut by a reload is recovered on a new worker
 * (missed packets once and in order, rooms, socket.data): the state lives in the primary, per host,
 * or with bus.redis in Redis (keys `{<bus.channel>}:sio:...`), so the client recovers on any host.
 */
export declare function createAdapter(options?: ClusterizeAdapterOptions): (nsp: any) => any
