'use strict'

const { clusterize } = require('../../')
clusterize(() => require('./app')())
