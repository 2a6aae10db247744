'use strict'

/**
 * Where the worker runtime meets the bus and the session store status.
 * Kept in one place so the runtime does not depend on their internals.
 */

function attachWorker (config, log, channel, id, generation) {}
function onPrimaryMessage (message) {}
function sessionStatus () { return undefined }

module.exports = { attachWorker, onPrimaryMessage, sessionStatus }
module.exports.useLocal = function useLocal (config, log) {}
module.exports.close = function close () { return Promise.resolve() }
module.exports.status = function status () { return undefined }
