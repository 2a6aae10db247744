const { clusterize } = require('../../')
clusterize(() => require('./app')())
