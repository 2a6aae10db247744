'use strict'

/**
 * A FIFO ring buffer that grows by doubling: push/shift without the O(n)
 * Array#shift cost of long arrays.
 */
class Queue {
  constructor (capacity = 16) {
    this._items = new Array(capacity)
    this._head = 0
    this.length = 0
  }

  /** @param {unknown} item */
  push (item) {
    const items = this._items
    if (this.length === items.length) {
      const grown = new Array(items.length * 2)
      for (let i = 0; i < this.length; i++) grown[i] = items[(this._head + i) % items.length]
      this._items = grown
      this._head = 0
    }
    this._items[(this._head + this.length) % this._items.length] = item
    this.length++
  }

  /** Drop every item. */
  clear () {
    this._items.fill(undefined)
    this._head = 0
    this.length = 0
  }

  /** @returns {any} the oldest item, or undefined */
  shift () {
    if (this.length === 0) return undefined
    const item = this._items[this._head]
    this._items[this._head] = undefined
    this._head = (this._head + 1) % this._items.length
    this.length--
    return item
  }
}

module.exports = Queue
