'use strict'

const { clusterize } = require('../../')
clusterize(() => require('./app')(), { workers: 2 })
