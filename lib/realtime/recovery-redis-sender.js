'use strict'

/**
 * This host's replayable socket.io broadcasts on their way to the shared
 * stream (./recovery-redis.js holds the log; this, the sender's side): one
 * order per sender on every host, through Redis outages.
 *
 * A broadcast goes to the stream (XADD) unless something older of this host
 * still waits: an XADD not answered yet, a broadcast numbered here during an
 * outage and not in the stream yet, or the check of what a restarted Redis
 * kept. Then it waits behind them, and is numbered here if Redis is away.
 * What was numbered here goes to the stream with its uid once Redis takes
 * writes again, before anything newer; this host's reader skips it.
 */

const debug = require('debug')('clusterize:socket.io')
const { replayable } = require('./recovery-log')

/** How many of this host's latest broadcasts Redis took are kept, to send again if Redis comes back without them. */
const RECENT_KEPT = 1000

class StreamSender {
  /**
   * @param {import('./recovery-redis').RedisLog} owner the log: its stream, its availability, and publishHere()
   */
  constructor (owner) {
    this.owner = owner
    /** This host's broadcasts in the order they came: XADDs not answered yet ({ done: false }) and what waits behind them. */
    this.sending = []
    /** Broadcasts in `sending` waiting behind an unanswered XADD (inOrder()). */
    this.queued = 0
    /**
     * This host's latest broadcasts Redis took (at most RECENT_KEPT), with their entry ids: when
     * Redis goes away they become `suspects`, checked once it is back (a Redis that restarts
     * empty loses what the other hosts had not read yet).
     * @type {Array<{ state: object, data: object, uid: string, id: string }>}
     */
    this.recent = []
    /** The `recent` of the last outage, not checked yet. */
    this.suspects = []
    /**
     * Broadcasts numbered here (delivered to this host's workers) that the stream has not
     * taken yet, oldest first: they go to it before any newer broadcast does.
     * @type {Array<{ state: object, data: object, uid: string }>}
     */
    this.unsent = []
    /** @type {Map<object, number>} how many of `unsent` each namespace has (its bound is its maxPackets) */
    this.unsentOf = new Map()
    /** Unsent broadcasts dropped at a namespace's maxPackets during this outage (the other hosts never get them). */
    this.unsentDropped = 0
    this.unsentDroppedTotal = 0
    /** The suspects are being checked (XRANGE): broadcasts wait in `unsent`. */
    this.catching = false
  }

  get stream () { return this.owner.stream }
  get degraded () { return this.owner.degraded }
  get closed () { return this.owner.closed }
  get log () { return this.owner.log }
  degrade (cause) { this.owner.degrade(cause) }
  recovered () { this.owner.recovered() }
  publishHere (state, data, meta, forward) { this.owner.publishHere(state, data, meta, forward) }

  /**
   * A broadcast of this host. One waiting behind an unanswered XADD waits too, whatever it
   * becomes: an XADD sent now would overtake it.
   */
  publish (state, data, meta) {
    if (this.queued > 0) return this.inOrder(() => this.route(state, data, meta))
    this.route(state, data, meta)
  }

  /**
   * A replayable broadcast goes to the stream (the readers deliver it), behind what was
   * numbered here and not sent yet; any other broadcast, and any while Redis is away, is
   * numbered here.
   */
  route (state, data, meta) {
    if (this.stream !== null && replayable(data.m) !== null) {
      if (this.stream.ready && !this.catching && this.unsent.length === 0 && this.suspects.length === 0) return this.publishShared(state, data)
      if (this.stream.ready) this.catchUp()
      else this.degrade('not connected')
      return this.inOrder(() => this.numberHere(state, data))
    }
    this.inOrder(() => this.publishHere(state, data, meta, true))
  }

  /**
   * Run `fn` (a broadcast of this host numbered here) after the XADDs sent before it
   * have answered: one whose XADD fails is numbered here when it does, and a newer
   * broadcast must not overtake it.
   */
  inOrder (fn) {
    if (this.sending.length === 0) return fn()
    this.queued++
    this.sending.push({ done: true, run: fn, queued: true })
  }

