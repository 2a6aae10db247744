'use strict'

/**
 * Where the primary meets the bus and the session backend.
 */

function attachPrimary (config, log) {}
function addWorker (record) {}
function removeWorker (record) {}
function onWorkerMessage (record, message) {}
function status () { return undefined }
function close () { return Promise.resolve() }

module.exports = { attachPrimary, addWorker, removeWorker, onWorkerMessage, status, close }
