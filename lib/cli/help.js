'use strict'

/**
 * `clusterize --help` and `--version`.
 */

const { version } = require('../../package.json')

const HELP = `clusterize ${version}: run an Express app on every core, with zero-downtime reloads

Usage
  clusterize <app.js> [flags]          start app.js (an Express app, a factory or an http.Server)
  clusterize [start] ecosystem.config.js [flags]   start the app a PM2 ecosystem file describes
  clusterize reload [--pid-file F]     replace every worker, one by one, without dropping requests
  clusterize upgrade [--pid-file F] [--node PATH] [-- START FLAGS]
                                       replace the primary itself (new Node, new clusterize, new
                                       options): a new primary started from what is on disk takes
                                       the sockets and sessions, then the old one drains and exits
  clusterize scale N|+N|-N [--pid-file F]
                                       set the number of workers (+N adds, -N retires), live:
                                       retired workers drain like a reload's old ones
  clusterize stop   [--pid-file F]     graceful shutdown: drain requests, then exit
  clusterize status [--pid-file F | --probes-port P]   print the workers table
  clusterize top    [--pid-file F | --probes-port P]   live view of the workers (q quits)

  app.js needs no clusterize import: it exports an Express app, a function
  returning one (sync or async), a (req, res) listener, or an http.Server
  that is not listening yet.

Start flags
  --workers N          workers to fork, or "auto" (usable CPUs, cgroup-aware, followed live)
                                                                              [env WORKERS, default auto]
                       0 runs everything in one process (development)
  --port P             port to listen on, 0 = any free port                   [env PORT, default 3000]
  --host H             address to bind, e.g. 127.0.0.1 or ::          [env HOST, default: all interfaces]
  --scheduling MODE    how connections reach workers: rr|none|reuseport|sticky|balanced
                       [default balanced on Linux with Node >= 22.12, else rr]
                         rr         round-robin in the primary, least busy first
                         none       the kernel picks (node:cluster SCHED_NONE)
                         reuseport  every worker binds the port (Linux, Node >= 22.12; else rr)
                         sticky     the same client IP always reaches the same worker
                         balanced   workers accept, each up to its share of the open connections
  --probes-port P      serve /live /ready /stats /metrics on this port          [default: any free port]
  --probes-host H      address for the probes server                            [default 127.0.0.1]
  --sessions cluster   express-session's default store (the app gives none) becomes the cluster
                       store, so logins work across workers with no code change  [default memory]
  --sessions redis     ... becomes the Redis store (--redis URL or REDIS_URL): logins also survive
                       a restart of the primary and carry across hosts
  --watch              development: reload the workers when a file in the app's folder changes
                       (node_modules and .git are not watched)
  --env NAME           ecosystem file: apply the app's env_NAME over its env (PM2's --env)
  --only NAME          ecosystem file: run the app named NAME (PM2's --only); its default pid
                       file is its own, so give the same --only to reload, stop and status
  --rate-limit cluster express-rate-limit's default store (rateLimit() with no store) counts in
                       the cluster: a limit holds for all workers, no code change  [default memory]
  --redis URL          bridge the bus to other hosts through Redis, and export
                       REDIS_URL so session() uses the Redis store               [env REDIS_URL]
                       redis://host:6379, redis+sentinel://host:26379,.../name,
                       redis+cluster://host:7000,host:7001
  --reload-signal SIG  the signal that starts a rolling reload: SIGUSR2, SIGHUP or SIGUSR1 [default SIGUSR2]
  --bake-ms MS         how long each new worker of a reload must serve healthy before the next
                       old one goes (reload.bakeMs; 0: no bake)                  [default 5000]
  --main-pid-file F    also write the bare pid here, for systemd's PIDFile= (follows upgrades)
  --pid-file F         where the primary writes its pid file (and F.sock, its control socket)
                       [default $XDG_RUNTIME_DIR/clusterize/<dir>-<hash>.pid, or
                       <tmp>/clusterize-<uid>/...: a 0700 directory, one file per working directory]
  --json               structured logs: one JSON object per line on stdout

Command flags
  --pid-file F         the pid file of the running primary   [default: the one for this directory]
  --only NAME          the primary started with --only NAME from this directory
                       refused if another user owns it or may write to it
  --probes-port P      status only: ask this probes port directly (no pid file needed)
  --probes-host H      status only: probes address                              [default 127.0.0.1]
  --node PATH          upgrade: the node binary the new primary runs      [default: the old one's path]
  -- START FLAGS       upgrade: start flags added to the old ones, e.g. -- --workers 8
  --timeout S          reload/upgrade/scale/stop: seconds to wait
                                                  [default: reload 120, upgrade 180, scale 120, stop 60]
  --json               status/reload/upgrade/scale/stop: print the result as JSON

General
  -h, --help           this help
  -v, --version        print the version

Signals (to the primary)
  SIGUSR2              rolling reload (or --reload-signal); \`clusterize reload\` asks through
                       the control socket and sends this signal only when there is none
  SIGURG               upgrade the primary (what \`clusterize upgrade\` asks through the control socket)
  SIGTERM, SIGINT      graceful shutdown (what \`clusterize stop\` sends); a second one exits at once

Exit codes
  0 ok, 1 runtime failure (startup failed, stop timed out, reload rolled back, upgrade failed),
  2 bad usage or options

Examples
  clusterize app.js                                 # every core, port 3000 (or $PORT)
  clusterize app.js --workers 4 --port 8080 --host 0.0.0.0
  WORKERS=2 PORT=8080 clusterize app.js --json      # env fallbacks, JSON logs
  clusterize app.js --scheduling sticky --redis redis://127.0.0.1:6379
  clusterize app.js --probes-port 9090 --probes-host 0.0.0.0   # Kubernetes probes
  clusterize reload                                 # after a deploy: new code, no dropped requests
  clusterize upgrade --node /usr/local/bin/node     # a new Node (or clusterize) for the primary too
  systemd-socket-activate -l 8080 clusterize app.js # serves on the socket it is given (LISTEN_FDS)
  clusterize scale 8                                # like pm2 scale: 8 workers from now on
  clusterize status
  clusterize stop --pid-file /run/myapp.pid
`

module.exports = { HELP, version }
