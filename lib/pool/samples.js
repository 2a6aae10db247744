'use strict'

/** A fixed-size ring of the most recent samples, with p50/p99 on demand. */
class Samples {
  /** @param {number} size */
  constructor (size) {
    this._buf = new Float64Array(size)
    this._n = 0
    this._i = 0
  }

  /** @param {number} value */
  add (value) {
    this._buf[this._i] = value
    this._i = this._i + 1 === this._buf.length ? 0 : this._i + 1
    if (this._n < this._buf.length) this._n++
  }

  /** @returns {{ p50: number, p99: number, samples: number }} milliseconds, rounded to 0.001 */
  percentiles () {
    if (this._n === 0) return { p50: 0, p99: 0, samples: 0 }
    const sorted = this._buf.slice(0, this._n).sort()
    return {
      p50: round(sorted[Math.min(this._n - 1, Math.floor(this._n * 0.5))]),
      p99: round(sorted[Math.min(this._n - 1, Math.floor(this._n * 0.99))]),
      samples: this._n
    }
  }
}

function round (v) {
  return Math.round(v * 1000) / 1000
}

module.exports = Samples
