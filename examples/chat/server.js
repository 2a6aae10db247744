'use strict'

// Long polling needs each session's requests on one worker: route by session id.
const { clusterize } = require('../../')
clusterize(() => require('./app')(), { scheduling: 'sticky', sticky: { sid: true } })