  /** Run what waited for the XADDs that have answered, in order. */
  drainSending () {
    while (this.sending.length > 0 && this.sending[0].done) {
      const next = this.sending.shift()
      if (next.queued) this.queued--
      if (next.run !== null) next.run()
    }
    if (this.sending.length === 0 && this.unsent.length > 0) this.catchUp()
  }

  /**
   * A replayable broadcast Redis cannot take now: to this host's workers, and kept with a
   * uid for the stream (the other hosts get it from there, in order, once Redis takes it).
   * What Redis took before it and this host's reader has not delivered yet goes first.
   */
  numberHere (state, data) {
    this.deliverUnread()
    const uid = typeof data.u === 'string' ? data.u : this.stream.mint()
    const marked = data.u === uid ? data : Object.assign({}, data, { u: uid })
    this.publishHere(state, marked, {}, false)
    this.keepUnsent({ state, data: marked, uid })
  }

  /**
   * This host's broadcasts Redis took that its reader has not delivered yet, delivered here
   * now (the reader skips them): a broadcast numbered here must not reach this host's
   * clients before them.
   */
  deliverUnread () {
    const recent = this.recent
    let first = recent.length
    while (first > 0 && !this.stream.wasRead(recent[first - 1].uid)) first--
    for (let i = first; i < recent.length; i++) {
      if (this.stream.claim(recent[i].uid)) this.publishHere(recent[i].state, recent[i].data, {}, false)
    }
  }

  /** Keep `item` for the stream, at most a namespace's maxPackets (the oldest go first, counted). */
  keepUnsent (item) {
    this.unsent.push(item)
    const state = item.state
    const count = (this.unsentOf.get(state) || 0) + 1
    if (count <= state.maxPackets) {
      this.unsentOf.set(state, count)
      return
    }
    const oldest = this.unsent.findIndex((kept) => kept.state === state)
    this.unsent.splice(oldest, 1)
    this.unsentDroppedTotal++
    if (this.unsentDropped++ === 0) {
      this.log.warn(`socket.io recovery: more than recovery.maxPackets (${state.maxPackets}) broadcasts of namespace "${state.name}" wait for Redis: ` +
        'the oldest are not sent to the other hosts (this host delivered them). Counted in /stats bounds.recoveryUnsentDropped and ' +
        'clusterize_primary_bound_reached_total{bound="recovery_unsent"}; logged once per outage')
    }
  }

  /**
   * Redis went away: what it took lately may be lost with it (a restart without persistence)
   * before every host read it. This host delivers now the ones its own reader had not
   * reached (its reader skips them if Redis kept them); all of them are checked once Redis
   * is back, and those it lost go to the stream again.
   */
  suspectRecent () {
    if (this.recent.length === 0 || this.stream === null) return
    debug('recovery: Redis went away: %d recent broadcasts to check once it is back', this.recent.length)
    this.deliverUnread()
    for (const item of this.recent) this.suspects.push(item)
    this.recent = []
  }

  /**
   * Redis takes broadcasts again: the suspects it lost, then what was numbered here, go to
   * the stream in order, ahead of any newer broadcast (which waits in `unsent` meanwhile).
   */
  catchUp () {
    const stream = this.stream
    if (this.catching || this.closed || stream === null || !stream.ready || this.sending.length > 0) return
    if (this.unsent.length === 0 && this.suspects.length === 0) return
    this.catching = true
    const suspects = this.suspects
    this.suspects = []
    this.lostOf(stream, suspects).then((lost) => {
      this.catching = false
      if (this.stream !== stream) return
      const items = lost.concat(this.unsent)
      this.unsent = []
      this.unsentOf.clear()
      debug('recovery: Redis is back: %d broadcasts (%d it lost) to the stream before the newer ones', items.length, lost.length)
      for (const item of items) this.sendAgain(stream, item)
    }, (err) => {
      this.catching = false
      debug('recovery: cannot check what Redis kept: %s', err.message)
      this.suspects = suspects.concat(this.suspects)
      if (this.stream === stream) this.degrade(err.message)
    })
  }

