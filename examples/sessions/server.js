'use strict'

const { clusterize } = require('../../')
clusterize(() => require('./app')(), { port: Number(process.env.PORT) || 3000, workers: process.env.WORKERS || 2 })
