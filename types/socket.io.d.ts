// clusterize-express/socket.io: a socket.io adapter carried by the clusterize bus.

export interface ClusterizeAdapterOptions {
  /** ms between two heartbeats of each server (socket.io-adapter). Default 5000. */
  heartbeatInterval?: number
  /** ms without a heartbeat before a server is considered gone. Default 10000. */
  heartbeatTimeout?: number
}

/** For io.adapter(): io.emit, rooms, fetchSockets, serverSideEmit... reach every worker (and host with bus.redis). */
export declare function createAdapter(options?: ClusterizeAdapterOptions): (nsp: any) => any
