'use strict'

/**
 * Text from workers (boot errors, exit reasons) reaches a terminal in
 * `clusterize top`. An escape sequence in it could retitle the window,
 * rewrite the screen or, on some terminals, answer back into the input; so
 * every control character goes, and escape sequences go whole.
 */

// CSI (ESC [ ... final byte), OSC/DCS/PM/APC/SOS strings (ESC ] ... BEL or
// ST), and any other two-byte ESC sequence; then their 8-bit C1 forms.
const ESCAPE_SEQUENCE = /\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[\x20-\x7e]?|\x9b[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c|\x1b\\)?/g
// C0 (with tab and newline: one event is one line), DEL, C1, and the
// bidirectional overrides that reorder what is shown.
const CONTROL = /[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g

/**
 * @param {unknown} value
 * @returns {string} the value as text with no control characters
 */
function printable (value) {
  return String(value).replace(ESCAPE_SEQUENCE, '').replace(CONTROL, ' ')
}

module.exports = { printable }