  /** @returns {Promise<object[]>} the suspects the stream no longer holds, in order */
  async lostOf (stream, suspects) {
    const byName = new Map()
    for (const item of suspects) {
      const group = byName.get(item.state.name)
      if (group === undefined) byName.set(item.state.name, [item])
      else group.push(item)
    }
    const kept = new Set()
    for (const [name, group] of byName) {
      const uids = await stream.kept(name, group[0].id, group[group.length - 1].id)
      for (const uid of uids) kept.add(uid)
    }
    return suspects.filter((item) => !kept.has(item.uid))
  }

  /** XADD a broadcast this host delivered already, with its uid; if Redis fails it, it waits for the next catch-up. */
  sendAgain (stream, item) {
    const { state, data, uid } = item
    let appended
    try {
      stream.skip(uid)
      appended = stream.append(state.name, entryOf(data), state.maxPackets, uid)
    } catch (err) {
      debug('recovery: packet not added to the stream again: %s', err.message)
      return
    }
    const slot = { done: false, run: null }
    this.sending.push(slot)
    appended.added.then((id) => {
      if (this.degraded && this.stream === stream) this.recovered()
      this.remember({ state, data, uid, id })
    }, (err) => {
      if (this.stream !== stream) return
      this.degrade(err.message)
      slot.run = () => this.keepUnsent(item)
    }).then(() => {
      slot.done = true
      this.drainSending()
    }).catch((err) => debug('recovery: after sending again: %s', err.message))
  }

  /** A broadcast Redis took, with its entry id: checked if Redis goes away. */
  remember (item) {
    this.recent.push(item)
    if (this.recent.length > RECENT_KEPT) this.recent.shift()
  }

  /** XADD the packet; if Redis fails it, number it here after all (skipped if it shows up in the stream anyway). */
  publishShared (state, data) {
    const stream = this.stream
    let appended
    try {
      appended = stream.append(state.name, entryOf(data), state.maxPackets)
    } catch (err) {
      debug('recovery: packet not added to the stream: %s', err.message)
      return this.inOrder(() => this.publishHere(state, data, {}, true))
    }
    const slot = { done: false, run: null }
    this.sending.push(slot)
    appended.added.then((id) => {
      // An outage seen as failed XADDs ends with one that works (the connection may never have closed).
      if (this.degraded && this.stream === stream) this.recovered()
      this.remember({ state, data, uid: appended.uid, id })
    }, (err) => {
      if (this.stream !== stream) return // closed meanwhile (shutdown)
      const id = stream.readAt(appended.uid)
      if (id !== undefined) {
        // Its answer was lost, but this host's reader delivered it: it is in the stream.
        this.remember({ state, data, uid: appended.uid, id })
      } else {
        // It may have reached the stream after all, or not (Redis restarted without it): numbered
        // here, and sent again with its uid; a host that read it already drops the copy.
        stream.skip(appended.uid)
        slot.run = () => this.numberHere(state, Object.assign({}, data, { u: appended.uid }))
      }
      this.degrade(err.message)
    }).catch((err) => debug('recovery: fallback delivery failed: %s', err.message)).then(() => {
      slot.done = true
      this.drainSending()
    }).catch((err) => debug('recovery: delivery after a failed XADD failed: %s', err.message))
  }

  /** Redis went away: checked later what it took lately; the drops of this outage are counted anew. */
  outage () {
    this.suspectRecent()
    this.unsentDropped = 0
  }

  stats () {
    return { unsent: this.unsent.length, unsentDropped: this.unsentDroppedTotal }
  }
}

/** What goes in a stream entry: the message, the sender's id, the binaries (`b`, ./binary.js: every host delivers and replays them). */
function entryOf (data) {
  return data.b === undefined ? { m: data.m, i: data.i } : { m: data.m, i: data.i, b: data.b }
}

module.exports = { StreamSender, RECENT_KEPT }
