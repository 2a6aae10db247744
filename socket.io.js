'use strict'

/**
 * `require('clusterize-express/socket.io')`: the socket.io adapter carried by
 * the clusterize bus (lib/realtime/socket-io-adapter.js). Loads nothing of
 * socket.io until createAdapter() is called.
 */

module.exports = require('./lib/realtime/socket-io-adapter')
